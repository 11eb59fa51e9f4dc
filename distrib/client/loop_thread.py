"""A private event loop on a daemon thread, for the blocking facades
(``SyncSession``, ``Server``): they drive the async core from plain scripts
and the REPL, where no loop runs, by handing coroutines to this thread.

Every loop still running when the interpreter exits is stopped, and its thread
joined (bounded), by an exit hook: a uvloop loop left running on a daemon
thread can crash a finished program with SIGSEGV while the interpreter
finalizes, when an event (a peer closing its connection, say) wakes it and
libuv calls back into an interpreter that is gone (uvloop #706; xpra and
uvicorn users hit the same). Owners with more to close (``Server``) stop
theirs first, from their own exit hook.
"""
from __future__ import annotations

import asyncio
import atexit
import os
import threading
import weakref
from typing import Any, Coroutine

__all__ = ["LoopThread", "client_loop", "EXIT_JOIN_S"]

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
        """Stop the loop and wait (at most ``timeout`` seconds) for its thread."""
        _live.discard(self)
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=timeout)


@atexit.register
def _stop_all_at_exit() -> None:
    """Stop every loop thread still running (registered first, so it runs
    after the exit hooks of the modules that own loops: see the module doc)."""
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
