"""Runs in a child process (the CUDA simulator must be chosen before numba is
imported): a two-layer MLP forward and backward pass pinned to /gpu:0 through
a real server and session, and the same graph on /cpu:0; prints JSON."""
from __future__ import annotations

import asyncio
import json
import sys

import numpy as np

import distrib as dt


def build(device: str, x_np, y_np, w1_np, w2_np):
    g = dt.Graph()
    with g.as_default(), dt.device(device):
        x = dt.constant(x_np)
        y = dt.constant(y_np)
        w1 = dt.Variable(w1_np, name="w1")
        b1 = dt.Variable(np.zeros(w1_np.shape[1], np.float32), name="b1")
        w2 = dt.Variable(w2_np, name="w2")
        h = dt.nn.relu(dt.nn.bias_add(dt.matmul(x, w1), b1))
        logits = dt.matmul(h, w2)
        loss = dt.reduce_mean(dt.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = dt.gradients(loss, [w1, b1, w2])
        init = dt.global_variables_initializer()
    return g, init, [loss, *grads], logits


async def run(device: str, arrays) -> list:
    g, init, fetches, _ = build(device, *arrays)
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(init)
            devs = [d["name"] for d in await sess.list_devices()]
            vals = await sess.run(fetches)
    return devs, [np.asarray(v, np.float64).tolist() for v in vals]


async def main() -> None:
    rng = np.random.default_rng(0)
    arrays = (rng.standard_normal((8, 17)).astype(np.float32),
              np.eye(5, dtype=np.float32)[rng.integers(0, 5, 8)],
              (rng.standard_normal((17, 16)) * 0.3).astype(np.float32),
              (rng.standard_normal((16, 5)) * 0.3).astype(np.float32))
    devs, gpu = await run("/gpu:0", arrays)
    _, cpu = await run("/cpu:0", arrays)
    json.dump({"devices": devs, "gpu": gpu, "cpu": cpu}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
