"""Endpoints: ``listen`` for peers, ``connect`` to one.

``connect`` retries refused or unreachable addresses with jittered
exponential backoff until the config's deadline, then fails with a
:class:`ConnectTimeout` that names the peer and address; a peer that refuses
our credentials fails at once (retrying cannot fix a wrong secret).

A listener serves every connection independently: whatever one peer sends
(garbage, HTTP, a huge or undecodable frame, a half frame) closes only that
connection, with a logged reason. A peer that connects and leaves without a
byte (a port probe, a load balancer's health check) is logged at DEBUG only.

Handshake deadlines use ``asyncio.timeout``, not ``wait_for``: wait_for runs
the handshake as a task of its own, and a failed one kept itself, its
exception and the wire alive in a cycle (task -> exception -> traceback ->
wait_for's frame -> task) until the collector ran; 10,000 port probes took a
server from 41 to 138 MB (issue 21).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import random
import ssl
from typing import Any, Callable

from .config import PeerInfo, TransportConfig, resolve_token
from .connection import Connection
from .errors import AuthError, ConnectionClosed, ConnectTimeout, HandshakeError
from .handshake import FdChannels, client_handshake, server_handshake
from .tls import (
    TLS_ADVICE,
    client_context,
    describe,
    handshake_watched_wire,
    is_tls_failure,
    server_context,
    speaks_tls,
)
from .wire import Wire

__all__ = ["listen", "connect", "Listener", "parse_address"]

logger = logging.getLogger("transports")

_BACKOFF_FIRST_S = 0.02
_BACKOFF_MAX_S = 1.0


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class Listener:
    """A listening endpoint; ``close()`` also closes every accepted connection."""

    def __init__(self, identity: PeerInfo, config: TransportConfig, token: bytes,
                 on_connection: Callable[[Connection], Any]) -> None:
        self._identity, self._config, self._token = identity, config, token
        self._on_connection = on_connection
        self._server: asyncio.AbstractServer | None = None
        self._fd_channels = FdChannels() if config.mode != "tcp" else None
        self._pending: set[Wire] = set()
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task] = set()
        self.host, self.port = "", 0

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    async def start(self, host: str, port: int) -> None:
        """Bind ``host:port`` (0: a free port) and serve it (:func:`listen` calls it)."""
        loop = asyncio.get_running_loop()
        config = self._config
        tls: dict[str, Any] = {}
        if config.tls:
            tls = {"ssl": server_context(config.tls_cert, config.tls_key, config.tls_ca),  # type: ignore[arg-type]
                   "ssl_handshake_timeout": config.handshake_timeout_s}
        self._server = await loop.create_server(self._new_wire, host, port, reuse_address=True, **tls)
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = sockname[0], sockname[1]

    def _new_wire(self) -> Wire:
        if self._config.tls:
            return handshake_watched_wire("?", self._accepted)
        return Wire("?", on_made=self._accepted)

    def _accepted(self, wire: Wire) -> None:
        peer = wire.transport.get_extra_info("peername") if wire.transport else None
        wire.label = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._pending.add(wire)
        self._spawn(self._serve(wire))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, wire: Wire) -> None:
        try:
            async with asyncio.timeout(self._config.handshake_timeout_s):
                conn = await server_handshake(wire, self._identity, self._config, self._token,
                                              self._fd_channels)
        except Exception as exc:  # every refusal is logged, the listener goes on
            self._refused(wire, exc)
            return
        finally:
            self._pending.discard(wire)
        self._connections.add(conn)
        wire.lost.add_done_callback(lambda _: self._connections.discard(conn))
        try:
            result = self._on_connection(conn)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("on_connection callback failed for %s", conn)

    def _refused(self, wire: Wire, exc: BaseException) -> None:
        if isinstance(exc, asyncio.TimeoutError):
            exc = HandshakeError(f"no handshake within {self._config.handshake_timeout_s:g}s")
        if wire.close_exc is None or wire.close_exc is not exc:
            if isinstance(exc, ConnectionClosed) and wire.bytes_in == 0:
                logger.debug("connection from %s closed before a byte (a port probe?)", wire.label)
            elif not (isinstance(exc, ConnectionClosed) and wire.close_exc is not None):
                logger.warning("refused connection from %s: %s", wire.label, exc)
        if wire.transport is not None:
            wire.transport.close()  # flushes a refusal message, if one was written

    async def close(self) -> None:
        """Stop accepting, close every connection; the port is free at once."""
        if self._server is not None:
            self._server.close()
        if self._fd_channels is not None:
            await self._fd_channels.close()
        for wire in list(self._pending):
            if wire.transport is not None:
                wire.transport.abort()
        await asyncio.gather(*(c.close() for c in list(self._connections)), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def listen(host: str, port: int, on_connection: Callable[[Connection], Any], *,
                 identity: PeerInfo, config: TransportConfig | None = None) -> Listener:
    """Serve peers at host:port (0 = a free port); ``on_connection(conn)`` runs
    (and is awaited if it is a coroutine function) after each handshake."""
    config = config or TransportConfig()
    listener = Listener(identity, config, resolve_token(config), on_connection)
    try:
        await listener.start(host, port)
    except BaseException:
        await listener.close()
        raise
    return listener


async def connect(address: str, *, identity: PeerInfo, config: TransportConfig | None = None,
                  expected_name: str | None = None) -> Connection:
    """A connection to the listener at ``address``, retried until the deadline."""
    config = config or TransportConfig()
    token = resolve_token(config)
    host, port = parse_address(address)
    who = f"{expected_name} at {host}:{port}" if expected_name else f"{host}:{port}"
    loop = asyncio.get_running_loop()
    tls: dict[str, Any] = {}
    if config.tls:
        tls = {"ssl": client_context(config.tls_cert, config.tls_key, config.tls_ca),  # type: ignore[arg-type]
               "server_hostname": host, "ssl_handshake_timeout": config.handshake_timeout_s}
    deadline = loop.time() + config.connect_timeout_s
    delay, last = _BACKOFF_FIRST_S, "no attempt made"
    probed = False
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise ConnectTimeout(f"could not reach {who} after "
                                 f"{config.connect_timeout_s:g}s: {last}")
        try:
            _, wire = await asyncio.wait_for(
                loop.create_connection(lambda: Wire(f"{host}:{port}"), host, port, **tls), remaining)
        except ssl.SSLError as exc:  # retrying cannot fix a certificate
            raise AuthError(f"TLS handshake with {who} failed ({describe(exc)}): it has no certificate "
                            f"signed by our DISTRIB_TLS_CA, or does not speak TLS; {TLS_ADVICE} "
                            f"on every task") from None
        except (OSError, asyncio.TimeoutError) as exc:
            last = str(exc) or type(exc).__name__
        else:
            conn = await _handshake(wire, identity, config, token, who)
            if conn is not None:
                if expected_name is not None and conn.peer.name != expected_name:
                    logger.warning("expected %s at %s:%d but %s answered", expected_name, host, port,
                                   conn.peer.name)
                return conn
            last = str(wire.close_exc or "connection closed during the handshake")
            if not config.tls and wire.bytes_in == 0 and not probed:
                # a plain server sends its preamble at once; silence then a
                # close is what a TLS listener does with a plain client
                probed = True
                if await speaks_tls(host, port, min(max(deadline - loop.time(), 0.1), 2.0)):
                    raise AuthError(f"{who} requires TLS (it answered a TLS handshake and asks for a "
                                    f"client certificate) but this process has no TLS settings: "
                                    f"{TLS_ADVICE} on every task")
        await asyncio.sleep(min(delay * random.uniform(0.5, 1.5), max(deadline - loop.time(), 0)))
        delay = min(delay * 2, _BACKOFF_MAX_S)


async def _handshake(wire: Wire, identity: PeerInfo, config: TransportConfig, token: bytes,
                     who: str) -> Connection | None:
    """The connection, None when the peer hung up early (worth a retry), or an error."""
    try:
        async with asyncio.timeout(config.handshake_timeout_s):
            return await client_handshake(wire, identity, config, token, who)
    except ConnectionClosed:
        # TLS 1.3: the server checks our certificate after our side finished
        # its handshake; a refusal then closes the socket before its preamble
        if is_tls_failure(wire.close_exc) or (config.tls and wire.bytes_in == 0):
            why = describe(wire.close_exc) if wire.close_exc else "closed before a byte"
            raise AuthError(f"{who} refused our TLS certificate ({why}): {TLS_ADVICE} "
                            f"on every task") from None
        return None
    except TimeoutError:
        if wire.transport is not None:
            wire.transport.abort()
        raise HandshakeError(f"{who} did not complete the handshake within "
                             f"{config.handshake_timeout_s:g}s") from None
    except BaseException:
        if wire.transport is not None:
            wire.transport.abort()
        raise
