"""Mutual TLS for every TCP connection (``DISTRIB_TLS_CERT/KEY/CA``).

When all three are set (in :class:`~transports.config.TransportConfig` or the
environment), a listener wraps every accepted socket in TLS and ``connect``
does the same, both sides with ``verify_mode=CERT_REQUIRED`` against the
cluster CA: a peer without a certificate signed by that CA does not get a
byte of our protocol. The cluster secret's HMAC handshake still runs inside.

Identity is "signed by the cluster CA", not a host name: ``check_hostname``
is off, because tasks are addressed by whatever names or IPs the cluster
spec holds (``localhost``, pod DNS names, SLURM node lists), and certificates
would otherwise have to list every one. Run one CA per cluster.

A listener passes ``ssl=`` to ``create_server`` (``loop.start_tls`` on an
accepted socket hangs the handshake in uvloop 0.23), and logs a failed TLS
handshake itself (:func:`handshake_watched_wire`). The protocol above
(:class:`~transports.wire.Wire`, a BufferedProtocol) is unchanged: uvloop's
SSL layer decrypts straight into its ``get_buffer`` blocks.

A client with no TLS settings that reaches a TLS listener sees the socket
close without a byte (a plain listener sends its preamble at once); it then
asks :func:`speaks_tls` once and fails with ``AuthError`` (distrib's
``UnauthenticatedError``) naming the variables to set, instead of retrying
until its connect deadline.

Shared memory between co-located tasks needs no TLS: its side channel is an
abstract Unix socket of this host's network namespace, and the segments
never leave the host. The socket beside it (headers, small messages) is TLS.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
import weakref
from typing import Any, Callable

from .wire import Wire

__all__ = ["server_context", "client_context", "is_tls_failure", "speaks_tls", "handshake_watched_wire"]

logger = logging.getLogger("transports")

TLS_ADVICE = ("set DISTRIB_TLS_CERT, DISTRIB_TLS_KEY and DISTRIB_TLS_CA to a certificate "
              "signed by the cluster's CA")
_contexts: dict[tuple, ssl.SSLContext] = {}


def _context(purpose: int, cert: str, key: str, ca: str) -> ssl.SSLContext:
    cached = _contexts.get((purpose, cert, key, ca))
    if cached is not None:
        return cached
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False          # identity = signed by the cluster CA (module doc)
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        ctx.load_cert_chain(cert, key)
        ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load TLS files (DISTRIB_TLS_CERT={cert!r}, DISTRIB_TLS_KEY={key!r}, "
                         f"DISTRIB_TLS_CA={ca!r}): {exc}") from None
    _contexts[(purpose, cert, key, ca)] = ctx
    return ctx


def server_context(cert: str, key: str, ca: str) -> ssl.SSLContext:
    """A listener's context: its certificate, and client certificates required."""
    return _context(ssl.PROTOCOL_TLS_SERVER, cert, key, ca)


def client_context(cert: str, key: str, ca: str) -> ssl.SSLContext:
    """A connecting side's context: its certificate, the server's verified."""
    return _context(ssl.PROTOCOL_TLS_CLIENT, cert, key, ca)


def is_tls_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a TLS failure: a refused or bad
    certificate, or a peer that does not speak TLS."""
    while exc is not None:
        if isinstance(exc, ssl.SSLError):
            return True
        exc = exc.__cause__
    return False


def describe(exc: BaseException) -> str:
    while exc.__cause__ is not None and not isinstance(exc, ssl.SSLError):
        exc = exc.__cause__
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return str(reason).replace("_", " ").lower() if isinstance(exc, ssl.SSLError) else str(reason)


def handshake_watched_wire(label: str, on_made: Callable[[Wire], None] | None) -> Wire:
    """The Wire for a TLS listener's socket, which logs a refusal when the TLS
    handshake fails: the Wire then dies without ever being connected. (asyncio
    and uvloop drop a failed server-side handshake silently: an ``ssl.SSLError``
    is an ``OSError``, which they log at DEBUG only, and only in debug mode.)"""
    made = [False]

    def mark(w: Any) -> None:
        made[0] = True
        if on_made is not None:
            on_made(w)

    def gone() -> None:
        if not made[0]:
            logger.warning("refused a connection: TLS handshake failed (the peer has no certificate "
                           "signed by this cluster's DISTRIB_TLS_CA, or does not speak TLS)")

    wire = Wire(label, on_made=mark)
    weakref.finalize(wire, gone)
    return wire


async def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the listener at ``host:port`` speaks TLS: a client without TLS
    settings asks this when a listener closed on it without a byte (a plain
    listener sends its preamble at once), to say why instead of retrying
    until its deadline. A TLS 1.3 handshake completes on our side before the
    server checks the (absent) client certificate; a TLS 1.2 server answers
    with an alert. Either way the server logs one refused connection."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await asyncio.wait_for(loop.create_connection(
            asyncio.Protocol, host, port, ssl=probe, server_hostname=host), timeout)
    except ssl.SSLError as exc:
        # ``reason`` is OpenSSL's reason mnemonic (a code such as
        # TLSV13_ALERT_CERTIFICATE_REQUIRED), not prose: any alert is a TLS peer
        return "ALERT" in str(getattr(exc, "reason", "") or "").upper()
    except (OSError, asyncio.TimeoutError):
        return False
    transport.abort()
    return True
