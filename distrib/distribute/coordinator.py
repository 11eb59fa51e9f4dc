"""``ClusterCoordinator``: TF2's way of driving parameter-server training from
one program (TF's ``coordinator/cluster_coordinator.py``), on the async client.

    coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    for _ in range(steps):
        coordinator.schedule(worker_fn, args=(per_worker_iterator,))   # returns at once
    await coordinator.join()

* ``schedule(fn, args, kwargs)`` queues a closure and returns a
  ``RemoteValue`` at once. Each worker has ``closures_per_worker`` (2) slots,
  each a task that takes the next closure from the queue as soon as it is
  free and runs ``fn`` on that worker: a ``dt.function`` traced once per
  worker under that worker's device (variables stay on the ps), executed
  through the chief's master. So a worker holds up to two closures: the next
  one reaches it while the current one runs, and it never idles the round
  trip between them (TF's remote functions are dispatched asynchronously to
  the same effect). Closures on one worker may overlap, as closures on two
  workers do: no order between closures is promised. Every closure runs at
  least once, and its RemoteValue settles once.
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
* ``create_per_worker_dataset(dataset_fn)``: one dataset per worker, each
  from its own call of ``dataset_fn`` (given an ``InputContext`` when it
  takes an argument); ``iter()`` of it gives per-worker iterators, and a
  closure's ``next(iterator)`` reads the next element of the iterator of the
  worker that runs it. The elements are read by this program and fed to the
  step (a deviation from TF, whose datasets run on the workers; see the
  README's differences).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import weakref
from typing import Any, Callable, Iterator

from distrib.client.session import parse_target
from distrib.distribute.def_function import Function, session_for
from distrib.distribute.input_lib import InputContext
from distrib.errors import (
    AbortedError,
    CancelledError,
    FailedPreconditionError,
    OpError,
    OutOfRangeError,
    UnavailableError,
)
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.variables import is_variable_initialized
from distrib.runtime.actors.system import ActorSystem, client_name
from distrib.runtime.step.doors import WorkerDoor
from distrib.train import checkpoint as ckpt
from distrib.train.ps_recovery import recoverable
from distrib.train.saver import Saver

logger = logging.getLogger(__name__)

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues"]

_PROBE_S = 1.0


class RemoteValue:
    """The result of a scheduled closure (``await rv.fetch()``): the reading end of
    the future that the closure (``_Closure``) settles."""

    def __init__(self, future: asyncio.Future) -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    async def fetch(self) -> Any:
        """The closure's outputs (numpy), once it ran; its error if it failed."""
        if self._future.done():
            return self._future.result()
        return await asyncio.shield(self._future)   # (a cancelled fetch leaves the closure be)

    get = fetch


class PerWorkerValues:
    """One value per worker (TF's): a closure on worker ``i`` sees ``values[i]``."""

    def __init__(self, values: list[Any]) -> None:
        self._values = values

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(self._values)


class _Closure:
    """One scheduled call: the function, its arguments, and the writing end of its
    RemoteValue (settled once: a closure put back and run again settles it then)."""

    __slots__ = ("fn", "args", "kwargs", "result", "_future")

    def __init__(self, fn: Function, args: tuple, kwargs: dict) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self._future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.result = RemoteValue(self._future)

    def succeed(self, value: Any) -> None:
        """The closure ran: its RemoteValue holds ``value`` (unless settled before)."""
        if not self._future.done():
            self._future.set_result(value)

    def fail(self, error: BaseException) -> None:
        """The closure failed: its RemoteValue raises ``error`` (unless settled before)."""
        if not self._future.done():
            self._future.set_exception(error)
            self._future.exception()   # retrieved: raised again by fetch


class ClusterCoordinator:
    """``dt.distribute.coordinator.ClusterCoordinator(strategy)``: see the module header.

    ``checkpoint_dir`` (a distrib extension): where a restarted ps's variables
    are restored from (the newest good checkpoint of the graph's Saver)."""

    ps_wait_s = 600.0   # how long closures wait for a ps to come back before failing
    closures_per_worker = 2   # closures a worker holds at once (the next sent while one runs)

    def __init__(self, strategy: Any, checkpoint_dir: str | None = None) -> None:
        if not hasattr(strategy, "worker_devices"):
            raise ValueError("ClusterCoordinator needs a ParameterServerStrategy")
        self.strategy = strategy
        self.checkpoint_dir = checkpoint_dir
        self._devices: list[str] = list(strategy.worker_devices)
        self._queue: collections.deque[_Closure] = collections.deque()
        self._error: BaseException | None = None
        self._inflight = 0
        self._up = [True] * len(self._devices)
        self._probing: list[asyncio.Lock] = []   # per worker: one slot probes, the other waits
        self._tasks: list[asyncio.Task] = []
        self._changed: asyncio.Event | None = None   # join's: a closure ended, an error came
        self._idle: collections.deque[asyncio.Future] = collections.deque()   # slots with
        # nothing to do: a closure queued wakes one of them (not every slot)
        self._datasets: weakref.WeakSet[_PerWorkerDataset] = weakref.WeakSet()   # (rebuilt
        # when a worker comes back; a dataset nobody holds any more is let go)
        self._system: ActorSystem | None = None
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
        closure = _Closure(fn, tuple(args or ()), dict(kwargs or {}))
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

    def create_per_worker_dataset(self, dataset_fn: Any) -> _PerWorkerDataset:
        """One dataset per worker from ``dataset_fn`` (see the module header)."""
        dataset = _PerWorkerDataset(self, dataset_fn)
        self._datasets.add(dataset)
        return dataset

    def create_per_worker_values(self, value_fn: Callable[[], Any]) -> PerWorkerValues:
        return PerWorkerValues([value_fn() for _ in self._devices])

    @property
    def num_workers(self) -> int:
        return len(self._devices)

    @property
    def worker_devices(self) -> list[str]:
        """The workers closures run on; a worker's index is its place here."""
        return list(self._devices)

    async def shutdown(self) -> None:
        """Stop the worker loops (closures still queued are cancelled)."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
        self._cancel_queued("the coordinator was shut down")
        system, self._system = self._system, None
        if system is not None:
            await system.shutdown()

    # -- the worker loops -----------------------------------------------------------------
    def _start(self) -> None:
        if self._tasks and not all(t.done() for t in self._tasks):
            return
        self._changed = asyncio.Event()
        self._idle = collections.deque()
        self._ps_lock = asyncio.Lock()
        self._probing = [asyncio.Lock() for _ in self._devices]
        slots = max(1, int(self.closures_per_worker))
        self._tasks = [asyncio.ensure_future(self._worker_loop(i))
                       for _ in range(slots) for i in range(len(self._devices))]

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
        """One slot of worker ``index``: takes the next closure whenever it is free."""
        device = self._devices[index]
        async with self._probing[index]:
            if device not in self._incarnations:   # to tell a restart from a passing failure
                found = await self._ping(device)
                if found is not None:
                    self._incarnations[device] = found
        while True:
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

    async def _run(self, index: int, closure: _Closure) -> None:
        device = self._devices[index]
        args = tuple(_for_worker(a, index) for a in closure.args)
        kwargs = {k: _for_worker(v, index) for k, v in closure.kwargs.items()}
        try:
            with _worker_index(closure, index):
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

    def _put_back(self, closure: _Closure) -> None:
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
    async def _ping(self, task: str) -> int | None:
        """The incarnation of ``task`` if it answers now, else None."""
        if self._system is None:
            self._system = await ActorSystem(client_name(), listen=False).start()
        job, index = task.split("/")[1][4:], int(task.split(":")[-1])
        address = self.strategy.cluster.task_address(job, index)
        try:
            status = await WorkerDoor.at(self._system, parse_target(address)).get_status(
                timeout=_PROBE_S * 2)
            return int(status["incarnation"])
        except OpError:
            return None

    async def _until_back(self, index: int) -> None:
        device = self._devices[index]
        waited = 0.0
        while (incarnation := await self._ping(device)) is None:
            await asyncio.sleep(_PROBE_S)
            waited += _PROBE_S
            if waited % 30 < _PROBE_S:   # never silent: say whom the queue waits for
                logger.warning("worker %s has not answered for %.0fs; %d closure(s) queued "
                               "for the other workers", device, waited, len(self._queue))
        if incarnation != self._incarnations.get(device):
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
            await _restore_ps(self.strategy, task, self.checkpoint_dir)


async def _restore_ps(strategy: Any, task: str, checkpoint_dir: str | None) -> None:
    """Bring back the variables of a restarted ps: the newest good checkpoint,
    else their initial values. Nothing to do when they are initialized."""
    graph = get_default_graph()
    on_task = [v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
               if task in (v.device or "")]
    if not on_task:
        return
    session = await session_for(graph, strategy.target)
    with graph.as_default():
        flags = [is_variable_initialized(v) for v in on_task]
    if all(bool(f) for f in await session.run(flags)):
        return
    if checkpoint_dir:
        with graph.as_default():
            saver = Saver(var_list=on_task)
        for path in ckpt.checkpoint_candidates(checkpoint_dir):
            try:
                await saver.restore(session, path, only_task=task)
                logger.warning("restored %s from %s", task, path)
                return
            except OpError as exc:
                logger.warning("checkpoint %s unusable for %s: %s", path, task, exc)
    await session.run([v.initializer for v in on_task])
    logger.warning("no checkpoint for %s: its variables start again from their initial "
                   "values", task)


# -- per-worker datasets ----------------------------------------------------------------------
class _PerWorkerDataset:
    """``create_per_worker_dataset``'s result: ``datasets[i]`` is worker i's."""

    def __init__(self, coordinator: ClusterCoordinator, dataset_fn: Any) -> None:
        self.coordinator = coordinator
        self._fn = dataset_fn
        n = coordinator.num_workers
        self.datasets = [self._make(i) for i in range(n)]
        self._iterators: weakref.WeakSet[_PerWorkerIterator] = weakref.WeakSet()

    def _make(self, index: int) -> Any:
        fn = self._fn
        takes = len(inspect.signature(fn).parameters) if callable(fn) else 0
        dataset = fn(InputContext(self.coordinator.num_workers, index, 1)) if takes else fn()
        if isinstance(dataset, _PerWorkerDataset):   # a per-worker dataset given back
            dataset = dataset.datasets[index]
        return dataset

    def rebuild(self, index: int) -> None:
        """Worker ``index``'s dataset made again (a new process of it: its
        iterators start again from the beginning)."""
        self.datasets[index] = self._make(index)
        for it in list(self._iterators):
            it.restart(index)

    def __iter__(self) -> _PerWorkerIterator:
        it = _PerWorkerIterator(self)
        self._iterators.add(it)
        return it

    def __aiter__(self) -> Any:
        raise TypeError("iterate a per-worker dataset with iter(); pass the iterator to "
                        "coordinator.schedule")


class _PerWorkerIterator:
    """A closure argument: the running worker's iterator (see the module header)."""

    def __init__(self, dataset: _PerWorkerDataset) -> None:
        self._dataset = dataset
        self._iters: list[Iterator[Any]] = [iter(d) for d in dataset.datasets]
        self._spec = dataset.datasets[0].element_spec
        self.worker: int | None = None    # set while a closure's arguments are read

    def restart(self, index: int) -> None:
        """Read worker ``index``'s (rebuilt) dataset from its beginning."""
        self._iters[index] = iter(self._dataset.datasets[index])

    def _function_signature(self) -> Any:
        # by what it yields: a step traced for one iterator serves every iterator of
        # the same element spec (a second fit), and a freed one's id is never reused
        return ("per_worker_iterator", repr(self._spec))

    def _function_placeholders(self, out: list[Any]) -> Any:
        return _TracedIterator(self._spec, out)

    def _function_leaves(self, out: list[Any]) -> None:
        index = self.worker if self.worker is not None else 0
        try:
            element = next(self._iters[index])
        except StopIteration:
            device = self._dataset.coordinator.worker_devices[index]
            raise OutOfRangeError(f"the dataset of {device} is exhausted (End of sequence)"
                                  ) from None
        out.extend(_flatten(element))

    def __next__(self) -> Any:
        raise TypeError("call next() on a per-worker iterator inside the scheduled function")


class _TracedIterator:
    """What a traced function's ``next(iterator)`` returns: placeholders shaped by
    the dataset's element spec (fed, per run, the running worker's next element)."""

    def __init__(self, spec: Any, out: list[Any]) -> None:
        self._spec = spec
        self._out = out
        self._used = False

    def __iter__(self) -> _TracedIterator:
        return self

    def __next__(self) -> Any:
        if self._used:
            raise ValueError("a scheduled function may read its per-worker iterator once "
                             "per call")
        self._used = True
        return _placeholders_for(self._spec, self._out)

    get_next = __next__


def _placeholders_for(spec: Any, out: list[Any]) -> Any:
    if isinstance(spec, tuple):
        return tuple(_placeholders_for(s, out) for s in spec)
    if isinstance(spec, list):
        return [_placeholders_for(s, out) for s in spec]
    if isinstance(spec, dict):
        return {k: _placeholders_for(spec[k], out) for k in sorted(spec)}
    dims = spec.shape.dims
    ph = ops.placeholder(spec.dtype, shape=None if dims is None else list(dims), name="next")
    out.append(ph)
    return ph


def _flatten(element: Any) -> list[Any]:
    if isinstance(element, (tuple, list)):
        return [x for e in element for x in _flatten(e)]
    if isinstance(element, dict):
        return [x for k in sorted(element) for x in _flatten(element[k])]
    return [element]


def _for_worker(value: Any, index: int) -> Any:
    return value.values[index] if isinstance(value, PerWorkerValues) else value


@contextlib.contextmanager
def _worker_index(closure: _Closure, index: int) -> Iterator[None]:
    """Point the closure's per-worker arguments at worker ``index`` while it reads them."""
    iterators = [a for a in list(closure.args) + list(closure.kwargs.values())
                 if isinstance(a, _PerWorkerIterator)]
    for it in iterators:
        it.worker = index
    try:
        yield
    finally:
        for it in iterators:
            it.worker = None
