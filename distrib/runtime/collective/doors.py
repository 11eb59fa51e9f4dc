"""The door of the ``collective`` actor (:class:`~.engine.CollectiveEngine`),
see :mod:`distrib.runtime.actors.door`: what one task's engine asks of the
group leader's, and what the members of an instance send each other.

``deliver`` carries every header and ring segment of a collective, so it
keeps flat parameters (no request dataclass) and is a tell: one plain call
in front of ``ActorRef.tell``.
"""
from __future__ import annotations

from typing import Any

from distrib.runtime.actors.door import Door
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S

__all__ = ["CollectiveDoor"]


class CollectiveDoor(Door):
    """Actor ``collective``; called by the collective engines of the other
    tasks (the group leader's by every member)."""

    __slots__ = ()
    actor = "collective"

    async def join_group(self, group_key: int, group_size: int, member: list, *,
                         timeout: float | None = DEFAULT_TIMEOUT_S) -> list:
        """(To the leader) join group ``group_key``: its member list once all have joined."""
        return await self.ref.call("join_group", group_key, group_size, member, timeout=timeout)

    async def deliver(self, key: list, dst_incarnation: int, src: list, tag: int,
                      payload: Any) -> None:
        """(Tell) a header or data message of instance ``key`` from member ``src``."""
        return await self.ref.tell("deliver", key, dst_incarnation, src, tag, payload)

    async def abort_instance(self, key: list, error: dict) -> None:
        """(Tell) a member failed instance ``key``: fail it here too."""
        return await self.ref.tell("abort_instance", key, error)

    async def ping(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """The task's name (a liveness probe)."""
        return await self.ref.call("ping", timeout=timeout)
