"""A MultiWorkerMirroredStrategy worker that stops where a test wants it
(tests/test_mwms.py): run with TF_CONFIG set.

``--mode train`` makes the strategy, prints ``strategy ready``, then runs one
step (the first use broadcasts the chief's variables, then an all-reduce) and
prints ``result X`` (the all-reduced sum of the workers' ``index + 1``).
``--mode wait`` makes the strategy (its server starts), prints ``strategy
ready`` and sleeps: the test kills it before its first collective.
``--mode save`` trains as ``train`` does; then a non-chief exits, and the
chief waits for a line on stdin (the test sends it once that worker is gone),
prints ``saving`` and calls ``dt.train.Checkpoint.write`` in ``--dir``: a
save that every worker must join, which the worker that exited never does.
A step that fails prints ``error TYPE: MESSAGE`` and exits 0.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402
from distrib.errors import OpError  # noqa: E402


async def train(strategy: dt.distribute.MultiWorkerMirroredStrategy) -> dt.Variable:
    with strategy.scope():
        v = dt.Variable(np.float32(1.0), name="v")

    @dt.function
    def step() -> dt.Tensor:
        def replica() -> dt.Tensor:
            ctx = dt.distribute.get_replica_context()
            return ctx.all_reduce("sum", v * 0 + float(strategy.worker_index + 1))
        return strategy.run(replica)

    out = await step()
    print(f"result {float(np.asarray(strategy.experimental_local_results(out)[0]))}",
          flush=True)
    return v


async def save(strategy: dt.distribute.MultiWorkerMirroredStrategy, v: dt.Variable,
               folder: str) -> None:
    if strategy.worker_index != 0:
        return   # this worker leaves without saving
    sys.stdin.readline()
    print("saving", flush=True)
    await dt.train.Checkpoint(v=v).write(os.path.join(folder, "state"))
    print("saved", flush=True)


async def main(args: argparse.Namespace) -> None:
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    print(f"strategy ready: worker {strategy.worker_index} of {strategy.num_workers}",
          flush=True)
    if args.mode == "wait":
        time.sleep(120)   # the test kills it sooner (a bound if the test dies)
        return
    try:
        v = await train(strategy)
        if args.mode == "save":
            await save(strategy, v, args.dir)
    except OpError as e:
        print(f"error {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["train", "wait", "save"], default="train")
    parser.add_argument("--dir", default="")
    asyncio.run(main(parser.parse_args()))
