"""How a session reaches its master: a ``MasterChannel`` that the runtime provides.

The client sits below the runtime in distrib's layers (docs/ARCHITECTURE.md):
it knows graphs, fetches and feeds, never actors or connections. So a session
asks for a channel by address and sends the master's messages as its typed
methods (one per message, declared here once), as
TensorFlow's Python session reaches its C++ runtime through one narrow
interface. ``distrib.runtime.step.master_channel`` registers the implementation
(an actor system of the client's own) when it loads, which ``import distrib``
always does.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

__all__ = ["MasterChannel", "register_channel_factory", "open_master_channel"]


class MasterChannel(Protocol):
    """Calls to one master service, with the master's own typed errors: one
    method per message a session sends (the master's handlers of the same
    names, ``distrib.runtime.step.master.MasterService``, and its door,
    ``runtime/step/doors.py``, which tests/test_doors.py checks this against).

    Every call raises ``distrib.errors.UnavailableError`` when the master
    cannot be reached, ``DeadlineExceededError`` past ``timeout`` seconds
    (None: no limit; the runtime's default when left out)."""

    async def create_session(self, graph_def: dict[str, Any],
                             config: dict[str, Any] | None = None, *,
                             timeout: float | None = ...) -> str:
        """Open a session on ``graph_def``: its handle."""

    async def extend_session(self, handle: str, graph_def: dict[str, Any], *,
                             timeout: float | None = ...) -> int:
        """Replace the session's graph with a newer version: the version."""

    async def run(self, handle: str, fetches: list[str], targets: list[str],
                  feeds: dict[str, Any], options: dict[str, Any] | None = None, *,
                  timeout: float | None = ...) -> list[Any]:
        """Run one step of the session: the fetched values, in order."""

    async def list_devices(self, *, timeout: float | None = ...) -> list[dict[str, Any]]:
        """Every reachable device of the cluster (TF's device attributes)."""

    async def close_session(self, handle: str, *, timeout: float | None = ...) -> bool:
        """Close the session, ending its steps: False if it was not open."""

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
        raise RuntimeError("no runtime to reach a master with: `import distrib` makes the "
                           "process runtime that registers it")
    return await _FACTORY[0](address)
