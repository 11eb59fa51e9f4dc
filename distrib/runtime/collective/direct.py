"""Small collectives without a task: the engine's fast path.

Once a group is resolved and a connection to every member is open, a
collective that takes the one-round algorithm (collective_small: a reduce
or gather of at most ``DIRECT_MAX_BYTES``, a broadcast) needs no coroutine
at all. ``DirectOp`` sends its header (with the data) to every other member
at once (``deliver_now``: a plain write on the open connection) and returns
a future; the instance's mailbox calls it back as each peer's header comes
(``Instance.notify``), and the last one computes the result (in rank order,
as the task path does) and sets the future. Per op that is one future and
one dict entry, against two tasks, a wait with a timer, and an abort task
per op on the task path (measured: see docs/ARCHITECTURE.md, collectives).

What the task path guarantees holds here too, by other means:
- the stall warning and the deadline (``timeout_seconds``, 0.9 of the step's
  timeout) come from one ``Watchdog`` per engine, a single timer armed
  lazily at the earliest warning or deadline of the ops in flight: nothing is
  armed per op, and a step of quick collectives re-arms it never;
- a step abort reaches the op through one future per step (the step
  channel's receive of a key nobody sends, which an abort fails), shared by
  every collective of the step;
- a failure fails the instance and tells every other member (the engine's
  ``fail_instance``), and a cancelled future (the step ended) does the same;
  the instance's state is dropped either way: a failure poisons nothing.
"""
from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Callable

import numpy as np

from distrib.errors import AbortedError, DeadlineExceededError, OpError
from distrib.runtime.collective.group import Group
from distrib.runtime.collective.instance import HEADER_TAG, Instance, InstanceTable
from distrib.runtime.collective.small import check_header, direct_result
from distrib.runtime.core.step_waits import retrieve

# the engine's logger: every collective's stall warnings under one name
logger = logging.getLogger("distrib.runtime.collective.engine")

__all__ = ["Watch", "Watchdog", "EngineSide", "DirectOp", "step_abort", "ABORT_KEY"]

# the step channel's receive that only an abort of the step completes
ABORT_KEY = "\x00collective-abort"


class Watch:
    """What one run is doing, for the watchdog's messages."""

    __slots__ = ("phase", "group_key", "group", "instance", "suspect")

    def __init__(self, phase: str, group_key: int) -> None:
        self.phase = phase
        self.group_key = group_key
        self.group: Group | None = None
        self.instance: Instance | None = None
        self.suspect: Any = None   # the cross wait seen at the last stall check (collective.stall)


def step_abort(channel: Any, task: str) -> asyncio.Future | None:
    """The future that fails when the step of ``channel`` is aborted, one per
    step (every collective of the step shares it); None without a step channel."""
    if channel is None or getattr(channel, "aborted", None) is None:
        return None
    try:
        return channel.expect(ABORT_KEY, task)
    except OpError as e:   # the step is aborted already
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(e)
        fut.add_done_callback(retrieve)
        return fut


class Watchdog:
    """One timer for every ``DirectOp`` in flight on an engine, armed at the
    earliest warning or deadline among them (see the module header)."""

    __slots__ = ("ops", "_timer", "_due")

    def __init__(self) -> None:
        self.ops: dict[DirectOp, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._due = math.inf

    def add(self, op: DirectOp) -> None:
        self.ops[op] = None
        due = op.due()
        if due < self._due:
            self._arm(due)

    def discard(self, op: DirectOp) -> None:
        self.ops.pop(op, None)

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = asyncio.get_running_loop().call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer, self._due = None, math.inf
        now = asyncio.get_running_loop().time()
        for op in list(self.ops):
            op.check(now)
        due = min((op.due() for op in self.ops), default=math.inf)
        if due < math.inf:
            self._arm(due)


class EngineSide:
    """What a ``DirectOp`` uses of its engine: its task, instance table and
    watchdog, and three of its methods, bound (the engine's own public
    methods are its actor messages)."""

    __slots__ = ("task", "table", "watchdog", "post_headers", "fail_instance", "late",
                 "stalled")

    def __init__(self, task: str, table: InstanceTable, post_headers: Callable[..., list],
                 fail_instance: Callable[..., None], late: Callable[[Watch], str],
                 stalled: Callable[..., OpError | None]) -> None:
        self.task = task
        self.table = table
        self.watchdog = Watchdog()
        self.post_headers = post_headers     # (group, key, message) -> sends still to await
        self.fail_instance = fail_instance   # (spec, watch, error): fail it, tell the others
        self.late = late                     # (watch) -> whom it waits for
        self.stalled = stalled   # (spec, watch, final=False) -> a mismatch's error (collective.stall)


class DirectOp:
    """One small collective in flight without a task (see the module header)."""

    __slots__ = ("engine", "spec", "watch", "header", "data", "value", "dtype", "shape",
                 "out", "abort", "started", "deadline", "warn_at", "stall_s")

    def __init__(self, engine: EngineSide, spec: Any, watch: Watch, header: list, data: Any,
                 value: np.ndarray | None, dtype: np.dtype, shape: tuple) -> None:
        self.engine = engine
        self.spec = spec
        self.watch = watch
        self.header = header
        self.data = data
        self.value = value
        self.dtype = dtype
        self.shape = shape
        self.out: asyncio.Future = asyncio.get_running_loop().create_future()
        self.abort: asyncio.Future | None = None
        self.started = self.deadline = self.warn_at = self.stall_s = 0.0

    def start(self, channel: Any, stall_s: float) -> asyncio.Future:
        """Send the header round and return the future of the op's outputs."""
        spec, inst, out = self.spec, self.watch.instance, self.out
        assert inst is not None
        inst.phase = self.watch.phase = "header round"
        now = asyncio.get_running_loop().time()
        op_timeout = getattr(channel, "timeout", None)
        limits = [t for t in (spec.timeout or None,
                              None if op_timeout is None else 0.9 * op_timeout) if t]
        self.started, self.stall_s = now, stall_s
        self.deadline = now + min(limits) if limits else math.inf
        self.warn_at = now + (spec.timeout / 2 if spec.timeout else stall_s)
        if inst.error is not None:   # a peer failed it before it started here
            self._fail(inst.error)
            return out
        try:
            late = self.engine.post_headers(self.watch.group, inst.key, [self.header, self.data])
        except Exception as e:
            self._fail(e)
            return out
        if late:
            asyncio.ensure_future(self._send_late(late)).add_done_callback(retrieve)
        inst.notify = self._arrived
        self._arrived()   # the peers may have been quicker
        if out.done():
            return out
        abort = step_abort(channel, self.engine.task)
        if abort is not None:
            self.abort = abort
            abort.add_done_callback(self._aborted)
        self.engine.watchdog.add(self)
        out.add_done_callback(self._out_done)
        return out

    async def _send_late(self, sends: list) -> None:
        try:
            for s in sends:
                await s
        except Exception as e:
            self._fail(e)

    def _arrived(self) -> None:
        out, inst, group = self.out, self.watch.instance, self.watch.group
        assert inst is not None and group is not None
        if out.done():
            return
        if inst.error is not None:
            self._fail(inst.error)
            return
        me = group.ranks[self.spec.device]
        late = {r: 1 for r in range(group.size) if r != me and not inst.ready(r, HEADER_TAG)}
        inst.waiting = late   # whom the watchdog names (as the task path's receives do)
        if late:
            return
        devices = [m.device for m in group.members]
        try:
            got: list[list] = [[self.header, self.data]] * group.size
            for r in range(group.size):
                if r != me:
                    got[r] = check_header(inst.take(r, HEADER_TAG), self.header, devices, me, r)
            spec = self.spec
            result = direct_result(self.header[0], spec.merge_op, spec.final_op, got, devices,
                                   self.dtype, self.shape, self.value)
        except Exception as e:
            self._fail(e)
            return
        self._end()
        out.set_result([result])

    def _end(self) -> None:
        inst = self.watch.instance
        assert inst is not None
        inst.notify = None
        self.engine.table.end(inst.key)
        self.engine.watchdog.discard(self)
        if self.abort is not None:
            self.abort.remove_done_callback(self._aborted)
            self.abort = None

    def _fail(self, e: BaseException) -> None:
        """Fail the op (and, unless the error came from a peer, its instance on
        every member)."""
        inst = self.watch.instance
        assert inst is not None
        inst.notify = None   # the instance's failure must not call us back
        self.engine.fail_instance(self.spec, self.watch, e)
        self._end()
        if not self.out.done():
            self.out.set_exception(e)

    def _out_done(self, out: asyncio.Future) -> None:
        if out.cancelled():   # the step ended (another op failed): tell the others
            self._fail(asyncio.CancelledError())

    def _aborted(self, abort: asyncio.Future) -> None:
        if self.out.done() or abort.cancelled() or abort.exception() is None:
            return
        cause = abort.exception()
        spec = self.spec
        self._fail(AbortedError(f"{spec.op} {spec.name} on {spec.device} stopped: {cause}",
                                task=self.engine.task, op=spec.name,
                                peer=getattr(cause, "peer", None)))

    def due(self) -> float:
        """When the watchdog must look at this op next (loop time)."""
        return min(self.warn_at, self.deadline)

    def check(self, now: float) -> None:
        """The watchdog's look: fail at the deadline, warn at the stall time."""
        if self.out.done():
            self.engine.watchdog.discard(self)
            return
        spec = self.spec
        if now >= self.deadline:
            mismatch = self.engine.stalled(spec, self.watch, final=True)
            self._fail(mismatch or DeadlineExceededError(
                f"{spec.op} {spec.name} (group_key={spec.group_key}, instance_key="
                f"{spec.instance_key}) on {spec.device} timed out after "
                f"{now - self.started:.1f}s waiting for {self.engine.late(self.watch)}",
                task=self.engine.task, op=spec.name))
        elif now >= self.warn_at:
            mismatch = self.engine.stalled(spec, self.watch)
            if mismatch is not None:
                self._fail(mismatch)
                return
            logger.warning(
                "%s: collective %s %s (group_key=%d, instance_key=%d) on %s has waited %.1fs "
                "for %s%s", self.engine.task, spec.op, spec.name, spec.group_key,
                spec.instance_key, spec.device, now - self.started, self.engine.late(self.watch),
                "" if self.deadline < math.inf else
                "; it keeps waiting (DISTRIB_COLLECTIVE_STALL_S sets how often this is logged)")
            self.warn_at = math.inf if spec.timeout else now + self.stall_s
