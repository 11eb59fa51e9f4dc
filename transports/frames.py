"""The bytes on the stream: the preamble, a frame's prefix, its types, and
the limit a frame is held to.

Each side of a connection first sends an 8-byte preamble (``PREAMBLE``:
magic + protocol version). Then frames::

    u32 header length | u32 (frame type << 24 | buffer count) | u64 payload length
    u64 length of each buffer
    msgpack header
    payload: the buffers, each starting at a multiple of ALIGN

A frame's type is ``FRAME_MSG`` (a message for the user), ``FRAME_RELEASE``
or ``FRAME_FORGET`` (shared-memory bookkeeping, :mod:`.connection`). Until
the handshake has passed, a frame may be at most ``HANDSHAKE_MAX_FRAME``
bytes; after it, the smaller of the limits both sides announced
(``DISTRIB_MAX_FRAME_BYTES``), and a sender refuses a message over it with
:func:`too_big`'s ``MessageTooLarge`` before a byte is sent.

Over TLS a big payload goes out in ``TLS_CHUNK`` pieces as the transport
drains (:func:`tls_pieces`): the SSL layer encrypts whatever it is given at
once into one memory BIO and then copies that out whole: a 64 MiB frame
handed over whole grew the BIO by reallocation and faulted in two fresh
64 MiB blocks (0.4 GB/s, a quarter of an ssl-wrapped blocking socket).
Pieces keep the BIO small and warm, and the wire's flow control paces them
(``Wire._pump``): it keeps up with the blocking socket.

The protocol object that reads and writes these bytes, :class:`~.wire.Wire`,
packs and unpacks the prefix inline (``PREFIX``): it runs for every message.
Only what runs once per connection (:func:`check_preamble`), once per TLS
frame that has arrays (:func:`tls_pieces`, which replaced a method call) or
once per refusal is a function here.
"""
from __future__ import annotations

import collections
import struct

from .errors import AuthError, FrameError, HandshakeError, MessageTooLarge

__all__ = ["MAGIC", "VERSION", "PREAMBLE", "PREFIX", "FRAME_MSG", "FRAME_RELEASE", "FRAME_FORGET",
           "HANDSHAKE_MAX_FRAME", "COALESCE", "TLS_CHUNK", "check_preamble", "tls_pieces", "too_big"]

MAGIC = b"DISTRB"
VERSION = 1
PREAMBLE = MAGIC + struct.pack("<H", VERSION)
PREFIX = struct.Struct("<IIQ")    # header length, type << 24 | buffer count, payload length
FRAME_MSG, FRAME_RELEASE, FRAME_FORGET = 0, 1, 2
HANDSHAKE_MAX_FRAME = 64 * 1024   # before the peer has proven itself
COALESCE = 64 * 1024              # payloads up to this size are joined into one write
TLS_CHUNK = 256 * 1024            # over TLS a bigger one goes out in pieces this big


def check_preamble(head: bytes) -> bool:
    """Whether ``head`` (the first bytes the peer sent, up to ``len(PREAMBLE)``)
    is the whole preamble of this protocol's version: False while more is to
    come; ``AuthError`` for a TLS peer on a plain socket, ``FrameError`` for
    one that is not a distrib peer, ``HandshakeError`` for another version."""
    if len(head) >= 2 and head[0] in (0x15, 0x16) and head[1] == 3:   # a TLS record
        raise AuthError("the peer speaks TLS and this side does not: set DISTRIB_TLS_CERT, "
                        "DISTRIB_TLS_KEY and DISTRIB_TLS_CA as on the other tasks")
    if len(head) < len(PREAMBLE):
        if not PREAMBLE.startswith(head[: len(MAGIC)]):
            raise FrameError(f"bad magic {head[:16]!r}: not a distrib peer")
        return False
    if head[: len(MAGIC)] != MAGIC:
        raise FrameError(f"bad magic {head!r}: not a distrib peer")
    version = struct.unpack("<H", head[len(MAGIC):len(PREAMBLE)])[0]
    if version != VERSION:
        raise HandshakeError(f"peer speaks protocol version {version}, this process speaks {VERSION}")
    return True


def tls_pieces(backlog: collections.deque, meta: bytes, pieces: list, chunk: int) -> None:
    """A frame's bytes (``meta``, then its payload ``pieces``) appended to a
    TLS wire's ``backlog`` in pieces of at most ``chunk`` bytes: small ones
    joined, big ones cut into views (no copy)."""
    small = [meta]
    for p in pieces:
        n = len(p)
        if n <= COALESCE:
            small.append(p)
            continue
        backlog.append(b"".join(small))
        small = []
        view = memoryview(p).cast("B")
        for at in range(0, n, chunk):
            backlog.append(view[at:at + chunk])
    if small:
        backlog.append(b"".join(small))


def too_big(size: int, send_limit: int, max_frame: int, label: str) -> MessageTooLarge:
    """The error of a message of ``size`` bytes over ``send_limit``: the
    smaller of our limit (``max_frame``) and the one the peer at ``label``
    announced in the handshake. The sender learns of it before anything is
    sent, and the connection survives."""
    whose = "" if send_limit == max_frame else f" of the receiver {label}"
    return MessageTooLarge(
        f"message of {size} bytes is over max_frame_bytes={send_limit}{whose} "
        "(TransportConfig.max_frame_bytes, or DISTRIB_MAX_FRAME_BYTES on every task, "
        "raises it); nothing was sent, the connection stays up", size, send_limit)
