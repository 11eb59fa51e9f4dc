"""Which worker is chief, as a Supervisor sees it: elected, or fixed.

In a training cluster with a ps job and two or more workers, the chief is
elected (``distrib.runtime.chief.election``): the arbiter is the first ps
task, the preferred chief is the worker whose Supervisor says
``is_chief=True``, and the role moves to another live worker when the chief
dies or stops answering. So is it in an elastic launch's cluster with a ps
job (``DISTRIB_ELASTIC=1``, which the launcher sets), even while it has one
worker: workers may join later, and the first one must then hold a lease
that can move, or a worker that joined could never become chief once the
first one is gone. Anywhere else (one worker of a fixed cluster, no ps
job, an in-process server) there is nothing to elect and the role is what
the script said, as in TensorFlow.

``ChiefRole`` hides the difference from the Supervisor: ``is_chief`` is live
either way, ``run_options()`` gives the fencing term that a chief-only write
carries (see ``distrib.runtime.chief.fencing``), and ``on_change(is_chief)`` runs
on every change of role.

It also watches the task's place in the cluster's membership (an elastic
launch, ``distrib.runtime.chief.membership``): every heartbeat it reads the
record its own server holds, and once the task is among those that left,
``on_leave()`` runs once (the Supervisor's ``request_stop``: the training
loop ends after its current step).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Awaitable, Callable

from distrib.client.session import parse_target
from distrib.errors import OpError
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import MembershipDoor
from distrib.runtime.chief.election import ChiefElection
from distrib.runtime.chief.lease import lease_seconds
from distrib.runtime.step.doors import MasterDoor, WorkerDoor
from distrib.settings import ELASTIC

logger = logging.getLogger(__name__)

__all__ = ["ChiefRole", "WORKER_JOBS"]

# the jobs whose tasks may be chief (TF's "chief" job, and "worker")
WORKER_JOBS = ("chief", "worker")


class ChiefRole:
    """The chief role of one Supervisor's task."""

    def __init__(self, preferred: bool,
                 on_change: Callable[[bool], Awaitable[None] | None] | None = None,
                 on_leave: Callable[[], None] | None = None) -> None:
        self.preferred = bool(preferred)
        self.on_change = on_change
        self.on_leave = on_leave
        self.left = False   # this task was removed from the cluster's membership
        self._watch: asyncio.Task | None = None
        self.election: ChiefElection | None = None
        self.task: str | None = None
        self.ps: dict[str, str] = {}   # ps task -> address
        self._system: ActorSystem | None = None

    @property
    def is_chief(self) -> bool:
        return self.election.is_chief if self.election is not None else self.preferred

    @property
    def term(self) -> int | None:
        """The current chief term (None where the role is fixed)."""
        return self.election.term if self.election is not None else None

    def run_options(self) -> dict[str, Any] | None:
        """Run options of a chief-only write: it carries the chief's term, so
        the ps tasks refuse it once a newer chief was elected."""
        term = self.term
        return None if term is None else {"fencing_term": term}

    async def start(self, target: str, decide_within: float | None = None) -> bool:
        """Learn the cluster from the master at ``target`` and, where there is
        something to elect, campaign. Returns ``is_chief`` once the role is
        known (or ``decide_within`` seconds passed, default two leases)."""
        if self._system is not None:
            return self.is_chief
        self._system = await client_systems().acquire()
        address = parse_target(target)
        info = await MasterDoor.at(self._system, address).cluster_info(timeout=30.0)
        self.task = info["task"]
        self._watch = asyncio.ensure_future(self._watch_membership(self._system, address))
        cluster: dict[str, dict[str, str]] = info["cluster"]
        ps = cluster.get("ps") or {}
        self.ps = {f"/job:ps/task:{i}": a for i, a in ps.items()}
        workers = sum(len(cluster.get(j) or {}) for j in WORKER_JOBS)
        job = self.task.split("/")[1].split(":", 1)[1]
        if not ps or job not in WORKER_JOBS or (workers < 2 and not ELASTIC.get()):
            return self.is_chief   # nothing to elect: TF's fixed role
        first = min(ps, key=int)
        self.election = ChiefElection(
            self._system, self.task, ps[first], {f"/job:ps/task:{i}": a for i, a in ps.items()},
            self.preferred, on_change=self._changed)
        self.election.start()
        if not self.preferred:
            return False   # the first chief is the preferred one; the role may come later
        wait = decide_within if decide_within is not None else 2 * lease_seconds()
        return await self.election.wait_decided(wait)

    async def ps_incarnations(self) -> dict[str, int | None]:
        """Each ps task's incarnation now (None: it does not answer)."""
        assert self._system is not None
        async def one(address: str) -> int | None:
            try:
                status = await WorkerDoor.at(self._system, address).get_status(timeout=5.0)
                return int(status["incarnation"])
            except OpError:
                return None
        found = await asyncio.gather(*(one(a) for a in self.ps.values()))
        return dict(zip(self.ps, found))

    async def fence(self, task: str) -> None:
        """Announce the chief's term to ``task`` (a restarted ps has seen none)."""
        if self.term is not None and self._system is not None:
            await WorkerDoor.at(self._system, self.ps[task]).fence(self.term, timeout=5.0)

    async def stop(self) -> None:
        """End the campaign (a chief resigns: a successor takes over at once)."""
        election, self.election = self.election, None
        if election is not None:
            await election.stop()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        system, self._system = self._system, None
        if system is not None:
            await client_systems().release(system)

    async def _changed(self, chief: bool, term: int) -> None:
        if self.on_change is not None:
            res = self.on_change(chief)
            if inspect.isawaitable(res):
                await res

    async def _watch_membership(self, system: ActorSystem, address: str) -> None:
        """Every heartbeat, this task's server's membership record: once it
        lists this task among those that left, ``on_leave()`` (once)."""
        door = MembershipDoor.at(system, address)
        every = heartbeat_s() or 1.0
        while True:
            try:
                record = await door.get(timeout=max(1.0, 2 * every))
            except OpError:
                record = None   # the server is busy or going: asked again next time
            left = record.get("left") if isinstance(record, dict) else None
            if isinstance(left, list) and self.task in left:
                self.left = True
                logger.info("%s left the cluster (membership version %s): stopping after "
                            "the current step", self.task, record.get("version"))
                if self.on_leave is not None:
                    self.on_leave()
                return
            await asyncio.sleep(every)
