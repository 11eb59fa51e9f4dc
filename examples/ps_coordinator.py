"""TF2 parameter-server training with a coordinator, the shape of TF's tutorial.

Every task runs this program with ``TF_CONFIG``: the ``ps`` and ``worker``
tasks serve (their servers run the steps the coordinator sends them); the
``chief`` is the coordinator: it makes the variables (round-robin over the ps
tasks), a per-worker dataset, schedules ``steps`` training closures, joins,
saves a checkpoint, prints the accuracy, and tells the servers that training
is over.

    python -m distrib.launch --cluster ... -- python examples/ps_coordinator.py
    python -m distrib.launch --ps 2 --workers 2 --chief -- python examples/ps_coordinator.py
    python -m distrib.launch --ps 1 --workers 2:3 --chief --logdir DIR -- python examples/ps_coordinator.py
    python -m distrib.launch scale --logdir DIR --workers 3     # a worker joins the coordinator's pool

(the second form needs a launcher with ``--chief``; otherwise write the
cluster file: ``{"chief": [...], "ps": [...], "worker": [...]}``).
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
from distrib.runtime.chief.membership import fetch_membership  # noqa: E402
from examples.datasets import load_digits  # noqa: E402


def serve(resolver: dt.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """A ps or worker task: serve until the coordinator says training is over."""
    server = dt.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                       task_index=resolver.task_id)
    print(f"{resolver.task_type} {resolver.task_id} serving at {server.target}", flush=True)
    server.join()


async def coordinate(args: argparse.Namespace,
                     resolver: dt.distribute.cluster_resolver.TFConfigClusterResolver) -> float:
    partitioner = dt.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=16 << 10, max_shards=len(resolver.cluster_spec().job_tasks("ps")))
    strategy = dt.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = dt.distribute.coordinator.ClusterCoordinator(
        strategy, checkpoint_dir=args.logdir, closures_per_worker=args.closures_per_worker)
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")

    with strategy.scope():
        rng = np.random.default_rng(args.seed)
        w1 = dt.Variable(rng.normal(0, 0.1, (64, args.hidden)).astype(np.float32), name="w1")
        b1 = dt.Variable(np.zeros(args.hidden, np.float32), name="b1")
        w2 = dt.Variable(rng.normal(0, 0.1, (args.hidden, 10)).astype(np.float32), name="w2")
        b2 = dt.Variable(np.zeros(10, np.float32), name="b2")
        optimizer = dt.train.GradientDescentOptimizer(args.learning_rate)
    params = [w1, b1, w2, b2]

    def model(x: dt.Tensor) -> dt.Tensor:
        return dt.matmul(dt.nn.relu(dt.matmul(x, w1) + b1), w2) + b2

    def dataset_fn(input_context: dt.distribute.InputContext) -> dt.data.Dataset:
        return (dt.data.Dataset.from_tensor_slices((x_train, y_train))
                .shuffle(len(x_train), seed=args.seed + input_context.input_pipeline_id)
                .batch(args.batch_size, drop_remainder=True).repeat())

    @dt.function
    def worker_fn(iterator: object) -> dt.Tensor:
        def replica_fn(inputs: tuple) -> dt.Tensor:
            x, y = inputs
            with dt.GradientTape() as tape:
                loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=model(x)))
            gradients = tape.gradient(loss, params)
            optimizer.apply_gradients(zip(gradients, params))
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    start = time.perf_counter()
    losses = []
    for epoch in range(args.epochs):
        results = [coordinator.schedule(worker_fn, args=(per_worker_iterator,))
                   for _ in range(args.steps_per_epoch)]
        await coordinator.join()
        losses = [float(await r.fetch()) for r in results]
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}", flush=True)
        if args.logdir:
            await save(strategy, args.logdir, epoch)

    @dt.function
    def predict(x: np.ndarray) -> dt.Tensor:
        return dt.argmax(model(x), axis=1)

    with strategy.scope():
        accuracy = float(np.mean(await predict(x_test) == y_test))
    print(f"done steps={args.epochs * args.steps_per_epoch} accuracy={accuracy:.4f} "
          f"in {time.perf_counter() - start:.1f}s", flush=True)
    await coordinator.shutdown()
    await stop_servers(resolver)
    return accuracy


async def save(strategy: dt.distribute.ParameterServerStrategy, logdir: str,
               epoch: int) -> None:
    from distrib.distribute.functions.def_function import session_for
    graph = dt.get_default_graph()
    if not hasattr(save, "saver"):
        with graph.as_default():
            save.saver = dt.train.Saver(max_to_keep=2)   # type: ignore[attr-defined]
    session = await session_for(graph, strategy.target)
    await save.saver.save(session, os.path.join(logdir, "model.ckpt"),  # type: ignore[attr-defined]
                          global_step=epoch)


async def stop_servers(resolver: dt.distribute.cluster_resolver.TFConfigClusterResolver) -> None:
    """Training is over: every worker and ps server's join() returns (in an
    elastic launch, the live ones of the membership record the first ps holds:
    a worker that joined is told too; one that left was released already)."""
    cluster = resolver.cluster_spec()
    try:
        record = await fetch_membership(
            cluster.task_address("ps", min(cluster.task_indices("ps"))), timeout=5.0)
    except dt.errors.OpError:
        record = None
    if record is not None:
        cluster = record.cluster
    for job in ("worker", "ps"):
        for i in cluster.task_indices(job):
            try:
                await dt.server.request_stop(cluster.task_address(job, i))
            except dt.errors.OpError as exc:
                print(f"{job} {i} did not take the stop: {exc}", flush=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--steps_per_epoch", type=int, default=40)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--logdir", default=None, help="checkpoints (and a restarted ps's restore)")
    p.add_argument("--closures_per_worker", type=int, default=1,
                   help="closures a worker holds at once: 1 as TF; 2 sends the next while "
                        "one runs (faster on small steps, staler gradients)")
    return p.parse_args(argv)


def main() -> None:
    args = parse()
    resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
        return
    asyncio.run(coordinate(args, resolver))


if __name__ == "__main__":
    main()
