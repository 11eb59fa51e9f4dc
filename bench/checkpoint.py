"""Saving the bench model: ``dt.train.Checkpoint.save`` under MirroredStrategy
against ``dt.train.Saver.save`` of the same variables, in one process.

The model is bench/train.py's 784-512-512-10 MLP (six variables, 2.7 MB of
float32), made in the scope of a MirroredStrategy over two logical CPUs, so
every variable is a MirroredVariable of two copies; both savers write the
first copy of each (the Saver folds the copies itself). Rows:

- ``checkpoint-save``: ``await ckpt.save(prefix)``: one ``dt.function`` step
  that increments ``save_counter`` and reads the six values, then one file
  (values, object graph) written atomically off the event loop, and the
  ``checkpoint`` state file. Target: no slower than ``saver-save``.
- ``saver-save``: ``await saver.save(sess, prefix, global_step=i)``: one
  ``sess.run`` of the six reads, the same file format, rotation and state file.
- ``checkpoint-restore``: ``await ckpt.restore(path)``: read and verify the
  file, assign both copies of every variable in one step.
- ``saver-restore``: ``await saver.restore(sess, path)``, the same.

The rows take turns in rounds (after one untimed call of each, which traces
the steps) and each reports the median over rounds, so load from other
processes hits all of them alike. Timings are never asserted: this only
reports. ``--json PATH`` writes the rows.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import train as train_bench  # noqa: E402  (bench/train.py: the model)

import distrib as dt  # noqa: E402
from distrib.distribute.core.values import local_results  # noqa: E402
from distrib.distribute.functions import def_function  # noqa: E402
from distrib.distribute.functions.local_target import default_target  # noqa: E402

SIZES = train_bench.SIZES          # bench/train.py's model
initial_params = train_bench.initial_params
TARGETS = {"checkpoint-save": "<= saver-save", "checkpoint-restore": "<= saver-restore"}


def build(strategy: Any) -> dict[str, Any]:
    """The MLP's variables, by name, made in ``strategy``'s scope."""
    params = iter(initial_params())
    out = {}
    with strategy.scope():
        for i in range(len(SIZES) - 1):
            out[f"w{i}"] = dt.Variable(next(params), name=f"w{i}")
            out[f"b{i}"] = dt.Variable(next(params), name=f"b{i}")
    return out


async def _keep(made: list[str], saving: Awaitable[str]) -> None:
    made.append(await saving)


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await call()
    return (time.perf_counter() - t0) * 1000.0


async def run(rounds: int, folder: str) -> list[dict[str, Any]]:
    cpu = dt.config.list_physical_devices("CPU")[0]
    dt.config.set_logical_device_configuration(
        cpu, [dt.config.LogicalDeviceConfiguration()] * 2)
    strategy = dt.distribute.MirroredStrategy()
    variables = build(strategy)
    ckpt = dt.train.Checkpoint(**variables)
    ckpt_prefix = os.path.join(folder, "object", "ckpt")
    first = await ckpt.save(ckpt_prefix)             # traces, initializes on first use
    copies = [c for v in variables.values() for c in local_results(v)]
    saver = dt.train.Saver(copies, max_to_keep=2)
    saver_prefix = os.path.join(folder, "saver", "model")
    async with dt.Session(default_target()) as sess:
        saver_path = await saver.save(sess, saver_prefix, global_step=0)
        await ckpt.restore(first)
        await saver.restore(sess, saver_path)
        rows: dict[str, list[float]] = {k: [] for k in
                                        ("checkpoint-save", "saver-save", "checkpoint-restore",
                                         "saver-restore")}
        made: list[str] = []
        for r in range(1, rounds + 1):
            rows["checkpoint-save"].append(await timed(
                lambda: _keep(made, ckpt.save(ckpt_prefix))))
            rows["saver-save"].append(await timed(
                lambda: _keep(made, saver.save(sess, saver_prefix, global_step=r))))
            ckpt_path, saver_path = made[-2:]
            rows["checkpoint-restore"].append(await timed(lambda: ckpt.restore(ckpt_path)))
            rows["saver-restore"].append(await timed(lambda: saver.restore(sess, saver_path)))
            if ckpt_path != first:
                os.remove(ckpt_path)   # the Saver rotates its own (max_to_keep=2)
    await def_function.close_sessions()
    size = os.path.getsize(first)
    out = []
    for name, times in rows.items():
        ms = statistics.median(times)
        out.append({"row": name, "median_ms": round(ms, 2), "min_ms": round(min(times), 2),
                    "file_mb": round(size / 2**20, 2), "mb_per_s": round(size / 2**20 / ms * 1e3, 1),
                    "rounds": rounds, "target": TARGETS.get(name, "")})
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = ["row", "median_ms", "min_ms", "file_mb", "mb_per_s", "target"]
    cells = [head] + [[str(r[h]) for h in head] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = asyncio.run(run(args.rounds, folder))
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
