"""``map(fn, num_parallel_calls=N)``: ``fn`` on N elements at once, in threads.

Why threads: the work a map of an input pipeline does is numpy on whole
images, the JPEG decoder (libjpeg-turbo through simplejpeg) and the resize
and colour kernels, all of which release the GIL while they run; measured
on the 2-core development machine, two threads decode 5,790 JPEGs/s
against one thread's 2,940 (``bench/input.py`` has the pipelines' figures).
A map whose function is mostly Python (small images) gains nothing from
threads; for it AUTOTUNE's fused map-and-batch also measures running the
map inline and in forked worker processes (``process_map``: the function
inherited by the fork, elements and results as msgpack both ways, never
pickled) and keeps the fastest (:class:`_Tuner`).

Order: with ``deterministic`` (the default: TF's, and ``Options.deterministic``
when the map leaves it None) elements come out in input order, each as
soon as it and every element before it are done; with ``deterministic=False``
an element comes out as soon as it is done. Up to ``2 N`` elements are in
flight (TF's parallel map buffers as many as it runs). An error in ``fn``
is raised where its element would have come out. The threads are the
cursor's own: closing or dropping the cursor cancels what has not started
and shuts the pool down.

``map(...).batch(n)`` of a parallel map is one stage (TF's map-and-batch
fusion, :class:`ParallelMapBatch`): each thread writes its element straight
into its row of the batch's arrays, allocated by the first element of the
batch done, so the copies that a batch's ``np.stack`` would make in the
consumer's thread are made in the map's threads, at once (measured on the
JPEG pipeline: the stack of 64 224x224x3 float32 images cost the consumer
a third of a millisecond per image).

Each element's random choices (``dt.image.random_*`` in ``fn``) come from a
generator keyed by the map's seed, the epoch and the element's position, so
a parallel map draws exactly what a sequential one does.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import os
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np

from distrib.data import process_map, structure
from distrib.data.pipeline import Failed, Node, probing
from distrib.errors import InvalidArgumentError
from distrib.ops import value_mode

__all__ = ["MapFn", "ParallelMap", "ParallelMapBatch", "autotune_calls"]

_END = object()


def autotune_calls() -> int:
    """What AUTOTUNE means for a map's parallelism: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class MapFn:
    """``fn`` called on one element as a dataset function, with its seed key."""

    def __init__(self, fn: Callable[..., Any], seed: int) -> None:
        self.fn = fn
        self.seed = seed

    def __call__(self, element: Any, epoch: int, index: int) -> Any:
        tokens = value_mode.enter((self.seed, epoch, index))
        try:
            out = self.fn(*element) if type(element) is tuple else self.fn(element)
        finally:
            value_mode.leave(tokens)
        return structure.normalize(out)


def _outcome(future: cf.Future) -> Any:
    """A map call's element, or its error as a failed element (TF's: the
    iterator goes on after it)."""
    try:
        return future.result()
    except Exception as e:
        return Failed(e)


class ParallelMap(Node):
    """``map`` with ``num_parallel_calls`` > 1 (see the module header)."""

    index_offset = 0   # the position of the first element (a restored iterator's twin)

    def __init__(self, node: Node, fn: MapFn, calls: int, deterministic: bool | None,
                 autotune: bool = False) -> None:
        self.inputs = (node,)
        self.fn = fn
        self.calls = calls
        self.autotune = autotune   # AUTOTUNE: the fused batch measures threads against none
        self.deterministic = deterministic
        self.default_deterministic = True   # Options.deterministic, set when iterated
        self._epochs = itertools.count()

    def reset(self) -> None:
        self._epochs = itertools.count()

    def _ordered(self) -> bool:
        if self.deterministic is not None:
            return self.deterministic
        return self.default_deterministic is not False

    def iterate(self) -> Iterator[Any]:
        epoch = 0 if probing() else next(self._epochs)
        source = self.inputs[0].iterate()
        cursor = enumerate(source, start=self.index_offset)
        fn, window = self.fn, 2 * self.calls
        pool = cf.ThreadPoolExecutor(self.calls, thread_name_prefix="dt.data.map")
        pending: collections.deque[cf.Future] = collections.deque()
        try:
            ended = False
            while True:
                while not ended and len(pending) < window:
                    item = next(cursor, _END)
                    if item is _END:
                        ended = True
                        break
                    index, element = item
                    if type(element) is Failed:   # failed upstream: it keeps its place
                        passed: cf.Future = cf.Future()
                        passed.set_result(element)
                        pending.append(passed)
                    else:
                        pending.append(pool.submit(fn, element, epoch, index))
                if not pending:
                    return
                if self._ordered():
                    yield _outcome(pending.popleft())
                    continue
                done, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                first = next(f for f in pending if f in done)
                pending.remove(first)
                yield _outcome(first)
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            source.close()  # type: ignore[attr-defined]

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def _compute_spec(self) -> Any:
        return self.probe_spec()


class _Rows:
    """The arrays of one batch, made by the first element done (its shapes)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.columns: list[np.ndarray] | None = None
        self.first: Any = None

    def put(self, row: int, element: Any) -> None:
        leaves = structure.flatten(element)
        with self.lock:
            if self.columns is None:
                self.first = element
                self.columns = [np.empty((self.size, *np.shape(v)), dtype=np.asarray(v).dtype)
                                for v in leaves]
        columns = self.columns
        if len(leaves) != len(columns):
            raise InvalidArgumentError("map: elements of one batch differ in structure")
        for c, (column, value) in enumerate(zip(columns, leaves)):
            if np.shape(value) != column.shape[1:]:
                raise InvalidArgumentError(
                    f"Cannot batch tensors with different shapes in component {c}. First "
                    f"element had shape {list(column.shape[1:])} and element {row} had shape "
                    f"{list(np.shape(value))}; make the shapes equal in the map")
            if column.dtype.kind == "O" and np.ndim(value) == 0:   # a string: its bytes
                value = value.item() if isinstance(value, np.ndarray) else value
            column[row] = value   # numpy copies without the GIL: threads copy at once

    def put_block(self, start: int, nest: Any, leaves: list[np.ndarray]) -> None:
        """Rows ``start...`` at once: the stacked leaves of a worker process's part."""
        with self.lock:
            if self.columns is None:
                self.first = structure.pack_as(nest, [leaf[0] for leaf in leaves])
                self.columns = [np.empty((self.size, *leaf.shape[1:]), dtype=leaf.dtype)
                                for leaf in leaves]
        for c, (column, leaf) in enumerate(zip(self.columns, leaves)):
            if leaf.shape[1:] != column.shape[1:]:
                raise InvalidArgumentError(
                    f"Cannot batch tensors with different shapes in component {c}: "
                    f"{list(column.shape[1:])} and {list(leaf.shape[1:])}")
            column[start:start + len(leaf)] = leaf

    def result(self, rows: int) -> Any:
        assert self.columns is not None
        cut = self.columns if rows == self.size else [c[:rows] for c in self.columns]
        return structure.pack_as(self.first, cut)


class ParallelMapBatch(Node):
    """``ParallelMap`` then ``Batch``, fused (see the module header)."""

    def __init__(self, mapped: ParallelMap, batch_size: int, drop_remainder: bool) -> None:
        self.inputs = (mapped,)
        self.batch_size = batch_size
        self.drop_remainder = drop_remainder

    def iterate(self) -> Iterator[Any]:
        mapped = self.inputs[0]
        assert isinstance(mapped, ParallelMap)
        if probing():
            yield from _batches(mapped.iterate(), self.batch_size, self.drop_remainder)
            return
        epoch = next(mapped._epochs)  # noqa: SLF001 - the fused map's own epoch counter
        source = mapped.inputs[0].iterate()
        fn, size = mapped.fn, self.batch_size
        chunk = max(1, size // (4 * mapped.calls))   # rows per task: fewer futures per batch
        pool = cf.ThreadPoolExecutor(mapped.calls, thread_name_prefix="dt.data.map")
        inflight: collections.deque[tuple[_Rows, list[cf.Future], int]] = collections.deque()
        tuner = _Tuner(mapped.autotune, process_map.available() and mapped.calls > 1)
        workers: list[process_map.ProcessMap] = []
        next_index = [mapped.index_offset]

        def take() -> list[tuple[int, Any]]:
            """The next batch's elements, numbered; or a failed element met
            upstream, alone (the rows before it dropped, as TF's batch does)."""
            rows = list(itertools.islice(source, size))
            first = next_index[0]
            next_index[0] += len(rows)
            bad = next((r for r in rows if type(r) is Failed), None)
            return [(-1, bad)] if bad is not None else list(enumerate(rows, start=first))

        def work(rows: _Rows, part: list[tuple[int, int, Any]]) -> None:
            for row, i, element in part:
                rows.put(row, fn(element, epoch, i))
        sent: collections.deque[tuple[Any, int]] = collections.deque()   # at the workers
        held: list[tuple[int, Any]] = []   # taken, but the workers could not take it: inline
        example: list[Any] = [None]   # an element the map made: the workers' result layout
        try:
            while True:
                failed = None   # this batch's error: it comes out as one failed element
                if sent or (tuner.mode == "processes" and not inflight):
                    # this block and the next at the worker processes: they map the
                    # next while this one is handed on (see process_map's header)
                    while tuner.mode == "processes" and len(sent) < 2:
                        elements = take()
                        if not elements:
                            break
                        if elements[0][0] < 0:   # failed upstream: it keeps its place
                            sent.append((elements[0][1], 0))
                            continue
                        if not workers:   # (an element made already: results written in place)
                            workers.append(process_map.ProcessMap(fn, mapped.calls,
                                                                  example[0], size))
                        try:
                            sent.append((workers[0].submit(epoch, elements[0][0],
                                                           [e for _, e in elements]),
                                         len(elements)))
                        except process_map.Ragged:   # elements of many shapes: not this way
                            tuner.drop("processes")
                            held = elements
                    if not sent:
                        if held:
                            continue
                        return
                    ticket, n = sent.popleft()
                    rows = _Rows(size)
                    try:
                        if type(ticket) is Failed:
                            failed = ticket
                        else:
                            for start, nest, leaves in workers[0].collect(ticket):
                                rows.put_block(start, nest, leaves)
                    except process_map.WorkerDied:   # the pipes are gone: not one batch's
                        raise
                    except Exception as e:
                        failed = Failed(e)
                elif tuner.threads or inflight:
                    while tuner.threads and len(inflight) < 2:   # this batch and the next
                        elements = take()
                        if not elements:
                            break
                        if elements[0][0] < 0:   # failed upstream: it keeps its place
                            inflight.append((elements[0][1], [], 0))
                            continue
                        rows = _Rows(size)
                        indexed = [(r, i, e) for r, (i, e) in enumerate(elements)]
                        parts = [indexed[k:k + chunk] for k in range(0, len(indexed), chunk)]
                        inflight.append((rows, [pool.submit(work, rows, p) for p in parts],
                                         len(elements)))
                    if not inflight:
                        return
                    rows, futures, n = inflight.popleft()
                    if type(rows) is Failed:
                        failed = rows
                    for future in futures:   # every part done before its batch is dropped
                        outcome = _outcome(future)
                        if failed is None and type(outcome) is Failed:
                            failed = outcome
                else:   # inline (a map the GIL serializes, where processes did not pay)
                    if workers and "processes" not in tuner.modes:
                        workers.pop().close()   # dropped (Ragged): every block collected
                    elements, held = held or take(), []
                    n = len(elements)
                    if not n:
                        return
                    rows = _Rows(size)
                    if elements[0][0] < 0:
                        failed = elements[0][1]
                    else:
                        try:
                            work(rows, [(r, i, e) for r, (i, e) in enumerate(elements)])
                        except Exception as e:
                            failed = Failed(e)
                if failed is not None:   # the next batch goes on after it (TF's)
                    yield failed
                    continue
                if n < size and self.drop_remainder:
                    return
                example[0] = rows.first
                yield rows.result(n)
                tuner.tick()
        finally:
            for _, futures, _ in inflight:
                for future in futures:
                    future.cancel()
            pool.shutdown(wait=False, cancel_futures=True)
            for w in workers:
                w.close()
            source.close()  # type: ignore[attr-defined]

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _compute_spec(self) -> Any:
        dim = self.batch_size if self.drop_remainder else None
        return structure.map_structure_unchecked(
            lambda s: structure.with_batch_dim(s, dim), self.inputs[0].element_spec())


class _Tuner:
    """AUTOTUNE's choice for a fused map and batch: threads, none, or processes.

    Threads win where the map frees the GIL (decoders, numpy on whole images)
    and lose where it does not (Python and numpy on CIFAR's small images: the
    threads' hand-offs and the GIL's contention cost a sequential map's time
    twice over, measured); worker processes (``process_map``) run such a map
    on every core but pay a copy of each element both ways. So it measures:
    ``WINDOW`` batches each way (the time between batches handed out, and
    this process's CPU time meanwhile), keeps the best, and measures again
    every ``RECHECK`` batches, as TF's autotuner keeps adjusting a map's
    parallelism. The best: of the ways within :data:`KEEPS_UP` of the
    fastest, the one that cost this process the least CPU. When the
    consumer sets the pace (a trainer in the same process) every way keeps
    up, and a map run here, in threads or inline, takes the trainer's GIL
    and cores (measured on the CIFAR-10 trainer: -10% against fed from
    memory with the map in this process's threads).
    """

    WINDOW = 4
    RECHECK = 64
    KEEPS_UP = 1.1   # within 10% of the fastest way's time a batch

    def __init__(self, enabled: bool, processes: bool) -> None:
        self.enabled = enabled
        self.modes = ["threads", "inline", "processes"] if processes else ["threads", "inline"]
        self.mode = "threads"
        self._rates: dict[str, tuple[float, float]] = {}   # mode -> (wall, CPU) a batch
        self._slow: set[str] = set()
        self._count = 0
        self._last = time.perf_counter()
        self._last_cpu = time.process_time()
        self._elapsed = 0.0
        self._cpu = 0.0

    @property
    def threads(self) -> bool:
        return self.mode == "threads"

    def drop(self, mode: str) -> None:
        """Never use ``mode`` again (it cannot run this map); measure on without it."""
        self.modes = [m for m in self.modes if m != mode]
        self._rates.pop(mode, None)
        if self.mode == mode:
            self.mode, self._count, self._elapsed, self._cpu = "inline", 0, 0.0, 0.0

    def tick(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        if not self.enabled:
            return
        self._count += 1
        if self._count > 1:   # the first batch of a window carries the switch: not timed
            self._elapsed += now - self._last
            self._cpu += cpu - self._last_cpu
        self._last, self._last_cpu = now, cpu
        if self._count == self.WINDOW + 1:
            self._rates[self.mode] = (self._elapsed / self.WINDOW, self._cpu / self.WINDOW)
            self._count, self._elapsed, self._cpu = 0, 0.0, 0.0
            untried = [m for m in self.modes if m not in self._rates and m not in self._slow]
            if untried:
                self.mode = untried[0]   # measure the next way
            else:
                best = min(wall for wall, _ in self._rates.values())
                keeping_up = [m for m, (wall, _) in self._rates.items()
                              if wall <= best * self.KEEPS_UP]
                self.mode = min(keeping_up, key=lambda m: self._rates[m][1])
                # a way twice as slow is not measured again (its window would cost that much)
                self._slow |= {m for m, (wall, _) in self._rates.items() if wall > 2 * best}
                self._count = -self.RECHECK       # keep it a while, then measure again
                self._rates = {}


def _batches(cursor: Iterator[Any], size: int, drop_remainder: bool) -> Iterator[Any]:
    while True:
        chunk = []
        for element in cursor:
            chunk.append(element)
            if len(chunk) == size:
                break
        if not chunk or (drop_remainder and len(chunk) < size):
            return
        leaves = [structure.flatten(e) for e in chunk]
        yield structure.pack_as(chunk[0], [np.stack(c) for c in zip(*leaves)])
