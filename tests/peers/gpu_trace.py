"""Runs in a child process under the CUDA simulator: one traced step of a
small graph on /gpu:0 (a MatMul and a ReLU, the result fetched) through a
real in-process server; prints JSON: per device of the step's run metadata,
its name, its ops and its counters (kernels.counters, as the runtime
reported them)."""
from __future__ import annotations

import asyncio
import json
import sys

import numpy as np

import distrib as dt


async def main() -> None:
    g = dt.Graph()
    with g.as_default(), dt.device("/gpu:0"):
        x = dt.placeholder(dt.float32, [4, 8], name="x")
        w = dt.constant(np.ones((8, 3), np.float32))
        y = dt.nn.relu(dt.matmul(x, w))
    feed = {x: np.ones((4, 8), np.float32)}
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(y, feed)   # cold: compiles (simulated)
            md = dt.RunMetadata()
            value = await sess.run(y, feed, options=dt.RunOptions(
                trace_level=dt.RunOptions.FULL_TRACE), run_metadata=md)
    assert float(value[0, 0]) == 8.0
    json.dump({"dev_stats": [{"device": d.device, "nodes": [n.node_name for n in d.node_stats],
                              "counters": d.counters} for d in md.step_stats.dev_stats]},
              sys.stdout)


if __name__ == "__main__":
    asyncio.run(main())
