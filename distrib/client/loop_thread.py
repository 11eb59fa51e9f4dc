"""A private event loop on a daemon thread, for the blocking facades
(``SyncSession``, ``Server``): they drive the async core from plain scripts
and the REPL, where no loop runs, by handing coroutines to this thread.

Every loop still running when the interpreter exits is stopped, and its thread
joined (bounded), by the process runtime's exit hook (``distrib.process``,
through :func:`stop_loops_at_exit`): a uvloop loop left running on a daemon
thread can crash a finished program with SIGSEGV while the interpreter
finalizes, when an event (a peer closing its connection, say) wakes it and
libuv calls back into an interpreter that is gone (uvloop #706; xpra and
uvicorn users hit the same). Owners with more to close (``Server``) stop
theirs first, earlier in the same hook.

Stopping a loop first cancels the tasks still pending on it and waits for
them (bounded), as ``asyncio.run`` does when its main coroutine ends: a task
left pending is destroyed with its loop at exit, and asyncio prints "Task
was destroyed but it is pending!" (issue 36: a ``SyncSession`` left open
when its local server stopped kept its channel's heartbeat task on the
client loop). The loop itself is left open: closing it would report each
connection an owner left open as an unclosed transport; the process ends anyway.
"""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
import time
import weakref
from typing import Any, Coroutine

__all__ = ["LoopThread", "client_loop", "EXIT_JOIN_S", "stop_loops_at_exit"]

logger = logging.getLogger(__name__)

EXIT_JOIN_S = 5.0     # how long the exit hook waits for each loop's thread to end
_live: weakref.WeakSet[LoopThread] = weakref.WeakSet()


class LoopThread:
    """A private event loop on a daemon thread, for blocking facades."""

    def __init__(self, name: str) -> None:
        import uvloop
        self.loop = uvloop.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()
        self.pid = os.getpid()   # a forked child has the object, not the thread
        _live.add(self)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def run(self, coro: Coroutine, timeout: float | None = None) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("blocking call from the loop thread itself would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = EXIT_JOIN_S) -> None:
        """Cancel the loop's pending tasks, stop it and wait for its thread: at
        most ``timeout`` seconds in all."""
        _live.discard(self)
        outside = threading.current_thread() is not self.thread
        deadline = time.monotonic() + timeout
        if self.loop.is_running() and outside:
            finishing = asyncio.run_coroutine_threadsafe(_cancel_pending(timeout / 2),
                                                         self.loop)
            try:
                finishing.result(timeout / 2 + 0.5)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError,
                    RuntimeError) as exc:
                logger.debug("%s: pending tasks not finished: %r", self.thread.name, exc)
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if outside:
            self.thread.join(timeout=max(deadline - time.monotonic(), 0.1))


async def _cancel_pending(grace: float) -> None:
    """Cancel every other task of the running loop and wait for them (``grace`` s)."""
    me = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=grace)


def stop_loops_at_exit() -> None:
    """Stop every loop thread still running (the process runtime's exit hook
    calls it last, after whatever owns loops stopped them: see the module doc)."""
    for loop_thread in list(_live):
        if loop_thread.pid == os.getpid():
            loop_thread.stop()


_client_loop: LoopThread | None = None
_client_lock = threading.Lock()


def client_loop() -> LoopThread:
    global _client_loop
    with _client_lock:
        if _client_loop is None:
            _client_loop = LoopThread("distrib-client")
            atexit.register(_client_loop.stop)
        return _client_loop
