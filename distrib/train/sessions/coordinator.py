"""``Coordinator``: stop a group of background tasks together (TF1's ``tf.train.Coordinator``).

TF's coordinator joins threads; here the background work is asyncio tasks
(a ``ChiefQueueRunner``'s loop, say). A task registered with
:meth:`Coordinator.register_thread` that fails requests a stop with its
error, as a thread under TF's ``stop_on_exception`` does; ``await
coord.join()`` waits for the tasks once a stop is requested (cancelling those
still running after ``stop_grace_period_secs``) and re-raises that error.

A ``MonitoredSession`` makes one per session it creates and hands it to each
hook's ``after_create_session``: ``coord.request_stop()`` ends training,
``coord.register_thread(task)`` ties a background task to the session.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from distrib.errors import OutOfRangeError

logger = logging.getLogger(__name__)

__all__ = ["Coordinator"]


class Coordinator:
    """``Coordinator(clean_stop_exception_types=None)``: by default ``OutOfRangeError``
    passed to :meth:`request_stop` stops cleanly (is not re-raised)."""

    def __init__(self, clean_stop_exception_types: Iterable[type] | None = None) -> None:
        if clean_stop_exception_types is None:
            clean_stop_exception_types = (OutOfRangeError,)
        self._clean_types = tuple(clean_stop_exception_types)
        self._stop = False
        self._exc: BaseException | None = None
        self._event = asyncio.Event()
        self._stopped = threading.Event()   # the same, for threads (a SyncSession's runners)
        self._tasks: list[asyncio.Task] = []
        self._joined = False

    # -- stopping -----------------------------------------------------------------------
    def request_stop(self, ex: BaseException | None = None) -> None:
        """Ask every task to stop; the first ``ex`` (not a clean type) is re-raised by join."""
        if ex is not None and self._exc is None and not isinstance(ex, self._clean_types):
            self._exc = ex
            logger.info("coordinator: stop requested with %s: %s", type(ex).__name__, ex)
        self._stop = True
        self._stopped.set()
        self._event.set()

    def should_stop(self) -> bool:
        return self._stop

    def clear_stop(self) -> None:
        self._stop = False
        self._exc = None
        self._joined = False
        self._stopped.clear()
        self._event.clear()

    @property
    def requested_exception(self) -> BaseException | None:
        """The error a stop was requested with (None if none)."""
        return self._exc

    def raise_requested_exception(self) -> None:
        if self._exc is not None:
            raise self._exc

    @contextlib.contextmanager
    def stop_on_exception(self) -> Iterator[None]:
        """``with coord.stop_on_exception():`` an exception inside requests a stop with it."""
        try:
            yield
        except Exception as exc:
            self.request_stop(exc)

    async def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Wait until a stop is requested (True), or ``timeout`` seconds pass (False)."""
        if self._stop:
            return True
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            return self._stop
        return True

    # -- tasks ---------------------------------------------------------------------------
    def register_thread(self, task: asyncio.Future) -> None:
        """Tie a background task to this coordinator: its error requests a stop."""
        self._tasks.append(task)  # type: ignore[arg-type]
        task.add_done_callback(self._task_done)

    register_task = register_thread

    def _task_done(self, task: asyncio.Future) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("coordinated task failed: %s: %s", type(exc).__name__, exc)
            self.request_stop(exc)

    @property
    def joined(self) -> bool:
        return self._joined

    def join(self, threads: Iterable[Any] | None = None, stop_grace_period_secs: float = 120,
             ignore_live_threads: bool = False) -> Any:
        """``await coord.join(tasks)``: wait for a stop request, then for the tasks
        (at most ``stop_grace_period_secs``); re-raise the error the stop was
        requested with. Given threads (a ``SyncSession``'s queue runners), it
        blocks as TF's does: until they end or a stop is requested, then gives
        them ``stop_grace_period_secs`` (RuntimeError naming those still alive
        unless ``ignore_live_threads``), and re-raises the same way."""
        given = list(threads or [])
        if given and all(isinstance(t, threading.Thread) for t in given):
            return self._join_threads(given, stop_grace_period_secs, ignore_live_threads)
        return self._join_tasks(given, stop_grace_period_secs, ignore_live_threads)

    def _join_threads(self, threads: list[threading.Thread], grace: float,
                      ignore_live_threads: bool) -> None:
        while any(t.is_alive() for t in threads) and not self._stopped.wait(1.0):
            pass
        deadline = time.monotonic() + grace
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        live = [t.name for t in threads if t.is_alive()]
        self._joined = True
        if live:
            if not ignore_live_threads:
                raise RuntimeError(f"Coordinator stopped with threads still running: {live}")
            logger.warning("threads still running %ss after the stop: %s", grace, live)
        self.raise_requested_exception()

    async def _join_tasks(self, threads: list[Any], stop_grace_period_secs: float,
                          ignore_live_threads: bool) -> None:
        tasks = list(self._tasks) + [t for t in threads if t not in self._tasks]
        await self._event.wait()
        if tasks:
            _, live = await asyncio.wait(tasks, timeout=stop_grace_period_secs)
            for task in live:
                task.cancel()
            if live:
                await asyncio.wait(live, timeout=1.0)
                names = [t.get_name() if isinstance(t, asyncio.Task) else repr(t) for t in live]
                if not ignore_live_threads:
                    self._joined = True
                    raise RuntimeError(f"Coordinator stopped with tasks still running: {names}")
                logger.warning("tasks still running %ss after the stop were cancelled: %s",
                               stop_grace_period_secs, names)
        self._joined = True
        self.raise_requested_exception()

    def __repr__(self) -> str:
        return f"<dt.train.Coordinator stop={self._stop} tasks={len(self._tasks)}>"
