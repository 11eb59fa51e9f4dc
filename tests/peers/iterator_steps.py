"""One worker of a MultiWorkerMirroredStrategy (TF_CONFIG) whose traced steps
take a distributed iterator (tests/test_function_iterators.py).

The dataset is 0..15 in global batches of 4 (sums 6, 22, 38, 54); each epoch
makes a new iterator (``iter(dist_dataset)``, the custom-loop tutorial's
pattern) and calls the step until it raises ``OutOfRangeError``, at most 8
times (a step that does not read its iterator would never end an epoch).
Epochs alternate between a step that calls ``next(iterator)`` inside
``strategy.run``'s arguments and one that calls ``iterator.get_next()``
(``--next_only``: always the first). Between epochs the garbage collector
runs, and worker 0 alone makes one more iterator and keeps it (a chief's
own work between epochs): on worker 1 the next epoch's iterator may take
the freed one's id, on worker 0 it may not, so a function keyed by ``id()``
retraced on one worker only (a hang in the step's collective). Prints one
JSON line: each epoch's global sums and the two functions' trace counts.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402

EPOCHS = 4
MAX_CALLS = 8


async def main() -> None:
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    dataset = dt.data.Dataset.from_tensor_slices(np.arange(16, dtype=np.float32)).batch(4)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    def total(per_replica: dt.distribute.PerReplica) -> dt.Tensor:
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica, axis=None)

    @dt.function
    def by_next(iterator: dt.distribute.DistributedIterator) -> dt.Tensor:
        return total(strategy.run(dt.reduce_sum, args=(next(iterator),)))

    @dt.function
    def by_get_next(iterator: dt.distribute.DistributedIterator) -> dt.Tensor:
        return total(strategy.run(dt.reduce_sum, args=(iterator.get_next(),)))

    epochs, held = [], []
    for epoch in range(EPOCHS):
        iterator = iter(dist_dataset)
        step = by_next if epoch % 2 == 0 or "--next_only" in sys.argv else by_get_next
        sums: list[float] = []
        for _ in range(MAX_CALLS):
            try:
                sums.append(float(await step(iterator)))
            except dt.errors.OutOfRangeError:
                sums.append(-1.0)   # the end, as the caller saw it
                break
        epochs.append(sums)
        del iterator
        gc.collect()
        if strategy.worker_index == 0:
            held.append(iter(dist_dataset))
    print(json.dumps({"epochs": epochs,
                      "traces": [by_next.experimental_get_tracing_count(),
                                 by_get_next.experimental_get_tracing_count()]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
