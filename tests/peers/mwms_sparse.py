"""One worker of a MultiWorkerMirroredStrategy (TF_CONFIG) that trains an
embedding table by its sparse gradients (tests/test_mwms_sparse.py).

Each step, worker ``w`` looks up its own ids (worker 0 four ids, worker 1
three: the two workers' ``IndexedSlices`` have different row counts), the
tape's gradient of the table is an ``IndexedSlices``, and TF1's Adagrad
applies the all-gathered rows to both copies. Prints one JSON line: the
gradient kinds seen, the table after the steps, and every all-reduce and
all-gather of the step with its static shape (none may be the table's).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402

ROWS, DIM, STEPS = 50, 4, 3
IDS = {0: [[1, 4, 4, 0], [7, 1, 2, 2]], 1: [[2, 2, 9], [4, 7, 7]]}   # by worker, by step
INIT = (np.arange(ROWS * DIM, dtype=np.float64).reshape(ROWS, DIM) - 70) / 100


async def main() -> None:
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        table = dt.Variable(INIT, name="table")
        opt = dt.train.AdagradOptimizer(0.2)
    kinds: list[str] = []

    def replica_step(ids: dt.Tensor) -> dt.Tensor:
        with dt.GradientTape() as tape:
            loss = dt.reduce_sum(dt.gather(table, ids)) / 7.0
        grads = tape.gradient(loss, [table])
        kinds.append(type(grads[0]).__name__)
        opt.apply_gradients(zip(grads, [table]))
        return loss

    @dt.function
    def step(ids: dt.Tensor) -> dt.Tensor:
        return strategy.run(replica_step, args=(ids,))

    @dt.function
    def copies() -> list:
        return list(strategy.experimental_local_results(table))

    mine = IDS[strategy.worker_index]
    for k in range(STEPS):
        await step(np.asarray(mine[k % len(mine)], np.int64))
    graph = step.get_concrete_function(np.asarray(mine[0], np.int64)).graph
    collectives = [[op.type, op.outputs[0].shape.as_list()] for op in graph.get_operations()
                   if op.type in ("CollectiveReduce", "CollectiveGather")]
    (value,) = await copies()
    print(json.dumps({"kinds": kinds, "table": np.asarray(value).tolist(),
                      "collectives": collectives, "replicas": strategy.num_replicas_in_sync}),
          flush=True)


if __name__ == "__main__":
    asyncio.run(main())
