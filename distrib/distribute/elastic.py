"""Elastic ``MultiWorkerMirroredStrategy``: the group of workers changes at a
step boundary while training runs, no worker restarts, no step is repeated.

Elastic mode is an elastic launch (``python -m distrib.launch --workers
MIN:MAX``, which sets ``DISTRIB_ELASTIC=1``): this task's server holds the
launch's membership record (``distrib.runtime.chief.membership``). Anywhere
else the strategy is exactly as before: no extra op, no extra collective.

- **The group** is the record's live chief and worker tasks (the chief, then
  the workers by index; rank 0 is the group's chief). It is named by the
  record version it was formed from: its collective group key is
  ``(7 << 20) + version`` and its instance keys count from one again, so the
  collectives of an old and a new group never mix; a ``dt.function`` traced
  under an old group is traced again (its cache is keyed on the strategy's
  ``trace_epoch``, the version). A newcomer builds its group from the record
  (waiting, bounded, until it lists it), never from ``TF_CONFIG``, which lists
  every worker index so far, those that left included.
- **Agreement**, once per step: each step that calls ``strategy.run`` carries
  one tiny all-reduce MAX of a membership version (fed at each call) and
  fetches it with the step. When the agreed version is newer than the
  group's, every member switches to exactly that version right after this
  same step (its record from the history kept by version, else asked of the
  source by version: a record that changed during the step does not
  matter): deterministic on every member. The version fed is the *ready*
  one: the collective group leader (the chief task, else worker 0: a
  member) feeds the highest version above the group's whose newcomers have
  all reached their first use (they joined that version's group on its
  table), trying the versions it keeps one at a time (two quick grows: v2's
  group, then v3's); the others feed 0, so the old members keep training
  while a new process starts instead of waiting for it in the broadcast. The
  leader's table is read on its server's loop (``Server.on_loop``). A group
  without its leader (none here) feeds each member's newest version held.
- **Members** are (task, generation): a task the launcher restarted in place
  (its generation bumped) is a newcomer with no state under its old name.
- **Regroup**: members still in the record form the new group with the
  newcomers; the member with state furthest ahead (the highest input position:
  a survivor that finished the step another one failed; ties: the lowest rank;
  one tiny all-reduce MAX finds it; none, as at the start: rank 0, which
  initializes first) broadcasts every mirrored variable of the strategy
  (model, optimizer slots, global step), in variable-name order so a fresh
  newcomer's build order cannot mismatch the keys, and the input position
  (``elastic_input``: the global batch, or the step of the per-worker
  pipelines, made again for a new (n, i)). **Every mirrored variable must
  exist before the first step**: one made later is in no regroup's broadcast.
  The broadcasts take instance keys from ``1 << 24`` up, apart from the steps'
  keys, each bounded by :data:`REGROUP_TIMEOUT_S`. A regroup that fails (a
  newcomer gone or moved on) regroups again to the newest record, within
  :data:`JOIN_WAIT_S`; the step that ran before it is not run again (the step
  call counts it, and the iterator's position, outside any retry). A
  newcomer's first use is the same routine, tried :data:`ATTEMPT_S` at a time:
  after :data:`MOVE_ON_TRIES` tries at one version it takes a newer record
  that lists it (that version's key) rather than wait in a stale one;
  ``ElasticGroupError`` (naming the version and group key) after
  :data:`JOIN_WAIT_S`.
- **Leaving**: a member in the record's ``left`` finishes the agreed step,
  waits for every member of the old group to finish it too (one tiny
  all-reduce, so none of its messages is lost with its process), logs "left
  the cluster at step N" (N: the steps it ran), stops its server and raises
  ``SystemExit(0)`` from the step call, as TF's PreemptionCheckpointHandler
  exits: ``finally`` blocks run; the launcher counts the exit as a leave.
- **A lost member** (kill -9): the step fails (``UnavailableError`` or
  ``AbortedError``); when, within two heartbeats plus the collective rejoin
  grace, a newer record drops that member or restarts it (the launcher
  shrinks on a worker's death when more than MIN are live, else restarts it
  in place with its generation bumped), the survivors take the newest record
  once it stopped changing for one poll, regroup (retrying, bounded, as
  above; no error escapes while its deadline lasts) and run the same global
  batch again on the new group, so the step counts once. Otherwise the error
  is raised as before. In elastic mode every variable update of a step
  waits for all of the step's gradient all-reduces
  (``CollectiveAllReduce(wait_all=True)``), so a failed step updated
  nothing and its retry is exact; a non-elastic run keeps the overlap.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from distrib.distribute.distribute_lib import variable_owner
from distrib.distribute.values import MirroredVariable
from distrib.errors import (
    AbortedError,
    DeadlineExceededError,
    FailedPreconditionError,
    OpError,
    UnavailableError,
)
from distrib.framework import dtypes
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem, client_name
from distrib.runtime.chief.doors import MembershipDoor
from distrib.runtime.chief.membership import Membership, MembershipReader
from distrib.runtime.collective.group import rejoin_grace_s

if TYPE_CHECKING:
    from distrib.distribute.elastic_input import ElasticIterator

logger = logging.getLogger(__name__)

__all__ = ["ElasticGroupError", "ElasticController", "Agreement", "group_tasks",
           "group_members", "elastic_group_key", "wait_for_record", "sender_code", "sender_rank",
           "JOIN_WAIT_S", "REGROUP_TIMEOUT_S"]

JOIN_WAIT_S = 60.0          # a newcomer waits this long for a record / its group; a regroup
                            # retries this long
REGROUP_TIMEOUT_S = 30.0    # bounds each collective of one regroup's broadcast
ATTEMPT_S = 5.0             # a first use's try at its group, before it looks for a newer record
MOVE_ON_TRIES = 3           # tries at one version before a newcomer moves to a newer record
_BROADCAST_KEYS = 1 << 24   # a regroup's broadcasts: instance keys from here up
_BARRIER_KEY = _BROADCAST_KEYS - 1   # a leave's barrier, once per (old) group
_POLL_S = 0.1


class ElasticGroupError(FailedPreconditionError):
    """An elastic group not formed or joined: no record lists this task in
    time, the agreed record does not list it or is kept nowhere (a regroup),
    or a newcomer's group did not form within :data:`JOIN_WAIT_S`."""


def elastic_group_key(base: int, version: int) -> int:
    """The collective group key of the group formed from record ``version``."""
    return (base << 20) + version


def sender_code(has_state: bool, position: int, rank: int, n: int) -> int:
    """A member's input to the all-reduce MAX that picks a regroup's sender: the
    member with state furthest ahead, ties: the lowest rank (-1: no state)."""
    return max(position, 0) * (n + 1) + (n - rank) if has_state else -1


def sender_rank(top: int, n: int) -> int:
    """The rank the MAX of :func:`sender_code` names (none has state: 0)."""
    return 0 if top < 0 else n - top % (n + 1)


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


class _SourceReader:
    """Reads records from the membership source through one client actor
    system (started at its first read; ``close`` ends it)."""

    def __init__(self, source: str | None) -> None:
        self.source = source
        self.system: ActorSystem | None = None

    async def read(self, version: int | None = None, timeout: float = 2.0) -> Membership | None:
        """The source's newest record, or exactly ``version``'s (None: none, or unreachable)."""
        if self.source is None:
            return None
        try:
            if self.system is None:
                self.system = await ActorSystem(client_name(), listen=False).start()
            # (bounded here too: reaching a task that is gone waits the connect deadline)
            record = await asyncio.wait_for(MembershipDoor.at(self.system, self.source).get(
                version, timeout=timeout), timeout)
        except (OpError, asyncio.TimeoutError):
            return None
        return None if record is None else Membership.from_wire(record)

    async def close(self) -> None:
        system, self.system = self.system, None
        if system is not None:
            await system.shutdown()


def _task_of(device: str) -> str:
    """``/job:J/replica:R/task:T/device:...`` -> ``/job:J/task:T``."""
    return re.sub(r"/replica:\d+", "", device.split("/device:", 1)[0])


def _lists(record: Membership | None, task: str) -> bool:
    return record is not None and (task in group_tasks(record) or record.has_left(task))


def wait_for_record(service: Any, task: str, timeout: float = JOIN_WAIT_S) -> Membership:
    """The membership record that lists ``task`` (live or left): the one its
    server holds, else the source's, asked until one does (``service``: the
    server's MembershipService). ElasticGroupError after ``timeout`` s.
    Blocking: it runs its own loop in a helper thread (called from a
    strategy's constructor, perhaps inside the user's event loop)."""
    deadline = time.monotonic() + timeout

    async def poll() -> Membership:
        async with MembershipReader() as reader:
            while True:
                record = service.record
                if not _lists(record, task) and service.source is not None:
                    try:   # (bounded here too: a source that is gone waits the connect deadline)
                        record = await asyncio.wait_for(reader.read(service.source, timeout=2.0),
                                                        2.0)
                    except (OpError, asyncio.TimeoutError):
                        record = None
                if _lists(record, task):
                    assert record is not None
                    return record
                if time.monotonic() > deadline:
                    raise ElasticGroupError(
                        f"{task}: no membership record lists this task after {timeout:g} s "
                        f"(held: version {service.version}; source "
                        f"{service.source or 'this task'}): is the elastic launch alive?")
                await asyncio.sleep(_POLL_S)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, poll()).result()


class Agreement:
    """One traced step's agreement: its feed (the version held) and fetch (the max)."""

    def __init__(self, controller: ElasticController, feed: Any, fetch: Any) -> None:
        self.controller = controller
        self.feed = feed
        self.fetch = fetch

    async def value(self) -> np.ndarray:
        return np.asarray(await self.controller.held_version(), np.int64)

    async def after_step(self, session: Any, agreed: Any) -> None:
        await self.controller.after_step(session, int(agreed))

    async def watched(self, step: Any) -> Any:
        return await self.controller.watched(step)

    async def recover(self, error: BaseException, session: Any) -> bool:
        return await self.controller.recover(error, session)


class ElasticController:
    """A strategy's elastic side: the group, its agreement and regroups."""

    def __init__(self, strategy: Any, server: Any, task: str, record: Membership) -> None:
        self.strategy = strategy
        self.server = server
        self.task = task
        self.version = record.version
        self.tasks = group_tasks(record)
        self.members = group_members(record)   # (task, generation): who the group is
        self.has_state = False   # this process's variables hold the group's values
        self.steps = 0
        self.iterator: ElasticIterator | None = None
        self.regrouped_at: float | None = None   # monotonic time of the last regroup

    def newcomers(self, record: Membership) -> list[str]:
        """The tasks of ``record``'s group that are not members of this one
        (a task restarted in place, its generation bumped, is one)."""
        return [t for t in group_tasks(record) if (t, record.generation(t)) not in self.members]

    # -- what a step feeds and does after ---------------------------------------------------
    async def held_version(self) -> int:
        """The version this member feeds to the agreement (see the module header)."""
        engine = self.server.collectives
        if engine.leader_task not in self.tasks:
            return max(self.server.membership.version, self.version)
        if engine.leader_task != self.task:
            return 0
        # the leader's group table changes on its server's loop: read it there
        return int(await self.server.on_loop(self.ready_version))

    def ready_version(self) -> int:
        """The highest version above the group's whose newcomers all joined its
        group's key (its records by exact version, from the history): versions
        are taken one at a time, so two quick grows regroup twice. Runs on the
        server's loop (the leader's table)."""
        service = self.server.membership
        leader = self.server.collectives.leader
        ready = self.version
        for v in sorted(service.history):
            record = service.at(v)
            if v <= self.version or record is None:
                continue
            newcomers = self.newcomers(record)
            if newcomers:
                key = elastic_group_key(self.strategy.base_group_key, v)
                if not set(newcomers) <= {_task_of(d) for d in leader.joined(key)}:
                    continue   # not at its first use yet: train on meanwhile
            ready = v
        return ready

    def restarted(self, record: Membership | None) -> list[str]:
        """The members of this group that ``record`` shows restarted in place."""
        if record is None or record.version <= self.version:
            return []
        return sorted(t for t, g in self.members
                      if t in group_tasks(record) and record.generation(t) != g)

    async def watched(self, step: Any) -> Any:
        """Run ``step`` (a step's coroutine). A member restarted in place under
        the same address (the collective group leader, say) can leave the
        step waiting for a group its new process never joins: when the
        record held shows a restart and the step still waits two heartbeats
        later, it is cancelled and ``AbortedError`` raised (``recover`` runs)."""
        task = asyncio.ensure_future(step)
        seen_at = None
        while True:
            try:
                done, _ = await asyncio.wait({task}, timeout=2 * _POLL_S)
            except BaseException:   # the caller was cancelled: so is its step
                task.cancel()
                raise
            if done:
                return task.result()
            restarted = self.restarted(self.server.membership.record)
            if not restarted:
                continue
            now = time.monotonic()
            seen_at = now if seen_at is None else seen_at
            if now - seen_at > 2 * (heartbeat_s() or 1.0):
                task.cancel()
                await asyncio.wait({task})
                if not task.cancelled() and task.exception() is None:
                    return task.result()   # it ended as it was cancelled
                raise AbortedError(f"{self.task}: the step waited on a group whose "
                                   f"{', '.join(restarted)} restarted in place; stopped")

    def use_iterator(self, iterator: ElasticIterator) -> None:
        self.iterator = iterator

    def agreement(self, graph: Any) -> Agreement:
        """The step's extra all-reduce MAX of the version held (built at trace time)."""
        s = self.strategy
        with graph.as_default(), graph.device(s.replica_devices[0]):
            feed = ops.placeholder(dtypes.int64, shape=[], name="membership_version")
            if s.num_workers == 1:
                fetch = ops.identity(feed)
            else:
                keys = s.collective_keys
                fetch = collective_ops.all_reduce(feed, s.num_workers, keys.group_key,
                                                  keys.instance_key(graph), merge_op="Max",
                                                  name="membership_agreement")
        return Agreement(self, feed, fetch)

    async def after_step(self, session: Any, agreed: int) -> None:
        """The step ran (once): count it, then switch to the agreed version."""
        self.steps += 1
        if self.iterator is not None:
            self.iterator.step_done()
        if agreed <= self.version:
            return
        record = await self.record_at(agreed)
        await self.regroup(session, record, barrier=True)

    async def record_at(self, version: int) -> Membership:
        """Record ``version`` exactly: held (the history), else asked of the
        source (bounded); ElasticGroupError when neither has it."""
        service = self.server.membership
        held = service.at(version)
        if held is not None:
            return held   # the usual case: no call
        deadline = time.monotonic() + 2 * (heartbeat_s() or 1.0) + rejoin_grace_s()
        reader = _SourceReader(service.source)
        try:
            while True:
                record = service.at(version) or await reader.read(version)
                if record is not None:
                    return record
                if time.monotonic() > deadline:
                    raise ElasticGroupError(
                        f"{self.task}: the group agreed on membership version {version}, which "
                        f"neither this task nor the source ({service.source or 'this task'}) "
                        "keeps")
                await asyncio.sleep(_POLL_S)
        finally:
            await reader.close()

    async def newest(self, reader: _SourceReader, timeout: float = 2.0) -> Membership | None:
        """The newest record held here or by the source (asked for ``timeout`` s)."""
        found = [self.server.membership.record, await reader.read(timeout=timeout)]
        return max((r for r in found if r is not None), key=lambda r: r.version, default=None)

    # -- regrouping -------------------------------------------------------------------------
    async def regroup(self, session: Any, record: Membership, barrier: bool) -> None:
        """Switch to ``record``'s group; a failed switch (a member gone, a
        newcomer that moved on) switches again to the newest record, within
        :data:`JOIN_WAIT_S`, without running any step again."""
        deadline = time.monotonic() + JOIN_WAIT_S
        reader = _SourceReader(self.server.membership.source)
        before = (list(self.tasks), set(self.members))   # a retry logs against these too
        try:
            while True:
                try:
                    await self.switch(session, record, barrier, before)
                    return
                except OpError as e:
                    if time.monotonic() > deadline:
                        raise
                    logger.warning("%s: regroup to membership version %d failed (%s: %s); "
                                   "regrouping to the newest record", self.task, record.version,
                                   type(e).__name__, e)
                barrier = False   # the leavers' barrier ran (or its group is gone)
                await asyncio.sleep(_POLL_S)
                newest = await self.newest(reader)
                if newest is not None and newest.version > record.version:
                    record = newest
        finally:
            await reader.close()

    async def switch(self, session: Any, record: Membership, barrier: bool,
                     before: tuple[list[str], set]) -> None:
        old, members = before   # the group the regroup left: its tasks, members
        leaving = [t for t in old if record.has_left(t)]
        if barrier and leaving and len(old) > 1:
            await self._barrier(session)   # every member finished the step: none waits on a leaver
        if record.has_left(self.task):
            self._leave()
        new = group_tasks(record)
        if self.task not in new:
            raise ElasticGroupError(f"{self.task} is not in membership version "
                                    f"{record.version} ({', '.join(new)})")
        started = time.monotonic()
        joined = [t for t in new if (t, record.generation(t)) not in members]
        self.adopt(record)
        gone = [t for t in old if t not in new]
        logger.info("%s: regroup to membership version %d after step %d: %d workers (%s)%s%s",
                    self.task, record.version, self.steps, len(new), ", ".join(new),
                    "; joining: " + ", ".join(joined) if joined else "",
                    "; gone: " + ", ".join(gone) if gone else "")
        await self.broadcast_state(session, self._containers(session.graph), REGROUP_TIMEOUT_S)
        self.regrouped_at = time.monotonic()
        logger.info("%s: regrouped to membership version %d: %d workers, this one %d, in "
                    "%.3f s", self.task, record.version, len(new), new.index(self.task),
                    self.regrouped_at - started)

    def adopt(self, record: Membership) -> None:
        """Become a member of ``record``'s group (keys, trace epoch): no collective."""
        new = group_tasks(record)
        self.version, self.tasks, self.members = record.version, new, group_members(record)
        self.strategy.regroup(new.index(self.task), len(new), record.version)

    async def _barrier(self, session: Any) -> None:
        s = self.strategy
        graph = session.graph
        keys = s.collective_keys
        with graph.as_default(), graph.device(s.replica_devices[0]):
            done = collective_ops.all_reduce(ops.constant(1, dtypes.int32), s.num_workers,
                                             keys.group_key, _BARRIER_KEY,
                                             timeout=REGROUP_TIMEOUT_S,
                                             name="elastic_leave_barrier")
        await session.run(done)

    def _leave(self) -> None:
        logger.info("%s left the cluster at step %d", self.task, self.steps)
        try:
            self.server.stop()   # its last messages go out before the process ends
        finally:
            raise SystemExit(0)

    def _containers(self, graph: Any) -> list[MirroredVariable]:
        out = []
        for c in graph.get_collection("mirrored_variables"):
            if isinstance(c, MirroredVariable) and variable_owner(c) is self.strategy \
                    and c not in out:
                out.append(c)
        return out

    async def first_use(self, session: Any, containers: list[MirroredVariable]) -> None:
        """First use: the regroup broadcast, as a newcomer meets it (a group
        with no member that has state: its rank 0 initializes first). Tried
        :data:`ATTEMPT_S` at a time; after :data:`MOVE_ON_TRIES` tries at one
        version a newer record that lists this task is taken instead (its
        group's key joined); ElasticGroupError after :data:`JOIN_WAIT_S`."""
        containers = [*containers, *(c for c in self._containers(session.graph)
                                     if c not in containers)]
        deadline = time.monotonic() + JOIN_WAIT_S
        reader = _SourceReader(self.server.membership.source)
        tries = 0
        try:
            while True:
                try:
                    await self.broadcast_state(session, containers, ATTEMPT_S)
                    return
                except (DeadlineExceededError, AbortedError, UnavailableError) as e:
                    if time.monotonic() > deadline:
                        key = elastic_group_key(self.strategy.base_group_key, self.version)
                        raise ElasticGroupError(
                            f"{self.task}: the group of membership version {self.version} "
                            f"(collective group key {key}) did not form within "
                            f"{JOIN_WAIT_S:g} s ({type(e).__name__}: {e})") from None
                tries += 1
                newest = await self.newest(reader)
                if tries >= MOVE_ON_TRIES and newest is not None \
                        and newest.version > self.version and self.task in group_tasks(newest):
                    logger.info("%s: membership version %d's group did not form; joining "
                                "version %d's", self.task, self.version, newest.version)
                    self.adopt(newest)
                    tries = 0
        finally:
            await reader.close()

    async def broadcast_state(self, session: Any, containers: list[MirroredVariable],
                              timeout: float) -> None:
        """The values of ``containers`` (in name order) and the input position,
        from the member with state furthest ahead (ties: the lowest rank; none:
        rank 0, initializing them) to the others; each bounded by ``timeout`` s."""
        s = self.strategy
        n, rank = s.num_workers, s.worker_index
        if n == 1:
            if not self.has_state:
                await session.run([c.initializer for c in containers])
            self.has_state = True
            return
        graph = session.graph
        gk = s.collective_keys.group_key
        instance = itertools.count(_BROADCAST_KEYS)
        ordered = sorted(containers, key=lambda c: c.values[0].op.name)
        at = -1 if self.iterator is None else self.iterator.position
        with graph.as_default(), graph.device(s.replica_devices[0]):
            code = collective_ops.all_reduce(   # who sends (see sender_code)
                ops.constant(sender_code(self.has_state, at, rank, n), dtypes.int64), n, gk,
                next(instance), merge_op="Max", timeout=timeout, name="elastic_broadcaster")
        top = int(await session.run(code))
        src = sender_rank(top, n)
        if top < 0 and rank == src:
            await session.run([c.initializer for c in ordered])
        sending = rank == src
        todo: list[Any] = []
        with graph.as_default(), graph.device(s.replica_devices[0]):
            for c in ordered:
                key = next(instance)
                if sending:
                    todo.append(collective_ops.broadcast_send(
                        c.values[0].value(), c.shape, c.dtype, n, gk, key,
                        timeout=REGROUP_TIMEOUT_S))
                else:
                    got = collective_ops.broadcast_recv(c.shape, c.dtype, n, gk, key,
                                                        timeout=REGROUP_TIMEOUT_S)
                    todo += [comp.assign(got, read_value=False) for comp in c.values]
            key = next(instance)
            if sending:
                position = collective_ops.broadcast_send(
                    ops.constant(at, dtypes.int64), [], dtypes.int64, n, gk, key,
                    timeout=REGROUP_TIMEOUT_S)
            else:
                position = collective_ops.broadcast_recv([], dtypes.int64, n, gk, key,
                                                         timeout=REGROUP_TIMEOUT_S)
        got_position, _ = await session.run([position, todo])
        self.has_state = True
        if not sending and self.iterator is not None and int(got_position) >= 0:
            self.iterator.seek(int(got_position))

    # -- a lost member ----------------------------------------------------------------------
    async def recover(self, error: BaseException, session: Any) -> bool:
        """After a failed step: True once regrouped without the member that
        died, or with its restarted process (the caller runs the same step
        again), False to raise ``error``. The record taken is the newest once
        it stopped changing for one poll, within two heartbeats plus the
        collective rejoin grace."""
        if not isinstance(error, (UnavailableError, AbortedError, DeadlineExceededError)):
            return False
        deadline = time.monotonic() + 2 * (heartbeat_s() or 1.0) + rejoin_grace_s()
        reader = _SourceReader(self.server.membership.source)
        record = seen = None
        try:   # (the launcher pushes a record to every task: the source may be the one gone)
            while True:
                newest = await self.newest(reader, timeout=0.5)
                if newest is not None and newest.version > self.version and (
                        not self.members <= group_members(newest)):   # one dropped or restarted
                    if seen is not None and seen.version == newest.version:
                        record = newest   # it stopped changing for one poll
                        break
                    seen = newest
                # past the deadline: only a record seen may still be confirmed, briefly
                now = time.monotonic()
                if now > deadline and (seen is None or now > deadline + 1.0):
                    break
                await asyncio.sleep(_POLL_S)
        finally:
            await reader.close()
        if record is None:
            return False
        changed = sorted(t for t, g in self.members if (t, g) not in group_members(record))
        logger.warning("%s: the step failed (%s: %s); membership version %d drops or restarted "
                       "%s: regrouping and running the step again", self.task,
                       type(error).__name__, error, record.version, ", ".join(changed))
        await self.regroup(session, record, barrier=False)
        if self.iterator is not None:
            self.iterator.reslice()
        return True
