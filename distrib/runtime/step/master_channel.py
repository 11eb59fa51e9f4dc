"""The runtime's side of ``distrib.client.channel``: a session's master
channel is an actor system of the client's own (no listening socket) and a
reference to the ``master`` actor at the target address. A master in this
process is called directly, with no serialization or socket (see actors)."""
from __future__ import annotations

from typing import Any

from distrib.client.channel import register_channel_factory
from distrib.runtime.actors.system import ActorRef, ActorSystem, client_name

__all__ = ["ActorMasterChannel"]


class ActorMasterChannel:
    """A ``MasterChannel`` over the actor runtime."""

    def __init__(self, system: ActorSystem, master: ActorRef) -> None:
        self._system = system
        self._master = master

    @classmethod
    async def open(cls, address: str) -> ActorMasterChannel:
        system = ActorSystem(client_name(), listen=False)
        await system.start()
        return cls(system, system.ref(address, "master"))

    async def call(self, method: str, *args: Any, timeout: float | None) -> Any:
        return await self._master.call(method, *args, timeout=timeout)

    async def close(self) -> None:
        await self._system.shutdown()


register_channel_factory(ActorMasterChannel.open)
