"""The door of a server's ``server`` actor (the control actor of
``distrib.server.server_lib``), see :mod:`distrib.runtime.actors.door`: how a
chief tells a task that training is over (``request_stop``), and how
``python -m distrib.status`` asks each task for its own view (``status``),
and how a worker that got a termination notice tells its peers the run at
which they all save (``preemption_notice``, TF's coordination-service key).
"""
from __future__ import annotations

from typing import Any

from distrib.runtime.actors.door import Door
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S

__all__ = ["ServerDoor"]


class ServerDoor(Door):
    """Actor ``server``; called by ``request_stop`` (a chief releasing the ps
    tasks), by ``distrib.status`` and by a preempted worker's
    ``PreemptionCheckpointHandler``."""

    __slots__ = ()
    actor = "server"

    async def request_stop(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> bool:
        """Training is over: the server's ``join()`` returns."""
        return await self.ref.call("request_stop", timeout=timeout)

    async def task(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """The task's name."""
        return await self.ref.call("task", timeout=timeout)

    async def status(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The task's own view (incarnation, uptime, sessions, chief term, peers, ...)."""
        return await self.ref.call("status", timeout=timeout)

    async def preemption_notice(self, save_at: int, sender: str, *,
                                timeout: float | None = DEFAULT_TIMEOUT_S) -> bool:
        """``sender`` got a termination notice: all save at run ``save_at`` (the reply acks it)."""
        return await self.ref.call("preemption_notice", save_at, sender, timeout=timeout)
