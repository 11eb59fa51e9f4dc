"""A ClusterCoordinator program for an elastic launch (tests/test_elastic_coordinator.py).

Every task runs it with ``TF_CONFIG``: ps and worker tasks serve
(examples/ps_coordinator.py's ``serve``); the chief trains
examples/ps_coordinator.py's digits model in rounds of ``--round`` closures
until the file ``LOGDIR/finish`` appears and ``--min_closures`` ran (or
``--max_s`` passes). Each closure also adds 1 to ``global_step`` and its worker's one-hot (a
per-worker value: worker index i sees e_i) to ``runs`` on the ps, and
returns the one-hot, so a closure that ran twice, or not at all, shows.

After each round the chief prints
``round R: closures=S workers=N by_worker=0:a,1:b,...`` (``by_worker`` from
the results), and at the end
``done closures=S global_step=G runs=a,b,... by_worker=... accuracy=A``.
"""
from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402
from examples.ps_coordinator import serve, stop_servers  # noqa: E402

MAX_WORKERS = 8


async def coordinate(args: argparse.Namespace,
                     resolver: dt.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    strategy = dt.distribute.ParameterServerStrategy(resolver)
    coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    with strategy.scope():
        rng = np.random.default_rng(1)
        w1 = dt.Variable(rng.normal(0, 0.1, (64, 64)).astype(np.float32), name="w1")
        b1 = dt.Variable(np.zeros(64, np.float32), name="b1")
        w2 = dt.Variable(rng.normal(0, 0.1, (64, 10)).astype(np.float32), name="w2")
        b2 = dt.Variable(np.zeros(10, np.float32), name="b2")
        global_step = dt.Variable(np.int64(0), name="global_step")
        runs = dt.Variable(np.zeros(MAX_WORKERS, np.float32), name="runs")
        optimizer = dt.train.GradientDescentOptimizer(args.learning_rate)
    params = [w1, b1, w2, b2]

    def model(x: dt.Tensor) -> dt.Tensor:
        return dt.matmul(dt.nn.relu(dt.matmul(x, w1) + b1), w2) + b2

    def dataset_fn(ctx: dt.distribute.InputContext) -> dt.data.Dataset:
        return (dt.data.Dataset.from_tensor_slices((x_train, y_train))
                .shuffle(len(x_train), seed=1 + ctx.input_pipeline_id)
                .batch(32, drop_remainder=True).repeat())

    indices = itertools.count()
    onehot = coordinator.create_per_worker_values(
        lambda: np.eye(MAX_WORKERS, dtype=np.float32)[next(indices)])

    @dt.function
    def worker_fn(iterator: object, me: dt.Tensor) -> tuple:
        def replica_fn(inputs: tuple) -> dt.Tensor:
            x, y = inputs
            with dt.GradientTape() as tape:
                loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=model(x)))
            optimizer.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss
        loss = strategy.run(replica_fn, args=(next(iterator),))
        global_step.assign_add(np.int64(1))
        runs.assign_add(me)
        return loss, me + 0.0

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    finish = os.path.join(args.logdir, "finish")
    by_worker = np.zeros(MAX_WORKERS, np.int64)
    closures = 0
    deadline = time.monotonic() + args.max_s
    for r in itertools.count(1):
        results = [coordinator.schedule(worker_fn, args=(iterator, onehot))
                   for _ in range(args.round)]
        closures += len(results)
        await coordinator.join()
        for result in results:
            _, me = await result.fetch()
            by_worker[int(np.argmax(me))] += 1
        print(f"round {r}: closures={closures} workers={coordinator.num_workers} "
              f"by_worker={_counts(by_worker)}", flush=True)
        if (os.path.exists(finish) and closures >= args.min_closures) \
                or time.monotonic() > deadline:
            break

    @dt.function
    def read() -> tuple:
        return global_step.read_value(), runs.read_value(), dt.argmax(model(x_test), axis=1)

    with strategy.scope():
        step, ran, predicted = await read()
    accuracy = float(np.mean(predicted == y_test))
    print(f"done closures={closures} global_step={int(step)} "
          f"runs={','.join(str(int(v)) for v in ran)} by_worker={_counts(by_worker)} "
          f"accuracy={accuracy:.4f}", flush=True)
    await coordinator.shutdown()
    await stop_servers(resolver)


def _counts(by_worker: np.ndarray) -> str:
    return ",".join(f"{i}:{int(n)}" for i, n in enumerate(by_worker) if n)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--logdir", required=True)
    p.add_argument("--round", type=int, default=40)
    p.add_argument("--learning_rate", type=float, default=0.1)
    p.add_argument("--min_closures", type=int, default=1200)
    p.add_argument("--max_s", type=float, default=45.0)
    args = p.parse_args()
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
        return
    asyncio.run(coordinate(args, resolver))


if __name__ == "__main__":
    main()
