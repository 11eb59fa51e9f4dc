"""Framing on a stream socket: the protocol object under every connection.

The bytes it reads and writes (preamble, frame prefix, types, limit) are
:mod:`.frames`. The receiver is an ``asyncio.BufferedProtocol``: small
frames land in one reusable bytearray and are decoded in place; for a frame
too big for it, once the header is in, ``get_buffer`` hands the kernel the
frame's own destination block (:mod:`.blocks`), so array bytes go from the
socket straight into the memory the received numpy array will view. The
sender writes array memoryviews with ``writelines`` (uvloop keeps
references, copies nothing); over TLS it hands them over in pieces as the
transport drains (:meth:`Wire._pump`, :func:`.frames.tls_pieces`).

Any error in the middle of a frame aborts the connection: the stream position
is unknown afterwards, so the stream is never reused.

A peer spends our memory only with bytes it has sent (issue 21, found by
probing a live server). Before the handshake a wire has a 4 KiB buffer, not
the 256 KiB one (2,400 port probes took a server from 44 to 330+ MB), and a
closed wire lets go of its buffers, callbacks and encoder at once, with no
reference cycle left for the collector. A frame's length prefix is checked
against ``max_frame`` (:mod:`.frames`), and a big frame's destination grows
as its bytes arrive (:mod:`.blocks`). A frame that stops arriving for
``frame_timeout`` seconds closes the connection (``DISTRIB_FRAME_TIMEOUT_S``).

This module is deliberately one class with a long ``_parse``: it runs for
every message, and each attribute lookup or call there costs round-trip time.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import mmap
import socket
import struct
from typing import Any, Callable

import numpy as np

from .blocks import FrameBlocks, extend
from .codec import ALIGN, Decoder, Encoder, buffer_spans
from .errors import ConnectionClosed, FrameError, TransportError, without_traceback
from .frames import (
    COALESCE,
    FRAME_FORGET,
    FRAME_MSG,
    FRAME_RELEASE,
    HANDSHAKE_MAX_FRAME,
    PREAMBLE,
    PREFIX,
    TLS_CHUNK,
    VERSION,
    check_preamble,
    tls_pieces,
    too_big,
)

__all__ = ["Wire", "PREAMBLE", "VERSION", "FRAME_MSG", "FRAME_RELEASE", "FRAME_FORGET"]

logger = logging.getLogger("transports")

_P = PREFIX.size
_HANDSHAKE_BUF = 4096             # the receive buffer until then: a page (hellos are ~150 bytes)
_BUF_SIZE = 256 * 1024            # frames up to this size are decoded in place
_EMPTY = bytearray()
_WRITE_HIGH = 256 * 1024          # send() waits when more than this is unsent
_ZEROS = memoryview(bytes(ALIGN))
_INBOX_PAUSE = 4096               # stop reading when recv() lags this many messages behind


class Wire(asyncio.BufferedProtocol):
    """One connection's framing, flow control and message delivery."""

    def __init__(self, label: str, on_made: Callable[[Wire], None] | None = None) -> None:
        self.label = label                     # for log lines: who is at the other end
        self._on_made = on_made
        self.transport: asyncio.Transport | None = None
        self.max_frame = HANDSHAKE_MAX_FRAME   # the biggest frame received
        self.send_limit = HANDSHAKE_MAX_FRAME  # the biggest sent: ours or the peer's, the smaller
        self.frame_timeout = 0.0               # 0: no deadline for a frame in progress
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.on_control: Callable[[int, Any], None] | None = None
        self._floor = _HANDSHAKE_BUF           # the receive buffer never shrinks below this
        self._buf = bytearray(_HANDSHAKE_BUF)
        self._mv = memoryview(self._buf)
        self._start = self._end = 0
        self._preamble = False
        self._direct: np.ndarray | mmap.mmap | None = None  # destination block of a big frame
        self._blocks = FrameBlocks()           # big frames' destinations, reused
        self._dmv: memoryview | None = None
        self._doff = 0
        self._dlen = 0                         # the frame's payload: _dmv may be shorter yet
        self._dframe: tuple = ()
        self._stall: asyncio.TimerHandle | None = None
        self._stall_mark = (0, 0.0)            # bytes_in and loop time when the timer was set
        self._reading = True
        # delivery: a callback after start(), else the inbox that recv() reads
        self._on_message: Callable[[Any], None] | None = None
        self._on_close: Callable[[BaseException | None], None] | None = None
        self._inbox: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._paused = False
        self._drain: asyncio.Future | None = None
        self._chunk = 0                        # TLS: pieces of a big payload, written as it drains
        self._backlog: collections.deque = collections.deque()
        self.closed = False
        # bytes read so far: liveness that also shows a big frame still arriving
        self.bytes_in = 0
        self.close_exc: BaseException | None = None
        self._error: BaseException | None = None
        self.lost = asyncio.get_running_loop().create_future()

    # ---- asyncio protocol -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # low=0: send() returns only once a big frame is fully handed to the
        # kernel, so the caller may reuse its arrays afterwards.
        transport.set_write_buffer_limits(high=_WRITE_HIGH, low=0)  # type: ignore[attr-defined]
        if transport.get_extra_info("ssl_object") is not None:
            self._chunk = TLS_CHUNK
        transport.write(PREAMBLE)  # type: ignore[attr-defined]
        if self._on_made is not None:
            self._on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._dmv is not None:
            if self._doff == len(self._dmv):
                self._extend()
            return self._dmv[self._doff:]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            self._compact()
        return self._mv[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.bytes_in += nbytes
        if self._error is not None:   # aborted: what the loop still reads is dropped
            self._start = self._end = 0
            return
        try:
            if self._dmv is not None:
                self._doff += nbytes
                if self._doff == self._dlen:
                    self._finish_direct()
                return
            self._end += nbytes
            self._parse()
            if self._end != self._start and self._stall is None and self.frame_timeout:
                self._arm_stall()
        except TransportError as exc:
            self.fail(exc)
        except Exception as exc:  # a bug of ours: still only this connection goes
            logger.exception("error while reading from %s", self.label)
            self.fail(FrameError(f"internal error while reading: {exc!r}"))

    def eof_received(self) -> None:
        if self._dmv is not None or self._end > self._start:
            got = self._doff if self._dmv is not None else self._end - self._start
            self._error = FrameError(f"peer closed the connection in the middle of a frame ({got} bytes in)")
            logger.warning("closing connection %s: %s", self.label, self._error)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self._error is None and exc is not None:
            lost = ConnectionClosed(f"connection {self.label} lost: {exc}")
            lost.__cause__ = exc   # a TLS failure shows through (transports.tls)
            exc = lost
        self.close_exc = self._error or exc
        self._release()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        if not self.lost.done():
            self.lost.set_result(None)
        if self._on_close is not None:
            self._call_close()
        self._on_message = None

    def _release(self) -> None:
        """Let go of every buffer and callback now: a closed wire holds only
        its undelivered messages, and nothing of it waits for the collector."""
        self._direct = self._dmv = None
        self._dframe = ()
        self._blocks.clear()
        self._buf, self._mv = _EMPTY, memoryview(_EMPTY)
        self._start = self._end = 0
        self._on_made = None
        self.on_control = None
        self._backlog.clear()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def open_up(self, max_frame: int, frame_timeout: float, peer_max_frame: int | None = None) -> None:
        """The peer passed the handshake: full-size buffers and frame limits
        (``peer_max_frame``: what the peer said it accepts, when it said)."""
        self.max_frame, self.frame_timeout = max_frame, frame_timeout
        self.send_limit = min(max_frame, peer_max_frame) if peer_max_frame else max_frame
        self._floor = _BUF_SIZE
        if len(self._buf) < _BUF_SIZE and not self.closed:
            self._grow(_BUF_SIZE)
        if self._end != self._start and self._stall is None and frame_timeout:
            self._arm_stall()

    def _arm_stall(self) -> None:
        loop = asyncio.get_running_loop()
        self._stall_mark = (self.bytes_in, loop.time())
        self._stall = loop.call_later(self.frame_timeout, self._check_stall)

    def _check_stall(self) -> None:
        """A frame in progress that got no byte for ``frame_timeout`` closes
        the connection (checked every ``frame_timeout``: it goes within one
        to two of them). Not while we stopped reading ourselves, nor when this
        timer ran late: our loop was held, the bytes may be in the socket."""
        self._stall = None
        if self.closed or (self._dmv is None and self._end == self._start):
            return
        got, since = self._stall_mark
        late = asyncio.get_running_loop().time() - since > 1.5 * self.frame_timeout
        if got == self.bytes_in and self._reading and not late:
            have = self._doff if self._dmv is not None else self._end - self._start
            self.fail(FrameError(f"no byte of a frame in progress for {self.frame_timeout:g}s "
                                 f"({have} bytes in; DISTRIB_FRAME_TIMEOUT_S)"))
            return
        self._arm_stall()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        if self._backlog:
            self._pump()
            if self._backlog or self._paused:
                return
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def _pump(self) -> None:
        """TLS: hand the backlog's pieces to the transport while it takes them
        (flow control paces them; why pieces: :mod:`.frames`)."""
        backlog, write = self._backlog, self.transport.write  # type: ignore[union-attr]
        while backlog and not self._paused:
            write(backlog.popleft())

    def flush(self) -> None:
        """Hand the whole backlog to the transport now (before a close)."""
        if self._backlog and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(list(self._backlog))
        self._backlog.clear()

    # ---- receiving ----------------------------------------------------------
    def _compact(self) -> None:
        n = self._end - self._start
        self._buf[:n] = self._mv[self._start:self._end].tobytes()
        self._start, self._end = 0, n

    def _grow(self, size: int) -> None:
        n = self._end - self._start
        buf = bytearray(max(size, self._floor))
        buf[:n] = self._mv[self._start:self._end]
        self._buf, self._mv = buf, memoryview(buf)
        self._start, self._end = 0, n

    def _check_preamble(self) -> bool:
        if not check_preamble(bytes(self._mv[self._start:min(self._end, self._start + len(PREAMBLE))])):
            return False
        self._start += len(PREAMBLE)
        self._preamble = True
        return True

    def _parse(self) -> None:
        if not self._preamble and not self._check_preamble():
            return
        buf, mv = self._buf, self._mv
        start, end = self._start, self._end
        while end - start >= _P and not self.closed:
            hlen, tn, plen = PREFIX.unpack_from(buf, start)
            nbufs = tn & 0xFFFFFF
            meta = _P + 8 * nbufs + hlen
            total = meta + plen
            if total > self.max_frame:
                raise FrameError(f"frame of {total} bytes is over the limit of {self.max_frame}")
            avail = end - start
            if avail < total:
                self._start = start
                self._wait_for(total, meta, avail, nbufs, hlen, plen, tn >> 24)
                return
            if nbufs:
                spans = buffer_spans(buf, start + _P, nbufs, plen)
                block = bytearray(mv[start + meta:start + total])  # writable arrays for the user
                obj = self.decoder.decode(mv[start + _P + 8 * nbufs:start + meta], block, spans)
            else:
                obj = self.decoder.decode(mv[start + _P:start + meta])
            start += total
            self._start = start
            self._dispatch(tn >> 24, obj)
            buf, mv, end = self._buf, self._mv, self._end  # a callback may have closed us
        self._start = start

    def _wait_for(self, total: int, meta: int, avail: int, nbufs: int, hlen: int, plen: int, ftype: int) -> None:
        """An incomplete frame: make room for it, or switch to direct receive."""
        if total <= len(self._buf) or avail < meta:
            need = total if total <= len(self._buf) else meta
            if need > len(self._buf):
                # grow with what has come, not with what the prefix claims (a
                # 16-byte prefix must not make us commit gigabytes): double
                # only a buffer that the frame's bytes fill
                if self._start:
                    self._compact()
                if self._end == len(self._buf):
                    self._grow(min(need, 2 * len(self._buf)))
            elif self._start + need > len(self._buf):
                self._compact()
            return
        start = self._start
        spans = buffer_spans(self._buf, start + _P, nbufs, plen)
        header = bytes(self._mv[start + _P + 8 * nbufs:start + meta])
        got = avail - meta
        block = self._blocks.take(plen, got)
        dmv = memoryview(block)
        dmv[:got] = self._mv[start + meta:start + avail]
        self._start = self._end = 0
        if len(self._buf) > self._floor:
            self._grow(self._floor)
        self._direct, self._dmv, self._doff, self._dlen = block, dmv, got, plen
        self._dframe = (ftype, header, spans)
        if self._stall is None and self.frame_timeout:
            self._arm_stall()

    def _extend(self) -> None:
        """The growing block is full and the frame is not: double it (:func:`.blocks.extend`)."""
        block = self._direct
        assert isinstance(block, mmap.mmap)
        self._dmv.release()  # type: ignore[union-attr]
        self._dmv = None
        block = extend(block, min(self._dlen, 2 * len(block)), self._doff)
        self._direct, self._dmv = block, memoryview(block)

    def _finish_direct(self) -> None:
        block, (ftype, header, spans) = self._direct, self._dframe
        self._direct = self._dmv = None
        self._dframe = ()
        if isinstance(block, mmap.mmap):   # grown to its full size: final, arrays view it
            block = np.frombuffer(block, np.uint8)
            self._blocks.keep(block)
        self._dispatch(ftype, self.decoder.decode(header, block, spans))

    def _dispatch(self, ftype: int, obj: Any) -> None:
        if ftype == FRAME_MSG:
            cb = self._on_message
            if cb is None:
                self._inbox.append(obj)
                if self._waiter is not None and not self._waiter.done():
                    self._waiter.set_result(None)
                if len(self._inbox) > _INBOX_PAUSE and self.transport is not None and self._reading:
                    self._reading = False
                    self.transport.pause_reading()
                return
            try:
                cb(obj)
            except Exception:
                logger.exception("on_message callback of connection %s failed", self.label)
        elif self.on_control is not None:
            self.on_control(ftype, obj)
        else:
            raise FrameError(f"unexpected frame type {ftype}")

    # ---- delivery modes -----------------------------------------------------
    def start(self, on_message: Callable[[Any], None], on_close: Callable[[BaseException | None], None]) -> None:
        if self._on_message is not None:
            raise RuntimeError("Connection.start() was already called")
        self._on_message, self._on_close = on_message, on_close
        while self._inbox:
            try:
                on_message(self._inbox.popleft())
            except Exception:
                logger.exception("on_message callback of connection %s failed", self.label)
        if self.transport is not None and not self.closed and not self._reading:
            self._reading = True
            self.transport.resume_reading()
        if self.closed:
            self._call_close()
            self._on_message = None

    def _call_close(self) -> None:
        cb, self._on_close = self._on_close, None
        if cb is not None:
            try:
                cb(self.close_exc)
            except Exception:
                logger.exception("on_close callback of connection %s failed", self.label)

    async def recv(self, timeout: float | None = None) -> Any:
        if self._on_message is not None:
            raise RuntimeError("recv() cannot be used after start()")
        while not self._inbox:
            if self.closed:
                raise ConnectionClosed(f"connection {self.label} is closed") from self.close_exc
            self._waiter = asyncio.get_running_loop().create_future()
            if timeout is None:
                await self._waiter
            else:
                await asyncio.wait_for(self._waiter, timeout)
        obj = self._inbox.popleft()
        if len(self._inbox) <= _INBOX_PAUSE // 2 and not self._reading and not self.closed:
            self._reading = True
            self.transport.resume_reading()  # type: ignore[union-attr]
        return obj

    # ---- sending ------------------------------------------------------------
    def write_message(self, obj: Any, ftype: int = FRAME_MSG, before: bytes = b"") -> None:
        """Frame ``obj`` and hand it to the transport; ``before``: whole frames
        (see :meth:`control_frame`) to write first, in the same system call."""
        if self.closed or self.transport is None or self.transport.is_closing():
            raise ConnectionClosed(f"connection {self.label} is closed") from self.close_exc
        enc = self.encoder
        header = enc.encode(obj)
        bufs = enc.buffers
        if not bufs:
            if len(header) + _P > self.send_limit:
                raise too_big(len(header) + _P, self.send_limit, self.max_frame, self.label)
            data = b"".join((before, PREFIX.pack(len(header), ftype << 24, 0), header))
            if self._backlog:
                self._backlog.append(data)
            else:
                self.transport.write(data)
            return
        pieces: list = []
        lens = []
        off = 0
        for b in bufs:
            pad = -off % ALIGN
            if pad:
                pieces.append(_ZEROS[:pad])
                off += pad
            pieces.append(b)
            lens.append(len(b))
            off += len(b)
        meta = b"".join((PREFIX.pack(len(header), ftype << 24 | len(bufs), off),
                         struct.pack(f"<{len(lens)}Q", *lens), header))
        # the encoder lets go of the arrays: only the transport holds what it
        # has not sent yet (a variable store counts holders to copy on write)
        bufs.clear()
        if len(meta) + off > self.send_limit:
            raise too_big(len(meta) + off, self.send_limit, self.max_frame, self.label)
        if self._chunk:   # TLS: in pieces at the end of the backlog, written as it drains
            tls_pieces(self._backlog, before + meta, pieces, self._chunk)
            self._pump()
        elif off <= COALESCE:
            self.transport.write(before + meta + b"".join(pieces))
        else:
            pieces.insert(0, before + meta)
            self.transport.writelines(pieces)

    def control_frame(self, obj: Any, ftype: int) -> bytes:
        """The bytes of a small frame without arrays (a release notice), to
        pass as ``before`` to the next :meth:`write_message`."""
        if self.closed:
            raise ConnectionClosed(f"connection {self.label} is closed") from self.close_exc
        header = self.encoder.encode(obj)
        if self.encoder.buffers:
            raise TypeError("a control frame holds no arrays")
        return PREFIX.pack(len(header), ftype << 24, 0) + header

    @property
    def paused(self) -> bool:
        return self._paused or bool(self._backlog)

    async def drain(self) -> None:
        while (self._paused or self._backlog) and not self.closed:
            if self._drain is None or self._drain.done():  # one future shared by all senders
                self._drain = asyncio.get_running_loop().create_future()
            await self._drain
        if self.closed:
            raise ConnectionClosed(f"connection {self.label} closed while sending") from self.close_exc

    def fail(self, exc: BaseException) -> None:
        """Abort the connection because of ``exc`` (logged at WARNING)."""
        if self.closed:
            return
        if self._error is None:
            # kept without its traceback: frames of ours would hold this wire
            # in a cycle (wire -> error -> traceback -> frame -> wire)
            self._error = without_traceback(exc)
            logger.warning("closing connection %s: %s", self.label, exc)
        if self.transport is not None:
            self.transport.abort()

