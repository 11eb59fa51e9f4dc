"""The strategies seed's custom training loop, with ``tf.`` -> ``dt.`` and ``await``.

A two-layer classifier of the 8x8 digits, trained synchronously:

    python examples/custom_loop.py                       # MirroredStrategy, 2 logical CPUs
    python examples/custom_loop.py --strategy central    # CentralStorageStrategy
    python -m distrib.launch --workers 2 -- python examples/custom_loop.py --strategy mwms
                                                         # MultiWorkerMirroredStrategy, 2 processes
    python examples/custom_loop.py --iterator            # the step takes the iterator

With ``--iterator`` the loop is the "Custom training loop with
MultiWorkerMirroredStrategy" tutorial's: a new iterator each epoch
(``iter(dist_dataset)``) passed to the traced step, which calls
``next(iterator)`` inside; each call trains on the next batch, and the end of
the data ends the epoch (``OutOfRangeError``). The losses are the same as the
default form's, which passes each batch to the step.

It prints the loss of each epoch and the final accuracy on the test split;
under MultiWorkerMirroredStrategy each worker prints its own lines (the
values agree: every worker holds the same weights).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402


def make_strategy(name: str, replicas: int) -> dt.distribute.Strategy:
    cpu = dt.config.list_physical_devices("CPU")[0]
    if replicas > 1:
        dt.config.set_logical_device_configuration(
            cpu, [dt.config.LogicalDeviceConfiguration()] * replicas)
    if name == "mirrored":
        return dt.distribute.MirroredStrategy()
    if name == "central":
        return dt.distribute.experimental.CentralStorageStrategy()
    if name == "mwms":
        return dt.distribute.MultiWorkerMirroredStrategy()
    raise SystemExit(f"unknown --strategy {name!r}: mirrored, central or mwms")


async def main(args: argparse.Namespace) -> float:
    strategy = make_strategy(args.strategy, args.replicas)
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    batch_per_replica = args.batch_size
    global_batch_size = batch_per_replica * strategy.num_replicas_in_sync

    with strategy.scope():
        rng = np.random.default_rng(args.seed)   # the same start on every worker
        w1 = dt.Variable(rng.normal(0, 0.1, (64, args.hidden)).astype(np.float32), name="w1")
        b1 = dt.Variable(np.zeros(args.hidden, np.float32), name="b1")
        w2 = dt.Variable(rng.normal(0, 0.1, (args.hidden, 10)).astype(np.float32), name="w2")
        b2 = dt.Variable(np.zeros(10, np.float32), name="b2")
        optimizer = dt.train.GradientDescentOptimizer(args.learning_rate)
    params = [w1, b1, w2, b2]

    def model(x: dt.Tensor) -> dt.Tensor:
        hidden = dt.nn.relu(dt.matmul(x, w1) + b1)
        return dt.matmul(hidden, w2) + b2

    def compute_loss(labels: dt.Tensor, logits: dt.Tensor) -> dt.Tensor:
        per_example_loss = dt.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits)
        return dt.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch_size)

    def train_step(inputs: tuple) -> dt.Tensor:
        features, labels = inputs
        with dt.GradientTape() as tape:
            predictions = model(features)
            loss = compute_loss(labels, predictions)
        gradients = tape.gradient(loss, params)
        optimizer.apply_gradients(zip(gradients, params))
        return loss

    @dt.function
    def distributed_train_step(dist_inputs: tuple) -> dt.Tensor:
        per_replica_losses = strategy.run(train_step, args=(dist_inputs,))
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @dt.function
    def train_on_next(iterator: dt.distribute.DistributedIterator) -> dt.Tensor:
        per_replica_losses = strategy.run(train_step, args=(next(iterator),))
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    async def epoch_by_iterator() -> tuple[float, int]:
        iterator = iter(dist_dataset)   # a new iterator each epoch, as the tutorial's
        total_loss, num_batches = 0.0, 0
        while num_batches != args.steps_per_epoch:
            try:
                total_loss += float(await train_on_next(iterator))
            except dt.errors.OutOfRangeError:
                break
            num_batches += 1
        return total_loss, num_batches

    @dt.function
    def predict(x: np.ndarray) -> dt.Tensor:
        return dt.argmax(model(x), axis=1)

    dataset = dt.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(
        len(x_train), seed=args.seed).batch(global_batch_size, drop_remainder=True)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        total_loss, num_batches = 0.0, 0
        if args.iterator:
            total_loss, num_batches = await epoch_by_iterator()
        for batch in (() if args.iterator else dist_dataset):
            total_loss += float(await distributed_train_step(batch))
            num_batches += 1
            if num_batches == args.steps_per_epoch:
                break
        print(f"epoch {epoch + 1}: loss {total_loss / max(num_batches, 1):.4f}", flush=True)
    with strategy.scope():
        predicted = await predict(x_test)
    accuracy = float(np.mean(predicted == y_test))
    print(f"done strategy={args.strategy} replicas={strategy.num_replicas_in_sync} "
          f"accuracy={accuracy:.4f} in {time.perf_counter() - start:.1f}s", flush=True)
    return accuracy


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--strategy", default="mirrored", help="mirrored | central | mwms")
    p.add_argument("--replicas", type=int, default=2,
                   help="logical CPUs (replicas) per process (default 2)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=32, help="per replica")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps_per_epoch", type=int, default=None,
                   help="batches per epoch (default: the whole training split)")
    p.add_argument("--iterator", action="store_true",
                   help="the tutorial's loop: the traced step takes a new iterator each epoch")
    args = p.parse_args(argv)
    if args.strategy == "mwms" and "--replicas" not in " ".join(argv or sys.argv):
        args.replicas = 1   # TF's default: one CPU replica per worker
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
