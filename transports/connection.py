"""The public connection object: messages in order, both ways, over one Wire.

A :class:`Connection` is what ``listen``'s callback and ``connect`` hand out
after a successful handshake. Its kind is "tcp" (everything through the
socket), "tls" (the same, over mutual TLS: :mod:`transports.tls`) or "shm" (arrays of at least ``shm_threshold`` bytes through shared
memory segments, see :mod:`transports.shm`; the socket carries headers,
small messages, and release notices that return segments to their sender).
"""
from __future__ import annotations

import asyncio
import collections
import logging
import socket
import threading
from typing import Any, Callable

from .config import PeerInfo, TransportConfig
from .errors import ConnectionClosed, FrameError
from .shm import SegmentMaps, SegmentPool
from .wire import FRAME_FORGET, FRAME_RELEASE, Wire

__all__ = ["Connection"]

logger = logging.getLogger("transports")

_RELEASE_WAIT_S = 0.2
# A release notice waits this long for a message to ride along with (each
# frame of its own costs both processes a system call and a wake-up, ~50 us
# of CPU on a VM)...
_RELEASE_ALONE_S = 0.002
# ... and this long on a connection that this side sends messages on too:
# long enough for a worker's releases of the variables it read to ride with
# its gradients, which leave 5-15 ms into a training step, over the
# connection both ways share (distrib.runtime.actors.system)
_RELEASE_DELAY_S = 0.02
# ... unless this many bytes wait to be released (or an eighth of the pool
# bound, where that is less): they go at once, so that a sender of big
# arrays gets its segments back without waiting out the delay
_RELEASE_NOW_BYTES = 16 << 20


class Connection:
    """An authenticated, ordered message channel to one peer.

    Arrays given to :meth:`send` / :meth:`send_nowait` on a tcp connection are
    referenced, not copied, until the kernel has taken them: ``send()``
    returns only after that, so the caller may then mutate them; after
    ``send_nowait`` do not mutate an array you sent. On shm connections the
    array is copied into shared memory during the call. Arrays received over
    tcp are writable; arrays received through shared memory are read-only
    views of the mapping (copy one to modify it).
    """

    def __init__(self, wire: Wire, local: PeerInfo, peer: PeerInfo, config: TransportConfig,
                 fd_sock: socket.socket | None = None, peer_max_frame: int | None = None) -> None:
        self._wire = wire
        self.local = local
        self.peer = peer
        tls = wire.transport is not None and wire.transport.get_extra_info("ssl_object") is not None
        self.kind = "shm" if fd_sock is not None else "tls" if tls else "tcp"
        self._fd_sock = fd_sock
        self._pool: SegmentPool | None = None
        self._maps: SegmentMaps | None = None
        self._releases: collections.deque[int] = collections.deque()
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        assert config.max_frame_bytes is not None and config.frame_timeout_s is not None
        wire.open_up(config.max_frame_bytes, config.frame_timeout_s, peer_max_frame)
        wire.label = f"{peer.name} ({wire.label})"
        if fd_sock is not None:
            self._attach_shm(fd_sock, config)
        wire.lost.add_done_callback(self._cleanup)

    def _attach_shm(self, fd_sock: socket.socket, config: TransportConfig) -> None:
        self._pool = SegmentPool(fd_sock, config.shm_pool_bytes)
        self._maps = SegmentMaps(fd_sock, self._release_soon)
        self._release_scheduled = False
        self._release_timer: asyncio.TimerHandle | None = None
        self._release_bytes = 0   # of the segments in self._releases (a hint)
        self._rides = False       # this side has sent a message here: notices may ride
        # Shared-memory flow control: past this many bytes lent to a peer that
        # has not released them, send() waits (briefly) for a release notice.
        self._shm_high_water = config.shm_pool_bytes // 4
        self._released: asyncio.Future | None = None
        self._wire.encoder = type(self._wire.encoder)(self._pool.put, config.shm_threshold)
        self._wire.decoder = type(self._wire.decoder)(self._maps.array)
        self._wire.on_control = self._on_control

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Connection {self.kind} {self.local.name} <-> {self.peer.name} {state}>"

    @property
    def closed(self) -> bool:
        return self._wire.closed

    @property
    def bytes_received(self) -> int:
        """Bytes read from the peer so far (a frame still arriving counts)."""
        return self._wire.bytes_in

    def fail(self, exc: BaseException) -> None:
        """Drop the connection at once because of ``exc``, which its close
        callback then receives (a peer declared dead, say)."""
        self._wire.fail(exc)

    def start(self, on_message: Callable[[Any], None],
              on_close: Callable[[BaseException | None], None]) -> None:
        """Deliver every message to ``on_message`` (on the loop, in order) from now on."""
        self._wire.start(on_message, on_close)

    async def recv(self) -> Any:
        """The next message; raises ConnectionClosed at the end (without start())."""
        return await self._wire.recv()

    async def send(self, obj: Any) -> None:
        """Send one message; waits only while the peer is slow to take bytes."""
        wire = self._wire
        self._write(obj)
        pool = self._pool
        if pool is not None:
            if pool.evicted:
                self._send_forget()
            if pool.lent_bytes > self._shm_high_water:
                await self._await_release()
        if wire.paused:
            await wire.drain()

    def send_nowait(self, obj: Any) -> None:
        """Send one message without waiting (the write buffer grows if the peer is slow)."""
        self._write(obj)
        if self._pool is not None and self._pool.evicted:
            self._send_forget()

    async def close(self) -> None:
        """Flush what is queued, close, and release shared memory."""
        wire = self._wire
        if not wire.closed and wire.transport is not None:
            wire.flush()
            wire.transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(wire.lost), 2.0)
            except asyncio.TimeoutError:
                wire.transport.abort()
                await wire.lost

    def abort(self) -> None:
        """Drop the connection at once, discarding unsent data."""
        if self._wire.transport is not None:
            self._wire.transport.abort()

    # ---- shared memory bookkeeping -------------------------------------------
    def _on_control(self, ftype: int, ids: Any) -> None:
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise FrameError(f"bad segment list {ids!r:.80}")
        assert self._pool is not None and self._maps is not None
        if ftype == FRAME_RELEASE:
            for i in ids:
                self._pool.release(i)
            if self._released is not None and not self._released.done():
                self._released.set_result(None)
        elif ftype == FRAME_FORGET:
            for i in ids:
                self._maps.forget(i)
        else:
            raise FrameError(f"unknown frame type {ftype}")

    async def _await_release(self) -> None:
        # Bounded: a receiver may legitimately hold arrays until it gets more
        # messages; after the wait the pool grows or the array goes inline.
        assert self._pool is not None
        loop = self._loop
        deadline = loop.time() + _RELEASE_WAIT_S
        while self._pool.lent_bytes > self._shm_high_water and not self._wire.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if self._released is None or self._released.done():
                self._released = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._released), remaining)
            except asyncio.TimeoutError:
                return

    def _release_soon(self, seg_id: int, nbytes: int = 0) -> None:
        # Runs wherever the last view of a received array died (any thread):
        # queue the id; the notices go in one frame, with the next message
        # this side sends or after _RELEASE_DELAY_S, whichever comes first
        # (at once when _RELEASE_NOW_BYTES are waiting).
        self._releases.append(seg_id)
        self._release_bytes += nbytes
        now = self._release_bytes >= min(_RELEASE_NOW_BYTES, max(self._shm_high_water // 2, 1))
        if (now or not self._release_scheduled) and not self._wire.closed:
            self._release_scheduled = True
            try:
                if threading.get_ident() == self._loop_thread:
                    self._arm_release_timer(now)
                else:
                    self._loop.call_soon_threadsafe(self._arm_release_timer, now)
            except RuntimeError:
                pass  # loop closed: the connection is gone with it

    def _arm_release_timer(self, now: bool = False) -> None:
        if self._wire.closed:
            return
        if now and self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        if self._release_timer is None:
            delay = 0 if now else _RELEASE_DELAY_S if self._rides else _RELEASE_ALONE_S
            self._release_timer = self._loop.call_later(delay, self._flush_releases)

    def _take_ids(self) -> list[int]:
        # No timer, then allow a new schedule, then drain: an id queued
        # meanwhile (a finalizer may run at any point) is drained here or
        # arms a timer of its own.
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self._release_scheduled = False
        self._release_bytes = 0
        ids = []
        while self._releases:
            ids.append(self._releases.popleft())
        return ids

    def _write(self, obj: Any) -> None:
        """Write one message, with the queued release notices in front. If it
        cannot be written (it does not encode, it is too big) nothing is lost:
        the notices wait for the next message and what the message would have
        lent is taken back."""
        pool = self._pool
        if pool is None:
            self._wire.write_message(obj)
            return
        self._rides = True
        ids = self._take_ids() if self._releases else []
        pool.mark()
        try:
            before = self._wire.control_frame(ids, FRAME_RELEASE) if ids else b""
            self._wire.write_message(obj, before=before)
        except BaseException:
            pool.rollback()
            if ids:
                self._releases.extendleft(reversed(ids))
                self._release_scheduled = True
                self._arm_release_timer()
            raise
        pool.commit()

    def _flush_releases(self) -> None:
        self._release_timer = None
        ids = self._take_ids()
        if ids and not self._wire.closed:
            try:
                self._wire.write_message(ids, FRAME_RELEASE)
            except ConnectionClosed:
                pass  # closing: the sender unmaps everything anyway

    def _send_forget(self) -> None:
        assert self._pool is not None
        ids, self._pool.evicted = self._pool.evicted, []
        self._wire.write_message(ids, FRAME_FORGET)

    def _cleanup(self, _: Any = None) -> None:
        if self._pool is not None:
            if self._release_timer is not None:
                self._release_timer.cancel()
                self._release_timer = None
            self._pool.close()
        if self._maps is not None:
            self._maps.close()
        if self._fd_sock is not None:
            self._fd_sock.close()
