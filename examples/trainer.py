"""Between-graph replicated training: the seed's trainer skeleton made real.

    python examples/trainer.py --ps_hosts=localhost:2222 \
        --worker_hosts=localhost:2223,localhost:2224 --job_name=ps --task_index=0
    python examples/trainer.py ... --job_name=worker --task_index=0   (the chief)
    python examples/trainer.py ... --job_name=worker --task_index=1

ps tasks serve the variables until the chief tells them training is over.
Each worker builds the same graph with ``replica_device_setter`` (variables
round-robin on the ps tasks, compute on itself), trains an MLP on the 8x8
handwritten digits that ship in ``examples/data`` asynchronously under a
``Supervisor`` (the chief initializes or restores from ``--logdir`` and saves
checkpoints), logs progress, and ends with one line
``done global_step=<int> accuracy=<float>`` measured on held-out data.
The chief also writes the batch's loss and accuracy as summaries every
``--log_every`` of its steps (``sv.summary_computed``, into ``--logdir``):
``tensorboard --logdir <logdir>`` shows them.

How the ps learns that training is over: every worker adds one to a counter
variable on ps task 0 when it finishes; the chief waits for all of them, then
calls ``request_stop`` on each ps task (TF users did this with a queue).

Under an elastic launch (``python -m distrib.launch --workers MIN:MAX``)
workers join and leave while it trains: "all of them" is the workers of the
cluster's current membership, and a worker that was removed stops after its
current step (its Supervisor's ``should_stop``) and prints
``left global_step=<int> steps=<int>`` instead of the done line. Every worker
prints ``worker steps=<int>``, the steps it ran itself, before its done line:
the steps of all workers, those that left included, add up to the final
global step.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from distrib.cluster import parse_tf_config  # noqa: E402
from distrib.errors import FailedPreconditionError  # noqa: E402
from distrib.runtime.chief.membership import MembershipReader  # noqa: E402
from distrib.server import request_stop  # noqa: E402
from examples.datasets import load_digits  # noqa: E402

log = logging.getLogger("trainer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="Without --ps_hosts/--worker_hosts/--job_name/--task_index "
                                       "the cluster and task come from TF_CONFIG (as "
                                       "python -m distrib.launch sets it).")
    p.add_argument("--ps_hosts", help="comma-separated host:port of the ps job")
    p.add_argument("--worker_hosts", help="comma-separated host:port of workers")
    p.add_argument("--job_name", choices=["ps", "worker"])
    p.add_argument("--task_index", type=int)
    p.add_argument("--train_steps", type=int, default=1500, help="global steps to train")
    p.add_argument("--logdir", default=None, help="checkpoint folder (chief saves here)")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.3)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--log_every", type=int, default=200)
    p.add_argument("--wait_workers_secs", type=float, default=120,
                   help="how long the chief waits for the other workers to finish")
    p.add_argument("--min_step_ms", type=float, default=0,
                   help="each step takes at least this long (a test's way to make the "
                        "training outlast a chief election on any machine)")
    p.add_argument("--save_model_secs", type=float, default=600,
                   help="seconds between the chief's checkpoints")
    p.add_argument("--save_checkpoint_steps", type=int, default=None,
                   help="also a checkpoint every this many global steps")
    args = p.parse_args(argv)
    try:
        fill_from_tf_config(args)
    except ValueError as e:
        p.error(str(e))
    return args


def fill_from_tf_config(args: argparse.Namespace) -> None:
    """Take the cluster and the task from TF_CONFIG where their flags are absent."""
    flags = (args.ps_hosts, args.worker_hosts, args.job_name, args.task_index)
    if None not in flags:
        return
    if not os.environ.get("TF_CONFIG"):
        raise ValueError("--ps_hosts, --worker_hosts, --job_name and --task_index are "
                         "required unless TF_CONFIG gives the cluster and the task")
    tf = parse_tf_config()
    if args.ps_hosts is None and args.worker_hosts is None:
        if set(tf.cluster.jobs) != {"ps", "worker"}:
            raise ValueError(f"TF_CONFIG's cluster has jobs {tf.cluster.jobs}; this trainer "
                             "needs a ps and a worker job, and no other")
        hosts = {job: tf.cluster.job_tasks(job) for job in ("ps", "worker")}
        if any(None in tasks for tasks in hosts.values()):
            raise ValueError("TF_CONFIG's ps and worker jobs must list every task (no gaps)")
        args.ps_hosts, args.worker_hosts = (",".join(hosts[j]) for j in ("ps", "worker"))
    if args.job_name is None:
        if tf.task_type not in ("ps", "worker"):
            raise ValueError(f"TF_CONFIG's task type is {tf.task_type!r}: "
                             "this trainer runs 'ps' or 'worker' tasks")
        args.job_name = tf.task_type
    if args.task_index is None:
        if tf.task_id is None:
            raise ValueError("TF_CONFIG gives no task index")
        args.task_index = tf.task_id
    if args.ps_hosts is None or args.worker_hosts is None:
        raise ValueError("give both --ps_hosts and --worker_hosts, or neither (TF_CONFIG)")


class Model:
    """A 64-hidden-10 MLP (relu, softmax cross-entropy) placed by the device setter."""

    def __init__(self, args: argparse.Namespace, cluster: dt.ClusterSpec) -> None:
        self.graph = dt.Graph()
        worker = f"/job:worker/task:{args.task_index}"
        with self.graph.as_default(), dt.device(
                dt.train.replica_device_setter(worker_device=worker, cluster=cluster)):
            self.x = dt.placeholder(dt.float32, shape=[None, 64], name="x")
            self.y = dt.placeholder(dt.int64, shape=[None], name="y")
            w1 = dt.Variable(dt.random_normal([64, args.hidden], stddev=0.1, seed=1), name="w1")
            b1 = dt.Variable(dt.zeros([args.hidden]), name="b1")
            w2 = dt.Variable(dt.random_normal([args.hidden, 10], stddev=0.1, seed=2), name="w2")
            b2 = dt.Variable(dt.zeros([10]), name="b2")
            h = dt.nn.relu(dt.matmul(self.x, w1) + b1)
            self.logits = dt.matmul(h, w2) + b2
            self.loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(
                labels=self.y, logits=self.logits))
            self.global_step = dt.train.get_or_create_global_step()
            opt = dt.train.GradientDescentOptimizer(args.learning_rate)
            self.train_op = opt.minimize(self.loss, global_step=self.global_step)
            self.accuracy = dt.reduce_mean(dt.cast(dt.equal(dt.argmax(self.logits, 1), self.y),
                                                   dt.float32))
            dt.summary.scalar("loss", self.loss)
            dt.summary.scalar("accuracy", self.accuracy)
            self.summary_op = dt.summary.merge_all()   # needs the batch: summary_computed
            self.saver = dt.train.Saver(max_to_keep=3)
            self.init_op = dt.global_variables_initializer()
            # not a global variable: never checkpointed, initialized by the chief only
            with dt.device("/job:ps/task:0"):
                self.done = dt.Variable(0, dtype=dt.int64, name="workers_done",
                                        trainable=False, collections=[])
            self.done_ready = dt.is_variable_initialized(self.done)
            self.done_init = self.done.initializer
            self.mark_done = self.done.assign_add(1)
            self.read_done = self.done.read_value()


class Progress:
    """When a worker logs: at its first step, then once each time the global
    step reaches the next multiple of ``every``.

    The global step is shared: between two steps of this worker the others
    add theirs, so it jumps by about the number of workers and a test for
    an exact multiple would skip most of them (irregular lines, or none)."""

    def __init__(self, every: int) -> None:
        self.every = max(1, every)
        self._next: int | None = None

    def due(self, step: int) -> bool:
        if self._next is not None and step < self._next:
            return False
        self._next = (step // self.every + 1) * self.every
        return True


async def train(args: argparse.Namespace, server: dt.Server,
                cluster: dt.ClusterSpec) -> tuple[float | None, bool]:
    """Train; returns the accuracy and whether this task ended as the chief
    (the role is elected: it moves to another worker when the chief dies)."""
    model = Model(args, cluster)
    is_chief = args.task_index == 0   # the preferred chief
    X, y = load_digits("train")
    Xt, yt = load_digits("test")
    rng = np.random.default_rng(1000 + args.task_index)
    sv = dt.train.Supervisor(graph=model.graph, is_chief=is_chief, logdir=args.logdir,
                             init_op=model.init_op, saver=model.saver,
                             global_step=model.global_step, summary_op=None,
                             save_model_secs=args.save_model_secs,
                             save_checkpoint_steps=args.save_checkpoint_steps,
                             recovery_wait_secs=0.2)
    # the membership reads after training go through one client (the chief polls it)
    async with sv.managed_session(server.target) as sess, MembershipReader() as members:
        if sv.is_chief and not await sess.run(model.done_ready):
            await sess.run(model.done_init)
        step, t0, seen, own_steps = 0, time.perf_counter(), 0, 0
        progress = Progress(args.log_every)
        while not sv.should_stop() and step < args.train_steps:
            began = time.perf_counter()
            idx = rng.integers(0, len(X), args.batch_size)
            fetches = [model.train_op, model.loss, model.global_step]
            write = sv.is_chief and sv.summary_writer is not None and own_steps % args.log_every == 0
            out = await sess.run(fetches + [model.summary_op] if write else fetches,
                                 {model.x: X[idx], model.y: y[idx]})
            _, loss, step = out[:3]
            if write:   # the chief's summaries of this batch, at this global step
                await sv.summary_computed(sess, out[3], step)
            seen += args.batch_size
            own_steps += 1
            if progress.due(step) or step >= args.train_steps:
                rate = seen / (time.perf_counter() - t0)
                log.info("worker %d: global step %d, loss %.4f, %.0f examples/s",
                         args.task_index, step, loss, rate)
            if args.min_step_ms:   # a floor on a step's time, whatever the machine's speed
                await asyncio.sleep(max(0.0, args.min_step_ms / 1000 - (time.perf_counter()
                                                                         - began)))
        own = cluster.task_address(args.job_name, args.task_index)
        membership = await membership_of(members, own)
        if membership is not None and membership.has_left(f"/job:worker/task:{args.task_index}"):
            # removed by a scale-down: gone after this step, not counted among the done
            print(f"left global_step={int(step)} steps={own_steps}", flush=True)
            return None, False
        logits = await sess.run(model.logits, {model.x: Xt})
        accuracy = float(np.mean(np.argmax(logits, axis=1) == yt))
        # read before reporting done: once every worker did, the chief may
        # release the ps at any moment
        step = await sess.run(model.global_step)
        await mark_done(sess, model, sv)
        chief = sv.is_chief
        if chief:
            await wait_for_workers(sess, model, lambda: live_workers(members, own, cluster),
                                   args.wait_workers_secs)
            step = await sess.run(model.global_step)   # with every worker's last steps
    # the Supervisor's final checkpoint is written when the block above ends
    print(f"worker steps={own_steps}", flush=True)
    print(f"done global_step={int(step)} accuracy={accuracy:.4f}", flush=True)
    return accuracy, chief


async def mark_done(sess: dt.Session, model: Model, sv: dt.train.Supervisor,
                    limit_s: float = 30) -> None:
    deadline = time.monotonic() + limit_s
    while True:  # the chief may not have initialized the counter yet
        try:
            await sess.run(model.mark_done)
            return
        except FailedPreconditionError:
            if sv.is_chief:   # not checkpointed: a restarted ps lost it; the chief starts it again
                await sess.run(model.done_init)
                continue
            if time.monotonic() > deadline:
                log.warning("could not report this worker done: the chief never initialized "
                            "the counter on /job:ps/task:0")
                return
            await asyncio.sleep(0.1)


async def membership_of(members: MembershipReader, own: str) -> Any:
    """The cluster membership this task's server holds (an elastic launch's);
    None without one."""
    try:
        return await members.read(own)
    except dt.errors.OpError as e:
        log.warning("could not read the cluster membership: %s", e)
        return None


async def live_workers(members: MembershipReader, own: str, cluster: dt.ClusterSpec) -> int:
    """The workers in the job now: the cluster membership's (an elastic launch
    changes it), else the cluster's."""
    membership = await membership_of(members, own)
    return cluster.num_tasks("worker") if membership is None else membership.num_workers


async def wait_for_workers(sess: dt.Session, model: Model, workers: Any, limit_s: float) -> None:
    """Wait until all workers (``await workers()``, asked anew each time: the
    membership may change) reported done, saying every few seconds how many
    are missing; past ``limit_s`` go on without them (a worker died)."""
    start = time.monotonic()
    said, n, asked = start, await workers(), start
    while (done := int(await sess.run(model.read_done))) < n:
        now = time.monotonic()
        if now - start > limit_s:
            log.warning("%d of %d workers finished; not waiting longer than "
                        "--wait_workers_secs=%g for the others", done, n, limit_s)
            return
        if now - said >= 5:
            log.info("chief: %d of %d workers finished; waiting for the others", done, n)
            said = now
        if now - asked >= 0.5:
            n, asked = await workers(), now
        await asyncio.sleep(0.1)


async def release_ps(cluster: dt.ClusterSpec) -> None:
    for i in cluster.task_indices("ps"):
        try:
            await request_stop(cluster.task_address("ps", i))
        except dt.errors.OpError as e:
            log.warning("could not tell /job:ps/task:%d to stop: %s", i, e)


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (kill, docker stop, a launcher's terminate()) ends the task as
    # Ctrl-C does: asyncio cancels the training loop and the chief's
    # Supervisor still writes its final checkpoint
    signal.raise_signal(signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        cluster = dt.ClusterSpec.from_flags(ps_hosts=args.ps_hosts, worker_hosts=args.worker_hosts)
        server = dt.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # Ctrl-C and SIGTERM stop the task cleanly even when it was started with
    # SIGINT ignored (a background job of a script, nohup): Python then keeps
    # the ignore, asyncio installs no handler, and _terminate's SIGINT was lost
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.job_name == "ps":
            log.info("ps %d serving at %s", args.task_index, server.target)
            server.join()
            log.info("ps %d: training is over", args.task_index)
            return 0
        _, chief = asyncio.run(train(args, server, cluster))
        if chief:
            asyncio.run(release_ps(cluster))
        return 0
    except KeyboardInterrupt:
        log.info("/job:%s/task:%d interrupted; stopping", args.job_name, args.task_index)
        return 130
    except dt.errors.OpError as e:
        print(f"error: /job:{args.job_name}/task:{args.task_index}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
