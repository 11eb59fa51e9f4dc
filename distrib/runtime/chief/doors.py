"""The chief wing's doors (see :mod:`distrib.runtime.actors.door`): the
messages of the arbiter's ``chief_lease`` actor (:class:`~.lease.ChiefLease`),
the ``membership`` actor's (:mod:`.membership`),
and the one worker message the chief wing sends, ``fence``, by which a new
chief announces its term to the ps tasks (:mod:`.fencing`).

``fence`` is declared here, not with the worker's other messages in
``runtime/step/doors.py``, because the chief wing sits below the step wing
and may not import it; the step wing's ``WorkerDoor`` extends ``FenceDoor``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distrib.runtime.actors.door import Door, request_args
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S

__all__ = ["Campaign", "ChiefLeaseDoor", "FenceDoor", "MembershipDoor"]


@dataclass(frozen=True, slots=True)
class Campaign:
    """A candidate's request for (or renewal of) the chief role."""

    candidate: str              # its task name, "/job:worker/task:1"
    incarnation: int            # its process's incarnation
    known_term: int = 0         # the newest term it has seen
    was_holder: bool = False    # it held the lease of that term
    preferred: bool = False     # Supervisor(is_chief=True)


class ChiefLeaseDoor(Door):
    """Actor ``chief_lease`` (the arbiter's lease); called by every worker's
    ``ChiefElection``."""

    __slots__ = ()
    actor = "chief_lease"

    async def campaign(self, req: Campaign, *,
                       timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Ask for (or renew) the role: the lease's state (granted, term, holder, lease_s)."""
        return await self.ref.call("campaign", *request_args(req, Campaign), timeout=timeout)

    async def resign(self, candidate: str, incarnation: int, *,
                     timeout: float | None = DEFAULT_TIMEOUT_S) -> bool:
        """The holder gives the role up: the lease is vacant at once."""
        return await self.ref.call("resign", candidate, incarnation, timeout=timeout)

    async def status(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The lease's term, live holder and recent grants."""
        return await self.ref.call("status", timeout=timeout)


class FenceDoor(Door):
    """Actor ``worker``, the message a new chief sends to every ps task."""

    __slots__ = ()
    actor = "worker"

    async def fence(self, term: int, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> int:
        """Announce chief ``term``: older chiefs' writes are refused from now on."""
        return await self.ref.call("fence", term, timeout=timeout)


class MembershipDoor(Door):
    """Actor ``membership`` (:class:`~.membership.MembershipService`); called by
    a task that heard a newer version, by the elastic launcher and by clients."""

    __slots__ = ()
    actor = "membership"

    async def get(self, version: int | None = None, *,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any] | None:
        """The newest membership record held (None: none), or exactly ``version``'s if kept."""
        return await self.ref.call("get", version, timeout=timeout)

    async def update(self, record: dict[str, Any], *,
                     timeout: float | None = DEFAULT_TIMEOUT_S) -> int:
        """Take a newer membership record; the version held after."""
        return await self.ref.call("update", record, timeout=timeout)
