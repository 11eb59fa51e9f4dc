"""The graph optimizer's benchmark rows (``bench/step.py`` runs them): two
chains of 10,000 multiplies on a fed ``[4]`` float32 tensor in one local
session (a ``dt.serve`` on this loop):

- ``chain-fed``: ``y = y * x`` (nothing folds: fusion makes it one kernel);
- ``chain-const``: ``y = y * 1.0001`` (CSE makes the 10,000 constants one,
  fusion the multiplies one kernel; ``aggressive`` folds them into one
  multiply, as TF does, which is not bit-exact).

For each chain: the step with every pass on, with each pass off in turn,
with the optimizer off, and (chain-const) with aggressive arithmetic;
sessions are opened once and the steps timed in interleaved rounds
(medians). ``build+first`` rows: a fresh process builds the graph, opens a
session and runs one step, with numba's disk cache warm, with it cold (a
fresh ``NUMBA_CACHE_DIR``, so the fused kernel compiles) and with the
optimizer off; the first step runs the fused program on numpy while a thread
loads numba, and ``build+first+compiled`` is the time until the compiled
kernel is ready for the next step. The TF figures are those of issue 28 (TF 2.21 graph mode on
this machine, 2026-11-27); TF is not run here.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import distrib as dt
from kernels.cpu import fused as cpu_fused

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_US_PER_OP = {"fed": 0.188, "const": 0.017}    # const: 0.17 ms a step / 10,000 ops
TF_FIRST_S = {"fed": 3.8, "const": 4.4}
_PASSES = ("common_subgraph_elimination", "constant_folding", "arithmetic_optimization",
           "dependency_optimization", "remapping")


def build(kind: str, n_ops: int) -> tuple:
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [4])
        y = x
        for _ in range(n_ops):
            y = y * x if kind == "fed" else y * 1.0001
    return g, x, y


def _config(name: str) -> dt.ConfigProto | None:
    rc = dt.RewriterConfig
    if name == "all-on":
        return None
    if name == "optimizer-off":
        return dt.ConfigProto(graph_options=dt.GraphOptions(rewrite_options=rc(
            **{p: rc.OFF for p in _PASSES})))
    if name == "aggressive":
        return dt.ConfigProto(graph_options=dt.GraphOptions(rewrite_options=rc(
            arithmetic_optimization=rc.AGGRESSIVE)))
    return dt.ConfigProto(graph_options=dt.GraphOptions(rewrite_options=rc(
        **{name.removeprefix("no-"): rc.OFF})))


async def chain_rows(reps: int, n_ops: int, rounds: int = 3) -> list[dict]:
    xv = np.array([1.0, 1.00001, 0.99999, -1.0], np.float32)
    cpu_fused.prepare("float32")   # steady state: the first runs' loader thread done
    configs = ["all-on", *(f"no-{p}" for p in _PASSES), "optimizer-off"]
    rows = []
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        for kind in ("fed", "const"):
            g, x, y = build(kind, n_ops)
            names = configs + (["aggressive"] if kind == "const" else [])
            sessions = {}
            for name in names:
                sess = dt.Session(srv.target, graph=g, config=_config(name))
                await sess.__aenter__()
                await sess.run(y, {x: xv})   # plan, optimize, register, warm
                sessions[name] = sess
            times: dict[str, list[float]] = {name: [] for name in names}
            try:
                for _ in range(rounds):
                    for name, sess in sessions.items():
                        for _ in range(reps):
                            t0 = time.perf_counter()
                            await sess.run(y, {x: xv})
                            times[name].append(time.perf_counter() - t0)
            finally:
                for sess in sessions.values():
                    await sess.__aexit__(None, None, None)
            for name in names:
                step = statistics.median(times[name])
                rows.append({"name": f"chain-{kind} {name}", "us": step * 1e6,
                             "us_per_op": step * 1e6 / n_ops, "baseline": "tf-2.21 (issue 28)",
                             "ratio": step * 1e6 / n_ops / TF_US_PER_OP[kind],
                             "target": "<= 0.5 us/op" if kind == "fed" else "<= 2x"})
    return rows


_FIRST = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
import numpy as np
import distrib as dt
from bench.graph_chain import build
async def main():
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        g, x, y = build(sys.argv[1], int(sys.argv[2]))
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(y, {x: np.ones(4, np.float32)})
asyncio.run(main())
first = time.perf_counter() - t0
from kernels.cpu import fused as cpu_fused
cpu_fused.prepare("float32")   # until the compiled kernel would run the next step
print(json.dumps([first, time.perf_counter() - t0]))
"""


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def first_run_rows(n_ops: int) -> list[dict]:
    """Build + first run in a fresh process (imports included)."""
    rows = []
    for kind in ("fed", "const"):
        for variant in ("warm-cache", "cold-cache", "optimizer-off"):
            env = dict(os.environ)
            with tempfile.TemporaryDirectory() as cache:
                if variant == "cold-cache":
                    env["NUMBA_CACHE_DIR"] = cache
                if variant == "optimizer-off":
                    env["DISTRIB_GRAPH_OPTIMIZER"] = "off"
                cpu0 = _children_cpu_s()
                out = subprocess.run([sys.executable, "-c", _FIRST, kind, str(n_ops), ROOT],
                                     env=env, capture_output=True, text=True, timeout=300,
                                     check=True)
                cpu = _children_cpu_s() - cpu0
            first, ready = json.loads(out.stdout.strip().splitlines()[-1])
            # cpu_s: the whole process's CPU seconds (the loader thread's included),
            # steadier than wall time on a busy machine
            rows.append({"name": f"chain-{kind} build+first {variant}", "us": first * 1e6,
                         "cpu_s": cpu,
                         "baseline": "tf-2.21 (issue 28)", "ratio": first / TF_FIRST_S[kind],
                         "target": "<= 1.0x"})
            if variant != "optimizer-off":
                rows.append({"name": f"chain-{kind} build+first+compiled {variant}",
                             "us": ready * 1e6, "baseline": "tf-2.21 (issue 28)",
                             "ratio": ready / TF_FIRST_S[kind], "target": "<= 1.0x"})
    return rows
