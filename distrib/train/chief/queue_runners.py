"""A Supervisor's queue runners: background loops stopped with its other services.

A runner is anything with ``start(sess, stop) -> asyncio.Task``; it runs until
``stop()`` is true (polled). A runner that fails stops training with its error,
as in TF. One marked ``chief_only`` (the sync-replicas chief queue runner)
runs on whichever task is chief: it is remembered on every task, started where
the role is, now or later, with the chief's fencing term on each of its steps
(``role.run_options``); a ps restarting or a lost role (fenced) is not a
reason to stop training: whoever is chief runs it again.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from distrib.errors import FencedError
from distrib.train.chief.ps_recovery import recoverable
from distrib.train.chief.role import ChiefRole

logger = logging.getLogger(__name__)

__all__ = ["QueueRunners"]


class QueueRunners:
    """The runners a Supervisor started, and the chief-only ones that follow the role."""

    def __init__(self, role: ChiefRole, should_stop: Callable[[], bool],
                 request_stop: Callable[[BaseException], None]) -> None:
        self._role = role
        self._should_stop = should_stop
        self._request_stop = request_stop
        self._tasks: list[asyncio.Task] = []
        self.chief_runners: list[Any] = []   # chief-only runners: they move with the role
        self.running_chief_runners: dict[Any, asyncio.Task] = {}   # ... and their tasks here
        self._sess: Any = None

    def start(self, sess: Any, runners: Sequence[Any]) -> list[asyncio.Task]:
        """Start ``runners`` on ``sess`` (a chief-only one only where the role is)."""
        self._sess = sess
        tasks = []
        for runner in runners:
            if getattr(runner, "chief_only", False):
                if runner not in self.chief_runners:
                    self.chief_runners.append(runner)
                if self._role.is_chief:
                    tasks.append(self._start_chief_runner(sess, runner))
                continue
            task = runner.start(sess, self._should_stop)
            task.add_done_callback(self._done)   # a failure stops training (TF)
            tasks.append(task)
        self._tasks.extend(tasks)
        return tasks

    def resume_chief_runners(self, sess: Any) -> None:
        """Start, on this (new) chief, the chief-only runners not running here."""
        if sess is None or not self._role.is_chief or self._should_stop():
            return
        self._sess = sess
        for runner in self.chief_runners:
            task = self.running_chief_runners.get(runner)
            if task is None or task.done():
                self._tasks.append(self._start_chief_runner(sess, runner))

    async def stop(self, grace_secs: float) -> None:
        """Wait up to ``grace_secs`` for each runner (each returns once ``should_stop()``
        is true), then cancel it; a runner's failure was recorded when it failed."""
        tasks, self._tasks = self._tasks, []
        self._sess = None
        for t in tasks:
            try:
                await asyncio.wait_for(asyncio.shield(t), grace_secs)
            except asyncio.TimeoutError:
                t.cancel()
            except Exception:  # recorded by _done; it must not hide the final save
                pass

    def _start_chief_runner(self, sess: Any, runner: Any) -> asyncio.Task:
        task = runner.start(sess, lambda: self._should_stop() or not self._role.is_chief,
                            self._role.run_options)
        task.add_done_callback(self._done)
        self.running_chief_runners[runner] = task
        return task

    def _done(self, task: asyncio.Task) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        chief_runner = next((r for r, t in self.running_chief_runners.items() if t is task), None)
        if chief_runner is not None and (recoverable(exc) or isinstance(exc, FencedError)):
            # a ps restarting, or this task lost the role (fenced): not a reason to
            # stop training; whoever is chief runs it again (Supervisor._role_changed)
            logger.warning("chief queue runner stopped: %s", exc)
            del self.running_chief_runners[chief_runner]
            if self._role.is_chief and self._sess is not None and not self._should_stop():
                asyncio.get_running_loop().call_later(
                    1.0, lambda: self.resume_chief_runners(self._sess))
            return
        logger.error("queue runner failed: %s", exc)
        self._request_stop(exc)
