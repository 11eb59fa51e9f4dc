"""A private event loop on a daemon thread, for the blocking facades
(``SyncSession``, ``Server``): they drive the async core from plain scripts
and the REPL, where no loop runs, by handing coroutines to this thread.
"""
from __future__ import annotations

import asyncio
import atexit
import threading
from typing import Any, Coroutine

__all__ = ["LoopThread", "client_loop"]


class LoopThread:
    """A private event loop on a daemon thread, for blocking facades."""

    def __init__(self, name: str) -> None:
        import uvloop
        self.loop = uvloop.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def run(self, coro: Coroutine, timeout: float | None = None) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("blocking call from the loop thread itself would deadlock")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)


_client_loop: LoopThread | None = None
_client_lock = threading.Lock()


def client_loop() -> LoopThread:
    global _client_loop
    with _client_lock:
        if _client_loop is None:
            _client_loop = LoopThread("distrib-client")
            atexit.register(_client_loop.stop)
        return _client_loop
