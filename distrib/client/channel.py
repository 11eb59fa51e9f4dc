"""How a session reaches its master: a ``MasterChannel`` that the runtime provides.

The client sits below the runtime in distrib's layers (docs/ARCHITECTURE.md):
it knows graphs, fetches and feeds, never actors or connections. So a session
asks for a channel by address and sends the master's messages as its typed
methods (one per message, declared here once), as
TensorFlow's Python session reaches its C++ runtime through one narrow
interface. The process runtime (``distrib.process``) hands in the
implementation, ``distrib.runtime.step.master_channel`` (a lease on the
process's client actor system), and the server layer's local channel (a
server of the session's own, for a session with no target).
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Protocol

__all__ = ["MasterChannel", "register_channel_factory", "open_master_channel",
           "open_local_channel"]


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
LocalChannelFactory = Callable[[Any], Awaitable[MasterChannel]]
_FACTORY: list[ChannelFactory] = []
_LOCAL: list[LocalChannelFactory] = []


def register_channel_factory(factory: ChannelFactory, local: LocalChannelFactory) -> None:
    """Make ``factory(address)`` the way sessions open their master channel, and
    ``local(config)`` the way a session with no target opens one to a server of
    its own (the process runtime hands both in)."""
    _FACTORY[:] = [factory]
    _LOCAL[:] = [local]


async def open_master_channel(address: str) -> MasterChannel:
    """A channel to the master at ``address`` (``host:port``)."""
    if not _FACTORY:
        raise RuntimeError("no runtime to reach a master with: `import distrib` makes the "
                           "process runtime that registers it")
    return await _FACTORY[0](address)


async def open_local_channel(config: Any) -> MasterChannel:
    """TF's ``tf.Session()`` with no target: a channel to a server of the
    session's own, in this process, made with the session's ``config`` (its
    ``device_count``), which closing the channel stops: the session's
    variables live as long as it, as a DirectSession's do."""
    if not _LOCAL:
        raise RuntimeError("no runtime to run a local session with: `import distrib` makes "
                           "the process runtime that registers it")
    return await _LOCAL[0](config)
