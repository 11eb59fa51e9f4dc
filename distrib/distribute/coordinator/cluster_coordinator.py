"""``ClusterCoordinator``: TF2's way of driving parameter-server training from
one program (TF's ``coordinator/cluster_coordinator.py``), on the async client.

    coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    for _ in range(steps):
        coordinator.schedule(worker_fn, args=(per_worker_iterator,))   # returns at once
    await coordinator.join()

* ``schedule(fn, args, kwargs)`` queues a closure and returns a
  ``RemoteValue`` at once. Each worker has ``closures_per_worker`` slots
  (1 by default, as TF: a worker runs one closure at a time), each a task
  that takes the next closure from the queue as soon as it is free and runs
  ``fn`` on that worker: a ``dt.function`` traced once per worker under that
  worker's device (variables stay on the ps), executed through the chief's
  master. Closures on two workers run at once: no order between closures is
  promised. Every closure runs at least once, and its RemoteValue settles
  once.
* ``closures_per_worker=2`` (a distrib extension, opt-in) lets a worker hold
  two closures: the next one reaches it while the current one runs, so it
  never idles the round trip between them (faster on small steps), but a
  step then reads variables that up to ``workers x closures_per_worker - 1``
  other steps are updating, not ``workers - 1``: staler gradients. Measured
  on TF's parameter-server tutorial's custom loop (RMSprop 0.1, 3 workers,
  ``tests/test_ps_tutorial.py``): with 1 the trained model was right on every
  example in 79 of 80 runs, with 2 in 11 of 30.
* A **worker that fails** (its step ends with ``UnavailableError`` or
  ``AbortedError`` naming it) gets its closures (each slot's) put back at the
  head of the queue for another worker; the coordinator probes it every
  second (one probe per worker, whichever slot finds it down) and, when it
  answers again (the launcher, Kubernetes or SLURM restarted it), rebuilds
  its datasets once and gives it closures again.
* A **ps that fails** fails the closures that need it; they are put back
  and wait until the ps answers, then the coordinator restores the ps's
  variables (``checkpoint_dir``'s newest checkpoint when one is given, else
  their initial values) before running them again; TF makes the user
  restart the coordinator instead.
* An **error in fn itself** (anything else) is kept: its RemoteValue fails
  with it, the closures queued after it, or put back after it by a failed
  worker or ps, are cancelled (their RemoteValues fail with
  ``CancelledError``), and the next ``join``, ``done`` or
  ``schedule`` raises it, once, as TF does.
* **Elastic** (an elastic launch, ``--workers MIN:MAX``): the pool follows
  the cluster's membership record, workers join and leave it while
  training runs (``distrib.distribute.coordinator.elastic_pool``).
* ``create_per_worker_dataset(dataset_fn)`` and ``create_per_worker_values``:
  one dataset or value per worker, made again for a worker added later
  (``distrib.distribute.coordinator.data``).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import weakref
from typing import Any, Callable

from distrib.client.session import parse_target
from distrib.distribute.coordinator.closure import Closure, RemoteValue
from distrib.distribute.coordinator.data import PerWorkerDataset, PerWorkerValues, for_worker
from distrib.distribute.coordinator.elastic_pool import ElasticPool
from distrib.distribute.coordinator.ps import restore_ps
from distrib.distribute.functions.def_function import Function
from distrib.errors import (
    AbortedError,
    CancelledError,
    FailedPreconditionError,
    OpError,
    OutOfRangeError,
    UnavailableError,
)
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.system import ActorSystem
from distrib.runtime.step.doors import WorkerDoor
from distrib.settings import ELASTIC
from distrib.train.chief.ps_recovery import recoverable

logger = logging.getLogger(__name__)

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues"]

_PROBE_S = 1.0


class ClusterCoordinator(ElasticPool):
    """``dt.distribute.coordinator.ClusterCoordinator(strategy)``: see the module header.

    ``checkpoint_dir`` (a distrib extension): where a restarted ps's variables
    are restored from (the newest good checkpoint of the graph's Saver).
    ``closures_per_worker`` (a distrib extension): the closures a worker holds
    at once; 1, TF's, unless you accept the staler gradients of more (see
    the module header)."""

    ps_wait_s = 600.0   # how long closures wait for a ps to come back before failing

    def __init__(self, strategy: Any, checkpoint_dir: str | None = None,
                 closures_per_worker: int = 1) -> None:
        if not hasattr(strategy, "worker_devices"):
            raise ValueError("ClusterCoordinator needs a ParameterServerStrategy")
        if isinstance(closures_per_worker, bool) or not isinstance(closures_per_worker, int) \
                or closures_per_worker < 1:
            raise ValueError("closures_per_worker must be an int >= 1 (1: one closure per "
                             f"worker at a time, as TF), got {closures_per_worker!r}")
        self.closures_per_worker = closures_per_worker
        self.strategy = strategy
        self.checkpoint_dir = checkpoint_dir
        # the pool: every worker it has had, by index (never reused); _gone: those that left
        self._devices: list[str] = list(strategy.worker_devices)
        self._gone: set[int] = set()
        self._addresses: dict[str, str] = {}   # workers that joined later: where they listen
        self._queue: collections.deque[Closure] = collections.deque()
        self._error: BaseException | None = None
        self._inflight = 0
        self._up = [True] * len(self._devices)
        self._probing: list[asyncio.Lock] = []   # per worker: one slot probes, the other waits
        self._tasks: list[asyncio.Task] = []
        self._slots: dict[int, list[asyncio.Task]] = {}   # per worker index: its slots' tasks
        self._watch: asyncio.Task | None = None   # follows the membership (elastic launches)
        self._version = 0   # the membership version followed
        self._changed: asyncio.Event | None = None   # join's: a closure ended, an error came
        self._idle: collections.deque[asyncio.Future] = collections.deque()   # slots with
        # nothing to do: a closure queued wakes one of them (not every slot)
        self._datasets: weakref.WeakSet[PerWorkerDataset] = weakref.WeakSet()   # (rebuilt
        # when a worker comes back, grown when one joins; one nobody holds is let go)
        self._values: weakref.WeakSet[PerWorkerValues] = weakref.WeakSet()
        self._system: asyncio.Future | None = None   # a lease on the client actor system
        self._ps_lock: asyncio.Lock | None = None
        self._wrapped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._incarnations: dict[str, int] = {}   # a worker's, when it was last taken back
        strategy.coordinator = self   # (TF: strategy._cluster_coordinator; Keras fit reads it)

    # -- the API ------------------------------------------------------------------------
    def schedule(self, fn: Callable[..., Any], args: tuple | None = None,
                 kwargs: dict | None = None) -> RemoteValue:
        """Queue ``fn(*args, **kwargs)`` for the next free worker; its RemoteValue."""
        self._raise_error()
        self._start()
        if not isinstance(fn, Function):   # TF wants a tf.function; one wrapper per callable
            wrapped = self._wrapped.get(fn)
            if wrapped is None:
                wrapped = self._wrapped[fn] = Function(fn)
            fn = wrapped
        closure = Closure(fn, tuple(args or ()), dict(kwargs or {}))
        self._queue.append(closure)
        self._wake_slot()
        return closure.result

    async def join(self) -> None:
        """Wait until every scheduled closure ran; raise the first error of fn, if any."""
        self._start()
        while self._queue or self._inflight:
            if self._error is not None and not self._inflight:
                break   # (TF: when join raises, no function is still running)
            await self._wait_change()
        self._raise_error()

    def done(self) -> bool:
        """Whether every scheduled closure ran (raises the first error of fn, if any)."""
        self._raise_error()
        return not self._queue and not self._inflight

    async def fetch(self, val: Any) -> Any:
        """The values of a RemoteValue, or of a structure of them."""
        if isinstance(val, RemoteValue):
            return await val.fetch()
        if isinstance(val, (list, tuple)):
            items = [await self.fetch(v) for v in val]
            return type(val)(items) if isinstance(val, tuple) else items
        if isinstance(val, dict):
            return {k: await self.fetch(v) for k, v in val.items()}
        return val

    def create_per_worker_dataset(self, dataset_fn: Any) -> PerWorkerDataset:
        """One dataset per worker from ``dataset_fn`` (see the module header)."""
        dataset = PerWorkerDataset(self._devices, dataset_fn)
        self._datasets.add(dataset)
        return dataset

    def create_per_worker_values(self, value_fn: Callable[[], Any]) -> PerWorkerValues:
        """One ``value_fn()`` per worker (called again for a worker that joins later)."""
        values = PerWorkerValues([value_fn() for _ in self._devices], value_fn)
        self._values.add(values)
        return values

    @property
    def num_workers(self) -> int:
        """The workers in the pool now."""
        return len(self._devices) - len(self._gone)

    @property
    def worker_devices(self) -> list[str]:
        """The workers in the pool now, by index (those that left are not)."""
        return [d for i, d in enumerate(self._devices) if i not in self._gone]

    async def shutdown(self) -> None:
        """Stop the worker loops (closures still queued are cancelled)."""
        tasks, self._tasks = self._tasks, []
        watch, self._watch = self._watch, None
        self._slots = {}
        for t in [*tasks, *([watch] if watch else [])]:
            t.cancel()
        for t in [*tasks, *([watch] if watch else [])]:
            with contextlib.suppress(BaseException):
                await t
        self._cancel_queued("the coordinator was shut down")
        system, self._system = self._system, None
        if system is not None:
            with contextlib.suppress(Exception):
                await client_systems().release(await system)

    # -- the worker loops -----------------------------------------------------------------
    def _start(self) -> None:
        if self._tasks and not all(t.done() for t in self._tasks):
            return
        self._changed = asyncio.Event()
        self._idle = collections.deque()
        self._ps_lock = asyncio.Lock()
        self._probing = [asyncio.Lock() for _ in self._devices]
        self._tasks, self._slots = [], {}
        for i in range(len(self._devices)):
            if i not in self._gone:
                self._start_slots(i)
        if ELASTIC.get() and (self._watch is None or self._watch.done()):
            self._watch = asyncio.ensure_future(self._follow_membership())

    def _start_slots(self, index: int) -> None:
        slots = [asyncio.ensure_future(self._worker_loop(index))
                 for _ in range(self.closures_per_worker)]
        self._slots[index] = slots
        self._tasks.extend(slots)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()

    async def _wait_change(self) -> None:
        assert self._changed is not None
        self._changed.clear()
        await self._changed.wait()

    def _wake_slot(self) -> None:
        """A closure was queued: wake one idle slot to take it."""
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _until_work(self) -> None:
        """An idle slot waits here until ``_wake_slot`` picks it."""
        waiter = asyncio.get_running_loop().create_future()
        self._idle.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._wake_slot()   # picked as it was cancelled: another slot takes it
            raise

    async def _worker_loop(self, index: int) -> None:
        """One slot of worker ``index``: takes the next closure whenever it is free,
        until the worker leaves the pool."""
        device = self._devices[index]
        async with self._probing[index]:
            if device not in self._incarnations:   # to tell a restart from a passing failure
                found = await self._ping(device)
                if found is not None:
                    self._incarnations[device] = found
                    self._up[index] = True   # (one that joined: up once it answers)
        while True:
            if index in self._gone:   # it left: what it held ran or was put back
                if self._queue:
                    self._wake_slot()   # this slot may have been the one woken for it
                return
            if not self._up[index]:
                if self._queue:
                    self._wake_slot()   # a slot of a worker that is up takes the closure
                async with self._probing[index]:   # the worker's other slot may be probing
                    if not self._up[index]:
                        await self._until_back(index)
                continue
            if not self._queue or self._error is not None:
                await self._until_work()
                continue
            closure = self._queue.popleft()
            self._inflight += 1
            try:
                await self._run(index, closure)
            except Exception as exc:   # recovering failed (a restore, say): the user hears of it
                logger.error("closure on %s failed while recovering: %s", self._devices[index],
                             exc)
                closure.fail(exc)
                self._set_error(exc)
            finally:
                self._inflight -= 1
                if self._error is not None or not (self._queue or self._inflight):
                    self._wake()   # what join waits for

    async def _run(self, index: int, closure: Closure) -> None:
        device = self._devices[index]
        args = tuple(for_worker(a, index) for a in closure.args)
        kwargs = {k: for_worker(v, index) for k, v in closure.kwargs.items()}
        try:
            value = await closure.fn.call_on(device, self.strategy, args, kwargs)
        except (UnavailableError, AbortedError, FailedPreconditionError) as exc:
            if isinstance(exc, FailedPreconditionError) and not recoverable(exc):
                closure.fail(exc)
                self._set_error(exc)
                return
            failed = self._failed_task(exc)
            if isinstance(exc, FailedPreconditionError) and failed is not None \
                    and not failed.startswith("/job:worker"):
                # a restarted ps whose variables are not back yet
                logger.warning("%s lost its variables (%s); restoring them", failed,
                               exc.message)
                await self._recover_ps(failed)
            elif failed is None or failed.startswith("/job:worker"):
                bad = self._devices.index(failed) if failed in self._devices else index
                logger.warning("worker %s failed (%s); its closure goes to another worker",
                               self._devices[bad], exc.message)
                self._up[bad] = False
            else:
                logger.warning("%s failed (%s); the closure waits for it", failed, exc.message)
                await self._recover_ps(failed)
            self._put_back(closure)
            return
        except OutOfRangeError as exc:
            closure.fail(exc)
            self._set_error(exc)
            return
        except Exception as exc:   # an error of fn itself: reaches the user at join
            closure.fail(exc)
            self._set_error(exc)
            return
        closure.succeed(value)

    def _put_back(self, closure: Closure) -> None:
        """A closure whose worker or ps failed goes back to the head of the
        queue, unless an error of fn is pending: then it is cancelled as the
        closures queued were (TF's ``put_back``), for no slot takes a closure
        while the error waits for ``join``, and nothing wakes one after."""
        if self._error is not None:
            closure.fail(CancelledError(
                f"closure cancelled: an earlier closure failed: "
                f"{type(self._error).__name__}: {self._error}"))
            return
        self._queue.appendleft(closure)

    def _failed_task(self, exc: OpError) -> str | None:
        """The task a failure blames, if it is one of ours: the error's ``peer``
        (the task whose failure caused it: lost, unreachable, restarted) or its
        ``task`` (where it was raised: a restarted ps's uninitialized
        variable); a ps first, then a worker, the peer before the task."""
        ps = list(getattr(self.strategy, "ps_devices", []))
        named = [t for t in (exc.peer, exc.task) if t is not None and (t in ps or t in self._devices)]
        return next((t for t in named if t in ps), named[0] if named else None)

    def _set_error(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            self._cancel_queued(f"an earlier closure failed: {type(exc).__name__}: {exc}")
        self._wake()

    def _cancel_queued(self, why: str) -> None:
        while self._queue:
            self._queue.popleft().fail(CancelledError(f"closure cancelled: {why}"))

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    # -- failures -------------------------------------------------------------------------
    async def _client(self) -> ActorSystem:
        """The coordinator's lease on the process's client actor system (probes,
        the membership), taken once however many slots ask for it at once."""
        if self._system is None:
            self._system = asyncio.ensure_future(client_systems().acquire())
        return await asyncio.shield(self._system)

    def _address(self, task: str) -> str:
        if task in self._addresses:
            return self._addresses[task]
        job, index = task.split("/")[1][4:], int(task.split(":")[-1])
        return self.strategy.cluster.task_address(job, index)

    async def _ping(self, task: str) -> int | None:
        """The incarnation of ``task`` if it answers now, else None."""
        system = await self._client()
        try:
            status = await WorkerDoor.at(system, parse_target(self._address(task))).get_status(
                timeout=_PROBE_S * 2)
            return int(status["incarnation"])
        except OpError:
            return None

    async def _until_back(self, index: int) -> None:
        device = self._devices[index]
        waited = 0.0
        while True:
            if index in self._gone:
                return   # it left the cluster while down: its slots end
            if (incarnation := await self._ping(device)) is not None:
                break
            await asyncio.sleep(_PROBE_S)
            waited += _PROBE_S
            if waited % 30 < _PROBE_S:   # never silent: say whom the queue waits for
                logger.warning("worker %s has not answered for %.0fs; %d closure(s) queued "
                               "for the other workers", device, waited, len(self._queue))
        if device not in self._incarnations:
            logger.info("worker %s joined: it takes closures", device)
        elif incarnation != self._incarnations[device]:
            # a new process: its datasets start again (TF rebuilds them on the worker)
            logger.info("worker %s answers again (a new process): its datasets are rebuilt",
                        device)
            for dataset in list(self._datasets):
                dataset.rebuild(index)
        else:
            logger.info("worker %s answers again: it takes closures again", device)
        self._incarnations[device] = incarnation
        self._up[index] = True

    async def _recover_ps(self, task: str) -> None:
        assert self._ps_lock is not None
        async with self._ps_lock:
            waited = 0.0
            while await self._ping(task) is None:
                if waited >= self.ps_wait_s:
                    raise UnavailableError(
                        f"{task} has not answered for {waited:.0f}s: the closures that need "
                        "it cannot run (restart it; a restarted ps is restored from the "
                        "checkpoint_dir)")
                if waited % 30 < _PROBE_S:
                    logger.warning("waiting for %s to come back (%.0fs)", task, waited)
                await asyncio.sleep(_PROBE_S)
                waited += _PROBE_S
            await restore_ps(self.strategy, task, self.checkpoint_dir)
