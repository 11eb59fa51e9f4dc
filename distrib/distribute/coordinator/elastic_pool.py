"""The coordinator's pool under an elastic launch: workers join and leave it
while training runs (``ElasticPool``, a base of ``ClusterCoordinator``).

Under an elastic launch (``--workers MIN:MAX``, which sets
``DISTRIB_ELASTIC=1``; the first ps holds the cluster's membership record,
``distrib.runtime.chief.membership``) the coordinator reads that record
about every heartbeat (one call, bounded by a timeout; an unanswered read
is tried at the next). Without ``DISTRIB_ELASTIC`` it reads nothing. A
worker that appears in it joins the pool: the next worker index (indices
are never reused), the chief's master told its address (awaited, bounded,
before the worker's first closure), its per-worker datasets and values
made, and its slots take closures once it answers; all or nothing: an
error meanwhile (``dataset_fn``, ``value_fn``, the chief's server) is
logged, leaves the pool as it was, and is raised as an error of fn is;
a newer record naming the worker tries it again. A worker
named in its ``left`` list takes no new closure: the ones it holds finish
(or, if it fails, are put back), then its slots end and the coordinator
tells its server that it is done with it (``request_stop``: its
``join()`` returns and the task exits, a leave). ``num_workers`` and
``worker_devices`` are the live pool. A worker that died and then left
is dropped the same way (its closures were put back when it failed).

The pool itself (the workers by index, their slots, the queue) is
``ClusterCoordinator``'s, in ``cluster_coordinator.py``; this base holds
only what changes it when the record does.
"""
from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Any

from distrib.client.session import parse_target
from distrib.errors import DeadlineExceededError, OpError
from distrib.runtime.actors.failure_detector import heartbeat_s
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.chief.doors import MembershipDoor
from distrib.runtime.chief.membership import Membership, membership_source
from distrib.server.doors import ServerDoor

logger = logging.getLogger(__name__)

__all__ = ["ElasticPool"]

_STOP_S = 5.0   # how long a leaving worker's server may take to take the stop
_ADD_S = 10.0   # how long the chief's server may take to learn a worker that joined


class ElasticPool:
    """``ClusterCoordinator``'s elastic side: follows the membership record,
    adds the workers it names (``_add``) and drops those that left
    (``_drop``). The state it changes is the coordinator's own."""

    strategy: Any
    num_workers: int
    _devices: list[str]
    _gone: set[int]
    _addresses: dict[str, str]
    _queue: collections.deque
    _up: list[bool]
    _probing: list[asyncio.Lock]
    _tasks: list[asyncio.Task]
    _slots: dict[int, list[asyncio.Task]]
    _idle: collections.deque
    _version: int
    _datasets: Any
    _values: Any

    if TYPE_CHECKING:   # the coordinator's, used here
        async def _client(self) -> ActorSystem: ...
        def _address(self, task: str) -> str: ...
        def _set_error(self, exc: BaseException) -> None: ...
        def _start_slots(self, index: int) -> None: ...
        def _wake_slot(self) -> None: ...

    async def _follow_membership(self) -> None:
        """Read the membership record on its source (the first ps) about every
        heartbeat and follow each newer version: workers join and leave the pool.
        No record there, or no answer: asked again later. Any other error (a
        bug) is logged, reaches ``join`` and stops the watcher; a worker that
        could not be added does not (``_follow``)."""
        source = membership_source(self.strategy.cluster)
        if source is None:
            return
        address = parse_target(self.strategy.cluster.task_address(*source))
        while True:
            every = heartbeat_s() or 1.0
            try:
                door = MembershipDoor.at(await self._client(), address)
                record = await door.get(timeout=max(1.0, 2 * every))
                if record is not None:
                    await self._follow(Membership.from_wire(record))
            except OpError as exc:   # the source restarting, say: the next read tries again
                logger.debug("membership not read from %s: %s", address, exc)
            except Exception as exc:
                logger.error("the coordinator stops following the membership on %s: %s: %s",
                             address, type(exc).__name__, exc)
                self._set_error(exc)
                return
            await asyncio.sleep(every)

    async def _follow(self, record: Membership) -> None:
        """Take membership ``record`` if it is newer than the one followed. A
        worker that fails to join is logged, its error kept for ``join``, and
        tried again when a newer record still names it."""
        if record.version <= self._version:
            return
        self._version = record.version
        for i, device in enumerate(self._devices):
            if i not in self._gone and record.has_left(device):
                self._drop(i)
        cluster = record.cluster
        for i in cluster.task_indices("worker") if "worker" in cluster.jobs else ():
            device = f"/job:worker/task:{i}"
            if device in self._devices or record.has_left(device):
                continue
            try:
                await self._add(device, cluster.task_address("worker", i))
            except Exception as exc:   # the user's dataset_fn or value_fn, the chief's server
                logger.error("worker %s could not join the pool (it takes no closure; tried "
                             "again at the next membership change): %s: %s", device,
                             type(exc).__name__, exc)
                self._set_error(exc)

    async def _add(self, device: str, address: str) -> None:
        """``device`` joins the pool, with the next index; its slots start once it
        answers. All or nothing: what may fail (the chief's server learning it,
        the user's functions making its datasets and values) runs before the
        pool changes, and the change itself cannot be interleaved (no await)."""
        index = len(self._devices)
        added = self.strategy.add_worker(device, address)   # the chief's master may place
        if added is not None:   # steps there: known before its first closure is sent
            try:
                async with asyncio.timeout(_ADD_S):
                    await asyncio.wrap_future(added)
            except TimeoutError:
                raise DeadlineExceededError(
                    f"the chief's server did not learn {device} within {_ADD_S:g}s") from None
        made = [(d, d.make(index)) for d in list(self._datasets)]
        made += [(v, v.make(index)) for v in list(self._values)]
        self._addresses[device] = address
        self._devices.append(device)
        self._up.append(False)
        self._probing.append(asyncio.Lock())
        for grown, new in made:
            grown.add_worker(index, new)
        logger.info("worker %s joins the pool (worker index %d, %d workers)", device, index,
                    self.num_workers)
        if self._tasks:
            self._start_slots(index)
            if self._queue:
                self._wake_slot()

    def _drop(self, index: int) -> None:
        """Worker ``index`` left the cluster: its slots take no new closure and end
        once the ones they hold ran (or were put back); then its server is told
        that the coordinator is done with it."""
        self._gone.add(index)
        logger.info("worker %s leaves the pool (%d workers): it takes no new closure",
                    self._devices[index], self.num_workers)
        while self._idle:   # its idle slots end; the others find nothing new and wait again
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
        slots = self._slots.pop(index, [])
        if slots:
            self._tasks.append(asyncio.ensure_future(self._release(index, slots)))

    async def _release(self, index: int, slots: list[asyncio.Task]) -> None:
        """Once worker ``index``'s slots ended: tell its server that training is over
        for it (a worker that is down is not told; the launcher ends it)."""
        await asyncio.gather(*slots, return_exceptions=True)
        device = self._devices[index]
        if not self._up[index]:
            return
        try:
            door = ServerDoor.at(await self._client(), parse_target(self._address(device)))
            await door.request_stop(timeout=_STOP_S)
            logger.info("worker %s left the pool: its server was told to stop", device)
        except OpError as exc:
            logger.info("worker %s left the pool; it did not take the stop: %s", device, exc)

