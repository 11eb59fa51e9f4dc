"""The handshake every connection starts with, and the cluster-secret check.

After the 8-byte preamble (magic + version, see :mod:`transports.frames`)::

    client -> server  {"peer": PeerInfo, "nonce": 16 random bytes}
    server -> client  {"peer": PeerInfo, "nonce": 16 bytes, "auth": bool,
                       "shm": abstract socket name | None, "ticket": bytes | None}
    client -> server  {"mac": HMAC(secret, "client" + nonces) | None, "shm": bool}
    server -> client  {"ok": True, "mac": HMAC(secret, "server" + nonces) | None}
                   or {"ok": False, "code": "auth" | "shm", "reason": str}

When either side has a secret, both must prove it: each MACs both fresh
nonces under its role, so the secret never crosses the wire, a MAC cannot be
replayed or reflected, and digests are compared in constant time.

Shared memory: a client that wants it (same host id, mode allows) connects to
the server's abstract Unix socket and sends the ticket before its second
message; the server pairs that socket with this connection only once the
client is authenticated. The socket then carries memfd descriptors only.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import socket
from typing import Any

from .config import PeerInfo, TransportConfig
from .connection import Connection
from .errors import AuthError, ConnectionClosed, HandshakeError
from .wire import Wire

__all__ = ["client_handshake", "server_handshake", "FdChannels"]

logger = logging.getLogger("transports")

_TOKEN_ADVICE = "set DISTRIB_CLUSTER_TOKEN (or DISTRIB_CLUSTER_TOKEN_FILE) to the cluster's secret"
_FD_TIMEOUT_S = 1.0  # fds are queued before the frame naming them: never a real wait


def _mac(token: bytes, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return hmac.new(token, b"distrib-auth-v1|" + role + b"|" + client_nonce + server_nonce,
                    hashlib.sha256).digest()


def _verify(token: bytes, mac: Any, role: bytes, client_nonce: bytes, server_nonce: bytes) -> bool:
    return isinstance(mac, bytes) and hmac.compare_digest(mac, _mac(token, role, client_nonce, server_nonce))


async def _recv(wire: Wire, who: str) -> dict:
    try:
        msg = await wire.recv()
    except ConnectionClosed as exc:
        if isinstance(wire.close_exc, HandshakeError):
            raise wire.close_exc from None
        raise ConnectionClosed(f"{who} closed the connection during the handshake") from exc
    if not isinstance(msg, dict):
        raise HandshakeError(f"malformed handshake message from {who}: {msg!r:.100}")
    return msg


def _nonce(msg: dict, who: str) -> bytes:
    nonce = msg.get("nonce")
    if not isinstance(nonce, bytes) or len(nonce) != 16:
        raise HandshakeError(f"malformed handshake from {who}: bad nonce")
    return nonce


def _peer(msg: dict, who: str) -> PeerInfo:
    try:
        return PeerInfo.from_wire(msg.get("peer"))
    except ValueError as exc:
        raise HandshakeError(f"malformed handshake from {who}: {exc}") from None


class FdChannels:
    """A server's abstract Unix socket where shm clients bring their tickets."""

    def __init__(self) -> None:
        self.name = "\0distrib-" + os.urandom(8).hex()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.bind(self.name)
        self._sock.listen(128)
        self._sock.setblocking(False)
        self._tickets: dict[bytes, asyncio.Future] = {}
        # the accept loop and each pairing are owned here: close() ends them
        self._pairing: set[asyncio.Task] = set()
        self._task = asyncio.get_running_loop().create_task(self._accept())

    def ticket(self) -> tuple[bytes, asyncio.Future]:
        ticket = os.urandom(16)
        fut = asyncio.get_running_loop().create_future()
        self._tickets[ticket] = fut
        return ticket, fut

    def take(self, ticket: bytes) -> None:
        """The paired socket now belongs to a connection."""
        del self._tickets[ticket]

    def drop(self, ticket: bytes) -> None:
        """Forget a ticket not taken; closes a socket that was paired with it."""
        fut = self._tickets.pop(ticket, None)
        if fut is None:
            return
        if fut.done() and not fut.cancelled():
            fut.result().close()
        fut.cancel()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(self._sock)
            sock.setblocking(False)
            task = loop.create_task(self._pair(sock))
            self._pairing.add(task)
            task.add_done_callback(self._pairing.discard)

    async def _pair(self, sock: socket.socket) -> None:
        try:
            ticket = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 64), 5.0)
        except (OSError, asyncio.TimeoutError):
            ticket = b""
        except asyncio.CancelledError:
            sock.close()   # the listener closed: nobody will take this socket
            raise
        fut = self._tickets.get(ticket)
        if fut is None or fut.done():
            logger.warning("closing shared-memory side channel: unknown ticket")
            sock.close()
            return
        fut.set_result(sock)

    async def close(self) -> None:
        tasks = [self._task, *self._pairing]
        for task in tasks:
            task.cancel()
        self._sock.close()
        for fut in self._tickets.values():
            if fut.done() and not fut.cancelled():
                fut.result().close()
            else:
                fut.cancel()
        self._tickets.clear()
        # ended, not just told to: a loop stopped next must not find them pending
        await asyncio.gather(*tasks, return_exceptions=True)


async def _open_fd_channel(name: Any, ticket: Any) -> socket.socket:
    if not isinstance(name, str) or not isinstance(ticket, bytes):
        raise OSError("the server offers no shared-memory side channel")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, name)
        await loop.sock_sendall(sock, ticket)
    except OSError:
        sock.close()
        raise
    return sock


async def client_handshake(wire: Wire, identity: PeerInfo, config: TransportConfig,
                           token: bytes, who: str) -> Connection:
    """Run the client's side on a fresh wire; the Connection, or an error."""
    client_nonce = os.urandom(16)
    wire.write_message({"peer": identity.to_wire(), "nonce": client_nonce,
                        "max_frame": config.max_frame_bytes})
    hello = await _recv(wire, who)
    peer, server_nonce = _peer(hello, who), _nonce(hello, who)
    fd_sock = await _choose_shm(config, identity, peer, hello, who)
    try:
        mac = _mac(token, b"client", client_nonce, server_nonce) if token else None
        wire.write_message({"mac": mac, "shm": fd_sock is not None})
        reply = await _recv(wire, who)
        if reply.get("ok") is not True:
            reason = str(reply.get("reason", "no reason given"))
            if reply.get("code") == "auth":
                raise AuthError(f"{who} refused the connection: {reason}; {_TOKEN_ADVICE}")
            raise HandshakeError(f"{who} refused the connection: {reason}")
        if token and not _verify(token, reply.get("mac"), b"server", client_nonce, server_nonce):
            raise AuthError(f"{who} did not prove the cluster secret (it has none or another one); "
                            f"{_TOKEN_ADVICE} on every task")
    except BaseException:
        if fd_sock is not None:
            fd_sock.close()
        raise
    if fd_sock is not None:
        fd_sock.settimeout(_FD_TIMEOUT_S)
    return Connection(wire, identity, peer, config, fd_sock, _max_frame(hello))


def _max_frame(hello: dict) -> int | None:
    """The biggest frame the peer said it accepts (an older peer says nothing)."""
    value = hello.get("max_frame")
    return value if type(value) is int and value > 0 else None


async def _choose_shm(config: TransportConfig, identity: PeerInfo, peer: PeerInfo,
                      hello: dict, who: str) -> socket.socket | None:
    if config.mode == "tcp":
        return None
    same_host = peer.host_id == identity.host_id
    if config.mode == "shm" and not same_host:
        raise HandshakeError(f"mode='shm' needs {who} on this host, but it runs on {peer.host_id}")
    if not same_host:
        return None
    try:
        return await _open_fd_channel(hello.get("shm"), hello.get("ticket"))
    except OSError as exc:
        if config.mode == "shm":
            raise HandshakeError(f"cannot use shared memory with {who}: {exc}") from None
        logger.info("using tcp to %s: shared memory unavailable (%s)", who, exc)
        return None


async def server_handshake(wire: Wire, identity: PeerInfo, config: TransportConfig,
                           token: bytes, fd_channels: FdChannels | None) -> Connection:
    """Run the server's side on an accepted wire; the Connection, or an error."""
    who = wire.label
    hello = await _recv(wire, who)
    peer, client_nonce = _peer(hello, who), _nonce(hello, who)
    server_nonce = os.urandom(16)
    ticket, paired = fd_channels.ticket() if fd_channels is not None else (None, None)
    try:
        wire.write_message({"peer": identity.to_wire(), "nonce": server_nonce, "auth": bool(token),
                            "shm": fd_channels.name if fd_channels else None, "ticket": ticket,
                            "max_frame": config.max_frame_bytes})
        reply = await _recv(wire, f"{peer.name} ({who})")
        mac = reply.get("mac")
        if token and not _verify(token, mac, b"client", client_nonce, server_nonce):
            _refuse(wire, "auth", "the peer has no cluster secret" if mac is None
                    else "the peer's cluster secret does not match")
        if not token and mac is not None:
            _refuse(wire, "auth", "this server has no cluster secret, the peer has one")
        fd_sock = None
        if reply.get("shm") is True:
            if paired is None:
                _refuse(wire, "shm", "this server offers no shared memory")
            fd_sock = await paired
            fd_channels.take(ticket)
            fd_sock.settimeout(_FD_TIMEOUT_S)
        wire.write_message({"ok": True, "mac": _mac(token, b"server", client_nonce, server_nonce)
                            if token else None})
        return Connection(wire, identity, peer, config, fd_sock, _max_frame(hello))
    finally:
        if ticket is not None:
            fd_channels.drop(ticket)


def _refuse(wire: Wire, code: str, reason: str) -> None:
    wire.write_message({"ok": False, "code": code, "reason": reason})
    raise (AuthError if code == "auth" else HandshakeError)(reason)
