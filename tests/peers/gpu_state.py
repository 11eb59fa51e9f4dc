"""Runs in a child process under the CUDA simulator: variables pinned to
/gpu:0 updated through real steps (Assign, AssignAdd, AssignSub, an int64
step counter as keras's ``iterations``, an SGD step with a global step and a
momentum step), and the same graph on /cpu:0;
prints JSON. ``--no-gpu-momentum`` first unregisters ApplyMomentum's GPU
kernel, so its update runs on a host copy of the device variable."""
from __future__ import annotations

import asyncio
import json
import sys

import numpy as np

import distrib as dt


def build(device: str):
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((8, 5)).astype(np.float32)
    y_np = rng.standard_normal((8, 2)).astype(np.float32)
    g = dt.Graph()
    with g.as_default(), dt.device(device):
        v = dt.Variable(np.arange(12, dtype=np.float32).reshape(3, 4), name="v")
        counter = dt.Variable(0, dtype=dt.int64, trainable=False, name="iterations")
        w = dt.Variable((rng.standard_normal((5, 2)) * 0.3).astype(np.float32), name="w")
        u = dt.Variable(np.ones((5, 2), np.float32), name="u")
        step = dt.Variable(0, dtype=dt.int64, trainable=False, name="global_step")
        updates = [v.assign_add(np.full((3, 4), 0.5, np.float32)),
                   v.assign_sub(np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25),
                   counter.assign_add(np.int64(1))]
        loss = dt.reduce_mean(dt.square(dt.matmul(dt.constant(x_np), w) - dt.constant(y_np)))
        loss_u = dt.reduce_mean(dt.square(dt.matmul(dt.constant(x_np), u) - dt.constant(y_np)))
        sgd = dt.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step, var_list=[w])
        mom = dt.train.MomentumOptimizer(0.05, 0.9).minimize(loss_u, var_list=[u])
        reassign = v.assign(np.full((3, 4), 7.0, np.float32))
        init = dt.global_variables_initializer()
    return g, init, updates, [sgd, mom], reassign, [v, counter, w, u, step]


async def run(device: str) -> dict:
    g, init, updates, train, reassign, variables = build(device)
    out: dict = {}
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(init)
            # each in its own step (two updates of one variable in one step have no order)
            out["fetched"] = [np.asarray(await sess.run(op)).tolist()
                              for _ in range(2) for op in updates]
            for _ in range(3):
                await sess.run(train)
            out["trained"] = [np.asarray(a).tolist() for a in await sess.run(variables)]
            await sess.run(reassign)
            out["reassigned"] = np.asarray(await sess.run(variables[0])).tolist()
            devs = [d["name"] for d in await sess.list_devices()]
    out["devices"] = devs
    return out


async def main() -> None:
    if "--no-gpu-momentum" in sys.argv:
        import kernels
        kernels.has_kernel("MatMul", "GPU")   # load the GPU kernels, then drop one
        kernels.unregister("ApplyMomentum", "GPU")
    gpu = await run("/gpu:0")
    cpu = await run("/cpu:0")
    json.dump({"gpu": gpu, "cpu": cpu}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
