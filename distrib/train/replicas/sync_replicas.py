"""``SyncReplicasOptimizer``: synchronous data-parallel training with backup replicas (TF1).

Between-graph replication: every worker builds the same graph and wraps its
optimizer. The pieces, as in TF1:

* one **conditional accumulator** per trainable variable, on that variable's
  device (the ps), shared by name (``<var>/grad_accum``). A replica's
  gradient counts only if it was computed at the accumulator's current step;
  a late (stale) one is silently dropped;
* a **local step** per worker (a ``LOCAL_VARIABLES`` variable on the worker,
  set from ``global_step`` by ``local_step_init_op``): the step a replica's
  gradients belong to;
* a **token queue** beside the global step. A worker's train op applies its
  gradients to the accumulators, then dequeues a token (waiting for the
  chief) and stores it as its new local step;
* the chief's **aggregation step** (``get_chief_queue_runner()``): take the
  average of ``replicas_to_aggregate`` gradients from every accumulator,
  apply it with the wrapped optimizer, increment ``global_step``, and enqueue
  ``max(total_num_replicas, replicas_to_aggregate)`` tokens carrying it.

With ``replicas_to_aggregate < total_num_replicas`` the extra replicas are
backups: the quota is met by whichever replicas are fastest, so a dead or slow
replica does not stop training, and its late gradients are dropped.

Without backup replicas a dead or stopped replica stalls the chief's take
until the replica (or its restarted process) sends again (as in TF, a spare
token left in the queue can let another replica contribute twice instead).
That is TF's behaviour, but it must not be silent, so
every gradient names its replica: ``AccumulatorApplyGradient`` carries attr
``replica``, the worker's ``/job:J/task:T`` taken from the device of the
local step (which ``replica_device_setter`` puts on the worker). A task index survives a
restart, so a restarted replica is recognised as the one that was missing.
The ps then logs, every ``DISTRIB_STALL_S`` seconds, which replicas have not
contributed to the current round (``distrib.runtime.state.resources``).

When the chief's aggregation loop is cancelled (its program ends with the
loop running, as TF's mnist_replica.py's chief does) it enqueues one last
token per replica carrying the current global step: a replica whose last
step waits for a round that will never be aggregated gets its step back and
sees the final global step (mnist_replica.py with 2 of 2 hung there). A
loop ended by ``stop()`` enqueues none: replicas given a token would train
on, completing the aggregation left waiting on the ps after training ended.

The ops (``docs/ops.md``, "Synchronous training resources") run on the tasks
that own the resources; a waiting take or dequeue honours
``operation_timeout_s`` and the step's abort (see ``distrib.runtime.step.executor``).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from distrib.errors import FencedError
from distrib.framework import dtypes
from distrib.framework.device import DeviceSpec
from distrib.framework.graph import GraphKeys, Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable, global_variables, is_variable_initialized
from distrib.runtime.state.resources import stall_s
from distrib.train.optimizers.optimizer import (
    GradsAndVars,
    Optimizer,
    OptimizerArgumentError,
    checked_pairs,
    gradient_tensor,
)
from distrib.train.replicas.accumulators import Accumulator, SparseAccumulator
from distrib.train.sessions.session_run_hooks import SessionRunHook

logger = logging.getLogger(__name__)

__all__ = ["SyncReplicasOptimizer"]

TOKEN_QUEUE_NAME = "sync_token_q"
_Accumulator = Accumulator   # (its old name here)


class TokenQueue:
    """Graph side of the sync token queue (a FIFO queue of int64 steps beside the global step)."""

    def __init__(self, global_step: Variable, name: str = TOKEN_QUEUE_NAME) -> None:
        self._anchor = global_step
        self.name = name
        self.dtype = global_step.dtype

    def _op(self, op_type: str, inputs: list, outputs: list | None = None) -> Operation:
        graph = self._anchor.graph
        with graph.as_default(), graph.colocate_with(self._anchor.op):
            return graph.create_op(op_type, inputs, {"queue": self.name, "dtype": self.dtype.name},
                                   op_type, output_specs=outputs or [])

    def enqueue_many(self, values: Tensor) -> Operation:
        return self._op("QueueEnqueueMany", [values])

    def dequeue(self) -> Tensor:
        return self._op("QueueDequeue", [], [(self.dtype, [])]).outputs[0]

    def size(self) -> Tensor:
        return self._op("QueueSize", [], [(dtypes.int32, [])]).outputs[0]

    def close(self) -> Operation:
        """Waiting and later dequeues of the empty queue fail with OutOfRangeError."""
        return self._op("QueueClose", [])


class ChiefQueueRunner:
    """The chief's aggregation loop: runs ``step_op`` until ``stop()`` is true.

    Start it beside the chief's own training (its train op waits for the
    tokens this loop enqueues)::

        runner = opt.get_chief_queue_runner()
        task = asyncio.ensure_future(runner.run(sess, sv.should_stop))
    """

    # a Supervisor runs it on whichever task is chief: it moves with the role
    chief_only = True

    def __init__(self, step_op: Operation, poll_s: float = 0.05,
                 release_op: Operation | None = None) -> None:
        self.step_op = step_op
        self.release_op = release_op   # the last tokens, run if the loop is cancelled (header)
        self.steps = 0
        self._poll_s = poll_s

    async def _release(self, sess: Any, options: Callable[[], dict | None] | None) -> None:
        """Give each replica a token of the current step, within a bound (module header)."""
        if self.release_op is None:
            return
        try:
            await asyncio.wait_for(_run(sess, self.release_op,
                                        options() if options is not None else None), 10.0)
            logger.info("chief queue runner stops: each replica got a last token")
        except Exception as e:   # noqa: BLE001 - a closed session, a ps gone: nothing waits
            logger.warning("chief queue runner stops; the replicas' last tokens were not "
                           "enqueued (%s): a replica waiting for this round waits on", e)

    async def run(self, sess: Any, stop: Callable[[], bool] | None = None,
                  options: Callable[[], dict | None] | None = None) -> int:
        """Aggregate until ``stop()``; returns the number of aggregation steps run.

        A step still waiting for gradients when ``stop()`` turns true is left
        to finish on the ps (it completes when the gradients arrive).
        ``options()``: each step's run options (a Supervisor's chief passes its
        fencing term: a chief that lost the role cannot apply an update)."""
        stop = stop or (lambda: False)
        try:
            await self._aggregate(sess, stop, options)
        except asyncio.CancelledError:   # the program ends with its runner running
            await self._release(sess, options)
            raise
        return self.steps

    async def _aggregate(self, sess: Any, stop: Callable[[], bool],
                         options: Callable[[], dict | None] | None) -> None:
        every = stall_s()
        while not stop():
            step = asyncio.ensure_future(_run(sess, self.step_op,
                                              options() if options is not None else None))
            # the ps names the missing replicas; the chief's own log says it is stalled
            started = warned = time.monotonic()
            try:
                while not step.done():
                    await asyncio.wait([step], timeout=self._poll_s)
                    if not step.done() and stop():
                        step.cancel()
                        return
                    now = time.monotonic()
                    if not step.done() and now - warned >= every:
                        warned = now
                        logger.warning(
                            "chief: the aggregation step has waited %.1fs for the replicas' "
                            "gradients and goes on waiting (%d aggregated by this runner); "
                            "the ps task's log names the replicas not heard from",
                            now - started, self.steps)
                step.result()
            finally:
                if not step.done():
                    step.cancel()
            self.steps += 1

    def start(self, sess: Any, stop: Callable[[], bool] | None = None,
              options: Callable[[], dict | None] | None = None) -> asyncio.Task:
        """``run`` as a background task of the running loop."""
        return asyncio.ensure_future(self.run(sess, stop, options))


def _replica_id(device: str) -> str:
    """What this replica's gradients are recorded under on the ps: its worker's
    ``/job:J/task:T``, which a restarted process keeps. A graph whose worker
    device names no task (no ``replica_device_setter``) gets a random id, unique
    to this optimizer: a restart then shows up as a new replica."""
    spec = DeviceSpec.from_string(device or None)
    if spec.task is not None:
        return (f"/job:{spec.job}" if spec.job else "") + f"/task:{spec.task}"
    return f"{device or 'replica'}#{uuid.uuid4().hex[:8]}"


async def _run(sess: Any, fetches: Any, options: dict | None = None) -> Any:
    result = sess.run(fetches) if options is None else sess.run(fetches, options=options)
    return await result if inspect.isawaitable(result) else result


class SyncReplicasOptimizer(Optimizer):
    """TF1's ``tf.train.SyncReplicasOptimizer`` (see the module header)."""

    def __init__(self, opt: Optimizer, replicas_to_aggregate: int,
                 total_num_replicas: int | None = None, variable_averages: Any = None,
                 variables_to_average: Sequence[Variable] | None = None,
                 use_locking: bool = False, name: str = "sync_replicas") -> None:
        super().__init__(use_locking, name)
        if total_num_replicas is None:
            total_num_replicas = replicas_to_aggregate
        if replicas_to_aggregate < 1 or total_num_replicas < 1:
            raise OptimizerArgumentError(
                f"replicas_to_aggregate ({replicas_to_aggregate}) and total_num_replicas "
                f"({total_num_replicas}) must be >= 1")
        logger.info("SyncReplicas enabled: replicas_to_aggregate=%s; total_num_replicas=%s",
                    replicas_to_aggregate, total_num_replicas)
        self._opt = opt
        self._replicas_to_aggregate = int(replicas_to_aggregate)
        self._total_num_replicas = int(total_num_replicas)
        self._tokens_per_step = max(self._total_num_replicas, self._replicas_to_aggregate)
        stall_s()   # a bad DISTRIB_STALL_S fails here, not in the middle of training
        self._variable_averages = variable_averages
        self._variables_to_average = variables_to_average
        self._global_step: Variable | None = None
        self._local_step: Variable | None = None
        self._sync_token_queue: TokenQueue | None = None
        self._chief_queue_runner: ChiefQueueRunner | None = None
        self._accumulators: list[_Accumulator] = []
        self.replica_id = ""
        self.local_step_init_op: Tensor | None = None
        self.chief_init_op: Operation | None = None
        self.ready_for_local_init_op: list[Tensor] | None = None

    # -- delegation ---------------------------------------------------------------------
    def compute_gradients(self, *args: Any, **kwargs: Any) -> GradsAndVars:
        """The wrapped optimizer's gradients (each replica computes its own)."""
        return self._opt.compute_gradients(*args, **kwargs)

    def get_slot(self, *args: Any, **kwargs: Any) -> Variable | None:
        return self._opt.get_slot(*args, **kwargs)

    def get_slot_names(self, *args: Any, **kwargs: Any) -> list[str]:
        return self._opt.get_slot_names(*args, **kwargs)

    def variables(self) -> list[Variable]:
        return self._opt.variables()

    # -- the graph ---------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars: Sequence[tuple[Any, Variable]], global_step: Any = None,
                        name: str | None = None) -> Operation:
        """The worker's train op: apply to the accumulators, wait for a token, take it as
        the local step. Also builds the chief's aggregation step and the init ops."""
        if global_step is None:
            raise OptimizerArgumentError("Global step is required to check staleness: pass "
                                         "global_step=dt.train.get_or_create_global_step()")
        if self._chief_queue_runner is not None:
            raise OptimizerArgumentError("apply_gradients was already called on this "
                                         "SyncReplicasOptimizer; build one per train op")
        pairs = checked_pairs(grads_and_vars)
        graph = global_step.graph
        self._global_step = global_step
        with graph.as_default():
            self._local_step = self._make_local_step(graph, global_step)
            self.replica_id = _replica_id(self._local_step.op.device)
            with graph.name_scope(name or self._name):
                train_ops, aggregated = self._accumulate(pairs)
                queue = self._sync_token_queue = TokenQueue(global_step)
                train_op = self._worker_train_op(graph, train_ops, queue)
                step_op = self._chief_step(graph, pairs, aggregated, queue)
                with graph.colocate_with(global_step.op):
                    last = ops.zeros([self._total_num_replicas], dtype=global_step.dtype)
                    release = queue.enqueue_many(last + global_step.value())
            self._chief_queue_runner = ChiefQueueRunner(step_op, release_op=release)
            self._build_init_ops(graph, global_step)
        train_ops_ref = graph.get_collection_ref(GraphKeys.TRAIN_OP)
        if train_op not in train_ops_ref:
            train_ops_ref.append(train_op)
        return train_op

    def _make_local_step(self, graph: Any, global_step: Variable) -> Variable:
        # the anchor lands on this worker under replica_device_setter, and so does the
        # variable colocated with it: each worker has its own local step (TF1's trick)
        with graph.control_dependencies(None), graph.name_scope(None):
            anchor = ops.no_op(name="sync_rep_local_anchor")
            with graph.colocate_with(anchor):
                return Variable(lambda: ops.zeros([], dtype=global_step.dtype), trainable=False,
                                collections=[GraphKeys.LOCAL_VARIABLES],
                                name="sync_rep_local_step", dtype=global_step.dtype)

    def _accumulate(self, pairs: list[tuple[Any, Variable]]) -> tuple[list[Operation], list[Any]]:
        assert self._local_step is not None
        train_ops, aggregated = [], []
        for grad, var in pairs:
            if grad is None:
                aggregated.append(None)
                continue
            sparse = isinstance(grad, IndexedSlices)   # its rows only: a sparse accumulator
            grad = grad if sparse else gradient_tensor(grad, var)
            shape = var.shape.as_list() if var.shape.rank is not None else None
            acc = (SparseAccumulator if sparse else Accumulator)(var, var.dtype, shape)
            self._accumulators.append(acc)
            train_ops.append(acc.apply_grad(grad, self._local_step.value(), self.replica_id))
            aggregated.append(acc.take_grad(self._replicas_to_aggregate,
                                            self._total_num_replicas))
        return train_ops, aggregated

    def _worker_train_op(self, graph: Any, train_ops: list[Operation], queue: TokenQueue) -> Operation:
        assert self._local_step is not None
        with graph.control_dependencies(train_ops):
            token = queue.dequeue()
        return self._local_step.assign(token, read_value=False)

    def _chief_step(self, graph: Any, pairs: list[tuple[Any, Variable]], aggregated: list[Any],
                    queue: TokenQueue) -> Operation:
        gs = self._global_step
        assert gs is not None
        update = self._opt.apply_gradients(
            [(g, v) for g, (_, v) in zip(aggregated, pairs) if g is not None])
        with graph.control_dependencies([update]), graph.colocate_with(gs.op):
            # the AssignAdd's output is the new step (a separate read could run before it)
            new_step = gs.assign_add(1, name="increment_global_step")
        # stale gradients of the step just taken are dropped from here on (take_grad
        # already advanced each accumulator; this also realigns them after a restore)
        set_steps = [acc.set_global_step(new_step) for acc in self._accumulators]
        with graph.control_dependencies(set_steps), graph.colocate_with(gs.op):
            tokens = ops.zeros([self._tokens_per_step], dtype=gs.dtype) + new_step
            sync_op = queue.enqueue_many(tokens)
        if self._variable_averages is not None:
            with graph.control_dependencies([sync_op]):
                sync_op = self._variable_averages.apply(self._variables_to_average)
        return sync_op

    def _build_init_ops(self, graph: Any, global_step: Variable) -> None:
        assert self._local_step is not None
        self.local_step_init_op = self._local_step.assign(global_step.value())
        with graph.name_scope(None):
            set_steps = [acc.set_global_step(global_step.value()) for acc in self._accumulators]
            self.chief_init_op = ops.group(self.local_step_init_op, *set_steps,
                                           name="sync_replicas_chief_init")
            self.ready_for_local_init_op = [is_variable_initialized(v) for v in global_variables()]

    # -- the chief's side -----------------------------------------------------------------
    @property
    def applied(self) -> bool:
        """Whether ``apply_gradients`` has built the aggregation (the hook needs it)."""
        return self._chief_queue_runner is not None

    def _check_applied(self, what: str) -> None:
        if not self.applied:
            raise OptimizerArgumentError(f"{what} should be called after apply_gradients()")

    @property
    def sync_token_queue(self) -> TokenQueue:
        self._check_applied("sync_token_queue")
        assert self._sync_token_queue is not None
        return self._sync_token_queue

    def get_chief_queue_runner(self) -> ChiefQueueRunner:
        """The chief's aggregation loop (``await runner.run(sess, stop)``; see ChiefQueueRunner)."""
        self._check_applied("get_chief_queue_runner")
        assert self._chief_queue_runner is not None
        return self._chief_queue_runner

    def get_init_tokens_op(self, num_tokens: int = -1) -> Operation:
        """Enqueue the first tokens (the current global step) so the replicas can start.

        TF's rule: ``-1`` means ``replicas_to_aggregate`` tokens; fewer than
        ``replicas_to_aggregate - total_num_replicas`` is an error; 0 is a no-op."""
        self._check_applied("get_init_tokens_op")
        gs, queue = self._global_step, self._sync_token_queue
        assert gs is not None and queue is not None
        tokens_needed = self._replicas_to_aggregate - self._total_num_replicas
        if num_tokens == -1:
            num_tokens = self._replicas_to_aggregate
        elif num_tokens < tokens_needed:
            raise OptimizerArgumentError(
                f"Too few tokens to finish the first step: {num_tokens} (given) vs "
                f"{tokens_needed} (needed)")
        graph = gs.graph
        with graph.as_default(), graph.name_scope(None):
            if num_tokens <= 0:
                return ops.no_op(name="sync_replicas_init_tokens")
            with graph.colocate_with(gs.op):
                tokens = ops.zeros([num_tokens], dtype=gs.dtype) + gs.read_value()
            return queue.enqueue_many(tokens)

    def num_accumulated(self) -> list[Tensor]:
        """One int32 scalar per accumulator: gradients accumulated towards the next step."""
        self._check_applied("num_accumulated")
        return [acc.num_accumulated() for acc in self._accumulators]

    def make_session_run_hook(self, is_chief: bool, num_tokens: int = -1) -> SessionRunHook:
        """A hook for ``MonitoredTrainingSession`` that sets up sync training (TF1's).

        After each session is created: every replica runs its local init (the
        chief ``chief_init_op``, the others ``local_step_init_op``) once the
        global variables are ready; the chief then enqueues ``num_tokens``
        initial tokens (see :meth:`get_init_tokens_op`) and starts the chief
        queue runner, which stops when the session closes."""
        return _SyncReplicasOptimizerHook(self, is_chief, num_tokens)


class _SyncReplicasOptimizerHook(SessionRunHook):
    """What ``make_session_run_hook`` returns (see there).

    Under a ``MonitoredTrainingSession`` whose chief is elected, the session
    sets ``chief_role`` before ``begin()``: ``is_chief`` is then only the
    preferred role, and the chief's part (the chief init, the initial
    tokens, the chief queue runner with the chief's fencing term) runs on
    whichever task holds the role, starting on a new chief before its next
    step and stopping on a former one."""

    chief_role: Any = None   # a distrib.train.chief.role.ChiefRole, set by the session

    def __init__(self, sync_optimizer: SyncReplicasOptimizer, is_chief: bool,
                 num_tokens: int) -> None:
        self._opt = sync_optimizer
        self._is_chief = bool(is_chief)
        self._num_tokens = num_tokens
        self._chief_init_op: Any = None
        self._local_init_op: Any = None
        self._init_tokens_op: Operation | None = None
        self._runner: ChiefQueueRunner | None = None
        self._runner_task: asyncio.Task | None = None
        self._coord: Any = None

    def _chief_now(self) -> bool:
        return self.chief_role.is_chief if self.chief_role is not None else self._is_chief

    def begin(self) -> None:
        opt = self._opt
        if not opt.applied:
            raise OptimizerArgumentError("SyncReplicasOptimizer.apply_gradients should be "
                                         "called before using the hook")
        self._local_init_op = opt.local_step_init_op
        if self._is_chief or self.chief_role is not None:
            self._chief_init_op = opt.chief_init_op
            self._runner = opt.get_chief_queue_runner()
            # built here: the monitored session finalizes the graph after begin()
            self._init_tokens_op = opt.get_init_tokens_op(self._num_tokens)

    async def after_create_session(self, session: Any, coord: Any) -> None:
        self._coord, self._runner_task = coord, None
        flags = self._opt.ready_for_local_init_op or []
        if flags:
            values = await _run(session, flags)
            missing = [t.op.get_attr("var") for t, ok in zip(flags, values) if not bool(ok)]
            if missing:
                raise RuntimeError("Init operations did not make model ready for "
                                   f"SyncReplicasOptimizer local_init: uninitialized {missing}")
        chief = self._chief_now()
        await _run(session, self._chief_init_op if chief else self._local_init_op,
                   self._options() if chief else None)
        if chief:
            await _run(session, self._init_tokens_op, self._options())
            self._start_runner(session)

    def before_run(self, run_context: Any) -> None:
        # the role reached this task since the session began: the runner starts here
        if self.chief_role is not None and self._runner is not None and self._coord is not None \
                and self.chief_role.is_chief \
                and (self._runner_task is None or self._runner_task.done()):
            logger.info("chief now: the sync-replicas chief queue runner starts on this task")
            self._start_runner(run_context.session)

    def _options(self) -> dict | None:
        return self.chief_role.run_options() if self.chief_role is not None else None

    def _start_runner(self, session: Any) -> None:
        if self._runner is None:
            return
        coord = self._coord
        if self.chief_role is None:
            task = self._runner.start(session, coord.should_stop)
        else:
            task = asyncio.ensure_future(self._run_as_chief(session))
        self._runner_task = task
        coord.register_thread(task)

    async def _run_as_chief(self, session: Any) -> None:
        """The chief queue runner while this task is chief; refused by a newer
        chief's term (fenced), it stops instead of failing the session."""
        role, coord = self.chief_role, self._coord
        assert self._runner is not None
        try:
            await self._runner.run(session, lambda: coord.should_stop() or not role.is_chief,
                                   role.run_options)
        except FencedError as exc:
            logger.warning("chief queue runner stops: a newer chief was elected (%s)",
                           exc.message)
