"""What a running partition waits on: the step's channel to the other
partitions (``StepChannel``: sends, and the futures of receives) and
``Pending``, the set of futures it sleeps on (receives, kernels on the pool,
waiting resource ops), with one callback each instead of a task each.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Protocol

__all__ = ["StepChannel", "Pending", "flush_channel", "abort_signal", "retrieve"]


class StepChannel(Protocol):
    """How a partition talks to the other partitions of the same step."""

    def send(self, key: str, dst_task: str, value: Any) -> Awaitable[None] | None: ...

    def flush(self, early: bool = False) -> Awaitable[None] | None:
        """Send whatever ``send`` held back (called before the partition waits
        and at its end; ``early``: before a heavy kernel, when the channel may
        keep small batches back)."""

    timeout: float | None   # how long a receive may wait (None: no limit)

    def expect(self, key: str, src_task: str) -> asyncio.Future:
        """The future of tensor ``key`` from ``src_task``; its result goes
        through ``received`` (raises if the step was aborted)."""

    def received(self, result: Any) -> Any:
        """The tensor out of a result of an ``expect`` future (raises when
        the sender is not the incarnation the step started with)."""

    def overdue(self, key: str, src_task: str) -> Exception:
        """The error for a receive that waited ``timeout`` seconds."""


class Pending:
    """What a step waits for (receives, kernels on the pool, waiting resource
    ops): one done callback per future, and one future for the step to sleep
    on until any of them is done; cheaper than a task per receive and
    ``asyncio.wait`` over all of them each time."""

    __slots__ = ("futs", "finished", "deadlines", "since", "_waker", "_loop")

    def __init__(self) -> None:
        self.futs: dict[asyncio.Future, int] = {}
        self.finished: list[asyncio.Future] = []
        self.deadlines: dict[asyncio.Future, float] | None = None   # receives' (loop time)
        self.since: dict[int, float] = {}   # receive node -> when the step began waiting for it
        self._waker: asyncio.Future | None = None
        self._loop = asyncio.get_running_loop()

    def add(self, fut: asyncio.Future, i: int, timeout: float | None = None) -> None:
        self.futs[fut] = i
        if timeout is not None:
            if self.deadlines is None:
                self.deadlines = {}
            self.deadlines[fut] = self._loop.time() + timeout
        if fut.done():
            self.finished.append(fut)
        else:
            fut.add_done_callback(self._done)

    def pop(self, fut: asyncio.Future) -> int | None:
        if self.deadlines:
            self.deadlines.pop(fut, None)
        return self.futs.pop(fut, None)

    def _done(self, fut: asyncio.Future) -> None:
        self.finished.append(fut)
        waker = self._waker
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def wait(self) -> list[asyncio.Future]:
        """The futures done since the last call, in the order they finished;
        none when the earliest receive deadline passed first."""
        if not self.finished:
            waker = self._waker = self._loop.create_future()
            timer = None
            if self.deadlines:
                timer = self._loop.call_at(min(self.deadlines.values()), _wake, waker)
            try:
                await waker
            finally:
                self._waker = None
                if timer is not None:
                    timer.cancel()
        out, self.finished = self.finished, []
        return out


def _wake(waker: asyncio.Future) -> None:
    if not waker.done():
        waker.set_result(None)


async def flush_channel(channel: StepChannel | None, early: bool = False) -> None:
    if channel is not None:
        res = channel.flush(early)
        if res is not None:
            await res


def abort_signal(channel: Any, tag: str) -> asyncio.Future | None:
    """A future that fails when the step is aborted (a peer failed), or None
    when the step has no channel (in-process evaluation). A resource op or a
    collective waits on it beside its own future."""
    aborted = getattr(channel, "aborted", None)
    if aborted is None:
        return None
    fut = aborted(tag)
    fut.add_done_callback(retrieve)
    return fut


def retrieve(fut: asyncio.Future) -> None:
    """Done callback: mark a background future's exception as seen (no
    "exception was never retrieved" when nobody awaits it)."""
    if not fut.cancelled():
        fut.exception()
