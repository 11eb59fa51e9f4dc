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

Members that never come: where a caller knows which tasks make up a group
(MultiWorkerMirroredStrategy does, for every group of its worker tasks; see
the engine's ``expect_tasks``), every join names them, and while the group
waits the leader *watches* each named task that has not joined: it connects
to it (the connection the failure detector then heartbeats) and asks it its
name. A task not reached yet is one that may still be starting (TF's
workers are started by hand, in any order): the leader probes it again,
with backoff, logging now and then whom it waits for, and fails the group's
waiters naming it only once the registration bound
(``DISTRIB_REGISTER_TIMEOUT_S``, 10 minutes) has passed without reaching
it. A task that was reached and is then lost (killed, or silent for three
heartbeats), before or while the group waits, departs as a joined member
does: the group fails within the grace below unless a new process of it
comes back. Without names (a bare ``dt.collective`` op) a group waits for
its members as TF's does, its stall warnings naming who joined.

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
from typing import Callable, Iterable

from distrib.cluster import ClusterSpec
from distrib.errors import InvalidArgumentError, UnavailableError
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.collective.registration import (
    Sayer,
    not_started,
    register_timeout_s,
    registration_error,
    retry_delay,
)

logger = logging.getLogger(__name__)

__all__ = ["Member", "Group", "GroupLeader", "leader_task", "task_address", "device_order",
           "rejoin_grace_s"]


def rejoin_grace_s() -> float:
    """How long a group waits for a departed member to come back."""
    return max(2.0, 3 * (heartbeat_s() or 1.0))

_TASK_RE = re.compile(r"^/job:[^/]+/task:\d+$")
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


def task_address(cluster: ClusterSpec, task: str) -> str:
    """The address of ``task`` (``/job:J/task:T``) in ``cluster``
    (InvalidArgumentError when it names no task of it)."""
    m = re.match(r"^/job:([^/]+)/task:(\d+)$", task)
    try:
        if m is None:
            raise ValueError(task)
        return cluster.task_address(m.group(1), int(m.group(2)))
    except (KeyError, ValueError):
        raise InvalidArgumentError(f"{task!r} is not a task of the cluster "
                                   f"({', '.join(cluster.jobs)})") from None


class _Forming:
    """A group on the leader: members joined so far, and who waits for the rest."""

    __slots__ = ("size", "members", "waiters", "departed", "timer", "expected", "watched",
                 "since")

    def __init__(self, size: int) -> None:
        self.size = size
        self.members: dict[str, Member] = {}
        self.waiters: list[asyncio.Future] = []
        # device (or, for a named task that never joined, the task) -> its task,
        # lost and not back
        self.departed: dict[str, str] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.expected: set[str] = set()   # the tasks the joins named as the group's
        self.watched: set[str] = set()    # those being (or already) reached
        # a named task not reached yet -> (when this wait for it began, probes so far)
        self.since: dict[str, tuple[float, int]] = {}

    def joined_tasks(self) -> set[str]:
        return {m.task for m in self.members.values()}


class GroupLeader:
    """The leader's table of groups (only the leader task's is used)."""

    def __init__(self, task: str,
                 reach: Callable[[str], asyncio.Future] | None = None) -> None:
        self.task = task
        # reach(task): a running task that connects to a named member and hears
        # from it (see the module header), cancelled when the task's system stops
        self.reach = reach
        self._groups: dict[int, _Forming] = {}
        # task -> the incarnation whose connection was lost, until a process of it
        # is heard again: a group that then waits for it does not wait for it to start
        self._gone: dict[str, int] = {}
        self._say = Sayer()

    def join(self, group_key: int, group_size: int, member: Member,
             expected: Iterable[str] = ()) -> asyncio.Future:
        """A future of the member list once ``group_size`` members have joined;
        ``expected``: the tasks the member knows make up the group (watched
        until they join)."""
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
        forming.departed.pop(member.task, None)
        forming.since.pop(member.task, None)
        self._gone.pop(member.task, None)
        forming.expected.update(str(t) for t in expected)
        fut = asyncio.get_running_loop().create_future()
        if len(forming.members) == forming.size:
            answer = [m.as_wire() for m in forming.members.values()]
            for w in [*forming.waiters, fut]:
                if not w.done():
                    w.set_result(answer)
            forming.waiters.clear()
            forming.since.clear()
            self._disarm(forming)
        else:
            forming.waiters.append(fut)
            self._watch(group_key, forming)
            self._arm(group_key, forming)
        return fut

    def _watch(self, group_key: int, forming: _Forming) -> None:
        """Reach every named task that has not joined (once each while it is away);
        one lost before (``_gone``) departs at once and has the grace to come back."""
        if self.reach is None:
            return
        now = asyncio.get_running_loop().time()
        for task in sorted(forming.expected - forming.joined_tasks() - forming.watched
                           - {self.task}):
            forming.watched.add(task)
            if task in self._gone:
                forming.departed[task] = task
            else:
                forming.since.setdefault(task, (now, 0))
            self._probe(group_key, forming, task)

    def _probe(self, group_key: int, forming: _Forming, task: str) -> None:
        assert self.reach is not None
        if task in forming.joined_tasks() or not forming.waiters:
            forming.watched.discard(task)   # no longer waited for: the next wait tries again
            forming.since.pop(task, None)
            return
        self.reach(task).add_done_callback(
            lambda f: self._reached(group_key, forming, task, f))

    def _reached(self, group_key: int, forming: _Forming, task: str,
                 probe: asyncio.Future) -> None:
        if probe.cancelled():   # the system stops
            forming.watched.discard(task)
            return
        err = probe.exception()
        if err is None:   # it runs: the failure detector watches it from now on (``lost``)
            self._gone.pop(task, None)
            forming.since.pop(task, None)
            if forming.departed.get(task) == task:   # a lost connection, not a lost task
                del forming.departed[task]
            return
        if task in forming.joined_tasks() or not forming.waiters or task in self._gone:
            forming.watched.discard(task)   # joined, not waited for, or lost: not starting
            forming.since.pop(task, None)
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        start, tries = forming.since.setdefault(task, (now, 0))
        left = register_timeout_s() - (now - start)
        what = f"collective group {group_key}"
        if left > 0 and not_started(err):
            self._say(now, task, f"{what} (leader {self.task})", now - start, err)
            forming.since[task] = (start, tries + 1)
            loop.call_later(retry_delay(tries, left), self._probe, group_key, forming, task)
            return
        forming.watched.discard(task)
        joined = f" (joined: {', '.join(forming.members) or 'none'})"
        self._fail(forming, registration_error(what, task, now - start, err, joined, self.task)
                   if not_started(err) else UnavailableError(
                       f"{what}: member task {task} cannot be reached: {err}{joined}",
                       task=self.task, peer=task))

    def _fail(self, forming: _Forming, err: Exception) -> None:
        """Fail every waiter of the group with ``err``."""
        waiters, forming.waiters = forming.waiters, []
        forming.since.clear()
        self._disarm(forming)
        for w in waiters:
            if not w.done():
                w.set_exception(err)

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
        gone = ", ".join(d if d == t else f"{d} ({t})" for d, t in forming.departed.items())
        err = UnavailableError(
            f"collective group {group_key}: member {gone} stopped, crashed or missed 3 "
            f"heartbeats and did not come back within {rejoin_grace_s():g}s; the collective "
            "fails (a restarted process of that task joins the next one)", task=self.task,
            peer=next(iter(forming.departed.values())))
        self._fail(forming, err)

    def lost(self, task: str, incarnation: int) -> None:
        """That process of ``task`` is gone: its devices leave every group, so
        the group forms again only with the process that replaces it (the
        members that re-resolve wait for it instead of getting a dead list)."""
        if _TASK_RE.match(task):   # (a client's name is not remembered)
            if len(self._gone) > 4096:
                self._gone.clear()
            self._gone[task] = incarnation
        for gk, forming in self._groups.items():
            forming.watched.discard(task)   # a later wait reaches it again
            gone = [d for d, m in forming.members.items()
                    if m.task == task and m.incarnation == incarnation]
            for d in gone:
                del forming.members[d]
                forming.departed[d] = task
            if not gone and forming.waiters and task in forming.expected \
                    and task not in forming.joined_tasks():
                gone = [task]   # named, watched, and lost before it joined
                forming.departed[task] = task
                forming.since.pop(task, None)
            if gone:
                self._arm(gk, forming)
                logger.info("collective group %d: %s left (its connection was lost)", gk,
                            ", ".join(gone))

    def joined(self, group_key: int) -> list[str]:
        """The devices that have joined ``group_key`` so far."""
        forming = self._groups.get(group_key)
        return [] if forming is None else list(forming.members)
