"""The actor runtime: one actor system per process, actors addressed by
(address, name), request/reply over pooled transport connections.

An actor is a plain object spawned with its door (:mod:`.door`): it answers
the messages that door declares and nothing else, as a gRPC service answers
only the RPCs of its ``.proto`` (any other name is ``UnimplementedError``
naming the door, and the actor's helpers stay out of the wire's reach). The
caller's side, ``ActorRef`` and the message kinds, is :mod:`.ref`; this
module serves, connects and routes.

Design choices, each for a measured reason:
- Replies are matched to requests by id on the connection's message callback,
  with no task per message: a request/reply costs one future and one timer.
- A synchronous method runs inline on the loop in arrival order; a coroutine
  method runs as its own task, so a long step never blocks a heartbeat or a
  rendezvous push to the same actor. Actors keep their state consistent by
  being single-threaded on the loop, not by a serial mailbox.
- A call to an actor of the same system, or of another system of this process
  on the same event loop, skips serialization and sockets but keeps the
  semantics: the same typed errors, the same timeouts. (Arguments are passed
  by reference then: callers must not mutate what they sent.) A session
  reaches a server of this process on another loop so too, where that server
  asked for it (``direct_callers``; :mod:`.in_process`).
- One pooled connection per peer; a lost connection fails every call pending
  on it with UnavailableError naming the peer (``peer``), and the next call reconnects.
- Every connection carries heartbeats both ways; one silent for three of
  them is dropped as dead, which fails the calls pending on it
  (:mod:`distrib.runtime.actors.failure_detector`).

Names of :mod:`.ref` that callers import from here stay importable (``__all__``).
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
from typing import Any, Callable

import transports
from distrib import errors
from distrib.errors import DeadlineExceededError, OpError, UnauthenticatedError, UnavailableError
from distrib.runtime.actors.failure_detector import MISSED_HEARTBEATS, FailureDetector, Heartbeat, heartbeat_s
from distrib.runtime.actors.in_process import in_process_system, register, unregister
from distrib.runtime.actors.ref import (
    CALL,
    CALLER,
    DEFAULT_TIMEOUT_S,
    ERR,
    HEARTBEAT,
    OK,
    TELL,
    ActorRef,
    caller_key,
    expire,
    task_name,
    too_big,
)
from distrib.runtime.actors.table import ActorTable
from distrib.settings import CONNECT_TIMEOUT_S, SESSION_GC_S, TRANSPORT

__all__ = ["ActorSystem", "ActorRef", "CALLER", "caller_key", "session_gc_s", "client_name",
           "default_transport_config", "DEFAULT_TIMEOUT_S", "TELL", "task_name",
           "in_process_system"]

logger = logging.getLogger(__name__)

# How long a shutdown waits for the tasks it cancelled to end (one that
# swallows its cancellation must not hold the shutdown forever)
_SHUTDOWN_WAIT_S = 5.0


def session_gc_s() -> float:
    """How long state tied to a peer outlives its connection
    (``DISTRIB_SESSION_GC_S``, default 60 s): a peer that comes back in time
    keeps it; past that it is freed, as TF's session GC does."""
    return SESSION_GC_S.get()


class _Peer:
    """The system's view of one connection: its pending calls."""

    __slots__ = ("conn", "pending", "name")

    def __init__(self, conn: transports.Connection) -> None:
        self.conn = conn
        self.pending: dict[int, asyncio.Future] = {}
        self.name = conn.peer.name


class ActorSystem:
    """One per process (or per task in tests): a listening endpoint, the local
    actors, and a pool of outgoing connections.

    ``host:port`` is the system's ``address``, the one its peers dial;
    ``bind_host`` (default: ``host``) is where it listens, when that differs
    (a server on ``0.0.0.0`` known to its cluster by its host name: see
    :mod:`distrib.server.bind_address`)."""

    def __init__(self, name: str, *, host: str = "127.0.0.1", port: int = 0,
                 config: transports.TransportConfig | None = None,
                 listen: bool = True, incarnation: int | None = None,
                 bind_host: str | None = None) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.bind_host = bind_host
        self.config = config or default_transport_config()
        self.incarnation = incarnation if incarnation is not None else transports.new_incarnation()
        self.identity = transports.PeerInfo(name, self.incarnation, transports.local_host_id())
        self._listen = listen
        self._listener: transports.Listener | None = None
        self._actors = ActorTable(name)
        self._out: dict[str, _Peer] = {}
        self._connecting: dict[str, asyncio.Future] = {}
        self._tasks_at: dict[str, str] = {}   # address -> the task last found there
        self._inbound: set[_Peer] = set()
        self._inbound_by_name: dict[str, _Peer] = {}   # the latest one from each system
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._closed, self.heartbeat = False, Heartbeat(HEARTBEAT)   # what the detector sends
        self._loop: asyncio.AbstractEventLoop | None = None
        self.address = f"{host}:{port}" if not listen else ""
        self.on_peer_lost: list[Callable[[str, transports.PeerInfo], None]] = []
        # sessions on other loops of this process call its actors on its loop
        # (in_process.DirectRef): the local server's, a strategy's own server's
        self.direct_callers = False

    # -- lifecycle ---------------------------------------------------------
    async def start(self) -> ActorSystem:
        if self._listen:
            self._listener = await transports.listen(
                self.bind_host or self.host, self.port, self._accept, identity=self.identity,
                config=self.config)
            self.port = self._listener.port
            self.address = f"{self.host}:{self.port}"
            self._loop = asyncio.get_running_loop()
            register(self, self._loop)
        every = heartbeat_s()
        if every > 0:
            detector = FailureDetector(self.name, self.connections, self.heartbeat, every)
            self.spawn_task(detector.run(), "heartbeats")
        return self

    def connections(self) -> list[transports.Connection]:
        """The open connections of this system, the ones it opened and the ones
        it accepted, as a new list (each names its peer, ``conn.peer.name``,
        and its transport, ``conn.kind``). Clients are among them."""
        return [peer.conn for peer in (*self._out.values(), *self._inbound)
                if not peer.conn.closed]

    @property
    def closed(self) -> bool:
        """Whether ``shutdown`` has begun."""
        return self._closed

    @property
    def listening_on(self) -> str | None:
        """``host:port`` of the socket this system listens on (None before
        ``start`` or without ``listen``); ``address`` is the one peers dial."""
        return None if self._listener is None else self._listener.address

    async def shutdown(self) -> None:
        """Stop listening, close every connection, fail every pending call."""
        if self._closed:
            return
        self._closed = True
        unregister(self)
        for actor in self._actors.actors():
            stop = getattr(actor, "on_stop", None)
            if stop is not None:
                try:
                    res = stop()
                    if inspect.isawaitable(res):
                        await res
                except Exception:
                    logger.exception("actor on_stop failed")
        if self._listener is not None:
            await self._listener.close()
        peers = list(self._out.values()) + list(self._inbound)
        for peer in peers:
            self._fail_pending(peer, UnavailableError(
                f"call to {peer.name} abandoned: the actor system of {self.name} shut down",
                peer=task_name(self.name)))
            await peer.conn.close()
        self._out.clear()
        self._inbound.clear()
        self._inbound_by_name.clear()
        await self._cancel_tasks()

    async def _cancel_tasks(self) -> None:
        """Cancel the calls and tells still running, and wait (boundedly) until
        they have ended: a loop stopped right after the shutdown (a Server's
        loop thread) would otherwise destroy them while pending."""
        me = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not me]
        for t in tasks:
            t.cancel()
        if not tasks:
            return
        _, stuck = await asyncio.wait(tasks, timeout=_SHUTDOWN_WAIT_S)
        if stuck:
            logger.warning("%s: %d task(s) still running %gs after the shutdown cancelled "
                           "them", self.name, len(stuck), _SHUTDOWN_WAIT_S)

    # -- actors --------------------------------------------------------------
    def spawn(self, name: str, actor: Any, door: Any) -> ActorRef:
        """Serve ``actor`` as ``name``; it answers the messages of ``door`` alone (a
        Door class, or the names: :class:`~.table.ActorTable`)."""
        self._actors.add(name, actor, door)
        return ActorRef(self, self.address, name)

    def actor(self, name: str) -> Any:
        """The local actor spawned as ``name`` (KeyError if none)."""
        return self._actors.actor(name)

    def ref(self, address: str, name: str, peer: tuple[str, int] | None = None) -> ActorRef:
        """A handle on actor ``name`` at ``address``; ``peer``: the (name,
        incarnation) of the system there, when known (see :meth:`_connection`)."""
        return ActorRef(self, address, name, peer)

    # -- local path ------------------------------------------------------------
    async def _call_local(self, actor: str, method: str, args: tuple, timeout: float | None) -> Any:
        res = self._actors.method(actor, method)(*args)
        if inspect.isawaitable(res):
            if timeout is None:
                return await res
            try:
                return await asyncio.wait_for(res, timeout)
            except asyncio.TimeoutError:
                raise DeadlineExceededError(
                    f"call {actor}.{method} on {self.name} got no reply within {timeout:g}s") from None
        return res

    def _tell_local(self, actor: str, method: str, args: tuple | list) -> None:
        try:
            res = self._actors.method(actor, method)(*args)
        except Exception:
            logger.exception("tell %s.%s failed", actor, method)
            return
        if inspect.isawaitable(res):
            self.spawn_task(res, f"tell {actor}.{method}")

    def spawn_task(self, coro: Any, what: str) -> asyncio.Task:
        """Run ``coro`` as a task of this system: logged if it fails with a
        non-distrib error, cancelled (boundedly awaited) at shutdown."""
        return self.track_task(asyncio.ensure_future(coro), what)

    def track_task(self, task: asyncio.Task, what: str) -> asyncio.Task:
        """Make a running ``task`` one of this system's (see ``spawn_task``)."""
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._task_done(t, what))
        return task

    async def call_local(self, actor: str, method: str, args: tuple,
                         timeout: float | None) -> Any:
        """Call an actor of this system from its own loop (the in-process path)."""
        return await self._call_local(actor, method, args, timeout)

    def _task_done(self, task: asyncio.Task, what: str) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, OpError):
                logger.error("%s failed: %r", what, exc)

    # -- remote path -------------------------------------------------------------
    def shares_memory_with(self, address: str, peer: tuple[str, int] | None = None) -> bool:
        """Whether the open connection to ``address`` passes arrays through shared memory."""
        found = self._open_peer(address, peer)
        return found is not None and found.conn.kind == "shm"

    def _open_peer(self, address: str, peer: tuple[str, int] | None = None) -> _Peer | None:
        """The open connection to ``address``: ours, or else the one that the
        system there, known as ``peer`` (name, incarnation), opened to us."""
        out = self._out.get(address)
        if out is not None and not out.conn.closed:
            return out
        if peer is not None:
            back = self._inbound_by_name.get(peer[0])
            # the incarnation ties the connection to the process at ``address``:
            # whoever gave it (a master) asked that address for it
            if back is not None and not back.conn.closed \
                    and back.conn.peer.incarnation == peer[1]:
                return back
        return None

    async def _connection(self, address: str,
                          peer: tuple[str, int] | None = None) -> transports.Connection:
        """A connection to ``address`` for one-way messages. A system that
        called us already has one open: we answer over it rather than open a
        second one, so that both ways share one connection (a parameter
        server sends a worker its variables over the connection the worker's
        step came by, and the worker's releases of their shared memory ride
        along with its next message instead of going alone)."""
        found = self._open_peer(address, peer)
        if found is not None:
            return found.conn
        return (await self._peer(address)).conn

    async def _peer(self, address: str) -> _Peer:
        peer = self._out.get(address)
        if peer is not None and not peer.conn.closed:
            return peer
        if self._closed:
            raise UnavailableError(f"the actor system of {self.name} is shut down",
                                   peer=task_name(self.name))
        fut = self._connecting.get(address)
        if fut is None:
            fut = asyncio.ensure_future(self._open(address))
            self._connecting[address] = fut
            fut.add_done_callback(lambda _f: self._connecting.pop(address, None))
        return await asyncio.shield(fut)

    async def _open(self, address: str) -> _Peer:
        try:
            conn = await transports.connect(address, identity=self.identity, config=self.config)
        except transports.AuthError as e:
            raise UnauthenticatedError(str(e)) from None
        except transports.ConnectTimeout as e:  # its message names the address
            raise UnavailableError(str(e), peer=self._tasks_at.get(address)) from None
        except (transports.TransportError, OSError) as e:
            raise UnavailableError(f"cannot reach {address}: {e}",
                                   peer=self._tasks_at.get(address)) from None
        if task_name(conn.peer.name) is not None:   # reaching it fails later: name it
            self._tasks_at[address] = conn.peer.name
        peer = _Peer(conn)
        self._out[address] = peer
        conn.start(lambda msg: self._on_message(peer, msg),
                   lambda exc: self._on_close(peer, exc, address))
        return peer

    async def _call_remote(self, address: str, actor: str, method: str, args: tuple,
                           timeout: float | None) -> Any:
        peer = await self._peer(address)
        req = next(self._ids)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        peer.pending[req] = fut
        handle = None
        if timeout is not None:
            handle = loop.call_later(timeout, expire, fut, actor, method, peer.name, timeout)
        try:
            try:
                await peer.conn.send([CALL, req, actor, method, list(args)])
            except transports.FrameError as e:   # nothing was sent: the connection is fine
                raise too_big(method, address, e) from e
            except transports.ConnectionClosed as e:   # lost between lookup and send
                raise UnavailableError(f"call {actor}.{method} to {peer.name} at {address} "
                                       f"not sent: {e}; the task may have stopped or "
                                       "crashed", peer=task_name(peer.name)) from None
            return await fut
        finally:
            peer.pending.pop(req, None)
            if handle is not None:
                handle.cancel()

    def _request_nowait(self, address: str, actor: str, method: str, args: tuple,
                        timeout: float | None) -> asyncio.Future | None:
        if address == self.address or in_process_system(address) is not None:
            return None
        peer = self._out.get(address)
        if peer is None or peer.conn.closed:
            return None
        req = next(self._ids)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        try:
            peer.conn.send_nowait([CALL, req, actor, method, list(args)])
        except Exception:
            return None  # let the ordinary path reconnect or raise the typed error
        peer.pending[req] = fut
        handle = (loop.call_later(timeout, expire, fut, actor, method, peer.name, timeout)
                  if timeout is not None else None)

        def done(_f: asyncio.Future) -> None:
            peer.pending.pop(req, None)
            if handle is not None:
                handle.cancel()
        fut.add_done_callback(done)
        return fut

    # -- inbound ----------------------------------------------------------------
    async def _accept(self, conn: transports.Connection) -> None:
        peer = _Peer(conn)
        self._inbound.add(peer)
        self._inbound_by_name[peer.name] = peer
        conn.start(lambda msg: self._on_message(peer, msg),
                   lambda exc: self._on_close(peer, exc, None))

    def _on_message(self, peer: _Peer, msg: Any) -> None:
        try:
            kind = msg[0]
            if kind == OK or kind == ERR:
                fut = peer.pending.get(msg[1])
                if fut is not None and not fut.done():
                    if kind == OK:
                        fut.set_result(msg[2])
                    else:
                        fut.set_exception(errors.from_wire(msg[2]))
            elif kind == CALL:
                self._serve_call(peer, msg[1], msg[2], msg[3], msg[4])
            elif kind == TELL:
                self._tell_local(msg[1], msg[2], msg[3])
            elif kind == HEARTBEAT:   # its bytes are what the failure detector counts
                self.heartbeat.heard(msg)
            else:
                raise ValueError(f"unknown message kind {kind!r}")
        except Exception as e:  # a malformed message closes only this connection
            logger.warning("closing connection from %s: bad actor message (%s)", peer.name, e)
            self.spawn_task(peer.conn.close(), "close")

    def _serve_call(self, peer: _Peer, req: int, actor: str, method: str, args: list) -> None:
        # the method (and the task that finishes it) sees who called: CALLER
        token = CALLER.set(peer.conn.peer)
        try:
            try:
                if not isinstance(actor, str) or not isinstance(method, str) \
                        or not isinstance(args, list):
                    raise errors.InvalidArgumentError(
                        "a call names its actor and method as strings and passes a list of "
                        f"arguments, not {type(actor).__name__}, {type(method).__name__}, "
                        f"{type(args).__name__}", task=self.name)
                res = self._actors.method(actor, method)(*args)
            except Exception as e:
                self._reply_error(peer, req, e)
                return
            if inspect.isawaitable(res):
                self.spawn_task(self._finish_call(peer, req, res), f"{actor}.{method}")
            else:
                self._reply(peer, [OK, req, res])
        finally:
            CALLER.reset(token)

    async def _finish_call(self, peer: _Peer, req: int, coro: Any) -> None:
        try:
            res = await coro
        except Exception as e:
            self._reply_error(peer, req, e)
            return
        self._reply(peer, [OK, req, res])

    def _reply_error(self, peer: _Peer, req: int, e: BaseException) -> None:
        if not isinstance(e, OpError):
            logger.exception("actor call failed on %s", self.name, exc_info=e)
        self._reply(peer, [ERR, req, errors.to_wire(e, task=self.name)])

    def _reply(self, peer: _Peer, msg: list) -> None:
        if peer.conn.closed:
            return
        try:
            peer.conn.send_nowait(msg)
        except Exception as e:
            logger.warning("could not reply to %s: %s", peer.name, e)
            if msg[0] == OK:  # e.g. an unencodable result: tell the caller why
                try:
                    peer.conn.send_nowait([ERR, msg[1], errors.to_wire(e, task=self.name)])
                except Exception:
                    pass

    def _on_close(self, peer: _Peer, exc: BaseException | None, address: str | None) -> None:
        if address is not None and self._out.get(address) is peer:
            del self._out[address]
        self._inbound.discard(peer)
        if self._inbound_by_name.get(peer.name) is peer:
            del self._inbound_by_name[peer.name]
        self._fail_pending(peer, UnavailableError(
            f"connection to {peer.name} at {address or 'peer'} was lost"
            + (f" ({exc})" if exc else "") + "; the task may have stopped or crashed",
            peer=task_name(peer.name)))
        for cb in self.on_peer_lost:
            try:
                cb(address or "", peer.conn.peer)
            except Exception:
                logger.exception("peer-lost callback failed")

    @staticmethod
    def _fail_pending(peer: _Peer, exc: OpError) -> None:
        for fut in peer.pending.values():
            if not fut.done():
                fut.set_exception(exc)
        peer.pending.clear()


def default_transport_config() -> transports.TransportConfig:
    """The transport settings of this process: ``DISTRIB_TRANSPORT`` = auto | tcp | shm
    forces the transport (benchmarks compare the two this way);
    ``DISTRIB_CONNECT_TIMEOUT_S`` is the deadline for reaching a peer (default 10).
    A peer that accepts the connection but does not answer the handshake
    within three heartbeats is hung, as one that goes silent later is."""
    every = heartbeat_s()
    handshake = 5.0 if every == 0 else min(5.0, MISSED_HEARTBEATS * every)
    return transports.TransportConfig(mode=TRANSPORT.get(), connect_timeout_s=CONNECT_TIMEOUT_S.get(),
                                      handshake_timeout_s=handshake)


def client_name() -> str:
    return f"client:{os.getpid()}:{os.urandom(4).hex()}"
