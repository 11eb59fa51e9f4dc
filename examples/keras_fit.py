"""The strategies seed's Keras example, then a digits classifier, with ``tf.`` -> ``dt.``
and ``await``: ``model.fit`` under a distribution strategy.

    python examples/keras_fit.py                        # MirroredStrategy, 2 logical CPUs
    python examples/keras_fit.py --strategy central     # CentralStorageStrategy
    python examples/keras_fit.py --strategy none        # no strategy
    python -m distrib.launch --workers 2 -- python examples/keras_fit.py --strategy mwms
                                                        # MultiWorkerMirroredStrategy, 2 processes
    python -m distrib.launch --ps 1 --workers 2 --chief -- \
        python examples/keras_fit.py --strategy ps      # ParameterServerStrategy: the chief
                                                        # fits, the ps and workers serve

First the seed's one-weight model (``Dense(1, input_shape=(1,))``, ``'mse'``,
``'sgd'``) fits a dataset of 100 copies of ``([1.], [1.])`` batched by the
global batch size, which the strategy splits across its replicas. Then a
64-64-10 classifier of the 8x8 digits trains with ``model.fit`` and prints its
test accuracy. The losses printed are the same under every synchronous strategy
(and on every worker): each reaches the weights one replica reaches on the
global batch. Under ParameterServerStrategy the chief's ``fit`` schedules the
steps on the workers, asynchronously (``steps_per_epoch`` given, as TF needs
it): the losses differ, the accuracy is alike.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402


def make_strategy(name: str, replicas: int) -> Any:
    if name == "ps":
        return dt.distribute.ParameterServerStrategy(
            dt.distribute.cluster_resolver.TFConfigClusterResolver())
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
    if name == "none":
        return None
    raise SystemExit(f"unknown --strategy {name!r}: mirrored, central, mwms, ps or none")


def scope(strategy: Any) -> Any:
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


async def seed_example(strategy: Any, verbose: int, steps_per_epoch: int | None = None) -> None:
    """The strategies seed's Keras example, as written there (``steps_per_epoch``:
    fewer steps, for quick checks)."""
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    with scope(strategy):
        model = dt.keras.Sequential([dt.keras.layers.Dense(
            1, input_shape=(1,), kernel_initializer="zeros")])
        model.compile(loss="mse", optimizer="sgd")
    global_batch_size = 10 * replicas
    dataset = dt.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(global_batch_size)
    steps = 100 // global_batch_size if is_ps(strategy) else None   # PSS needs it
    steps = steps_per_epoch or steps
    history = await model.fit(dataset, epochs=2, verbose=verbose, steps_per_epoch=steps)
    kernel, bias = await model.get_weights()
    print(f"seed example: loss {history.history['loss'][-1]:.4f}, "
          f"w={float(kernel[0, 0]):.4f} b={float(bias[0]):.4f}", flush=True)


async def digits(strategy: Any, args: argparse.Namespace) -> float:
    """A 64-64-10 classifier of the digits through ``model.fit``."""
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    with scope(strategy):
        model = dt.keras.Sequential([
            dt.keras.layers.Dense(args.hidden, activation="relu", input_shape=(64,)),
            dt.keras.layers.Dense(10)])
        model.compile(optimizer=dt.keras.optimizers.SGD(args.learning_rate),
                      loss=dt.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    start = time.perf_counter()
    batch_size = args.batch_size * replicas
    steps = len(x_train) // batch_size if is_ps(strategy) else None
    history = await model.fit(x_train, y_train, batch_size=batch_size, epochs=args.epochs,
                              verbose=args.verbose, steps_per_epoch=args.steps_per_epoch or steps)
    for epoch, loss in enumerate(history.history["loss"]):
        print(f"epoch {epoch + 1}: loss {loss:.4f}", flush=True)
    loss, accuracy = await model.evaluate(x_test, y_test, verbose=0)
    print(f"done strategy={args.strategy} replicas={replicas} accuracy={accuracy:.4f} "
          f"test_loss={loss:.4f} in {time.perf_counter() - start:.1f}s", flush=True)
    return accuracy


def is_ps(strategy: Any) -> bool:
    return isinstance(strategy, dt.distribute.ParameterServerStrategy)


def serve() -> None:
    """A ps or worker task of ``--strategy ps``: serve until the chief says it is over."""
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
    server = dt.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                       task_index=resolver.task_id)
    print(f"{resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    server.join()


async def stop_servers(strategy: Any) -> None:
    """``--strategy ps``: training is over, every worker and ps server's join() returns."""
    cluster = strategy.cluster_resolver.cluster_spec()
    for job in ("worker", "ps"):
        for i in cluster.task_indices(job):
            try:
                await dt.server.request_stop(cluster.task_address(job, i))
            except dt.errors.OpError as exc:
                print(f"{job} {i} did not take the stop: {exc}", flush=True)


async def main(args: argparse.Namespace) -> float:
    dt.set_random_seed(args.seed)   # the same weights and batches on every worker
    strategy = make_strategy(args.strategy, args.replicas)
    try:
        await seed_example(strategy, args.verbose, args.steps_per_epoch)
        return await digits(strategy, args)
    finally:
        if is_ps(strategy):
            await stop_servers(strategy)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--strategy", default="mirrored",
                   help="mirrored | central | mwms | ps | none")
    p.add_argument("--replicas", type=int, default=2,
                   help="logical CPUs (replicas) per process (default 2)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch_size", type=int, default=32, help="per replica")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--verbose", type=int, default=2, help="fit's progress bar: 0, 1 or 2")
    p.add_argument("--steps_per_epoch", type=int, default=None,
                   help="fit's steps per epoch (default: the whole dataset)")
    args = p.parse_args(argv)
    if args.strategy in ("mwms", "ps", "none") and "--replicas" not in " ".join(argv or sys.argv):
        args.replicas = 1   # TF's default: one CPU replica per worker
    return args


if __name__ == "__main__":
    ARGS = parse()
    if ARGS.strategy == "ps" and os.environ.get("TF_CONFIG") and \
            dt.distribute.cluster_resolver.TFConfigClusterResolver().task_type in ("ps", "worker"):
        serve()
    else:
        asyncio.run(main(ARGS))
