"""A handle on an actor (``ActorRef``), and what a call is made of: its
message kinds, its deadline, its caller.

``ref.call`` awaits the reply (or the remote error, rebuilt as the same typed
``distrib.errors`` class, naming the remote task); ``ref.tell`` is one-way;
``ref.request`` sends a call now and returns the future of its reply. A ref
picks the path: an actor of its own system, or of another system on this
loop (:mod:`.in_process`), is called with no encoding and no socket; any
other goes over the system's pooled connection (:mod:`.system`).

Wire format of a message (a msgpack-able list, arrays out of band):
``[CALL, id, actor, method, args]``, ``[TELL, actor, method, args]``,
``[OK, id, result]``, ``[ERR, id, error-dict]``, ``[HEARTBEAT(, membership version)]``.
A call's deadline is one timer (:func:`expire`), a message over the frame
limit one typed error (:func:`too_big`): the system that serves and the ref
that calls share them, and this module imports the system only for types,
so it sits below it. A served method learns who called it from ``CALLER``
(set by the system for each call it serves).
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import TYPE_CHECKING, Any

import transports
from distrib.errors import DeadlineExceededError, InvalidArgumentError, UnavailableError
from distrib.runtime.actors.in_process import in_process_system

if TYPE_CHECKING:
    from distrib.runtime.actors.system import ActorSystem

__all__ = ["ActorRef", "CALLER", "caller_key", "CALL", "TELL", "OK", "ERR", "HEARTBEAT",
           "DEFAULT_TIMEOUT_S", "task_name", "too_big", "expire"]

CALL, TELL, OK, ERR, HEARTBEAT = 0, 1, 2, 3, 4
DEFAULT_TIMEOUT_S = 60.0


class ActorRef:
    """A handle on an actor, local or remote. It is the system's own front
    door: it calls the system's private send paths directly (each reach is
    marked SLF001) rather than through a public layer that would cost every
    message one more call."""

    __slots__ = ("system", "address", "name", "_local", "peer")

    def __init__(self, system: ActorSystem, address: str, name: str,
                 peer: tuple[str, int] | None = None) -> None:
        self.system = system
        self.address = address
        self.name = name
        self._local = address == system.address
        # (name, incarnation) of the system at ``address``, when the caller
        # knows it: a tell may then go over the connection that system opened
        # to this one (see ActorSystem._connection)
        self.peer = peer

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r} at {self.address})"

    async def call(self, method: str, *args: Any, timeout: float | None = DEFAULT_TIMEOUT_S) -> Any:
        if self._local or self.address == self.system.address:
            return await self.system._call_local(self.name, method, args, timeout)  # noqa: SLF001
        near = in_process_system(self.address)
        if near is not None:
            return await near._call_local(self.name, method, args, timeout)  # noqa: SLF001
        return await self.system._call_remote(self.address, self.name, method, args, timeout)  # noqa: SLF001

    def request(self, method: str, *args: Any,
                timeout: float | None = DEFAULT_TIMEOUT_S) -> asyncio.Future:
        """Send a call now and return the future of its reply, without a task per
        call when the connection is already open (the step fan-out uses this to
        start every partition at once)."""
        fut = self.system._request_nowait(self.address, self.name, method, args, timeout)  # noqa: SLF001
        if fut is None:
            fut = asyncio.ensure_future(self.call(method, *args, timeout=timeout))
        return fut

    async def tell(self, method: str, *args: Any) -> None:
        if self._local or self.address == self.system.address:
            self.system._tell_local(self.name, method, args)  # noqa: SLF001
            return
        near = in_process_system(self.address)
        if near is not None:
            near._tell_local(self.name, method, args)  # noqa: SLF001
            return
        conn = await self.system._connection(self.address, self.peer)  # noqa: SLF001
        try:
            await conn.send([TELL, self.name, method, list(args)])
        except transports.FrameError as e:
            raise too_big(method, self.address, e) from e
        except transports.ConnectionClosed as e:   # lost between lookup and send
            raise UnavailableError(f"message {self.name}.{method} to {self.address} not "
                                   f"sent: {e}; the task may have stopped or crashed",
                                   peer=task_name(conn.peer.name)) from None


# The peer (its handshake identity) whose call a method is serving; None for
# a call from this process. A master ties a session to the client that opened
# it, a worker a partition to the master that registered it: state a peer
# leaves behind is freed once that peer has been gone for session_gc_s().
CALLER: contextvars.ContextVar[transports.PeerInfo | None] = contextvars.ContextVar(
    "distrib_caller", default=None)


def caller_key() -> tuple[str, int] | None:
    """(name, incarnation) of the remote peer whose call is being served."""
    peer = CALLER.get()
    return None if peer is None else (peer.name, peer.incarnation)


def task_name(name: str | None) -> str | None:
    """``name`` if a task's (``/job:J/task:T``, a server's system), else None
    (a client's system): what an error's ``peer`` may hold."""
    return name if name is not None and name.startswith("/job:") else None


def too_big(method: str, address: str, e: Exception) -> InvalidArgumentError:
    """The error of a message over the frame limit: nothing was sent, the
    connection is fine."""
    return InvalidArgumentError(
        f"cannot send {method} to {address}: {e}; send less in one step (split a big "
        "feed or tensor into parts)")


def expire(fut: asyncio.Future, actor: str, method: str, peer: str, timeout: float) -> None:
    """A call's timer: its reply did not come within ``timeout``."""
    if not fut.done():
        fut.set_exception(DeadlineExceededError(
            f"call {actor}.{method} to {peer} got no reply within {timeout:g}s"))
