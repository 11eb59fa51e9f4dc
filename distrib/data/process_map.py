"""Worker processes for a map the GIL serializes (AUTOTUNE's third choice).

A map of Python and small numpy calls (CIFAR's per-image augmentation: ten
calls of a few microseconds on 24x24x3 arrays) holds the GIL almost all the
time, so threads only add their hand-offs (measured: 0.27 ms of CPU per
image with two threads against 0.09 with none). Processes run it on every
core: :class:`ProcessMap` forks ``n`` children when a fused map-and-batch's
tuner tries them (``parallel_map._Tuner``), each running the map's own
function (inherited by the fork: a closure or lambda needs no pickling) on
the elements it is sent, in order, and sending the results back.

Rules it keeps:
- Nothing is pickled: a worker's part of a batch crosses the pipe as one
  msgpack of its nest and each leaf stacked over the part (dtype, shape,
  bytes; strings as lists of bytes), both ways, so the parent copies a
  few large arrays into the batch instead of decoding every element.
- The children die with their cursor: closing it closes the pipes (a child
  exits at the end of its input), then waits a bounded time and kills
  what is left, by pid; a child whose parent dies sees its pipe end and
  exits, and a watchdog thread ends it within a second of its parent's death
  even inside a map function that never returns. A child closes the
  parent's ends of every other worker's pipe
  (``_PARENT_ENDS``, of every ProcessMap of this process), so no worker
  holds another's pipe open past its cursor. They never touch the parent's
  event loops, sessions or GPUs: they run the map function and numpy, then
  ``os._exit``.
- Work goes out in chunks of rows, round robin, and comes back in the same
  order per child, so a batch is filled as the sequential map fills it; the
  next batch's block goes out before this one's results are read
  (:meth:`ProcessMap.submit`/:meth:`~ProcessMap.collect`), so the workers map
  it while the parent reads records and hands a batch on (measured on CIFAR:
  a block at a time left the two cores 17% idle);
  each element's random draws are keyed by its position (value_mode), so
  the processes draw what one thread draws.
- An exception in the map function comes back as its type's name and
  message (``distrib.errors.to_wire``) and is raised in the consumer as
  that ``dt.errors`` class (any other exception as an
  ``InvalidArgumentError`` naming its type), after the other workers'
  answers to the block are read (the pipes stay in step); a child that
  dies is an ``InternalError``, and one that stops answering is named in a
  warning every 30 s. A block is encoded whole before any of it is sent,
  so one that cannot go (``Ragged``) leaves nothing in the pipes.
"""
from __future__ import annotations

import logging
import math
import mmap
import os
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection, Pipe
from typing import Any, Callable

import msgpack
import numpy as np

from distrib import errors
from distrib.data import cache, structure
from distrib.errors import InternalError, InvalidArgumentError

__all__ = ["ProcessMap", "Ragged", "WorkerDied", "available"]

_JOIN_S = 1.0
_POLL_S = 1.0
_STALL_S = 30.0
logger = logging.getLogger(__name__)
# the parent's end of every live worker pipe in this process: a new child closes them all
# (else it would keep an older map's pipes open, and that map's workers would never see
# their input end); made and changed under _FORK_LOCK, so a fork sees a whole set
_PARENT_ENDS: set[Connection] = set()
_FORK_LOCK = threading.Lock()


def available() -> bool:
    """Whether this platform can fork workers (Linux, macOS)."""
    return hasattr(os, "fork")


def pack_block(elements: list[Any]) -> bytes:
    """Elements of one nest and shapes as that nest of stacked arrays (one leaf
    each: a few large payloads instead of one per element)."""
    first = elements[0]
    columns = zip(*(structure.flatten(e) for e in elements))
    leaves = []
    for column in columns:
        arrays = [np.asarray(v) for v in column]
        if len({a.shape for a in arrays}) > 1:
            raise Ragged("a map run in worker processes needs elements of one shape per "
                         "component")
        leaves.append(cache.leaf_out(np.stack(arrays)))
    return msgpack.packb([cache.nest_layout(first), leaves], use_bin_type=True)


def unpack_block(data: bytes) -> tuple[Any, list[np.ndarray]]:
    """The nest (leaves as placeholders) and the stacked leaves of :func:`pack_block`."""
    layout, leaves = msgpack.unpackb(data, raw=False)
    return cache.nest_of_layout(layout), [cache.leaf_in(*leaf) for leaf in leaves]


def _rows(nest: Any, leaves: list[np.ndarray]) -> list[Any]:
    """The elements of a block: row k of every leaf, packed as the nest."""
    out = []
    for k in range(len(leaves[0]) if leaves else 0):
        row = []
        for leaf in leaves:
            v = leaf[k]
            row.append(v if isinstance(v, np.ndarray) or leaf.dtype.kind != "O"
                       else np.array(v, dtype=object))
        out.append(structure.pack_as(nest, row))
    return out


class _Arena:
    """Shared memory for the workers' results: anonymous and ``MAP_SHARED``,
    made before the fork (so nothing in /dev/shm, gone with the last process
    that maps it), :data:`SLOTS` batches of the map's element layout. A worker
    writes each result into its row of the block's slot, and the parent copies
    the slot into the batch: two copies of an image instead of seven (stack,
    bytes, msgpack and the pipe both ways; on CIFAR's 24x24x3 floats those
    copies cost about a fifth of a worker's time per image, measured)."""

    SLOTS = 3            # two blocks at the workers, one being copied out
    MAX_BYTES = 64 << 20  # bigger batches (large images) go through the pipes

    def __init__(self, layout: list[tuple[np.dtype, tuple]], rows: int) -> None:
        self.layout, self.rows = layout, rows
        self.leaf_bytes = [rows * d.itemsize * math.prod(shape) for d, shape in layout]
        self.slot_bytes = sum(-(-b // 64) * 64 for b in self.leaf_bytes)
        self.mem = mmap.mmap(-1, self.SLOTS * self.slot_bytes)
        self._views: dict[int, list[np.ndarray]] = {}

    @classmethod
    def for_element(cls, element: Any, rows: int) -> _Arena | None:
        """An arena for ``rows`` elements like ``element``; None when one cannot
        hold them (strings) or would be too big."""
        leaves = [np.asarray(v) for v in structure.flatten(element)]
        if not leaves or any(v.dtype.kind == "O" for v in leaves):
            return None
        layout = [(v.dtype, v.shape) for v in leaves]
        if cls.SLOTS * rows * sum(v.nbytes for v in leaves) > cls.MAX_BYTES:
            return None
        return cls(layout, rows)

    def views(self, slot: int) -> list[np.ndarray]:
        """The slot's arrays, one per leaf: ``[rows, *shape]``."""
        views = self._views.get(slot)
        if views is None:
            views, at = [], slot * self.slot_bytes
            for (dtype, shape), size in zip(self.layout, self.leaf_bytes):
                views.append(np.frombuffer(self.mem, dtype, self.rows * math.prod(shape),
                                           at).reshape(self.rows, *shape))
                at += -(-size // 64) * 64
            self._views[slot] = views
        return views

    def put(self, slot: int, row0: int, results: list[Any]) -> bool:
        """Write ``results`` into rows ``row0...`` of ``slot``; False (nothing
        usable written) when one differs from the layout: the pipe takes them."""
        views = self.views(slot)
        for k, element in enumerate(results):
            leaves = structure.flatten(element)
            if len(leaves) != len(views):
                return False
            for view, value in zip(views, leaves):
                value = np.asarray(value)
                if value.shape != view.shape[1:] or value.dtype != view.dtype:
                    return False
                view[row0 + k] = value
        return True

    def close(self) -> None:
        self._views.clear()
        try:
            self.mem.close()
        except BufferError:   # a view is still held somewhere: the mapping goes with it
            pass


def _child(conn: Connection, fn: Callable[[Any, int, int], Any], arena: _Arena | None) -> None:
    """A worker's loop: (epoch, first index, a block of elements) in, the block of
    results (or an error) out. A reader thread takes the requests off the pipe
    as they come, so the parent can send the next block while this one is
    mapped and its results are written (both sides writing at once to full
    pipes would otherwise deadlock)."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        while True:
            try:
                inbox.put(conn.recv_bytes())
            except (EOFError, OSError):
                inbox.put(None)
                return
    threading.Thread(target=read, daemon=True, name="dt.data.worker.inbox").start()
    while True:
        request = inbox.get()
        if request is None:
            return
        epoch, first, block, slot, row0 = msgpack.unpackb(request, raw=False)
        try:
            nest, leaves = unpack_block(block)
            results = [fn(e, epoch, first + k) for k, e in enumerate(_rows(nest, leaves))]
            if slot is not None and arena is not None and arena.put(slot, row0, results):
                conn.send_bytes(msgpack.packb([True, None]))   # written in place
            else:
                conn.send_bytes(msgpack.packb([True, pack_block(results)], use_bin_type=True))
        except Exception as exc:   # the map function's own error, sent back by its words
            if isinstance(exc, errors.OpError):
                wire = errors.to_wire(exc)
            else:
                wire = {"type": "InvalidArgumentError", "message": f"{type(exc).__name__}: {exc}"}
            conn.send_bytes(msgpack.packb([False, wire], use_bin_type=True))


def _watch_parent(parent: int) -> None:
    """A worker's watchdog thread: end the worker once its parent is gone, even in
    the middle of a map function that never returns (the pipe's end is only
    seen between elements)."""
    while os.getppid() == parent:
        time.sleep(_POLL_S)
    os._exit(1)


def _forked() -> None:
    """In a new worker: no pipes of the parent's, and a lock of its own (the
    parent's was held across the fork), should the map make workers itself."""
    global _FORK_LOCK
    _PARENT_ENDS.clear()
    _FORK_LOCK = threading.Lock()


def _running(pid: int) -> bool:
    """Whether child ``pid`` still runs (reaping it if it has ended)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


class WorkerDied(InternalError):
    """A worker process died or its pipe broke: the map cannot go on (not one
    element's error)."""


class Ragged(InvalidArgumentError):
    """A block's elements differ in shape: they cannot go to the workers stacked
    (the map then runs in the consumer's thread)."""


class ProcessMap:
    """``n`` forked workers running ``fn(element, epoch, index)``."""

    def __init__(self, fn: Callable[[Any, int, int], Any], n: int, example: Any = None,
                 rows: int = 0) -> None:
        """``example``: an element the map made (its layout), with ``rows`` the
        most a block holds: the workers write results like it in place (_Arena)."""
        self.pids: list[int] = []
        self.conns: list[Connection] = []
        self.arena = _Arena.for_element(example, rows) if example is not None and rows else None
        self._nest = (cache.nest_of_layout(cache.nest_layout(example))
                      if self.arena is not None else None)
        self._slot = 0
        try:
            self._start(fn, n)
        except BaseException:   # a fork that failed: the workers made so far end now
            self.close()
            raise

    def _start(self, fn: Callable[[Any, int, int], Any], n: int) -> None:
        me = os.getpid()
        for _ in range(n):
            with _FORK_LOCK:
                parent, child = Pipe(duplex=True)
                pid = os.fork()
                if pid == 0:   # the child: run the map, never return into the parent's code
                    code = 0
                    try:
                        signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops us
                        for other in (*_PARENT_ENDS, parent):
                            other.close()
                        _forked()
                        threading.Thread(target=_watch_parent, args=(me,), daemon=True,
                                         name="dt.data.worker.watchdog").start()
                        _child(child, fn, self.arena)
                    except BaseException:
                        code = 1
                    finally:
                        os._exit(code)
                _PARENT_ENDS.add(parent)
            child.close()
            self.pids.append(pid)
            self.conns.append(parent)

    def map_block(self, epoch: int, first: int, elements: list[Any]
                  ) -> list[tuple[int, Any, list[np.ndarray]]]:
        """The results of ``elements`` (positions ``first``...): for each worker's
        part, ``(its first row, the results' nest, the stacked leaves)``."""
        return self.collect(self.submit(epoch, first, elements))

    def submit(self, epoch: int, first: int, elements: list[Any]) -> tuple:
        """Send ``elements`` (positions ``first``...) to the workers, a part each;
        the ticket to :meth:`collect` their results with. Blocks are collected in
        the order they were submitted (each worker answers its pipe in order)."""
        n = len(self.conns)
        size = -(-len(elements) // n)
        slot = None
        if self.arena is not None and len(elements) <= self.arena.rows:
            slot, self._slot = self._slot, (self._slot + 1) % _Arena.SLOTS
        requests = [(w, msgpack.packb([epoch, first + w * size,
                                       pack_block(elements[w * size:(w + 1) * size]),
                                       slot, w * size], use_bin_type=True))
                    for w in range(n) if elements[w * size:(w + 1) * size]]
        for w, request in requests:   # all encoded first: a Ragged block sends nothing
            self.conns[w].send_bytes(request)
        return size, len(elements), slot, [w for w, _ in requests]

    def collect(self, ticket: tuple) -> list[tuple[int, Any, list[np.ndarray]]]:
        """The results of a submitted block (see :meth:`map_block`); leaves in the
        arena are views of it, valid until the slot's next block is submitted."""
        size, count, slot, parts = ticket
        blocks, failed = [], None
        for w in parts:   # every answer read, a failed one too: the pipes stay in step
            ok, payload = self._answer(w)
            if not ok:
                failed = failed or (w, payload)
                continue
            start = w * size
            if payload is None:   # in the arena
                end = min(start + size, count)
                blocks.append((start, self._nest,
                               [v[start:end] for v in self.arena.views(slot)]))
                continue
            nest, leaves = unpack_block(payload)
            blocks.append((start, nest, leaves))
        if failed is not None:
            w, wire = failed
            wire = dict(wire, message=f"map function failed in worker process {self.pids[w]}: "
                                      f"{wire.get('message', '')}")
            raise errors.from_wire(wire)
        return blocks

    def _answer(self, w: int) -> tuple[bool, Any]:
        self._wait(w, self.conns[w])
        try:
            return msgpack.unpackb(self.conns[w].recv_bytes(), raw=False)
        except (EOFError, OSError):
            raise WorkerDied(f"a dt.data map worker process (pid {self.pids[w]}) "
                                "died; see its error above") from None

    def _wait(self, w: int, conn: Connection) -> None:
        """Until worker ``w`` has answered: a dead worker is an error at once, a
        silent one is named in a warning every ``_STALL_S`` (never a silent hang)."""
        waited = 0.0
        while not conn.poll(_POLL_S):
            waited += _POLL_S
            if not _running(self.pids[w]):
                raise WorkerDied(f"a dt.data map worker process (pid {self.pids[w]}) "
                                    "died; see its error above")
            if waited >= _STALL_S:
                waited = 0.0
                logger.warning("dt.data map worker process %d has not answered for %.0f s "
                               "(a slow map, or a map function stuck on something the fork "
                               "did not carry over)", self.pids[w], _STALL_S)

    def close(self) -> None:
        """End the workers: pipes closed, then waited for, then killed (by pid)."""
        with _FORK_LOCK:
            for conn in self.conns:
                _PARENT_ENDS.discard(conn)
                conn.close()
        deadline = time.monotonic() + _JOIN_S
        alive = list(self.pids)
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _running(pid)]
            if alive:
                time.sleep(0.005)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.pids, self.conns = [], []
        if self.arena is not None:
            self.arena.close()
            self.arena = None
