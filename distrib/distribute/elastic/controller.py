"""Elastic ``MultiWorkerMirroredStrategy``: the group of workers changes at a
step boundary while training runs, no worker restarts, no step is repeated.

Elastic mode is an elastic launch (``python -m distrib.launch --workers
MIN:MAX``, which sets ``DISTRIB_ELASTIC=1``): this task's server holds the
launch's membership record (``distrib.runtime.chief.membership``). Anywhere
else the strategy is exactly as before: no extra op, no extra collective.
This module is the controller a strategy holds; the group and its
records are ``group.py``'s, a regroup's collectives ``broadcast.py``'s.

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
  leader's table is read on its server's loop (``Server.collective_joined``). A group
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
  (``datasets``: the global batch, or the step of the per-worker
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
  (``CollectiveAllReduce(wait_all=True)``) and for every other collective
  of the step that does not itself follow a write, the membership agreement
  included (``auto_deps.writes_after_collectives``, applied to each elastic
  trace), so a failed step updated nothing and its retry is exact (a member
  killed after the gradients' all-reduce but before the agreement once left
  the survivor's global step one ahead); a non-elastic run keeps the overlap.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from distrib.distribute.core.distribute_lib import variable_owner
from distrib.distribute.core.values import MirroredVariable
from distrib.distribute.elastic import group
from distrib.distribute.elastic.broadcast import broadcast_state, leave_barrier
from distrib.distribute.elastic.group import (
    ATTEMPT_S,
    JOIN_WAIT_S,
    MOVE_ON_TRIES,
    POLL_S,
    ElasticGroupError,
    SourceReader,
    elastic_group_key,
    group_members,
    group_tasks,
    task_of,
)
from distrib.errors import AbortedError, DeadlineExceededError, OpError, UnavailableError
from distrib.framework import dtypes
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.chief.membership import Membership
from distrib.runtime.collective.group import rejoin_grace_s

if TYPE_CHECKING:
    from distrib.distribute.elastic.datasets import ElasticIterator

logger = logging.getLogger(__name__)

__all__ = ["ElasticController", "Agreement"]

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
        leader = self.server.collective_leader
        if leader not in self.tasks:
            return max(self.server.membership_version, self.version)
        if leader != self.task:
            return 0
        return await self.ready_version()

    async def ready_version(self) -> int:
        """The highest version above the group's whose newcomers all joined its
        group's key (its records by exact version, from the history): versions
        are taken one at a time, so two quick grows regroup twice. On the
        group leader: its table of who joined is read on its server's loop."""
        ready = self.version
        for record in self.server.membership_records_after(self.version):
            newcomers = self.newcomers(record)
            if newcomers:
                key = elastic_group_key(self.strategy.base_group_key, record.version)
                joined = await self.server.collective_joined(key)
                if not set(newcomers) <= {task_of(d) for d in joined}:
                    continue   # not at its first use yet: train on meanwhile
            ready = record.version
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
                done, _ = await asyncio.wait({task}, timeout=2 * POLL_S)
            except BaseException:   # the caller was cancelled: so is its step
                task.cancel()
                raise
            if done:
                return task.result()
            restarted = self.restarted(self.server.membership_record())
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
        held = self.server.membership_record(version)
        if held is not None:
            return held   # the usual case: no call
        deadline = time.monotonic() + 2 * (heartbeat_s() or 1.0) + rejoin_grace_s()
        source = self.server.membership_source
        reader = SourceReader(source)
        try:
            while True:
                record = self.server.membership_record(version) or await reader.read(version)
                if record is not None:
                    return record
                if time.monotonic() > deadline:
                    raise ElasticGroupError(
                        f"{self.task}: the group agreed on membership version {version}, which "
                        f"neither this task nor the source ({source or 'this task'}) keeps")
                await asyncio.sleep(POLL_S)
        finally:
            await reader.close()

    async def newest(self, reader: SourceReader, timeout: float = 2.0) -> Membership | None:
        """The newest record held here or by the source (asked for ``timeout`` s)."""
        found = [self.server.membership_record(), await reader.read(timeout=timeout)]
        return max((r for r in found if r is not None), key=lambda r: r.version, default=None)

    # -- regrouping -------------------------------------------------------------------------
    async def regroup(self, session: Any, record: Membership, barrier: bool) -> None:
        """Switch to ``record``'s group; a failed switch (a member gone, a
        newcomer that moved on) switches again to the newest record, within
        :data:`JOIN_WAIT_S`, without running any step again."""
        deadline = time.monotonic() + JOIN_WAIT_S
        reader = SourceReader(self.server.membership_source)
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
                await asyncio.sleep(POLL_S)
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
            await leave_barrier(self.strategy, session)   # every member finished the step: none waits on a leaver
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
        await self.broadcast_state(session, self._containers(session.graph),
                                   group.REGROUP_TIMEOUT_S)
        self.regrouped_at = time.monotonic()
        logger.info("%s: regrouped to membership version %d: %d workers, this one %d, in "
                    "%.3f s", self.task, record.version, len(new), new.index(self.task),
                    self.regrouped_at - started)

    def adopt(self, record: Membership) -> None:
        """Become a member of ``record``'s group (keys, trace epoch): no collective."""
        new = group_tasks(record)
        self.version, self.tasks, self.members = record.version, new, group_members(record)
        self.strategy.regroup(new.index(self.task), len(new), record.version)

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
        reader = SourceReader(self.server.membership_source)
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
        """This member's side of a regroup's broadcast (``elastic.broadcast``):
        after it, this process's variables hold the group's values."""
        await broadcast_state(self.strategy, session, containers, self.has_state, self.iterator,
                              timeout)
        self.has_state = True

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
        reader = SourceReader(self.server.membership_source)
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
                await asyncio.sleep(POLL_S)
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
