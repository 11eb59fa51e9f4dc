"""A ``ClusterCoordinator``'s scheduled call (``distrib.distribute.coordinator.cluster_coordinator``):
the ``Closure`` a slot takes from the queue, and the ``RemoteValue``
``schedule`` returns, the reading end of the future the closure settles.

A closure settles its RemoteValue once: a closure put back (its worker
failed) and run again settles it then; a RemoteValue settled by a
cancellation stays cancelled."""
from __future__ import annotations

import asyncio
from typing import Any

from distrib.distribute.functions.def_function import Function

__all__ = ["RemoteValue", "Closure"]


class RemoteValue:
    """The result of a scheduled closure (``await rv.fetch()``)."""

    def __init__(self, future: asyncio.Future) -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    async def fetch(self) -> Any:
        """The closure's outputs (numpy), once it ran; its error if it failed."""
        if self._future.done():
            return self._future.result()
        return await asyncio.shield(self._future)   # (a cancelled fetch leaves the closure be)

    get = fetch


class Closure:
    """One scheduled call: the function, its arguments, and the writing end of its
    RemoteValue (settled once)."""

    __slots__ = ("fn", "args", "kwargs", "result", "_future")

    def __init__(self, fn: Function, args: tuple, kwargs: dict) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self._future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.result = RemoteValue(self._future)

    def succeed(self, value: Any) -> None:
        """The closure ran: its RemoteValue holds ``value`` (unless settled before)."""
        if not self._future.done():
            self._future.set_result(value)

    def fail(self, error: BaseException) -> None:
        """The closure failed: its RemoteValue raises ``error`` (unless settled before)."""
        if not self._future.done():
            self._future.set_exception(error)
            self._future.exception()   # retrieved: raised again by fetch
