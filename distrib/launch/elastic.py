"""The elastic launcher: workers that join and leave a running job.

``python -m distrib.launch --ps P --workers MIN:MAX --logdir DIR -- COMMAND``
starts MIN workers; ``python -m distrib.launch scale --logdir DIR --workers N``
asks the launcher running with that ``--logdir`` to grow or shrink to N.

The launcher owns the membership (``distrib.runtime.chief.membership``): a
versioned record of the live tasks and of those that left. How a change goes:

- **The control socket.** The launcher listens on the unix socket
  ``DIR/launch.sock`` (mode 0600), where ``scale`` sends one JSON line and
  gets one back (:mod:`distrib.launch.control`, both ends); a request
  comes to :meth:`Elastic.scale`.
- **Growing.** Each new worker takes a fresh index (never one a removed
  worker had: a step of it may still be in flight) on a free port. The new
  record goes to the source task (ps 0) first, and only then does the task
  start, with a ``TF_CONFIG`` that lists every worker index so far (one
  that left keeps its last address: nothing listens there), so no worker's
  list has gaps. The Supervisor makes it a non-chief that waits until the
  variables are ready and trains from the live ones.
- **Shrinking.** The highest-index workers that are not chief (the lease's
  holder, and worker 0, the preferred one) go into the record's ``left``
  list; when the source cannot say who holds the lease (it does not answer,
  or an election is under way) the shrink is refused. Each learns it through
  its server's record (heartbeat, then fetch)
  and its Supervisor stops after the current step; its exit, whatever its
  code, is a leave, never a failure, and it is not restarted. One still
  running ``stop_timeout`` seconds after the leave is terminated (SIGTERM,
  then SIGKILL another ``stop_timeout`` later).
- **A worker that dies** (killed, crashed: any exit but 0, a leave, or the
  preemption code 42) while more than MIN workers are live is not restarted:
  it goes into ``left`` at once (:meth:`Elastic.lost`, called by the
  launcher as soon as it sees the exit, and published as a scale-down is,
  then pushed to every running task too: survivors waiting on the dead one
  learn it without waiting for a heartbeat),
  and the job goes on smaller; a later ``scale`` may grow it again, with a
  fresh index. The chief-lease holder may go this way too: its lease runs
  out within three heartbeats and the arbiter (ps 0) grants it to a
  survivor. At MIN live workers it is restarted in place, as a fixed
  launch's task is; so is the source of the membership when it is a worker
  (no ps job, no chief): the record lives there, and a worker that serves it
  cannot leave. The launcher's line says which happened and why.
- **A restart in place is a new generation.** Whenever the launcher
  restarts a worker (or chief) task in place (at MIN, the source, a
  preemption exit 42), the restarted process is a fresh one with no state
  under the old name: :meth:`Elastic.restarted` publishes a new version
  whose ``generations`` count that task one more, before the new process
  starts, to the source first and at once to every running task (an
  elastic MultiWorkerMirroredStrategy group takes it for a newcomer, and
  its survivors' recovery has a newer record to go by). When the restarted
  task is the source itself, the record reaches its new process by the
  keeper below, within about half a second of it listening.
- **A change that fails part way** (cluster.json cannot be written) is
  rolled back: no index of a worker that never started stays in the cluster.
- **Everyone keeps up.** Every half second the launcher asks the source for
  its version and pushes the record again when the source's is older (the
  first push, before the source listens; a restarted ps or source worker,
  which lost it). While the source does not answer it asks again every
  tenth of a second, each try giving up after a second (a client of its
  own with that connect deadline, so the transport's backoff between
  attempts stays short): a restarted source holds the record within about
  half a second of listening.
- ``DIR/cluster.json`` is always the live cluster (written anew, atomically,
  on each change): ``python -m distrib.status --cluster DIR/cluster.json``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import tempfile
from typing import TYPE_CHECKING

from distrib.cluster import ClusterSpec, task_string
from distrib.errors import OpError
from distrib.launch.control import ControlSocket, ScaleRefusedError
from distrib.launch.tasks import LOOPBACK, free_ports
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem, default_transport_config
from distrib.runtime.chief.doors import MembershipDoor
from distrib.runtime.chief.membership import WORKER_JOBS, Membership, membership_source, push_membership
from distrib.server.doors import ServerDoor

if TYPE_CHECKING:
    from distrib.launch.launcher import Launcher

logger = logging.getLogger(__name__)

__all__ = ["CLUSTER_FILE", "Elastic", "parse_workers", "write_cluster"]

CLUSTER_FILE = "cluster.json"
_KEEP_EVERY_S = 0.5
_KEEP_RETRY_S = 0.1      # the keeper's pause while the source does not answer
_KEEP_CONNECT_S = 1.0    # the keeper's connect deadline: attempts stay <= ~0.5 s apart
_PUSH_TIMEOUT_S = 5.0
_TELL_WAIT_S = 1.0       # a restart in place waits this long at most for its pushes to everyone


def parse_workers(text: str) -> tuple[int, int | None]:
    """``"M"`` -> (M, None): a fixed job; ``"MIN:MAX"`` -> (MIN, MAX): elastic,
    with 1 <= MIN <= MAX. A ValueError says what is wrong."""
    text = str(text).strip()
    low, sep, high = text.partition(":")
    try:
        lo = int(low)
        hi = int(high) if sep else None
    except ValueError:
        raise ValueError(f"must be a count M or a range MIN:MAX, not {text!r}") from None
    if lo < 0 or (hi is not None and not 1 <= lo <= hi):
        raise ValueError(f"must be a count >= 0 or a range MIN:MAX with 1 <= MIN <= MAX, "
                         f"not {text!r}")
    return lo, hi


def write_cluster(path: str, cluster: ClusterSpec) -> None:
    """``cluster`` to ``path`` as JSON, atomically (a reader sees one or the other)."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".cluster-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cluster.to_json() + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Elastic:
    """A launcher's elastic side: the membership it owns, its control socket,
    and the scale changes. ``launcher.cluster`` is the cluster every new task
    is told (every worker index so far); ``live()`` the cluster of the record."""

    def __init__(self, launcher: Launcher, min_workers: int, max_workers: int, logdir: str) -> None:
        if not 1 <= min_workers <= max_workers:
            raise ValueError(f"--workers MIN:MAX needs 1 <= MIN <= MAX, got {min_workers}:{max_workers}")
        self.launcher = launcher
        self.min, self.max = min_workers, max_workers
        self.logdir = logdir
        self._control = ControlSocket(logdir, self.scale)
        self.path = self._control.path   # the control socket (ValueError when too long)
        self.version = 0
        self.left: list[str] = []
        self.generations: dict[str, int] = {}   # task -> its restarts in place (absent: 0)
        self.changed_at: float | None = None   # loop time of the last scale request
        self._lock = asyncio.Lock()
        self._system: ActorSystem | None = None
        self._keeper: asyncio.Task | None = None
        self._keeper_system: ActorSystem | None = None   # the keeper's: a short connect deadline
        self._telling: set[asyncio.Task] = set()   # a loss's pushes to every task
        source = membership_source(launcher.cluster)
        self.source_task = source   # (job, index) of the task that serves the record
        self.source = None if source is None else launcher.cluster.task_address(*source)

    # -- the record --------------------------------------------------------
    def live(self) -> ClusterSpec:
        """The live tasks: the launcher's cluster without those that left."""
        full = self.launcher.cluster
        return ClusterSpec({job: {i: full.task_address(job, i) for i in full.task_indices(job)
                                  if task_string(job, i) not in self.left}
                            for job in full.jobs})

    def record(self) -> Membership:
        return Membership(self.version, self.live(), tuple(self.left),
                          tuple(sorted(self.generations.items())))

    def workers(self) -> list[int]:
        """The live worker indices."""
        live = self.live()
        return live.task_indices("worker") if "worker" in live.jobs else []

    async def _publish(self, *, live_changed: bool = True, source_down: bool = False) -> None:
        """A new version: to cluster.json, and to the source now (the keeper
        retries). With heartbeats off (``DISTRIB_HEARTBEAT_S=0``) nothing
        would carry it on: every running task of the launch is given it directly.
        cluster.json is written first: when that fails, nothing was published.
        ``live_changed=False`` (a restart in place: the live tasks are the
        same) leaves cluster.json as it is; ``source_down`` (the source is
        the task being restarted) leaves the source to the keeper."""
        if live_changed:
            write_cluster(os.path.join(self.logdir, CLUSTER_FILE), self.live())
        self.version += 1
        if not source_down:
            await self._push()
        if heartbeat_s() == 0 and self._system is not None:
            record = self.record()
            await asyncio.gather(*(self._push_to(a, record) for a in self._others()))

    async def _push(self) -> bool:
        if self.source is None or self._system is None:
            return False
        return await self._push_to(self.source, self.record())

    async def _push_to(self, address: str, record: Membership,
                       system: ActorSystem | None = None) -> bool:
        """Give ``record`` to the task at ``address``; False (logged) if it did not answer:
        it learns the version from a heartbeat, as always."""
        try:
            await push_membership(system or self._system, address, record,
                                  timeout=_PUSH_TIMEOUT_S)
            return True
        except OpError as e:
            logger.debug("membership version %d not pushed to %s: %s", record.version,
                         address, e)
            return False

    def _others(self) -> list[str]:
        """The addresses of the launch's running tasks but the source's."""
        full = self.launcher.cluster
        return [full.task_address(t.job, t.index) for t in self.launcher.tasks
                if t.running and full.task_address(t.job, t.index) != self.source]

    def _tell_everyone(self) -> list[asyncio.Task]:
        """The record, pushed now to every running task but the source (which
        has it), in the background: after a loss the survivors may be waiting
        on the dead worker (a collective), and need not wait for a heartbeat
        to carry the new version. A task that does not answer learns it from
        its heartbeat, as always. The pushes, for a caller that waits on them."""
        if self._system is None:
            return []
        record = self.record()
        pushes = []
        for address in self._others():
            task = asyncio.ensure_future(self._push_to(address, record))
            self._telling.add(task)
            task.add_done_callback(self._telling.discard)
            pushes.append(task)
        return pushes

    async def _keep(self) -> None:
        """Every half second: the source's version, and the record pushed
        again when it is older. A try that cannot reach the source gives up
        after a second (the keeper's own client) and the next follows a
        tenth of a second later: a source that restarts (a ps, or the worker
        that serves the record) holds the record within about half a second
        of listening, not after the transport's longer connect backoff."""
        system = self._keeper_system
        door = None if self.source is None or system is None else \
            MembershipDoor.at(system, self.source)
        while door is not None:
            pause = _KEEP_EVERY_S
            try:
                held = await door.get(timeout=_PUSH_TIMEOUT_S)
                if held is None or held.get("version", 0) < self.version:
                    await door.update(self.record().to_wire(), timeout=_PUSH_TIMEOUT_S)
            except OpError:
                pause = _KEEP_RETRY_S   # not up yet, or restarting: asked again soon
            await asyncio.sleep(pause)

    # -- lifecycle -----------------------------------------------------------
    async def open(self) -> None:
        """Before any task starts: the control socket (OSError when another
        launcher answers there), cluster.json, version 1."""
        await self._control.open()
        self._system = await client_systems().acquire()
        if self.source is not None:
            config = dataclasses.replace(default_transport_config(),
                                         connect_timeout_s=_KEEP_CONNECT_S)
            self._keeper_system = await client_systems().acquire(config)
        self.version = 1
        write_cluster(os.path.join(self.logdir, CLUSTER_FILE), self.live())
        self._keeper = asyncio.ensure_future(self._keep())

    async def close(self) -> None:
        telling, self._telling = list(self._telling), set()
        for task in telling:
            task.cancel()
        await asyncio.gather(*telling, return_exceptions=True)
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        self._control.close()
        systems = (self._system, self._keeper_system)
        self._system = self._keeper_system = None
        for system in systems:
            if system is not None:
                await client_systems().release(system)

    # -- a change ------------------------------------------------------------
    async def scale(self, n: int) -> str:
        """Grow or shrink to ``n`` live workers; the message, once under way."""
        if not self.min <= n <= self.max:
            raise ScaleRefusedError(f"--workers {n} is outside this launch's {self.min}:{self.max}")
        async with self._lock:
            if self.launcher.stopping:
                raise ScaleRefusedError("the launcher is stopping")
            self.changed_at = asyncio.get_running_loop().time()
            have = self.workers()
            if n == len(have):
                return f"already {n} workers (membership version {self.version})"
            if n > len(have):
                return await self._grow(n - len(have))
            return await self._shrink(len(have) - n, have)

    async def _grow(self, count: int) -> str:
        full = self.launcher.cluster
        taken = set(full.task_indices("worker")) if "worker" in full.jobs else set()
        start = max(taken, default=-1) + 1
        ports = free_ports(count)
        jobs = {job: {i: full.task_address(job, i) for i in full.task_indices(job)}
                for job in full.jobs}
        new = list(range(start, start + count))
        jobs.setdefault("worker", {}).update(
            {i: f"{LOOPBACK}:{port}" for i, port in zip(new, ports)})
        before, self.launcher.cluster = self.launcher.cluster, ClusterSpec(jobs)
        try:
            tasks = [self.launcher.new_task("worker", i) for i in new]
        except ValueError as e:   # e.g. --gpus_per_task: no GPUs left for it
            self.launcher.cluster = before
            raise ScaleRefusedError(f"cannot start worker:{new[0]}: {e}") from None
        try:
            await self._publish()
        except BaseException:   # never started: no index of theirs stays in the cluster
            for t in tasks:
                t.close()
            self._roll_back(before, list(self.left))
            raise
        for t in tasks:
            self.launcher.add_task(t)
        names = ", ".join(f"worker:{i}" for i in new)
        self.launcher.say(f"scale: {names} joining (membership version {self.version}, "
                          f"{len(self.workers())} workers)")
        return f"starting {names}; membership version {self.version}"

    async def _shrink(self, count: int, have: list[int]) -> str:
        keep = {0} | await self._chief_workers()
        leaving = [i for i in sorted(have, reverse=True) if i not in keep][:count]
        if len(leaving) < count:
            raise ScaleRefusedError(f"only {len(leaving)} worker(s) may leave: the chief stays")
        before = list(self.left)
        self.left.extend(task_string("worker", i) for i in leaving)
        try:
            await self._publish()
        except BaseException:   # none of them told to leave: they stay
            self._roll_back(self.launcher.cluster, before)
            raise
        names = ", ".join(f"worker:{i}" for i in leaving)
        for i in leaving:
            self.launcher.leave_task("worker", i)
        self.launcher.say(f"scale: {names} leaving after the current step (membership "
                          f"version {self.version}, {len(self.workers())} workers)")
        return f"{names} leaving after the current step; membership version {self.version}"

    async def lost(self, job: str, index: int) -> str | None:
        """Task ``index`` of ``job`` died (not a leave, not a preemption).
        While more than MIN workers are live it leaves the membership now: a
        new version with it in ``left``, cluster.json rewritten and the record
        pushed to the source (as a scale-down is); returns None, and the
        launcher does not restart it. Otherwise returns why it is to be
        restarted in place instead (at MIN live workers; the source of the
        membership; not a worker; the launch stopping; the record not written)."""
        if job != "worker":
            return f"a {job} task is not elastic"
        async with self._lock:
            if self.launcher.stopping:
                return "the launcher is stopping"
            have = self.workers()
            if index not in have:
                return None if task_string(job, index) in self.left else \
                    f"worker:{index} is not in the membership"
            if self.source_task == (job, index):
                return ("it serves the cluster's membership (the source, with no ps job): "
                        "the record would go with it")
            if len(have) <= self.min:
                return f"{len(have)} live worker(s), this launch's MIN"
            before = list(self.left)
            self.left.append(task_string(job, index))
            try:
                await self._publish()
            except Exception as e:   # noqa: BLE001 - a removal not published: restarted instead
                self._roll_back(self.launcher.cluster, before)
                return f"the membership could not be changed ({type(e).__name__}: {e})"
            if heartbeat_s() != 0:   # (with heartbeats off, _publish told everyone)
                self._tell_everyone()
            return None

    async def restarted(self, job: str, index: int) -> int | None:
        """Task ``index`` of ``job`` is about to be restarted in place (at MIN,
        the source, a preemption): its new process has no state, so the
        record counts it a new generation. A new version with the task's
        generation one more, published before the process starts: to the
        source first (unless it is the source: the keeper gives it to the
        new process once it listens), then to every running task, waited on
        for up to :data:`_TELL_WAIT_S` (a task that listens answers in
        milliseconds; one still starting is not waited for: its heartbeat
        brings it the record). The new version; None when nothing was
        published (not a training task, not in the membership, stopping)."""
        if job not in WORKER_JOBS:
            return None
        task = task_string(job, index)
        async with self._lock:
            live = self.live()
            if self.launcher.stopping or job not in live.jobs \
                    or index not in live.task_indices(job):
                return None
            self.generations[task] = self.generations.get(task, 0) + 1
            try:
                await self._publish(live_changed=False, source_down=self.source_task == (job, index))
            except Exception as e:   # noqa: BLE001 - restarted all the same, under the old count
                logger.warning("the restart of %s was not published: %s", task, e)
                count = self.generations.pop(task) - 1
                if count:
                    self.generations[task] = count
                self._roll_back(self.launcher.cluster, list(self.left))
                return None
            if heartbeat_s() != 0:   # (with heartbeats off, _publish told everyone)
                pushes = self._tell_everyone()
                if pushes:
                    await asyncio.wait(pushes, timeout=_TELL_WAIT_S)
            return self.version

    def _roll_back(self, cluster: ClusterSpec, left: list[str]) -> None:
        """A change that failed part way: the cluster and the left list as they
        were, under a newer version (the source may hold the failed one: the
        keeper then pushes this), and cluster.json rewritten if it can be."""
        self.launcher.cluster, self.left = cluster, left
        self.version += 1
        try:
            write_cluster(os.path.join(self.logdir, CLUSTER_FILE), self.live())
        except OSError as e:
            logger.warning("could not rewrite %s after a failed scale: %s", CLUSTER_FILE, e)

    async def _chief_workers(self) -> set[int]:
        """The worker index that holds the chief lease now (on the source), if
        any. ScaleRefusedError when that is unknown: the source does not
        answer, or the lease is between holders (the next may be any worker)."""
        if self.source is None or self._system is None:
            return set()   # no source: no ps, nothing elected; worker 0 is the chief
        try:
            status = await ServerDoor.at(self._system, self.source).status(timeout=_PUSH_TIMEOUT_S)
        except OpError as e:
            raise ScaleRefusedError(f"cannot tell which worker is chief ({self.source} does "
                                    f"not answer: {type(e).__name__}); try again") from None
        lease = status.get("lease") or {}
        holder = lease.get("holder") or ""
        if not holder and lease.get("term"):
            raise ScaleRefusedError("the chief lease is between holders (an election is under "
                                    "way); try again")
        prefix = "/job:worker/task:"
        return {int(holder[len(prefix):])} if holder.startswith(prefix) else set()
