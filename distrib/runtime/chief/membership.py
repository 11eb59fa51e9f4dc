"""Cluster membership at run time: which tasks are in the job now, as a
versioned record every task learns without restarting.

An elastic launch (``python -m distrib.launch --workers MIN:MAX``) grows and
shrinks the worker job while training runs. The launcher owns the
membership and pushes each new version to the *source*: the first ps task
(else the chief, else worker 0; :func:`membership_source`), the task every
worker already talks to. From there it spreads by heartbeat:

- Each server's ``membership`` actor (:class:`MembershipService`) holds the
  newest record it has; its actor system's heartbeat carries that record's
  version on every connection (``failure_detector.Heartbeat``).
- A task that hears a newer version than its own fetches the record from
  the source (one call; a failed one is tried again at a later heartbeat),
  so a worker learns a change within about one heartbeat of the source
  learning it, and ``python -m distrib.status`` shows each task's version.
- A record is a value: its ``version`` only grows, and a task keeps the
  newest it was given (an older one, pushed late, is ignored).

A record names the live tasks (``cluster``: job -> index -> address) and
the tasks that left (``left``, task names). Task indices are never reused,
so a name in ``left`` is final: a worker that finds itself there stops after
its current step (the Supervisor's ``should_stop``; ``distrib.train.chief.role``
watches its own server's record), and a task started later, with a fresh
index, can never be taken for it. A worker that died while more than the
launch's MIN workers were live is put there too, at once, instead of being
restarted (``Elastic.lost``): the others see the job shrink by one version.
A task absent from both lists is one the record does not know yet (it
joined after), never one that left.

``generations`` counts, per task, the times the launcher restarted it in
place (absent: 0): a task whose generation changed is a fresh process with
no state, a newcomer to a group even though its name stayed.

Each service keeps the last :data:`HISTORY` records it held, so a reader
that agreed on a version (an elastic MultiWorkerMirroredStrategy's group)
can ask for exactly that one after a newer record arrived
(``MembershipDoor.get(version=V)``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from distrib.cluster import ClusterSpec, task_string
from distrib.errors import InvalidArgumentError, OpError
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import MembershipDoor

logger = logging.getLogger(__name__)

__all__ = ["Membership", "MembershipService", "MembershipReader", "membership_source",
           "fetch_membership", "push_membership", "WORKER_JOBS"]

# the jobs whose tasks train (and may join or leave)
WORKER_JOBS = ("chief", "worker")
# records a service keeps for readers that ask for one version
HISTORY = 16


def membership_source(cluster: ClusterSpec) -> tuple[str, int] | None:
    """The task that serves the membership: ps 0, else chief 0, else worker 0
    (its lowest index), else None."""
    for job in ("ps", "chief", "worker"):
        if job in cluster.jobs and cluster.task_indices(job):
            return job, min(cluster.task_indices(job))
    return None


@dataclass(frozen=True)
class Membership:
    """One version of the cluster's membership: the live tasks and those that left."""

    version: int
    cluster: ClusterSpec
    left: tuple[str, ...] = ()
    generations: tuple[tuple[str, int], ...] = ()   # (task, restarts in place), sorted

    def to_wire(self) -> dict[str, Any]:
        return {"version": self.version,
                "cluster": {job: {str(i): self.cluster.task_address(job, i)
                                  for i in self.cluster.task_indices(job)}
                            for job in self.cluster.jobs},
                "left": list(self.left),
                "generations": dict(self.generations)}

    def generation(self, task: str) -> int:
        """How many times the launcher restarted ``task`` in place (0: never)."""
        return dict(self.generations).get(task, 0)

    @classmethod
    def from_wire(cls, record: Any) -> Membership:
        """The record a peer sent; InvalidArgumentError when it is not one."""
        try:
            version = record["version"]
            if type(version) is not int or version < 1:
                raise ValueError(f"version {version!r} is not an int >= 1")
            left = record.get("left") or []
            if not isinstance(left, list) or not all(isinstance(t, str) for t in left):
                raise ValueError("left is not a list of task names")
            gens = record.get("generations") or {}
            if not isinstance(gens, dict) or not all(
                    isinstance(t, str) and type(g) is int and g >= 0 for t, g in gens.items()):
                raise ValueError("generations is not a map of task name to a count >= 0")
            return cls(version, ClusterSpec(record["cluster"]), tuple(left),
                       tuple(sorted((t, g) for t, g in gens.items() if g)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidArgumentError(f"not a membership record: {e}") from None

    def tasks(self, jobs: tuple[str, ...] = WORKER_JOBS) -> list[str]:
        """The live tasks of ``jobs`` (default: the training ones), by name."""
        return [task_string(job, i) for job in self.cluster.jobs if job in jobs
                for i in self.cluster.task_indices(job)]

    @property
    def num_workers(self) -> int:
        """The live chief and worker tasks."""
        return len(self.tasks())

    def has_left(self, task: str) -> bool:
        return task in self.left


class MembershipService:
    """Actor ``membership`` of every server: the newest record this task has,
    taken from the launcher's push (on the source) or fetched from the
    source when a heartbeat carries a newer version."""

    def __init__(self, system: ActorSystem, task: str, cluster: ClusterSpec) -> None:
        self._system = system
        self.task = task
        self.record: Membership | None = None
        self.history: dict[int, Membership] = {}   # version -> record, the last HISTORY
        source = membership_source(cluster)
        self.source = (None if source is None or task_string(*source) == task
                       else cluster.task_address(*source))
        self._fetching: asyncio.Task | None = None
        self._last_try = float("-inf")
        system.heartbeat.on_version = self._heard

    @property
    def version(self) -> int:
        """The version held (0: none yet)."""
        return 0 if self.record is None else self.record.version

    def get(self, version: int | None = None) -> dict[str, Any] | None:
        """The record held, as sent on the wire (None: none yet); with
        ``version``, that version's record if this task still keeps it
        (None: never held, or older than the last :data:`HISTORY`)."""
        if version is None:
            return None if self.record is None else self.record.to_wire()
        record = self.history.get(version) if type(version) is int else None
        return None if record is None else record.to_wire()

    def at(self, version: int) -> Membership | None:
        """Version ``version``'s record if this task keeps it (in process)."""
        return self.history.get(version)

    def update(self, record: dict[str, Any]) -> int:
        """Take ``record`` if it is newer than the one held; the version held after."""
        new = Membership.from_wire(record)
        if new.version not in self.history and new.version >= min(self.history, default=0):
            # an older one pushed late is kept for readers of that version, not taken
            self.history[new.version] = new
            for v in sorted(self.history)[:-HISTORY]:
                del self.history[v]
        if new.version > self.version:
            old = self.version
            self.record = new
            self._system.heartbeat.version = new.version
            logger.info("%s: cluster membership version %d (was %d): %s%s", self.task,
                        new.version, old, ", ".join(new.tasks()) or "no workers",
                        "; left: " + ", ".join(new.left) if new.left else "")
        return self.version

    def _heard(self, version: int) -> None:
        """A heartbeat carried ``version``, newer than ours: fetch it from the source."""
        if self.source is None or (self._fetching is not None and not self._fetching.done()):
            return
        now = time.monotonic()
        if now - self._last_try < (heartbeat_s() or 1.0) / 2:
            return   # at most two tries a heartbeat, however many peers gossip it
        self._last_try = now
        self._fetching = self._system.spawn_task(self._fetch(), "membership fetch")

    async def _fetch(self) -> None:
        assert self.source is not None
        try:
            record = await MembershipDoor.at(self._system, self.source).get(
                timeout=max(1.0, 2 * (heartbeat_s() or 1.0)))
        except OpError as e:   # the next heartbeat that carries it tries again
            logger.debug("%s: membership not fetched from %s: %s", self.task, self.source, e)
            return
        if record is not None:
            self.update(record)


class MembershipReader:
    """A client that reads the records tasks hold, again and again, through
    the process's client actor system (a lease taken at its first read, given
    back by :meth:`close` or ``async with``): for a caller that polls, a
    chief waiting for the live workers."""

    def __init__(self) -> None:
        self.system: ActorSystem | None = None

    async def read(self, address: str, timeout: float = 5.0) -> Membership | None:
        """The record the task at ``address`` holds (None: none)."""
        if self.system is None:
            self.system = await client_systems().acquire()
        record = await MembershipDoor.at(self.system, address).get(timeout=timeout)
        return None if record is None else Membership.from_wire(record)

    async def close(self) -> None:
        system, self.system = self.system, None
        if system is not None:
            await client_systems().release(system)

    async def __aenter__(self) -> MembershipReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def fetch_membership(address: str, timeout: float = 5.0) -> Membership | None:
    """The record the task at ``address`` holds (None: none), asked once by a
    client (to ask again and again, keep a :class:`MembershipReader`)."""
    async with MembershipReader() as reader:
        return await reader.read(address, timeout)


async def push_membership(system: ActorSystem, address: str, record: Membership,
                          timeout: float = 5.0) -> int:
    """Give ``record`` to the task at ``address`` (the source); the version it holds after."""
    return await MembershipDoor.at(system, address).update(record.to_wire(), timeout=timeout)
