"""Errors of the transport layer.

Every failure a transport reports derives from :class:`TransportError`, so the
runtime above can catch the whole family in one place and translate it into
its own typed errors (``UnavailableError``, ``UnauthenticatedError``...).
The transport layer never imports the runtime, hence its own small hierarchy.
"""
from __future__ import annotations

__all__ = [
    "TransportError", "ConnectionClosed", "ConnectTimeout",
    "HandshakeError", "AuthError", "FrameError", "MessageTooLarge",
]


class TransportError(Exception):
    """Base of every error raised by :mod:`transports`."""


class ConnectionClosed(TransportError):
    """The connection ended (cleanly or not); no more messages flow on it."""


class ConnectTimeout(TransportError):
    """``connect()`` could not reach the peer before its deadline."""


class HandshakeError(TransportError):
    """The peer does not speak our protocol (bad magic or version, bad hello)."""


class AuthError(HandshakeError):
    """The cluster secret is missing or does not match on one side."""


class FrameError(TransportError):
    """A frame broke the protocol (too big, undecodable, dangling buffer)."""


class MessageTooLarge(FrameError):
    """A message over the frame limit of the receiving side (``size`` and
    ``limit`` in bytes). Raised by the sender before a byte is written: the
    connection stays up. The limit is ``TransportConfig.max_frame_bytes``,
    by default ``DISTRIB_MAX_FRAME_BYTES`` (see :mod:`transports.config`)."""

    def __init__(self, message: str, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size, self.limit = size, limit


def without_traceback(exc: BaseException) -> BaseException:
    """``exc`` with the tracebacks of it and its causes dropped: an error kept
    on a connection must not hold the frames (and so the connection) in a
    reference cycle."""
    seen = exc
    for _ in range(8):   # the exception and what it was raised from
        seen.__traceback__ = None
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    return exc
