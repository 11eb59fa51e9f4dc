"""Stateful resources a task owns besides variables: conditional accumulators
and FIFO queues (the pieces of ``SyncReplicasOptimizer``).

Like variables they live on the task, by shared name, created on first use,
and outlive steps and sessions: every replica that names
``w/grad_accum`` reaches the same accumulator on the ps. The executor hands
the ops of ``docs/ops.md`` ("Synchronous training resources") to
:func:`run_resource_op`, which runs them against the task's store.

Everything here runs on the task's event loop, so each method is atomic with
respect to the others. An operation that must wait (``take_grad`` until
enough gradients arrived, ``dequeue`` until a token is there) returns a
future instead of blocking; waiters are served first come, first served, and
a waiter whose future was cancelled (its step timed out or was aborted) is
skipped, so it never swallows a gradient sum or a token.

A wait never ends by itself (only the step's ``operation_timeout_s`` or an
abort ends it): without backup replicas the chief's take *should* wait for a
dead replica until it restarts. So that such a stall is never silent, every
``DISTRIB_STALL_S`` seconds (:func:`stall_s`) a waiting op logs what it waits
for and which replicas have not contributed to the accumulator's current
round: each gradient carries its replica's id (the ``replica`` attr of
``AccumulatorApplyGradient``, the worker's ``/job:J/task:T``), and an
accumulator remembers every replica it has heard from, so a replica that
stopped, or restarted and has not sent again yet, is named.

Closing a session aborts its steps (the master tells their tasks, as when a
peer fails), with a ``SessionClosedError`` as the reason: a waiting op then
fails with ``SessionClosedError`` (a ``CancelledError``), not with the
``AbortedError`` of a failed peer, and its place in the queue is given up.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from distrib.errors import (
    AbortedError,
    DeadlineExceededError,
    InvalidArgumentError,
    OutOfRangeError,
    SessionClosedError,
)
from distrib.runtime.core.step_waits import abort_signal
from distrib.runtime.state.accumulator import ConditionalAccumulator
from distrib.runtime.state.readers import INPUT_OPS, run_input_op
from distrib.runtime.state.sparse_accumulator import SPARSE_ACCUMULATOR_OPS, run_sparse_accumulator_op
from distrib.settings import STALL_S

logger = logging.getLogger(__name__)

__all__ = ["ConditionalAccumulator", "FIFOQueue", "ResourceStore", "run_resource_op",
           "stall_s"]

# the contract's default (docs/CONTRACT.md, "Fault tolerance"): a waiting op
# (take_grad, dequeue) says what it waits for this often
DEFAULT_STALL_S: float = STALL_S.default


def stall_s() -> float:
    """``DISTRIB_STALL_S``: seconds between the warnings of a waiting take or
    dequeue (default 30; a positive, finite float). Read when a wait starts, so
    a server picks up its environment; a bad value is a ``ValueError`` naming
    the variable rather than a silently ignored setting."""
    return STALL_S.get()


class FIFOQueue:
    """An unbounded FIFO queue of tensors (TF1's ``FIFOQueue(-1, ...)``)."""

    def __init__(self, name: str, dtype: str) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.closed = False
        self._items: deque[np.ndarray] = deque()
        self._waiters: deque[asyncio.Future] = deque()

    def size(self) -> int:
        return len(self._items)

    def enqueue_many(self, values: Any) -> None:
        if self.closed:
            raise OutOfRangeError(f"queue {self.name} is closed; no more elements can be "
                                  "enqueued (training has ended)")
        arr = np.asarray(values, dtype=self.dtype)
        if arr.ndim == 0:
            raise InvalidArgumentError(f"enqueue_many into queue {self.name} needs a batch "
                                       "(at least one dimension)")
        self._items.extend(np.array(x, copy=True) for x in arr)
        self._serve()

    def dequeue(self) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._serve()
        return fut

    def give_back(self, value: Any) -> None:
        """Put a dequeued element back at the front (its step ended before using it)."""
        self._items.appendleft(value)
        self._serve()

    def close(self) -> None:
        """No more enqueues; waiting and later dequeues of an empty queue fail."""
        self.closed = True
        self._serve()

    def _serve(self) -> None:
        while self._waiters:
            fut = self._waiters[0]
            if fut.done():
                self._waiters.popleft()
                continue
            if self._items:
                self._waiters.popleft()
                fut.set_result(self._items.popleft())
            elif self.closed:
                self._waiters.popleft()
                fut.set_exception(OutOfRangeError(
                    f"queue {self.name} is closed and empty (training has ended)"))
            else:
                return


class ResourceStore:
    """The accumulators and queues of one task, by shared name."""

    def __init__(self, task: str = "") -> None:
        self.task = task
        self.accumulators: dict[str, ConditionalAccumulator] = {}
        self.queues: dict[str, FIFOQueue] = {}
        # TF1's input queues and readers (distrib.runtime.state.readers)
        self.input_queues: dict[str, Any] = {}
        self.readers: dict[str, Any] = {}

    def accumulator(self, name: str, dtype: str, shape: list | None) -> ConditionalAccumulator:
        acc = self.accumulators.get(name)
        if acc is None:
            acc = self.accumulators[name] = ConditionalAccumulator(name, dtype, shape)
        elif np.dtype(dtype) != acc.dtype:
            raise InvalidArgumentError(
                f"accumulator {name} holds {acc.dtype} gradients, not {np.dtype(dtype)}")
        return acc

    def queue(self, name: str, dtype: str) -> FIFOQueue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = FIFOQueue(name, dtype)
        elif np.dtype(dtype) != q.dtype:
            raise InvalidArgumentError(f"queue {name} holds {q.dtype}, not {np.dtype(dtype)}")
        return q

    def clear(self) -> None:
        self.accumulators.clear()
        self.queues.clear()
        self.input_queues.clear()
        self.readers.clear()


# -- running the ops (called by distrib.runtime.step.executor) --------------------------------

def run_resource_op(node: dict[str, Any], args: list[Any], store: ResourceStore,
                    channel: Any, task: str) -> list[Any] | asyncio.Future:
    """Run a resource op; a waiting one (take, dequeue) returns a future that the
    dataflow loop treats like a receive, so the partition's other ops go on."""
    op, attrs = node["op"], node["attrs"]
    if op in INPUT_OPS:
        # (a queue runner's enqueue into a full queue waits as a matter of course: it
        # says so hourly, not every DISTRIB_STALL_S)
        every = stall_s()
        return run_input_op(node, args, store, lambda fut, what, describe, give_back=None,
                            quiet=False: _wait(fut, node, what, describe,
                                               3600.0 if quiet else every, channel, task,
                                               give_back))
    if op in SPARSE_ACCUMULATOR_OPS:   # sync replicas' sparse gradients, kept as rows
        return run_sparse_accumulator_op(node, args, store.accumulators, lambda fut, what, d: _wait(
            fut, node, what, d, stall_s(), channel, task))
    if op.startswith("Accumulator"):
        acc = store.accumulator(attrs["acc"], attrs["dtype"], attrs.get("shape"))
        if op == "AccumulatorApplyGradient":
            acc.apply_grad(int(args[0]), args[1], str(attrs.get("replica") or ""))
            return []
        if op == "AccumulatorSetGlobalStep":
            acc.set_global_step(int(args[0]))
            return []
        if op == "AccumulatorNumAccumulated":
            return [np.array(acc.count, dtype=np.int32)]
        need = int(args[0])
        if attrs.get("num_replicas"):
            acc.num_replicas = int(attrs["num_replicas"])
        every = stall_s()   # a bad setting fails the op before it waits
        return asyncio.ensure_future(_wait(
            acc.take_grad(need), node, f"{need} gradients in accumulator {acc.name}",
            lambda: acc.describe_wait(need), every, channel, task))
    queue = store.queue(attrs["queue"], attrs["dtype"])
    if op == "QueueEnqueueMany":
        queue.enqueue_many(args[0])
        return []
    if op == "QueueSize":
        return [np.array(queue.size(), dtype=np.int32)]
    if op == "QueueClose":
        queue.close()
        return []
    every = stall_s()
    return asyncio.ensure_future(_wait(
        queue.dequeue(), node, f"an element of queue {queue.name}",
        lambda: _describe_dequeue(queue, store), every, channel, task, give_back=queue))


def _describe_dequeue(queue: FIFOQueue, store: ResourceStore) -> str:
    # an empty token queue means the chief's aggregation has not finished; when
    # that is because its takes on this task wait for replicas, say which
    stalled = [f"{acc.name} waits for {acc.missing()}"
               for acc in store.accumulators.values() if acc.waiting()]
    why = ("; accumulator " + "; ".join(stalled)) if stalled else \
        " (the chief enqueues tokens after each aggregation step: is it running?)"
    return f"an element of queue {queue.name}, empty{why}"


def _session_closed(cause: BaseException | None) -> bool:
    """Whether a step's abort comes of its session's close: the master's
    ``SessionClosedError``, which a worker's abort keeps as its ``__cause__``."""
    for _ in range(4):   # the abort, what it wraps, ...
        if cause is None:
            return False
        if isinstance(cause, SessionClosedError):
            return True
        cause = cause.__cause__
    return False


async def _wait(fut: asyncio.Future, node: dict[str, Any], what: str,
                describe: Callable[[], str], every: float, channel: Any, task: str,
                give_back: FIFOQueue | None = None) -> list[Any]:
    """``fut``'s value, unless the step is aborted (AbortedError at once) or its
    ``operation_timeout_s`` passes (DeadlineExceededError naming the op). Without
    a deadline it waits as long as TF would. Either way it logs ``describe()``
    (what it waits for, and from which replicas) every ``every`` seconds."""
    timeout = getattr(channel, "timeout", None)
    abort = abort_signal(channel, f"{node['name']}/{id(fut)}")
    waits = {fut} if abort is None else {fut, abort}
    # give up a little before the step's receives do: the error then names the op
    # that waited, not a receive downstream of it on another task
    deadline = None if timeout is None else time.monotonic() + 0.9 * timeout
    waited = 0.0
    try:
        while True:
            left = every if deadline is None else min(every, deadline - time.monotonic())
            done, _ = await asyncio.wait(waits, timeout=max(left, 0.0),
                                         return_when=asyncio.FIRST_COMPLETED)
            if fut in done:
                return [fut.result()]
            if abort is not None and abort in done:
                cause = abort.exception()
                if _session_closed(cause):
                    raise SessionClosedError(
                        f"{node['op']} stopped waiting for {what}: the session was closed "
                        "while the step waited; open a new session to run more steps",
                        task=task or None, op=node["name"])
                raise AbortedError(f"{node['op']} stopped waiting for {what}: {cause}",
                                   task=task or None, op=node["name"],
                                   peer=getattr(cause, "peer", None))
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceededError(
                    f"{node['op']} timed out after {timeout:g}s waiting for {describe()} "
                    "(operation_timeout_s); the replicas or the chief that feed it may be "
                    "down, slow or not started", task=task or None, op=node["name"])
            waited += left
            logger.warning("%s: %s %s has waited %.1fs for %s; it goes on waiting (a "
                           "replica that restarts rejoins; DISTRIB_STALL_S sets how often "
                           "this is logged)", task or "this task", node["op"], node["name"],
                           waited, describe())
    except BaseException:
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            if give_back is not None:   # the token was ours but the step is gone: return it
                give_back.give_back(fut.result())
        else:
            fut.cancel()   # the resource skips a cancelled waiter
        raise
    finally:
        if abort is not None:
            abort.cancel()


