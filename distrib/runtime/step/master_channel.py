"""The runtime's side of ``distrib.client.channel``: a session's master
channel is an actor system of the client's own (no listening socket) and the
door of the ``master`` actor at the target address (``MasterDoor``, whose
methods are the channel's). A master in this process is called directly,
with no serialization or socket (see actors)."""
from __future__ import annotations

from distrib.client.channel import register_channel_factory
from distrib.runtime.actors.system import ActorRef, ActorSystem, client_name
from distrib.runtime.step.doors import MasterDoor

__all__ = ["ActorMasterChannel"]


class ActorMasterChannel(MasterDoor):
    """A ``MasterChannel`` over the actor runtime: the master's door, and the
    actor system it owns."""

    __slots__ = ("_system",)

    def __init__(self, system: ActorSystem, master: ActorRef) -> None:
        super().__init__(master)
        self._system = system

    @classmethod
    async def open(cls, address: str) -> ActorMasterChannel:
        system = ActorSystem(client_name(), listen=False)
        await system.start()
        return cls(system, system.ref(address, cls.actor))

    async def close(self) -> None:
        await self._system.shutdown()


register_channel_factory(ActorMasterChannel.open)
