"""Runs in a child process under the CUDA simulator: the bench model's graph
(bench/train.py: an MLP of two relu layers and a linear one, sparse softmax
cross-entropy, mean loss, plain SGD, the batch fed every step) on /gpu:0,
at small sizes (the simulator runs every CUDA thread as a Python thread; the
counts do not depend on the sizes), through a real in-process server and
session; prints JSON: the device counters (kernels.counters) of warm steps,
the number of ops the worker runs on the GPU, and the losses beside /cpu:0's.

The counters come from the run metadata of a traced step
(``RunOptions(trace_level=FULL_TRACE)``) where the session takes one
(``"via": "run_metadata"``); else a ``counting`` scope is opened around the
step in this process, the worker's partition running in the same asyncio
task (``"via": "scope"``).
"""
from __future__ import annotations

import asyncio
import inspect
import json
import sys

import numpy as np

import distrib as dt
from kernels.counters import StepCounters, counting
from kernels.cuda.fusion import fuse_gpu_nodes

SIZES = (24, 16, 16, 10, 8)   # inputs, hidden, hidden, classes, batch


def build(device: str):
    d_in, h1, h2, n_out, bs = SIZES
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((bs, d_in)).astype(np.float32)
    y_np = rng.integers(0, n_out, bs).astype(np.int64)
    g = dt.Graph()
    with g.as_default(), dt.device(device):
        x = dt.placeholder(dt.float32, [None, d_in], name="x")
        y = dt.placeholder(dt.int64, [None], name="y")
        w1 = dt.Variable((rng.standard_normal((d_in, h1)) * 0.2).astype(np.float32))
        b1 = dt.Variable(np.zeros(h1, np.float32))
        w2 = dt.Variable((rng.standard_normal((h1, h2)) * 0.2).astype(np.float32))
        b2 = dt.Variable(np.zeros(h2, np.float32))
        w3 = dt.Variable((rng.standard_normal((h2, n_out)) * 0.2).astype(np.float32))
        b3 = dt.Variable(np.zeros(n_out, np.float32))
        h = dt.nn.relu(dt.matmul(x, w1) + b1)
        h = dt.nn.relu(dt.matmul(h, w2) + b2)
        logits = dt.matmul(h, w3) + b3
        loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
        train = dt.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = dt.global_variables_initializer()
    return g, init, loss, train, {x: x_np, y: y_np}


def _traced_run_supported(sess: dt.Session) -> bool:
    return (hasattr(dt, "RunMetadata") and hasattr(dt, "RunOptions")
            and "run_metadata" in inspect.signature(sess.run).parameters)


async def run(device: str, count: bool) -> dict:
    g, init, loss, train, feed = build(device)
    out: dict = {"losses": []}
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(init)
            for _ in range(3):   # cold: compile (simulated), fill the allocator's pool
                out["losses"].append(float((await sess.run([loss, train], feed_dict=feed))[0]))
            if count:
                out["steps"] = []
                for _ in range(2):
                    out["steps"].append(await _counted_step(sess, loss, train, feed))
                # the ops after the GPU fusion (what the worker compiles)
                nodes = fuse_gpu_nodes(g.as_graph_def()["nodes"], [], 1)
                out["gpu_ops"] = sum(1 for n in nodes if "GPU" in (n.get("device") or "")
                                     and n["op"] not in ("Placeholder", "NoOp"))
                out["fused"] = sum(1 for n in nodes if n["op"] == "_FusedBiasRelu")
            devs = [d["name"] for d in await sess.list_devices()]
    out["devices"] = devs
    return out


async def _counted_step(sess: dt.Session, loss, train, feed) -> dict:
    if _traced_run_supported(sess):
        md = dt.RunMetadata()
        await sess.run([loss, train], feed_dict=feed,
                       options=dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
                       run_metadata=md)
        found = [d for d in md.step_stats.dev_stats if d.counters]
        if found:   # the ops the GPU ran in this step (after fusion), beside its counters
            ops = [s.node_name for s in found[0].node_stats if s.kind == "op"]
            return {"via": "run_metadata", **found[0].counters, "ops_run": len(ops),
                    "fused_run": sum(1 for s in found[0].node_stats
                                     if "= _FusedBiasRelu(" in s.timeline_label)}
    counters = StepCounters()
    with counting(counters):
        await sess.run([loss, train], feed_dict=feed)
    return {"via": "scope", **counters.as_dict()}


async def main() -> None:
    gpu = await run("/gpu:0", count=True)
    cpu = await run("/cpu:0", count=False)
    json.dump({"gpu": gpu, "cpu": cpu}, sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
