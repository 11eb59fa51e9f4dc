"""The door of the ``collective`` actor (:class:`~.engine.CollectiveEngine`),
see :mod:`distrib.runtime.actors.door`: what one task's engine asks of the
group leader's, and what the members of an instance send each other.

``deliver`` carries every header and ring segment of a collective, so it
keeps flat parameters (no request dataclass) and is a tell: one plain call
in front of ``ActorRef.tell``.
"""
from __future__ import annotations

from typing import Any

import transports
from distrib.runtime.actors.door import Door
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S, TELL, in_process_system

__all__ = ["CollectiveDoor", "deliver_now"]


class CollectiveDoor(Door):
    """Actor ``collective``; called by the collective engines of the other
    tasks (the group leader's by every member)."""

    __slots__ = ()
    actor = "collective"

    async def join_group(self, group_key: int, group_size: int, member: list,
                         expected: list | None = None, *,
                         timeout: float | None = DEFAULT_TIMEOUT_S) -> list:
        """(To the leader) join ``group_key`` (naming its tasks if known): its member list."""
        return await self.ref.call("join_group", group_key, group_size, member,
                                   list(expected or ()), timeout=timeout)

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


def deliver_now(door: CollectiveDoor, key: list, dst_incarnation: int, src: list, tag: int,
                payload: Any) -> bool:
    """``door.deliver(...)`` written at once on the open connection to another
    process, without a task or a coroutine (a small collective's header, a
    lent ring segment): True; False when nothing was sent (this process, no
    connection yet, or a failed write: ``deliver`` then sends or raises the
    typed error)."""
    ref = door.ref
    system = ref.system
    if ref.address == system.address or in_process_system(ref.address) is not None:
        return False
    # ActorRef.tell less its coroutine (system.py has no room for a second tell)
    found = system._open_peer(ref.address, ref.peer)  # noqa: SLF001
    if found is None:
        return False
    try:
        found.conn.send_nowait([TELL, door.actor, "deliver",
                                [key, dst_incarnation, src, tag, payload]])
    except (transports.FrameError, transports.ConnectionClosed):
        return False
    return True
