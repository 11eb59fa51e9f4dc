"""The runtime's side of ``distrib.client.channel``: a session's master
channel is a lease on the process's client actor system (no listening
socket; :mod:`distrib.runtime.actors.clients`) and the door of the
``master`` actor at the target address (``MasterDoor``, whose methods are
the channel's). The process runtime (``distrib.process``) hands
:meth:`ActorMasterChannel.open` to the client layer. A master in this process is called directly,
with no serialization or socket: on the caller's loop, or on the loop of the
process's local server or a strategy's own server (``DirectRef``; see
:mod:`distrib.runtime.actors.in_process`). On those paths a fed array that
the caller could write to later is copied once (TF copies feeds too), so
that nothing the step keeps (a queue, a fetched feed) changes with it."""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.in_process import DirectRef
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S, ActorSystem
from distrib.runtime.step.doors import MasterDoor

__all__ = ["ActorMasterChannel"]


class ActorMasterChannel(MasterDoor):
    """A ``MasterChannel`` over the actor runtime: the master's door, and the
    lease on the client actor system it holds."""

    __slots__ = ("_system",)

    def __init__(self, system: ActorSystem, master: DirectRef) -> None:
        super().__init__(master)   # type: ignore[arg-type]  (DirectRef calls as ActorRef does)
        self._system = system

    @classmethod
    async def open(cls, address: str) -> ActorMasterChannel:
        system = await client_systems().acquire()
        return cls(system, DirectRef(system.ref(address, cls.actor)))

    async def run(self, handle: str, fetches: list[str], targets: list[str],
                  feeds: dict[str, Any], options: dict[str, Any] | None = None, *,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> list[Any]:
        if feeds and self.ref.in_process:   # type: ignore[attr-defined]
            feeds = {k: _owned(v) for k, v in feeds.items()}
        return await super().run(handle, fetches, targets, feeds, options, timeout=timeout)

    async def close(self) -> None:
        await client_systems().release(self._system)


def _owned(value: Any) -> Any:
    """A fed value the step may keep: a copy of a writable array (the caller
    may reuse it), anything else as it is (check_feed converts the rest)."""
    if type(value) is np.ndarray and value.flags.writeable:
        return value.copy()
    return value
