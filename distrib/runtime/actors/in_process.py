"""The actor systems of this process, and the calls that reach them with no
socket and no encoding (the in-process actor path).

Every listening :class:`~distrib.runtime.actors.system.ActorSystem` registers
here by its address while it runs. A call to one of them takes the in-process
path, with the same typed errors and timeouts as over the wire, in two cases:

- **the same event loop** (``in_process_system``): the caller runs the
  actor's method itself (a Session on the loop of an ``async with
  dt.serve(...)`` server), for every actor message;
- **another loop of this process, for a server that asked for it**
  (``direct_callers``; :class:`DirectRef`): the process's local server and a
  strategy's own server run on a loop thread of their own, so that they
  outlive the caller's ``asyncio.run``; a session of any other loop sends its
  master's messages to that loop as coroutines (``run_coroutine_threadsafe``)
  instead of as bytes. Only sessions take this path: the calls between
  tasks (a worker's tensors, the collectives) keep the wire, whose failure
  detection the fault tests cover.

Arguments and results are passed by reference on both paths: neither side
may mutate them afterwards (a master channel copies fed arrays the caller may
reuse, as TensorFlow copies feeds). A server that stops fails the calls in
flight with ``UnavailableError``, as a lost connection does; one found stopped
is reached over the wire, which fails the same way.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from distrib.errors import UnavailableError

__all__ = ["register", "unregister", "in_process_system", "direct_system", "DirectRef"]

# Actor systems listening in this process, by normalized address, with their loop
_IN_PROCESS: dict[str, tuple[Any, asyncio.AbstractEventLoop]] = {}
# how often a call to another loop checks that that loop still runs (a
# server's loop thread stops after its shutdown, which fails what it ran then)
_WATCH_S = 1.0


def _norm(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"{'127.0.0.1' if host in ('localhost', '') else host}:{port}"


def register(system: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Record ``system`` (started on ``loop``) under its address."""
    _IN_PROCESS[_norm(system.address)] = (system, loop)


def unregister(system: Any) -> None:
    """Forget ``system`` (its shutdown began)."""
    key = _norm(system.address)
    found = _IN_PROCESS.get(key)
    if found is not None and found[0] is system:
        del _IN_PROCESS[key]


def in_process_system(address: str) -> Any:
    """The running actor system at ``address`` when it is on the caller's own
    loop, else None."""
    if not _IN_PROCESS:
        return None
    found = _IN_PROCESS.get(_norm(address))
    if found is None:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return found[0] if found[1] is loop else None


def direct_system(address: str) -> tuple[Any, asyncio.AbstractEventLoop] | None:
    """``(system, its loop)`` for the running system at ``address`` that takes
    direct calls from other loops (``direct_callers``) when the caller is on
    another loop of this process; else None."""
    if not _IN_PROCESS:
        return None
    found = _IN_PROCESS.get(_norm(address))
    if found is None or not found[0].direct_callers or not found[1].is_running():
        return None
    try:
        here = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return None if found[1] is here else found


class DirectRef:
    """A handle on an actor for a session: a direct call on the loop of an
    in-process server that takes them (see the module header), else ``ref``'s
    own path (the same loop's in-process call, or the wire)."""

    __slots__ = ("ref", "name", "address")

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.name = ref.name
        self.address = ref.address

    def __repr__(self) -> str:
        return f"DirectRef({self.name!r} at {self.address})"

    @property
    def in_process(self) -> bool:
        """Whether a call now takes an in-process path (no copy on the way)."""
        return direct_system(self.address) is not None \
            or in_process_system(self.address) is not None

    async def call(self, method: str, *args: Any, timeout: float | None = 60.0) -> Any:
        found = direct_system(self.address)
        if found is None:
            return await self.ref.call(method, *args, timeout=timeout)
        return await call_on_loop(found[0], found[1], self.name, method, args, timeout)


async def call_on_loop(system: Any, loop: asyncio.AbstractEventLoop, actor: str, method: str,
                       args: tuple, timeout: float | None) -> Any:
    """Call ``actor.method(*args)`` of ``system`` on its ``loop`` (another
    thread's) and await the result here."""
    coro = _served(system, actor, method, args, timeout)
    try:
        done = asyncio.run_coroutine_threadsafe(coro, loop)
    except RuntimeError:   # the loop closed since the lookup
        coro.close()
        raise _gone(system) from None
    waiting = asyncio.wrap_future(done)
    here = asyncio.get_running_loop()
    watch: list[asyncio.TimerHandle] = []
    watch.append(here.call_later(_WATCH_S, _watch, waiting, done, system, loop, here, watch))
    try:
        return await waiting
    finally:
        watch[0].cancel()


def _watch(waiting: asyncio.Future, done: concurrent.futures.Future, system: Any,
           loop: asyncio.AbstractEventLoop, here: asyncio.AbstractEventLoop,
           handle: list) -> None:
    """Fail the call if the server's loop stopped with it unanswered."""
    if waiting.done():
        return
    if not loop.is_running() and not done.done():
        try:   # the caller's future follows (wrap_future's chain)
            done.set_exception(_gone(system))
        except concurrent.futures.InvalidStateError:   # answered meanwhile
            pass
        return
    handle[0] = here.call_later(_WATCH_S, _watch, waiting, done, system, loop, here, handle)


async def _served(system: Any, actor: str, method: str, args: tuple,
                  timeout: float | None) -> Any:
    """The call, run on the system's loop as one of its tasks (cancelled at
    its shutdown, which the caller sees as the server being gone)."""
    if system.closed:
        raise _gone(system)
    task = asyncio.current_task()
    if task is not None:
        system.track_task(task, f"{actor}.{method}")
    try:
        return await system.call_local(actor, method, args, timeout)
    except asyncio.CancelledError:
        if system.closed:
            raise _gone(system) from None
        raise


def _gone(system: Any) -> UnavailableError:
    name = system.name
    return UnavailableError(
        f"the server {name} at {system.address} in this process shut down; the task may "
        "have stopped", peer=name if name.startswith("/job:") else None)
