"""A custom training loop that survives a preempted worker: MultiWorkerMirroredStrategy
with ``dt.distribute.experimental.PreemptionCheckpointHandler``.

    python -m distrib.launch --workers 2 -- python examples/preemption.py --checkpoint_dir ckpts
    python -m distrib.launch --workers 2 -- python examples/preemption.py \\
        --checkpoint_dir ckpts --preempt_at 40          # worker 1 sends itself SIGTERM at run 40
    python -m distrib.launch --workers 2 -- python examples/preemption.py \
        --checkpoint_dir ckpts --hold_at 40    # worker 1 waits at run 40 for a SIGTERM from outside

The seed's two-layer classifier of the 8x8 digits, trained synchronously on
every worker. Each step goes through ``handler.run``; a SIGTERM to any worker
(``kill -TERM <pid>`` of one the launcher lists, or ``--preempt_at``) makes
every worker save a checkpoint at the same step (the run after the one the
noticed worker was about to start) and exit with code 42, which
the launcher restarts without counting it as a failure. Restarted, the
handler restores the checkpoint and the loop goes on from
``handler.total_run_calls``: the epoch and the step inside it, each epoch's
batches in the same order as before (its shuffle is seeded by the epoch), so
no batch is skipped or trained twice and the run ends where one without a
preemption ends. Each worker prints ``start total_run_calls=S restored=PATH``
when it starts and, at the end, ``done global_step=N accuracy=A seen=C``:
``N`` the steps trained (a variable in the checkpoint), ``C`` the sum of the
ids of every example trained on (each batch counted once, or ``C`` differs).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402

log = logging.getLogger("preemption")


def epoch_dataset(x: np.ndarray, y: np.ndarray, epoch: int, global_batch: int,
                  seed: int) -> dt.data.Dataset:
    """Epoch ``epoch``'s batches: the same order in every process that asks (its seed)."""
    ids = np.arange(len(x), dtype=np.float64)
    return dt.data.Dataset.from_tensor_slices((x, y, ids)).shuffle(
        len(x), seed=seed * 1000 + epoch).batch(global_batch, drop_remainder=True)


async def main(args: argparse.Namespace) -> float:
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    worker = strategy.worker_index
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    steps_per_epoch = len(x_train) // global_batch

    with strategy.scope():
        rng = np.random.default_rng(args.seed)   # the same start on every worker
        w1 = dt.Variable(rng.normal(0, 0.1, (64, args.hidden)).astype(np.float32), name="w1")
        b1 = dt.Variable(np.zeros(args.hidden, np.float32), name="b1")
        w2 = dt.Variable(rng.normal(0, 0.1, (args.hidden, 10)).astype(np.float32), name="w2")
        b2 = dt.Variable(np.zeros(10, np.float32), name="b2")
        global_step = dt.Variable(0, dtype=dt.int64, trainable=False, name="global_step")
        seen = dt.Variable(np.float64(0), trainable=False, name="seen",
                           aggregation=dt.VariableAggregation.SUM)
        optimizer = dt.train.GradientDescentOptimizer(args.learning_rate)
        checkpoint = dt.train.Checkpoint(w1=w1, b1=b1, w2=w2, b2=b2, step=global_step,
                                         seen=seen)
        handler = await dt.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, checkpoint, args.checkpoint_dir,
            check_period_s=args.check_period)
    params = [w1, b1, w2, b2]
    print(f"start total_run_calls={handler.total_run_calls} "
          f"restored={handler.restored_from or 'none'}", flush=True)

    def model(x: dt.Tensor) -> dt.Tensor:
        return dt.matmul(dt.nn.relu(dt.matmul(x, w1) + b1), w2) + b2

    def train_step(inputs: tuple) -> dt.Tensor:
        features, labels, ids = inputs
        with dt.GradientTape() as tape:
            loss = dt.nn.compute_average_loss(
                dt.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                               logits=model(features)),
                global_batch_size=global_batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, params), params),
                                  global_step=global_step)
        seen.assign_add(dt.reduce_sum(ids), read_value=False)   # summed over the replicas
        return loss

    @dt.function
    def distributed_train_step(dist_inputs: tuple) -> dt.Tensor:
        per_replica_losses = strategy.run(train_step, args=(dist_inputs,))
        return strategy.reduce(dt.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    @dt.function
    def predict(x: np.ndarray) -> dt.Tensor:
        return dt.argmax(model(x), axis=1)

    start = time.perf_counter()
    first = handler.total_run_calls
    for epoch in range(handler.total_run_calls // steps_per_epoch, args.epochs):
        skip = handler.total_run_calls % steps_per_epoch   # after a restart: mid-epoch
        dataset = epoch_dataset(x_train, y_train, epoch, global_batch, args.seed).skip(skip)
        total_loss, batches = 0.0, 0
        for batch in strategy.experimental_distribute_dataset(dataset):
            runs = handler.total_run_calls
            if worker == args.preempt_worker and handler.restored_from is None:
                if args.preempt_at == runs:
                    os.kill(os.getpid(), signal.SIGTERM)   # what a cluster manager would send
                elif args.hold_at == runs:
                    hold_for_sigterm(runs)
            total_loss += float(await handler.run(distributed_train_step, batch))
            batches += 1
            if args.log_every and (runs + 1) % args.log_every == 0:
                log.info("run %d done (epoch %d)", runs + 1, epoch + 1)
        print(f"epoch {epoch + 1}: loss {total_loss / max(batches, 1):.4f}", flush=True)
    with strategy.scope():
        predicted = await predict(x_test)
        step = int(await checkpoint.value_of(global_step))
        total_seen = float(await checkpoint.value_of(seen))
    accuracy = float(np.mean(predicted == y_test))
    calls, agree_s = handler.agreement_seconds
    print(f"agreement calls={calls} mean_ms={1000 * agree_s / max(calls, 1):.3f} "
          f"runs_here={handler.total_run_calls - first} "
          f"train_s={time.perf_counter() - start:.3f}", flush=True)
    print(f"done global_step={step} accuracy={accuracy:.4f} seen={total_seen:.0f}", flush=True)
    return accuracy


def hold_for_sigterm(runs: int, timeout_s: float = 120.0) -> None:
    """Wait before run ``runs`` until a SIGTERM comes from outside (``--hold_at``: a
    test's notice at a run it chooses, not one timed against the log), then hand it to
    the handler's own SIGTERM handler, as if it had come during the run."""
    came = threading.Event()
    handlers = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, handlers)
        came.set()
        handlers(signum, frame)   # the handler's: the notice
    signal.signal(signal.SIGTERM, on_sigterm)
    print(f"holding before run {runs} for a SIGTERM", flush=True)
    if not came.wait(timeout_s):   # the signal handler runs on this (the main) thread
        raise SystemExit(f"no SIGTERM came within {timeout_s:g} s of run {runs}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--checkpoint_dir", default=None,
                   help="where the handler saves and restores (every worker reads it; "
                        "default: a folder under the system's temp dir)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch_size", type=int, default=32, help="per replica")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--preempt_at", type=int, default=None,
                   help="worker --preempt_worker sends itself SIGTERM before this run (its "
                        "first start only)")
    p.add_argument("--hold_at", type=int, default=None,
                   help="worker --preempt_worker waits before this run until a SIGTERM "
                        "comes from outside (its first start only)")
    p.add_argument("--preempt_worker", type=int, default=1)
    p.add_argument("--check_period", type=float, default=None,
                   help="agree by a collective every this many seconds of training (0: "
                        "every run); default: none until a notice, which the noticed "
                        "worker sends the others")
    p.add_argument("--log_every", type=int, default=0,
                   help="log 'run N done' every N runs (0: never)")
    args = p.parse_args(argv)
    if args.checkpoint_dir is None:
        args.checkpoint_dir = os.path.join(tempfile.gettempdir(), "distrib-preemption-example")
    return args


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    asyncio.run(main(parse()))
