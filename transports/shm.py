"""Shared-memory segments for arrays that travel between processes of one host.

Principles:

* **Nothing to leak.** A segment is an anonymous ``memfd`` (never a name in
  /dev/shm). Its file descriptor crosses to the peer once, over a Unix-domain
  SEQPACKET socket (``socket.send_fds``), and both sides close the fd as soon
  as they have mapped it. The memory lives exactly as long as some mapping of
  it does, so a SIGKILL of either side frees everything the dead side held.
* **One memcpy.** The sender pools segments per connection and copies an array
  into an already faulted segment; the receiver caches the mapping and hands
  out a read-only numpy view of it: no copy on the receiving side.
* **Never overwritten under a reader.** A segment carries one array at a time
  and is reused only after the receiver says it has released it (a
  ``weakref.finalize`` on the view's owner sends a release notice).

Ordering: the sender passes a new segment's fd *before* it writes the message
that refers to it, so by the time the receiver decodes the reference the fd
is already queued on the side socket and is read without waiting.

**Shared arrays** (:class:`SharedArena`, one per process): an array that
lives in shared memory from the start, such as a parameter server's
variable, is sent by reference, with no copy at all. Its segment is lent to
every co-located peer that reads it; while anyone holds it (a peer that has
not released it, or a view in this process), its owner must not write it:
:meth:`SharedArena.holders` tells, and the variable store copies on write
into a fresh arena array (:func:`shared_empty`). A buffer nobody holds any
more goes back to the arena's free list, so in steady state the versions of
a variable cycle through a few buffers that every peer has already mapped.
"""
from __future__ import annotations

import fcntl
import logging
import math
import mmap
import os
import resource
import socket
import struct
import sys
import threading
import weakref
from typing import Any, Callable

import numpy as np

from .errors import FrameError
from .settings import SHM_ARENA_BYTES, SettingError

__all__ = ["SegmentPool", "SegmentMaps", "SharedArena", "ARENA", "shared_empty", "MEMFD_NAME"]

logger = logging.getLogger(__name__)

MEMFD_NAME = "distrib-shm"
_ID = struct.Struct("<Q")
_MIN_SEGMENT = 64 * 1024
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _size_class(nbytes: int) -> int:
    # Powers of two: a reused segment fits a range of sizes, at most 2x waste.
    return max(_MIN_SEGMENT, 1 << (nbytes - 1).bit_length())


def _new_memfd(size: int) -> int:
    fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)  # the peer can trust the size
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Buffer:
    __slots__ = ("id", "size", "fd", "mm", "root", "pins")

    def __init__(self, buf_id: int, size: int, fd: int, mm: mmap.mmap) -> None:
        self.id, self.size, self.fd, self.mm = buf_id, size, fd, mm
        # Every array handed out is a view of ``root``, and numpy makes every
        # view of those views point at ``root`` too: its reference count is
        # the number of arrays (and peer loans) that use this buffer.
        self.root = np.frombuffer(mm, np.uint8)
        # loans of peers whose connection closed: they may still read it, so
        # it is never written or handed out again (see SegmentPool.close)
        self.pins: list[np.ndarray] = []


# ids of arena buffers live far above those a SegmentPool hands out
_ARENA_IDS = 1 << 48
# fds a receiver maps ahead of the message that refers to them, at most
_MAX_EARLY_FDS = 64


class SharedArena:
    """This process's arrays in shared memory, sent to co-located peers by reference.

    A buffer keeps its memfd open so that it can be lent to peers met later.
    ``limit`` bounds the bytes and ``max_buffers`` the fds it keeps; past them
    :func:`shared_empty` returns ordinary memory (sent with one copy, as
    any array). Buffers nobody holds are reused before new ones are made.
    """

    def __init__(self, limit: int = 1 << 30, max_buffers: int = 256) -> None:
        self.limit = limit
        self.max_buffers = max_buffers
        # free buffers kept for reuse past this many bytes are unmapped
        self.idle_limit = min(limit // 4, 64 << 20)
        self._by_id: dict[int, _Buffer] = {}
        self._by_root: dict[int, _Buffer] = {}
        self._total = 0
        self._next_id = _ARENA_IDS
        self.evicted: list[int] = []   # ids unmapped here, in order (peers must forget them)
        self.evicted_base = 0          # how many older ids were dropped from ``evicted``
        self._pid = os.getpid()
        self._lock = threading.Lock()  # servers of one process may run on several threads

    def after_fork_in_child(self) -> None:
        """Fit a forked child's copy for use (``os.register_at_fork`` calls it)."""
        # the child's copy must not wait for a lock some other thread held at fork
        self._lock = threading.Lock()

    def empty(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """An uninitialised array in a shared buffer (ordinary memory past the limits)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        # small arrays travel inline anyway; a forked child must not write
        # into the buffers it inherited (they are its parent's)
        if nbytes >= _MIN_SEGMENT and dtype.kind in "biufc" and os.getpid() == self._pid:
            with self._lock:
                buf = self._take(_size_class(nbytes))
                if buf is not None:
                    # the view counts as a holder before another thread looks
                    return buf.root[:nbytes].view(dtype).reshape(shape)
        return np.empty(shape, dtype)

    def _find(self, arr: Any) -> _Buffer | None:
        base = getattr(arr, "base", None)
        if base is None:
            return None
        buf = self._by_root.get(id(base))
        return buf if buf is not None and base is buf.root else None

    def lookup(self, arr: Any) -> _Buffer | None:
        """The buffer ``arr`` covers from its first byte, if it is an arena
        array this process may lend (a forked child's are its parent's)."""
        buf = self._find(arr)
        if buf is None or os.getpid() != self._pid or buf.pins \
                or arr.ctypes.data != buf.root.ctypes.data:
            return None
        return buf

    def holders(self, arr: Any) -> int:
        """How many arrays or peer loans use ``arr``'s buffer besides ``arr``
        itself (0 for an array that is not in the arena). In a forked child
        an arena array is always held: its parent may be reading it."""
        buf = self._find(arr)
        if buf is None:
            return 0
        if os.getpid() != self._pid:
            return 1
        # the arena's own reference, ``arr``'s, and getrefcount's argument
        return sys.getrefcount(buf.root) - 3

    def _take(self, size: int) -> _Buffer | None:
        for buf in self._by_id.values():
            # two references: the buffer's slot and getrefcount's argument
            if buf.size == size and not buf.pins and sys.getrefcount(buf.root) <= 2:
                return buf
        if self._total + size > self.limit or len(self._by_id) >= self.max_buffers:
            self._evict(size)
            if self._total + size > self.limit or len(self._by_id) >= self.max_buffers:
                return None
        elif self._idle_bytes() > self.idle_limit:
            # free buffers of other sizes that nobody has wanted back: unmap
            # at least idle_limit bytes of them (_evict frees until total + need fits)
            self._evict(self.limit - self._total + self.idle_limit)
        fd = _new_memfd(size)
        try:
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        buf = _Buffer(self._next_id, size, fd, mm)
        self._next_id += 1
        self._by_id[buf.id] = buf
        self._by_root[id(buf.root)] = buf
        self._total += size
        return buf

    def _idle_bytes(self) -> int:
        return sum(b.size for b in self._by_id.values()
                   if sys.getrefcount(b.root) <= 2 + len(b.pins))

    def _evict(self, need: int) -> None:
        # unmap free buffers (largest first) until ``need`` more bytes fit; a
        # pinned one is free once only its pins hold it: it is never reused,
        # and a peer's mapping keeps its memory as long as that peer needs it
        for buf in sorted(self._by_id.values(), key=lambda b: -b.size):
            if (self._total + need <= self.limit and len(self._by_id) < self.max_buffers):
                return
            if sys.getrefcount(buf.root) > 2 + len(buf.pins):
                continue
            del self._by_id[buf.id], self._by_root[id(buf.root)]
            buf.root = None  # type: ignore[assignment]
            buf.pins.clear()
            _unmap(buf.mm)
            os.close(buf.fd)
            self._total -= buf.size
            self.evicted.append(buf.id)
        if len(self.evicted) > 4096:   # connections more than this far behind miss some
            self.evicted_base += 2048
            del self.evicted[:2048]

    def pin(self, buf_id: int, loans: list[np.ndarray]) -> None:
        """Loans of a peer whose connection closed: the buffer is never written
        or handed out again (the peer may still read it)."""
        buf = self._by_id.get(buf_id)
        if buf is not None:
            buf.pins.extend(loans)

    def trim(self) -> None:
        """Unmap the buffers nobody holds (a server that stops calls this)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._evict(self.limit + 1)

    def close(self) -> None:
        """Unmap every buffer (arrays still alive keep theirs until they die)."""
        for buf in self._by_id.values():
            buf.root = None  # type: ignore[assignment]
            _unmap(buf.mm)
            os.close(buf.fd)
        self._by_id.clear()
        self._by_root.clear()
        self._total = 0


def _arena_limit() -> int:
    # read once, at import; a bad value must not make ``import transports`` fail
    try:
        return SHM_ARENA_BYTES.get()
    except SettingError as e:
        logger.warning("%s; using %s", e, SHM_ARENA_BYTES.shown_default())
        return SHM_ARENA_BYTES.default


def _arena_max_buffers() -> int:
    # each buffer keeps a descriptor open: a quarter of the process's allowance
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 16
    return max(16, min(4096, soft // 4))


# DISTRIB_SHM_ARENA_BYTES bounds it (0: no shared arrays, every send copies)
ARENA = SharedArena(_arena_limit(), _arena_max_buffers())
os.register_at_fork(after_in_child=ARENA.after_fork_in_child)


def shared_empty(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array in this process's :data:`ARENA`."""
    return ARENA.empty(shape, dtype)


class _Segment:
    __slots__ = ("id", "size", "mm")  # many per connection, touched per send

    def __init__(self, seg_id: int, size: int, mm: mmap.mmap) -> None:
        self.id, self.size, self.mm = seg_id, size, mm


class SegmentPool:
    """The sending side: segments this process wrote, free or lent to the peer.

    ``limit`` bounds the bytes pooled (free + lent); when a new segment would
    pass it, free segments are unmapped first (their ids are queued in
    :attr:`evicted` so the peer drops its mapping too), and if that is not
    enough :meth:`put` returns None and the array goes inline over the socket.
    A single array bigger than the limit still gets a segment when nothing
    else is pooled.
    """

    def __init__(self, fd_sock: socket.socket, limit: int) -> None:
        self._sock = fd_sock
        self._limit = limit
        self._free: dict[int, list[_Segment]] = {}
        self._lent: dict[int, _Segment] = {}
        self._total = 0
        self._next_id = 1
        self.evicted: list[int] = []
        self.lent_bytes = 0
        # arena buffers: those whose fd the peer has, and one reference to
        # a buffer per loan (which tells the arena that someone still reads it)
        self._arena_known: set[int] = set()
        self._arena_lent: dict[int, list[np.ndarray]] = {}
        self._arena_seen = ARENA.evicted_base + len(ARENA.evicted)
        self._since: list[int] | None = None   # ids put since mark(), for rollback()

    def put(self, arr: np.ndarray, fortran: bool) -> int | None:
        """Lend ``arr`` to the peer through shared memory; the segment's id, or None.

        An arena array is lent as it is; any other is copied into a segment."""
        if arr.base is not None:
            buf = ARENA.lookup(arr)
            if buf is not None:
                return self._lend(buf)
        seg = self._take(_size_class(arr.nbytes))
        if seg is None:
            return None
        if self._since is not None:
            self._since.append(seg.id)
        dest = np.frombuffer(seg.mm, arr.dtype, arr.size).reshape(arr.shape, order="F" if fortran else "C")
        np.copyto(dest, arr, casting="no")
        del dest
        self._lent[seg.id] = seg
        self.lent_bytes += seg.size
        return seg.id

    def _lend(self, buf: _Buffer) -> int:
        seen = ARENA.evicted_base + len(ARENA.evicted)
        if seen != self._arena_seen:
            gone = ARENA.evicted[max(0, self._arena_seen - ARENA.evicted_base):]
            self._arena_seen = seen
            self.evicted += [i for i in gone if i in self._arena_known]
            self._arena_known.difference_update(gone)
        if buf.id not in self._arena_known:
            socket.send_fds(self._sock, [_ID.pack(buf.id)], [buf.fd])
            self._arena_known.add(buf.id)
        # the loan holds the buffer's root: ARENA.holders counts it
        self._arena_lent.setdefault(buf.id, []).append(buf.root)
        if self._since is not None:
            self._since.append(buf.id)
        return buf.id

    def mark(self) -> None:
        """Start recording what :meth:`put` lends, for :meth:`rollback`."""
        self._since = []

    def commit(self) -> None:
        """The message went out: stop recording (see :meth:`mark`)."""
        self._since = None

    def rollback(self) -> None:
        """Take back what was lent since :meth:`mark`: the message that
        referred to it was never sent. (A new segment's fd has gone to the
        peer already; the peer maps it when it is referred to later.)"""
        ids, self._since = self._since or [], None
        for seg_id in reversed(ids):
            self.release(seg_id)

    def release(self, seg_id: int) -> None:
        if seg_id >= _ARENA_IDS:
            loans = self._arena_lent.get(seg_id)
            if not loans:
                logger.warning("peer released shared array %d that it does not hold", seg_id)
                return
            loans.pop()
            if not loans:
                del self._arena_lent[seg_id]
            return
        seg = self._lent.pop(seg_id, None)
        if seg is None:
            logger.warning("peer released shared-memory segment %d that it does not hold", seg_id)
            return
        self.lent_bytes -= seg.size
        self._free.setdefault(seg.size, []).append(seg)

    def close(self) -> None:
        for seg in [*self._lent.values(), *(s for lst in self._free.values() for s in lst)]:
            _unmap(seg.mm)
        self._lent.clear()
        self._free.clear()
        self._total = self.lent_bytes = 0
        # The connection is gone but the peer process may still read what it
        # was lent: those arena buffers are never written again.
        for buf_id, loans in self._arena_lent.items():
            ARENA.pin(buf_id, loans)
        self._arena_lent.clear()
        self._arena_known.clear()

    def _take(self, size: int) -> _Segment | None:
        free = self._free.get(size)
        if free:
            return free.pop()
        if self._total + size > self._limit:
            self._evict(self._total + size - self._limit)
            if self._total + size > self._limit and self._total:
                return None
        return self._create(size)

    def _idle_bytes(self) -> int:
        return sum(b.size for b in self._by_id.values()
                   if sys.getrefcount(b.root) <= 2 + len(b.pins))

    def _evict(self, need: int) -> None:
        for size in sorted(self._free, reverse=True):
            segs = self._free[size]
            while segs and need > 0:
                seg = segs.pop()
                _unmap(seg.mm)
                self._total -= size
                need -= size
                self.evicted.append(seg.id)

    def _create(self, size: int) -> _Segment:
        seg_id = self._next_id
        self._next_id += 1
        fd = _new_memfd(size)
        try:
            mm = mmap.mmap(fd, size)
            socket.send_fds(self._sock, [_ID.pack(seg_id)], [fd])
        finally:
            os.close(fd)  # the mapping (and the peer's) keeps the memory alive
        self._total += size
        return _Segment(seg_id, size, mm)


class SegmentMaps:
    """The receiving side: read-only mappings of the peer's segments, by id."""

    def __init__(self, fd_sock: socket.socket, on_release: Callable[[int, int], None]) -> None:
        self._sock = fd_sock
        self._on_release = on_release
        self._maps: dict[int, mmap.mmap] = {}

    def array(self, dt: np.dtype, shape: tuple, seg_id: int, nbytes: int, fortran: bool) -> np.ndarray:
        """A read-only view of segment ``seg_id``; releasing it frees the segment."""
        mm = self._maps.get(seg_id)
        if mm is None:
            mm = self._attach(seg_id)
        if nbytes > len(mm) or nbytes % dt.itemsize:
            raise FrameError(f"shared-memory segment {seg_id} holds {len(mm)} bytes, not {nbytes}")
        # Views of views keep ``owner`` (an ndarray over the mapping) as their
        # base, so its finalizer runs only when the last view of this transfer dies.
        owner = np.frombuffer(mm, np.uint8, nbytes)
        weakref.finalize(owner, self._on_release, seg_id, nbytes).atexit = False
        return owner.view(dt).reshape(shape, order="F" if fortran else "C")

    def forget(self, seg_id: int) -> None:
        mm = self._maps.pop(seg_id, None)
        if mm is not None:
            _unmap(mm)

    def close(self) -> None:
        for mm in self._maps.values():
            _unmap(mm)  # arrays still alive keep theirs mapped until they die
        self._maps.clear()

    def _attach(self, seg_id: int) -> mmap.mmap:
        # The fds come in the order the sender made its segments. One whose
        # message was never sent (it failed to encode) comes before the one
        # wanted: it is mapped too, for when the sender refers to it.
        for _ in range(_MAX_EARLY_FDS):
            try:
                msg, fds, flags, _ = socket.recv_fds(self._sock, _ID.size, 1)
            except (OSError, ValueError) as exc:
                raise FrameError(f"no fd for shared-memory segment {seg_id}: {exc}") from None
            try:
                if len(fds) != 1 or len(msg) != _ID.size:
                    raise FrameError(f"expected the fd of shared-memory segment {seg_id}, "
                                     f"got {msg!r} {fds}")
                got, fd = _ID.unpack(msg)[0], fds[0]
                if got in self._maps:
                    raise FrameError(f"a second fd for shared-memory segment {got}")
                if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
                    raise FrameError(f"shared-memory segment {got} is not sealed")
                mm = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
            finally:
                for fd in fds:
                    os.close(fd)
            self._maps[got] = mm
            if got == seg_id:
                return mm
        raise FrameError(f"no fd for shared-memory segment {seg_id} among the next "
                         f"{_MAX_EARLY_FDS} the peer passed")


def _unmap(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        pass  # a live array still views it; the mapping goes when that array does
