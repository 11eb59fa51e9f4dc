"""The process's client actor system: the one actor system (no listening
socket) through which this process calls other tasks' actors when it is not a
task itself, or not through its own server: a session's master channel, a
``request_stop``, the chief role's election, membership reads, the
coordinator's probes, the launcher, ``distrib status``.

An actor system is bound to its event loop, so there is one per loop that
calls (the session loop thread's, a ``asyncio.run`` of the user's), and
one per transport configuration on it (``distrib status`` dials by TCP with
its own connect deadline; the launcher's membership keeper a short one).
Each user takes a lease (:meth:`ClientSystems.acquire` / :meth:`release`,
or ``async with lease()``): the first lease on a loop starts the system,
the last one's release shuts it down, so a program that closed its sessions
leaves no connection open, as before, and several clients alive at once
share one system and its connections (one connection to the master however
many sessions, probes and readers dial it).

The object is the process runtime's (``distrib.process``), which installs
it here when it is made (:func:`install`); :func:`client_systems` is how
the layers below find it.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from typing import Any, AsyncIterator

import transports
from distrib.errors import FailedPreconditionError
from distrib.runtime.actors.system import ActorSystem, client_name, default_transport_config

__all__ = ["ClientSystems", "install", "client_systems"]


@dataclasses.dataclass
class _Held:
    system: ActorSystem
    started: asyncio.Future
    leases: int = 0


class ClientSystems:
    """The process's client actor systems, one per (event loop, transport
    configuration), each alive while someone holds a lease on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()   # loops on several threads lease at once
        self._held: dict[tuple[Any, ...], _Held] = {}

    async def acquire(self, config: transports.TransportConfig | None = None) -> ActorSystem:
        """A lease on the running loop's client system for ``config`` (default:
        the process's transport settings), started before it is returned."""
        loop = asyncio.get_running_loop()
        config = config or default_transport_config()
        key = (loop, config)
        with self._lock:
            self._forget_closed_loops()
            held = self._held.get(key)
            if held is None:
                system = ActorSystem(client_name(), listen=False, config=config)
                held = _Held(system, loop.create_task(system.start()))
                self._held[key] = held
            held.leases += 1
        try:
            await asyncio.shield(held.started)
        except BaseException:
            await self.release(held.system)
            raise
        return held.system

    async def release(self, system: ActorSystem) -> None:
        """Give a lease back; the last one shuts the system down."""
        with self._lock:
            key = next((k for k, h in self._held.items() if h.system is system), None)
            if key is None:
                return   # already shut down (its loop closed, or released twice)
            held = self._held[key]
            held.leases -= 1
            if held.leases > 0:
                return
            del self._held[key]
        # shielded: a release cancelled here still shuts the system down (nobody
        # else tracks it any more)
        await asyncio.shield(self._shut_down(held))

    @staticmethod
    async def _shut_down(held: _Held) -> None:
        with contextlib.suppress(Exception):
            await held.started   # a start under way ends first
        await held.system.shutdown()

    @contextlib.asynccontextmanager
    async def lease(self, config: transports.TransportConfig | None = None
                    ) -> AsyncIterator[ActorSystem]:
        """``async with clients.lease() as system:`` for one exchange."""
        system = await self.acquire(config)
        try:
            yield system
        finally:
            await self.release(system)

    def live(self) -> list[ActorSystem]:
        """The client systems alive now, on every loop of the process."""
        with self._lock:
            return [h.system for h in self._held.values()]

    def _forget_closed_loops(self) -> None:
        # a loop closed with leases still out (a session never closed): its
        # system died with it; the next user of a new loop starts afresh
        for key in [k for k in self._held if k[0].is_closed()]:
            del self._held[key]


_installed: ClientSystems | None = None


def install(systems: ClientSystems) -> None:
    """Make ``systems`` the process's (the process runtime does, once)."""
    global _installed
    _installed = systems


def client_systems() -> ClientSystems:
    """The process's client actor systems (``distrib.process`` made them)."""
    if _installed is None:
        raise FailedPreconditionError(
            "distrib's process runtime is not made, so there is no client actor system: "
            "`import distrib` makes it (distrib.process.runtime())")
    return _installed
