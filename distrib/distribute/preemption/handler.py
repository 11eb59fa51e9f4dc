"""``dt.distribute.experimental.PreemptionCheckpointHandler`` and
``TerminationConfig``: TF's preemption handling for synchronous training
(``tensorflow/python/distribute/failure_handling/failure_handling.py``).

    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model, optimizer = ...
        ckpt = dt.train.Checkpoint(model=model, optimizer=optimizer)
        handler = await dt.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, ckpt, "ckpts")      # restores the newest, if any
    for epoch in range(handler.total_run_calls // STEPS, EPOCHS):
        for step in range(handler.total_run_calls % STEPS, STEPS):
            loss = await handler.run(distributed_train_step, next(iterator))

TF's behaviour, kept:

* Made, it restores the newest checkpoint of ``checkpoint_dir`` (through a
  ``CheckpointManager(max_to_keep=1)`` it makes, or the manager given) and
  ``total_run_calls`` goes on from the number of ``run`` calls the
  checkpoint was saved at (the ``checkpointed_runs`` variable it adds to the
  checkpoint). A ``Checkpoint`` without ``checkpoint_dir`` is an
  ``InvalidArgumentError``; a cluster with ``ps`` tasks is
  ``NotImplementedError`` (the synchronous strategies only).
* From then on it watches for a termination notice (SIGTERM, or a
  ``termination_watcher_fn`` polled every second, see
  ``signals.py``). A notice to ANY worker makes every worker save
  a checkpoint at one agreed step, at the start of its next ``run``, then call
  ``exit_fn``: by default ``sys.exit(42)``, TF's restart code, which
  ``python -m distrib.launch`` restarts without counting it against
  ``--max_restarts`` (``distrib.cluster.exit_codes``). The chief writes the
  file; every worker takes part in the save's read step (the ``Checkpoint``'s
  rule) and waits until the file is written before it exits, so a worker
  restarted at once finds the new checkpoint. ``save_fn`` replaces the
  manager's ``save`` (arguments of ``save_checkpoint_if_preempted`` go to it).
* ``grace_period`` (seconds from the notice to the actual end): save at once
  and train on; the noticed worker calls for a last save-and-exit when
  ``grace_period - 6 x`` the mean ``run`` time is left (TF's margin): two
  checkpoints, as TF's test expects.
* ``save_checkpoint_if_preempted()`` is ``run`` without a function (check,
  maybe save and exit, count one run); ``watch_preemption_scope()`` is a
  context for the loop that, for the mirrored strategies, only lets errors
  through (TF's use for it is TPUStrategy).

The agreement is TF's (``signals.py``): the noticed worker tells
its peers through the actor system to save at the run after the one it is
about to start, so the checkpoint is at most two runs after the notice, and
training pays nothing until a notice comes. Where it differs (the README's
"Differences from TensorFlow"): given ``check_period_s`` (distrib's), or
where the peers cannot be told by message, the workers agree by a
collective every run (0) or every few that together take that long, and
the checkpoint is at the run where the notice is first seen; ``run`` and
the handler itself are awaited (``handler = await ...``: the restore is a
step); an error in a step is not sent to the other workers (they fail at
their next collective with ``UnavailableError`` naming the worker); any
callable of a ``TerminationConfig`` may be a coroutine function; and there
is no platform detection (GCE, Borg): the defaults are TF's off those.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any, Callable, Iterator, NoReturn

import numpy as np

from distrib.cluster.exit_codes import RESTART_EXIT_CODE
from distrib.distribute.core.distribute_lib import variable_owner
from distrib.distribute.preemption.signals import Agreement, TerminationNotice, call_maybe_async
from distrib.errors import AbortedError, FailedPreconditionError, InvalidArgumentError, OpError
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import get_default_graph
from distrib.ops.variables import Variable
from distrib.train.checkpoints import object_graph, trackable
from distrib.train.checkpoints.manager import CheckpointManager
from distrib.train.checkpoints.object_checkpoint import Checkpoint

logger = logging.getLogger(__name__)

__all__ = ["PreemptionCheckpointHandler", "TerminationConfig", "RESTART_EXIT_CODE"]

_ITERATION_VARIABLE = "checkpointed_runs"   # TF's name, a child of the checkpoint
# what a worker votes at the start of a run (the max over the workers is the decision)
_GO_ON, _SAVE, _SAVE_AND_EXIT = 0, 1, 2
_GRACE_MARGIN = 3 * 2   # TF: a buffer factor of 3, times 2 for a peer up to a step behind
# Periodic agreement (check_period_s given, or peers that cannot be told by message): every
# run while a run takes longer than this, else every n runs that together take about this
# long (at most _MAX_INTERVAL). A notice is acted on within this much training. Measured (bench/recovery.py's preempt-mwms row, two workers
# on a 2-core loopback, runs of ~18 ms): an agreement takes 6-8 ms, waiting for the slower
# worker included; one every run made the training 20% slower, one every ~11 runs (this
# period) costs under 4%.
CHECK_PERIOD_S = 0.25
_MAX_INTERVAL = 100
_NEVER = 1 << 40   # the interval a worker asks for when notices come by message


class TerminationConfig:
    """``dt.distribute.experimental.TerminationConfig(termination_watcher_fn=None,
    exit_fn=None, grace_period=None, save_fn=None)``: TF's arguments; each callable
    may be a coroutine function.

    * ``termination_watcher_fn``: True when a notice came (polled every second);
      None: SIGTERM is the notice.
    * ``exit_fn``: what ends the program after the save; None: ``sys.exit(42)``.
      One that returns lets training go on in this process, no longer watched.
    * ``grace_period``: seconds from the notice to the end; None or 0: save and
      exit at once.
    * ``save_fn``: how to save; None: the checkpoint manager's ``save``.
    """

    def __init__(self, termination_watcher_fn: Callable[[], Any] | None = None,
                 exit_fn: Callable[[], Any] | None = None, grace_period: float | None = None,
                 save_fn: Callable[..., Any] | None = None) -> None:
        self.termination_watcher_fn = termination_watcher_fn
        self.exit_fn = exit_fn
        self.grace_period = grace_period
        self.save_fn = save_fn


def exit_to_restart() -> NoReturn:
    """TF's default ``exit_fn`` off Google Cloud: ``sys.exit(42)``."""
    sys.exit(RESTART_EXIT_CODE)


class PreemptionCheckpointHandler:
    """``PreemptionCheckpointHandler(cluster_resolver, checkpoint_or_checkpoint_manager,
    checkpoint_dir=None, termination_config=None)``: see the module header.
    ``await`` it once (it restores), then ``await handler.run(fn, *args)``.

    distrib's extension: ``check_period_s``, how much training may pass between two
    agreement collectives (0: one every run, and the save is at the run where the
    notice is seen). None (the default): none until a notice, which the noticed worker
    sends its peers (module header); where peers cannot be told so, ``CHECK_PERIOD_S``."""

    def __init__(self, cluster_resolver: Any, checkpoint_or_checkpoint_manager: Any,
                 checkpoint_dir: Any = None, termination_config: TerminationConfig | None = None,
                 *, check_period_s: float | None = None) -> None:
        given = checkpoint_or_checkpoint_manager
        if isinstance(given, CheckpointManager):
            self._manager, self._checkpoint = given, given.checkpoint
        elif isinstance(given, Checkpoint):
            if not checkpoint_dir:
                raise InvalidArgumentError("When a checkpoint is passed, a checkpoint_dir must "
                                           "be passed as well.")
            self._checkpoint = given
            self._manager = CheckpointManager(given, checkpoint_dir, max_to_keep=1)
        else:
            raise TypeError("checkpoint_or_checkpoint_manager must be a dt.train.Checkpoint or "
                            f"a dt.train.CheckpointManager, got {given!r}")
        cluster = cluster_resolver.cluster_spec() if cluster_resolver is not None else None
        jobs = list(cluster.jobs) if cluster else []
        if "ps" in jobs:
            raise NotImplementedError("PreemptionCheckpointHandler does not support usage with "
                                      "dt.distribute.experimental.ParameterServerStrategy.")
        workers = sum(len(cluster.task_indices(j)) for j in ("chief", "worker") if j in jobs)
        self._strategy = _find_strategy(self._checkpoint)
        self._worker_index = 0
        if workers > 1:
            if self._strategy is None or self._strategy.num_workers != workers:
                raise ValueError(
                    f"PreemptionCheckpointHandler: the cluster has {workers} workers, but "
                    f"{self._strategy!r} is not a MultiWorkerMirroredStrategy over them: make "
                    "the handler in the strategy's scope (as TF's example does)")
            self._worker_index = self._strategy.worker_index
        self._id_in_cluster = (f"{cluster_resolver.task_type}:{cluster_resolver.task_id}"
                               if workers > 1 else "single_worker")
        config = termination_config or TerminationConfig()
        self._exit_fn = config.exit_fn or exit_to_restart
        self._grace_period = float(config.grace_period or 0)
        self._save_fn = config.save_fn
        self._check_period = CHECK_PERIOD_S if check_period_s is None else float(check_period_s)
        self._checkpointed_runs = self._iteration_variable()
        self._agreement = Agreement(self._strategy, max(workers, 1))
        self._by_notice = check_period_s is None and self._agreement.tells_peers
        self._save_at: int | None = None       # by notice: the run every worker saves at
        self._steps = trackable.step_runner()
        self._run_counter: int | None = None   # known once restored (``await handler``)
        self._next_check = 0                   # the run calls at which the workers agree next
        self._runs_here = 0                    # runs timed in this process
        self._estimated_run_time = 0.0         # of the function (TF's, for the grace period)
        self._loop_time = 0.0                  # from one run's start to the next's (a mean)
        self._last_start: float | None = None
        self._countdown = False                # saved once within a grace period
        self._deadline: float | None = None    # the noticed worker's last call, in its grace
        self._reported = False
        self._watching = True                  # False once exit_fn returned (as TF: no more)
        self.restored_from: str | None = None  # the checkpoint restored, if any
        self.saves: list[tuple[int, float]] = []   # (run calls, seconds) of each save
        self._notice = TerminationNotice(config.termination_watcher_fn, self._id_in_cluster)

    def _iteration_variable(self) -> Variable:
        found = getattr(self._checkpoint, _ITERATION_VARIABLE, None)
        if found is not None:
            return found
        graph = get_default_graph()
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
                distribution_context.variable_creation_paused():
            made = Variable(np.int64(0), trainable=False, dtype=dtypes.int64,
                            name=_ITERATION_VARIABLE)
        setattr(self._checkpoint, _ITERATION_VARIABLE, made)
        return made

    # -- restore ---------------------------------------------------------------------------
    def __await__(self) -> Any:
        return self._ready().__await__()

    async def _ready(self) -> PreemptionCheckpointHandler:
        if self._run_counter is None:
            with self._agreement.scope():
                self.restored_from = await self._manager.restore_or_initialize()
                runs = await self._checkpoint.value_of(self._checkpointed_runs)
            self._run_counter = int(np.asarray(runs).reshape(-1)[0])
            # periodic: an agreement at once (every worker restored the same); by notice
            # none (its first costs ~50 ms of group forming): the run a notice names is
            # checked against this worker's instead (_follow_notice)
            self._next_check = self._run_counter + (_NEVER if self._by_notice else 0)
            if self.restored_from is not None:
                logger.info("PreemptionCheckpointHandler: restored %s; training goes on from "
                            "run %d", self.restored_from, self._run_counter)
        self._notice.start_async()
        return self

    @property
    def total_run_calls(self) -> int:
        """How many times ``run`` was called, before a restart too (the checkpoint's count)."""
        if self._run_counter is None:
            raise FailedPreconditionError(
                "PreemptionCheckpointHandler has not restored yet: await it once, "
                "handler = await dt.distribute.experimental.PreemptionCheckpointHandler(...), "
                "before reading total_run_calls")
        return self._run_counter

    @property
    def agreement_seconds(self) -> tuple[int, float]:
        """How many agreement collectives ran in this process, and their time (the bench's)."""
        return self._agreement.calls, self._agreement.seconds

    # -- the loop's calls ------------------------------------------------------------------
    async def run(self, distributed_train_function: Callable[..., Any], *args: Any,
                  **kwargs: Any) -> Any:
        """``await distributed_train_function(*args, **kwargs)`` (one step), after the
        agreement: on a notice to any worker, save at this step and ``exit_fn``."""
        await self._ready()
        self._tick()
        with self.watch_preemption_scope():
            await self._check_preemption_and_maybe_checkpoint()
            begin = time.monotonic()
            result = await call_maybe_async(distributed_train_function, *args, **kwargs)
        self._counted(time.monotonic() - begin)
        return result

    async def save_checkpoint_if_preempted(self, *args: Any, **kwargs: Any) -> None:
        """``run`` without a function: check, maybe save (``args`` to the manager's
        ``save`` or ``save_fn``) and exit, and count one run."""
        await self._ready()
        self._tick()
        with self.watch_preemption_scope():
            await self._check_preemption_and_maybe_checkpoint(*args, **kwargs)
        self._run_counter = self.total_run_calls + 1

    @contextlib.contextmanager
    def watch_preemption_scope(self) -> Iterator[None]:
        """The training loop's scope: errors pass through (logged with this worker's name)."""
        try:
            yield
        except OpError as e:
            if self._agreement.collective:
                logger.info("%s: the step failed (%s: %s); the other workers fail at their "
                            "next collective", self._id_in_cluster, type(e).__name__, e)
            raise

    def _tick(self) -> None:
        now = time.monotonic()
        if self._last_start is not None:
            gap = now - self._last_start
            self._loop_time = gap if not self._loop_time else 0.8 * self._loop_time + 0.2 * gap
        self._last_start = now

    def _interval(self) -> int:
        """How many runs until the next agreement, as this worker sees it (CHECK_PERIOD_S)."""
        if not self._agreement.collective or self._countdown or self._notice.received:
            return 1   # alone, an agreement costs nothing
        if self._by_notice:
            return _NEVER   # the next one is at a notice's run (_follow_notice)
        if self._loop_time <= 0:
            return 1
        return int(min(_MAX_INTERVAL, max(1.0, self._check_period // self._loop_time)))

    def _counted(self, seconds: float) -> None:
        self._run_counter = self.total_run_calls + 1
        self._runs_here += 1
        self._estimated_run_time += (seconds - self._estimated_run_time) / self._runs_here

    # -- notice, agreement, save, exit -----------------------------------------------------
    def _vote(self) -> int:
        received = self._notice.received_at
        if received is None:
            return _GO_ON
        if not self._reported:
            self._reported = True
            logger.warning("PreemptionCheckpointHandler: %s received a termination notice "
                           "(before run %d); the workers save at their next agreement",
                           self._id_in_cluster, self.total_run_calls)
        if self._grace_period <= 0:
            return _SAVE_AND_EXIT
        if not self._countdown:
            return _SAVE
        if self._deadline is None:
            sparse = self._check_period if self._agreement.collective else 0.0
            self._deadline = (received + self._grace_period - sparse
                              - _GRACE_MARGIN * self._estimated_run_time)
        if time.time() >= self._deadline:
            logger.warning("PreemptionCheckpointHandler: the grace period almost ended; "
                           "the last checkpoint now")
            return _SAVE_AND_EXIT
        return _GO_ON

    async def _agree(self, vote: int, interval: int = 1) -> tuple[int, int]:
        """The decision (the highest vote) and the runs to the next agreement (the fewest
        any worker asks for); it checks that every worker is at this run."""
        runs = self.total_run_calls
        out = await self._agreement.exchange([vote, runs, -runs, -interval])
        if int(out[1]) != runs or -int(out[2]) != runs:
            raise FailedPreconditionError(
                f"PreemptionCheckpointHandler: the workers are at different steps (run calls "
                f"{-int(out[2])} to {int(out[1])}; this worker {runs}). Every worker must call "
                "handler.run once per step, and all must restore the same checkpoint: a "
                "checkpoint_dir every worker reads (one file system)")
        return int(out[0]), max(1, -int(out[3]))

    async def _check_preemption_and_maybe_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        runs = self.total_run_calls
        if not self._watching:
            return
        if self._by_notice:
            await self._follow_notice(runs)
        if runs < self._next_check:
            return
        decision, interval = await self._agree(self._vote(), self._interval())
        self._next_check = runs + interval
        if decision == _GO_ON or (decision == _SAVE and self._countdown):
            return
        await self._save(*args, **kwargs)
        if decision == _SAVE and self._grace_period > 0:
            self._countdown = True
            logger.info("PreemptionCheckpointHandler: saved; training on for the grace "
                        "period (%g s)", self._grace_period)
            return
        await self._exit()

    async def _follow_notice(self, runs: int) -> None:
        """By notice: learn the run every worker saves at, from a peer's message or
        from this worker's own notice, which it then tells every peer (and waits for
        their acknowledgements) before it trains run ``runs``."""
        if self._save_at is not None:
            return
        held = self._agreement.peer_notice()
        if held is not None:
            self._save_at, sender = held
            logger.warning("PreemptionCheckpointHandler: %s received a termination notice; "
                           "the workers save at run %d (this worker is before run %d)",
                           sender, self._save_at, runs)
        elif self._notice.received:
            self._vote()   # logs the notice once
            self._save_at = runs + 1   # a peer may be in run ``runs`` already
            await self._agreement.announce(self._save_at)
        else:
            return
        if not runs <= self._save_at <= runs + 2:   # the noticer is at most a run ahead
            raise FailedPreconditionError(
                f"PreemptionCheckpointHandler: the workers are at different steps (a notice "
                f"names run {self._save_at}, this worker is at run {runs}). Every worker "
                "must call handler.run once per step, and all must restore the same "
                "checkpoint: a checkpoint_dir every worker reads (one file system)")
        self._next_check = min(self._next_check, self._save_at)

    async def _save(self, *args: Any, **kwargs: Any) -> None:
        runs = self.total_run_calls
        start = time.monotonic()
        failed: BaseException | None = None
        path = None
        try:
            with self._agreement.scope():
                await self._steps.assign([(self._checkpointed_runs, np.int64(runs))],
                                         strategy=self._strategy)
                if self._save_fn is not None:
                    await call_maybe_async(self._save_fn, *args, **kwargs)
                else:
                    if self._manager.checkpoint_interval is not None:
                        kwargs.setdefault("check_interval", False)   # this one is written
                    path = await self._manager.save(*args, **kwargs)
        except Exception as e:   # noqa: BLE001 - told to the others first, raised below
            failed = e
        # nobody goes on (or exits) before the chief's file is written; a failure anywhere
        # fails the save everywhere
        who = await self._agreement.exchange([self._worker_index + 1 if failed else 0, runs,
                                              -runs, -1])
        if failed is not None:
            raise failed
        if int(who[0]):
            raise AbortedError(f"PreemptionCheckpointHandler: worker {int(who[0]) - 1} failed "
                               f"to save the checkpoint of run {runs} (see its log)")
        took = time.monotonic() - start
        self.saves.append((runs, took))
        logger.warning("PreemptionCheckpointHandler: checkpoint of run %d saved%s in %.3f s",
                       runs, f" ({path})" if path else "", took)

    async def _exit(self) -> None:
        self._notice.stop()
        logger.warning("PreemptionCheckpointHandler: %s exits (exit_fn) to be restarted",
                       self._id_in_cluster)
        for handler in logging.getLogger().handlers:
            handler.flush()
        await call_maybe_async(self._exit_fn)
        # the exit_fn returned (TF's in-process restart): training goes on, and as in TF
        # nothing is watched any more (every worker stops agreeing at this same run)
        self._watching = False
        logger.warning("PreemptionCheckpointHandler: exit_fn returned; training goes on, "
                       "and preemption is no longer watched")

    def __del__(self) -> None:
        notice = getattr(self, "_notice", None)
        if notice is not None:
            try:
                notice.stop()
            except (ValueError, RuntimeError):   # not the main thread, or shutting down
                pass

    def __repr__(self) -> str:
        return (f"<PreemptionCheckpointHandler {self._id_in_cluster} "
                f"total_run_calls={self._run_counter} dir={self._manager.directory!r}>")


def _find_strategy(checkpoint: Checkpoint) -> Any:
    """The strategy the handler's steps run under: the one whose scope is open (TF's
    example makes the handler there), else the checkpoint's, else its variables' owner."""
    found = distribution_context.strategy() or checkpoint.strategy()
    if found is not None:
        return found
    for _, value in object_graph.walk(checkpoint).values():
        owner = variable_owner(value)
        if owner is not None:
            return owner
    return None
