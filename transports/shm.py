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
"""
from __future__ import annotations

import fcntl
import logging
import mmap
import os
import socket
import struct
import weakref
from typing import Callable

import numpy as np

from .errors import FrameError

__all__ = ["SegmentPool", "SegmentMaps", "MEMFD_NAME"]

logger = logging.getLogger(__name__)

MEMFD_NAME = "distrib-shm"
_ID = struct.Struct("<Q")
_MIN_SEGMENT = 64 * 1024
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _size_class(nbytes: int) -> int:
    # Powers of two: a reused segment fits a range of sizes, at most 2x waste.
    return max(_MIN_SEGMENT, 1 << (nbytes - 1).bit_length())


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

    def put(self, arr: np.ndarray, fortran: bool) -> int | None:
        """Copy ``arr`` into a segment lent to the peer; its id, or None."""
        seg = self._take(_size_class(arr.nbytes))
        if seg is None:
            return None
        dest = np.frombuffer(seg.mm, arr.dtype, arr.size).reshape(arr.shape, order="F" if fortran else "C")
        np.copyto(dest, arr, casting="no")
        del dest
        self._lent[seg.id] = seg
        self.lent_bytes += seg.size
        return seg.id

    def release(self, seg_id: int) -> None:
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

    def _take(self, size: int) -> _Segment | None:
        free = self._free.get(size)
        if free:
            return free.pop()
        if self._total + size > self._limit:
            self._evict(self._total + size - self._limit)
            if self._total + size > self._limit and self._total:
                return None
        return self._create(size)

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
        fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)  # the peer can trust the size
            mm = mmap.mmap(fd, size)
            socket.send_fds(self._sock, [_ID.pack(seg_id)], [fd])
        finally:
            os.close(fd)  # the mapping (and the peer's) keeps the memory alive
        self._total += size
        return _Segment(seg_id, size, mm)


class SegmentMaps:
    """The receiving side: read-only mappings of the peer's segments, by id."""

    def __init__(self, fd_sock: socket.socket, on_release: Callable[[int], None]) -> None:
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
        weakref.finalize(owner, self._on_release, seg_id).atexit = False
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
        try:
            msg, fds, flags, _ = socket.recv_fds(self._sock, _ID.size, 1)
        except (OSError, ValueError) as exc:
            raise FrameError(f"no fd for shared-memory segment {seg_id}: {exc}") from None
        try:
            if len(fds) != 1 or len(msg) != _ID.size or _ID.unpack(msg)[0] != seg_id:
                raise FrameError(f"expected the fd of shared-memory segment {seg_id}, got {msg!r} {fds}")
            fd = fds[0]
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
                raise FrameError(f"shared-memory segment {seg_id} is not sealed")
            mm = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
        finally:
            for fd in fds:
                os.close(fd)
        self._maps[seg_id] = mm
        return mm


def _unmap(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        pass  # a live array still views it; the mapping goes when that array does
