"""How a session reaches its master: a ``MasterChannel`` that the runtime provides.

The client sits below the runtime in distrib's layers (docs/ARCHITECTURE.md):
it knows graphs, fetches and feeds, never actors or connections. So a session
asks for a channel by address and calls the master's methods through it, as
TensorFlow's Python session reaches its C++ runtime through one narrow
interface. ``distrib.runtime.step.master_channel`` registers the implementation
(an actor system of the client's own) when it loads, which ``import distrib``
always does.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

__all__ = ["MasterChannel", "register_channel_factory", "open_master_channel"]


class MasterChannel(Protocol):
    """Calls to one master service, with the master's own typed errors."""

    async def call(self, method: str, *args: Any, timeout: float | None) -> Any:
        """The master's ``method(*args)``; ``distrib.errors.UnavailableError``
        when it cannot be reached, ``DeadlineExceededError`` past ``timeout``."""

    async def close(self) -> None:
        """Release the channel's connections (calls after this fail)."""


ChannelFactory = Callable[[str], Awaitable[MasterChannel]]
_FACTORY: list[ChannelFactory] = []


def register_channel_factory(factory: ChannelFactory) -> None:
    """Make ``factory(address)`` the way sessions open their master channel."""
    _FACTORY[:] = [factory]


async def open_master_channel(address: str) -> MasterChannel:
    """A channel to the master at ``address`` (``host:port``)."""
    if not _FACTORY:
        raise RuntimeError("no runtime to reach a master with: import distrib first")
    return await _FACTORY[0](address)
