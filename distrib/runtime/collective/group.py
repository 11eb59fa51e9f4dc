"""Collective groups: who takes part in a collective, in which order, and where.

A collective op names a group by ``(group_key, group_size)``; its members are
the *devices* that run an op of that group (the op's full device string,
``/job:worker/replica:0/task:1/device:CPU:0``), so two devices of one task
are two members. Nobody but the members knows who they are, least of all in
between-graph replication where every worker runs its own graph. As in
TensorFlow (``collective_param_resolver_local.cc``), one task of the cluster
is the *group leader*: the first task of the ``chief`` job, else of the
``worker`` job, else the lowest task. Every member registers
``(device, task, address, incarnation)`` with it; once ``group_size`` members
have joined, the leader answers them all with the member list, and each
member caches it per group key.

Order: members are ranked by (job, replica, task, device type, device index),
numerically, so a group's ranks are the same on every member and
``all_gather`` concatenates in the order a reader expects.

Deaths: when the leader loses a member's connection, the member leaves
every group it was in, and the leader remembers it as *departed*. A group
that waits for a departed member fails (``UnavailableError`` naming it)
unless the member comes back within ``rejoin_grace_s()`` (three heartbeats,
at least 2 s): the survivors' step fails instead of hanging, and a restarted
process that joins in time (a new incarnation) lets the group form again.

Restarts: a member that joins again with a new incarnation (its process
restarted) replaces its old entry. The list's *signature* hashes every
member's device and incarnation, and it is part of every collective's key:
after a restart every member re-resolves (see collective.engine), and the
instances of the new signature are counted from zero on all of them alike.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass

from distrib.cluster import ClusterSpec
from distrib.errors import InvalidArgumentError, UnavailableError
from distrib.runtime.actors.failure_detector import heartbeat_s

logger = logging.getLogger(__name__)

__all__ = ["Member", "Group", "GroupLeader", "leader_task", "device_order", "rejoin_grace_s"]


def rejoin_grace_s() -> float:
    """How long a group waits for a departed member to come back."""
    return max(2.0, 3 * (heartbeat_s() or 1.0))

_DEVICE_RE = re.compile(r"^/job:([^/]+)/replica:(\d+)/task:(\d+)/device:([A-Za-z_]+):(\d+)$")


def device_order(device: str) -> tuple:
    """The sort key of a canonical device string (numeric task and index)."""
    m = _DEVICE_RE.match(device)
    if m is None:
        return ("~", 0, 0, device, 0)
    job, replica, task, dtype, idx = m.groups()
    return (job, int(replica), int(task), dtype.upper(), int(idx))


@dataclass(frozen=True)
class Member:
    """One participant of a group: its device, and the task that hosts it."""

    device: str
    task: str
    address: str
    incarnation: int

    def as_wire(self) -> list:
        return [self.device, self.task, self.address, self.incarnation]

    @staticmethod
    def from_wire(data: list) -> Member:
        if not isinstance(data, list) or len(data) != 4:
            raise InvalidArgumentError(f"a group member is [device, task, address, "
                                       f"incarnation], not {data!r}")
        device, task, address, inc = data
        return Member(str(device), str(task), str(address), int(inc))


class Group:
    """A resolved group: its members in rank order and their signature."""

    __slots__ = ("key", "size", "members", "sig", "ranks")

    def __init__(self, key: int, members: list[Member]) -> None:
        self.key = key
        self.members = sorted(members, key=lambda m: device_order(m.device))
        self.size = len(self.members)
        self.ranks = {m.device: r for r, m in enumerate(self.members)}
        text = ";".join(f"{m.device}@{m.incarnation:x}" for m in self.members)
        self.sig = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(),
                                  "little") >> 1

    def has(self, task: str, incarnation: int | None = None) -> bool:
        return any(m.task == task and (incarnation is None or m.incarnation == incarnation)
                   for m in self.members)


def leader_task(cluster: ClusterSpec) -> tuple[str, str]:
    """(task name, address) of the group leader of ``cluster``: TF's default
    ``collective_group_leader``."""
    jobs = cluster.jobs
    for job in ("chief", "worker"):
        if job in jobs:
            break
    else:
        job = sorted(jobs)[0]
    index = min(cluster.task_indices(job))
    return f"/job:{job}/task:{index}", cluster.task_address(job, index)


class _Forming:
    """A group on the leader: members joined so far, and who waits for the rest."""

    __slots__ = ("size", "members", "waiters", "departed", "timer")

    def __init__(self, size: int) -> None:
        self.size = size
        self.members: dict[str, Member] = {}
        self.waiters: list[asyncio.Future] = []
        self.departed: dict[str, str] = {}    # device -> its task, lost and not back
        self.timer: asyncio.TimerHandle | None = None


class GroupLeader:
    """The leader's table of groups (only the leader task's is used)."""

    def __init__(self, task: str) -> None:
        self.task = task
        self._groups: dict[int, _Forming] = {}

    def join(self, group_key: int, group_size: int, member: Member) -> asyncio.Future:
        """A future of the member list once ``group_size`` members have joined."""
        forming = self._groups.get(group_key)
        if forming is None:
            forming = self._groups[group_key] = _Forming(group_size)
        if forming.size != group_size:
            raise InvalidArgumentError(
                f"collective group {group_key}: {member.device} joined with group_size "
                f"{group_size}, but its members so far ({', '.join(forming.members)}) use "
                f"group_size {forming.size}", task=self.task)
        old = forming.members.get(member.device)
        if old is None and len(forming.members) >= forming.size:
            raise InvalidArgumentError(
                f"collective group {group_key} of size {group_size} is full "
                f"({', '.join(forming.members)}); {member.device} cannot join it",
                task=self.task)
        if old is not None and old != member:
            logger.info("collective group %d: %s rejoined (incarnation %x, was %x)",
                        group_key, member.device, member.incarnation, old.incarnation)
        forming.members[member.device] = member
        forming.departed.pop(member.device, None)
        fut = asyncio.get_running_loop().create_future()
        if len(forming.members) == forming.size:
            answer = [m.as_wire() for m in forming.members.values()]
            for w in [*forming.waiters, fut]:
                if not w.done():
                    w.set_result(answer)
            forming.waiters.clear()
            self._disarm(forming)
        else:
            forming.waiters.append(fut)
            self._arm(group_key, forming)
        return fut

    def _arm(self, group_key: int, forming: _Forming) -> None:
        """Fail the group's waiters if a departed member is not back in time."""
        if not forming.departed or forming.timer is not None or not forming.waiters:
            return
        forming.timer = asyncio.get_running_loop().call_later(
            rejoin_grace_s(), self._give_up, group_key, forming)

    @staticmethod
    def _disarm(forming: _Forming) -> None:
        if forming.timer is not None:
            forming.timer.cancel()
            forming.timer = None

    def _give_up(self, group_key: int, forming: _Forming) -> None:
        forming.timer = None
        if not forming.departed or len(forming.members) == forming.size:
            return
        gone = ", ".join(f"{d} ({t})" for d, t in forming.departed.items())
        err = UnavailableError(
            f"collective group {group_key}: member {gone} stopped, crashed or missed 3 "
            f"heartbeats and did not come back within {rejoin_grace_s():g}s; the collective "
            "fails (a restarted process of that task joins the next one)", task=self.task,
            peer=next(iter(forming.departed.values())))
        waiters, forming.waiters = forming.waiters, []
        for w in waiters:
            if not w.done():
                w.set_exception(err)

    def lost(self, task: str, incarnation: int) -> None:
        """That process of ``task`` is gone: its devices leave every group, so
        the group forms again only with the process that replaces it (the
        members that re-resolve wait for it instead of getting a dead list)."""
        for gk, forming in self._groups.items():
            gone = [d for d, m in forming.members.items()
                    if m.task == task and m.incarnation == incarnation]
            for d in gone:
                del forming.members[d]
                forming.departed[d] = task
            if gone:
                self._arm(gk, forming)
                logger.info("collective group %d: %s left (its connection was lost)", gk,
                            ", ".join(gone))

    def joined(self, group_key: int) -> list[str]:
        """The devices that have joined ``group_key`` so far."""
        forming = self._groups.get(group_key)
        return [] if forming is None else list(forming.members)
