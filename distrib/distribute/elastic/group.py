"""The elastic group: who it is, and the membership records it is made from.

An elastic launch (``python -m distrib.launch --workers MIN:MAX``) keeps a
membership record (``distrib.runtime.chief.membership``): its source is ps 0
(the launcher pushes each new version there and to every task), and every
server holds the newest version it heard of, plus the last few by version.
An elastic ``MultiWorkerMirroredStrategy``'s group is a record's live chief
and worker tasks, the chief first, then the workers by index (rank 0 is the
group's chief), and its members are (task, generation): a task the launcher
restarted in place (its generation bumped) is a new member with no state.
The group formed from version ``v`` has the collective group key
``(base << 20) + v``, so the collectives of two groups never mix.

A newcomer builds its group from the record that lists it, waiting for one
(bounded: :data:`JOIN_WAIT_S`), never from ``TF_CONFIG``, which lists every
worker index so far, those that left included. Records are read off the
task's own server (``Server.membership_record``, from any thread) and,
when that one does not have the version wanted, asked of the source
(:class:`SourceReader`, bounded per read). The bounds every elastic module
shares live here too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import re
import time
from typing import Any

from distrib.errors import FailedPreconditionError, OpError
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import MembershipDoor
from distrib.runtime.chief.membership import Membership, MembershipReader

__all__ = ["ElasticGroupError", "elastic_group_key", "group_tasks", "group_members", "task_of",
           "SourceReader", "wait_for_record", "JOIN_WAIT_S", "REGROUP_TIMEOUT_S", "ATTEMPT_S",
           "MOVE_ON_TRIES", "POLL_S"]

JOIN_WAIT_S = 60.0          # a newcomer waits this long for a record / its group; a regroup
                            # retries this long
REGROUP_TIMEOUT_S = 30.0    # bounds each collective of one regroup's broadcast
ATTEMPT_S = 5.0             # a first use's try at its group, before it looks for a newer record
MOVE_ON_TRIES = 3           # tries at one version before a newcomer moves to a newer record
POLL_S = 0.1


class ElasticGroupError(FailedPreconditionError):
    """An elastic group not formed or joined: no record lists this task in
    time, the agreed record does not list it or is kept nowhere (a regroup),
    or a newcomer's group did not form within :data:`JOIN_WAIT_S`."""


def elastic_group_key(base: int, version: int) -> int:
    """The collective group key of the group formed from record ``version``."""
    return (base << 20) + version


def group_tasks(record: Membership) -> list[str]:
    """The group a record makes: its live chief, then its workers by index."""
    cluster = record.cluster
    out = []
    for job in ("chief", "worker"):
        if job in cluster.jobs:
            out += [f"/job:{job}/task:{i}" for i in sorted(cluster.task_indices(job))]
    return out


def group_members(record: Membership) -> set[tuple[str, int]]:
    """The group's members as (task, generation): a task restarted in place
    (its generation bumped) is a new member with no state."""
    return {(t, record.generation(t)) for t in group_tasks(record)}


def task_of(device: str) -> str:
    """``/job:J/replica:R/task:T/device:...`` -> ``/job:J/task:T``."""
    return re.sub(r"/replica:\d+", "", device.split("/device:", 1)[0])


class SourceReader:
    """Reads records from the membership source through the process's client
    actor system (a lease taken at its first read; ``close`` gives it back)."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.system: ActorSystem | None = None

    async def read(self, version: int | None = None, timeout: float = 2.0) -> Membership | None:
        """The source's newest record, or exactly ``version``'s (None: none, or unreachable)."""
        if self.source is None:
            return None
        try:
            if self.system is None:
                self.system = await client_systems().acquire()
            # (bounded here too: reaching a task that is gone waits the connect deadline)
            record = await asyncio.wait_for(MembershipDoor.at(self.system, self.source).get(
                version, timeout=timeout), timeout)
        except (OpError, asyncio.TimeoutError):
            return None
        return None if record is None else Membership.from_wire(record)

    async def close(self) -> None:
        system, self.system = self.system, None
        if system is not None:
            await client_systems().release(system)


def _lists(record: Membership | None, task: str) -> bool:
    return record is not None and (task in group_tasks(record) or record.has_left(task))


def wait_for_record(server: Any, task: str, timeout: float = JOIN_WAIT_S) -> Membership:
    """The membership record that lists ``task`` (live or left): the one
    ``server`` (this task's ``Server``) holds, else the source's, asked until
    one does. ElasticGroupError after ``timeout`` s. Blocking: it runs its
    own loop in a helper thread (called from a strategy's constructor,
    perhaps inside the user's event loop)."""
    deadline = time.monotonic() + timeout
    source = server.membership_source

    async def poll() -> Membership:
        async with MembershipReader() as reader:
            while True:
                record = server.membership_record()
                if not _lists(record, task) and source is not None:
                    try:   # (bounded here too: a source that is gone waits the connect deadline)
                        record = await asyncio.wait_for(reader.read(source, timeout=2.0), 2.0)
                    except (OpError, asyncio.TimeoutError):
                        record = None
                if _lists(record, task):
                    assert record is not None
                    return record
                if time.monotonic() > deadline:
                    raise ElasticGroupError(
                        f"{task}: no membership record lists this task after {timeout:g} s "
                        f"(held: version {server.membership_version}; source "
                        f"{source or 'this task'}): is the elastic launch alive?")
                await asyncio.sleep(POLL_S)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, poll()).result()
