"""The rendezvous table of a task: tensors in flight between partitions, by
(step id, key).

A ``_Recv`` awaits its tensor here; a ``recv_tensors`` message from another
task's worker fills it. Every pushed tensor carries its sender's
incarnation: a tensor from a task that restarted since the step began fails
the step (``PeerRestartedError``) instead of being mixed in. An aborted step fails every receive of
it at once and drops whatever arrives for it later; tensors that come before
their step starts here are kept a bounded time.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Any

from distrib.errors import DeadlineExceededError, OpError, PeerRestartedError

logger = logging.getLogger(__name__)

_MAX_ABORTED = 4096
_MAX_ENDED = 4096
# Tensors may come before their step's partition starts here (the sender was
# quicker than the master's call); those of a step that never starts (a
# sender's late tensors from before this task restarted, a confused peer) are
# dropped after _EARLY_TTL_S, or oldest first past _MAX_EARLY steps.
_MAX_EARLY = 1024
_EARLY_TTL_S = 300.0


class Rendezvous:
    """Tensors in flight between partitions, by (step id, key)."""

    def __init__(self, task: str) -> None:
        self.task = task
        self._slots: dict[int, dict[str, asyncio.Future]] = {}
        self._expected: dict[int, dict[str, int]] = {}
        self._aborted: OrderedDict[int, OpError] = OrderedDict()
        self._ended: OrderedDict[int, None] = OrderedDict()
        self._early: OrderedDict[int, float] = OrderedDict()   # step -> first tensor's time

    def begin(self, step: int, incarnations: dict[str, int]) -> None:
        self._expected[step] = incarnations
        self._early.pop(step, None)
        if step in self._aborted:
            raise self._aborted[step]

    def _slot(self, step: int, key: str) -> asyncio.Future:
        table = self._slots.setdefault(step, {})
        fut = table.get(key)
        if fut is None:
            fut = table[key] = asyncio.get_running_loop().create_future()
        return fut

    def put(self, step: int, key: str, value: Any, src_task: str, incarnation: int) -> None:
        if step in self._aborted or step in self._ended:
            return   # too late: nobody will take it
        if step not in self._expected and step not in self._early:
            self._drop_stale_early()
            self._early[step] = time.monotonic()
        fut = self._slot(step, key)
        if not fut.done():
            fut.set_result((value, src_task, incarnation))

    def expect(self, step: int, key: str) -> asyncio.Future:
        """The future of tensor ``key`` of ``step``: its result is (value,
        sender, incarnation), for :meth:`check`."""
        if step in self._aborted:
            raise self._aborted[step]
        return self._slot(step, key)

    def check(self, step: int, result: tuple[Any, str, int]) -> Any:
        """The value of an :meth:`expect` result, if its sender is still the
        incarnation the step began with."""
        value, sender, inc = result
        want = self._expected.get(step, {}).get(sender)
        if want is not None and want != inc:
            raise PeerRestartedError(
                f"{sender} restarted during the step (incarnation {inc:x}, expected {want:x}); "
                "the step is aborted, run it again", task=self.task, peer=sender)
        return value

    def overdue(self, key: str, src_task: str, timeout: float) -> DeadlineExceededError:
        return DeadlineExceededError(
            f"timed out after {timeout:g}s waiting for tensor {key!r} from {src_task}; "
            "that task may be down or stuck", task=self.task)

    async def get(self, step: int, key: str, src_task: str, timeout: float | None) -> Any:
        fut = self.expect(step, key)
        try:
            if timeout is None:
                result = await fut
            else:
                result = await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            raise self.overdue(key, src_task, timeout) from None  # type: ignore[arg-type]
        return self.check(step, result)

    def abort(self, step: int, exc: OpError) -> None:
        self._early.pop(step, None)
        self._aborted[step] = exc
        while len(self._aborted) > _MAX_ABORTED:
            self._aborted.popitem(last=False)
        for fut in self._slots.pop(step, {}).values():
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: a slot nobody awaits must not log noise
        self._expected.pop(step, None)

    def end(self, step: int) -> None:
        self._slots.pop(step, None)
        self._expected.pop(step, None)
        self._ended[step] = None
        if len(self._ended) > _MAX_ENDED:
            self._ended.popitem(last=False)

    def _drop_stale_early(self) -> None:
        now = time.monotonic()
        while self._early:
            step, since = next(iter(self._early.items()))
            if len(self._early) < _MAX_EARLY and now - since < _EARLY_TTL_S:
                return
            del self._early[step]
            dropped = self._slots.pop(step, {})
            for fut in dropped.values():
                fut.cancel()
            logger.warning("%s: dropped %d tensor(s) of step %x, which never started here",
                           self.task, len(dropped), step)
