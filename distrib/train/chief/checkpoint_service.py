"""The chief's periodic checkpoints (and its restore of the newest), for a Supervisor.

Like TF's SVTimerCheckpointThread: a save at once, then one every
``save_secs``; and, a distrib extension that the contract's fault tolerance
(docs/CONTRACT.md) counts on, one every ``save_steps`` global steps (the
global step is read twice a second for it), whichever comes first. The
progress a ps restart loses is at most one such interval.

A save runs only while this task is chief, carries the chief's term to the
checkpoint folder (``checkpoint_fence``: an older chief's save is refused),
and never overlaps another (the final save waits for a periodic one). Two
failures do not stop training: a fenced save (this task lost the role while
paused: it trains on as a non-chief) and a save during a ps restart (its
variables are not there to read: the next interval saves).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Callable

import numpy as np

from distrib.errors import DataLossError, FencedError, OpError
from distrib.train.checkpoints import state_file
from distrib.train.checkpoints.readiness import run_fetches
from distrib.train.chief.checkpoint_fence import fence_directory
from distrib.train.chief.ps_recovery import recoverable
from distrib.train.chief.role import ChiefRole

logger = logging.getLogger(__name__)

__all__ = ["CheckpointService"]

_STEP_POLL_S = 0.5   # how often the global step is read for save_steps


class CheckpointService:
    """Periodic and final checkpoints of one Supervisor."""

    def __init__(self, saver: Any, save_path: str | None, logdir: str | None,
                 global_step: Any, role: ChiefRole, save_secs: float | None,
                 save_steps: int | None, request_stop: Callable[[BaseException], None]) -> None:
        self.saver = saver
        self.save_path = save_path
        self.logdir = logdir
        self.global_step = global_step
        self.role = role
        self.save_secs = save_secs or None
        self.save_steps = save_steps or None
        self.request_stop = request_stop
        self.task: asyncio.Task | None = None
        self.lock: asyncio.Lock | None = None

    @property
    def enabled(self) -> bool:
        """A saver, a folder, and an interval (save_secs=0 and no save_steps: off, as in TF)."""
        return bool(self.saver is not None and self.save_path
                    and (self.save_secs or self.save_steps))

    def bind(self) -> None:
        """A lock of the running loop (a Supervisor's next session may run on another)."""
        self.lock = asyncio.Lock()

    def start(self, sess: Any, stop_event: asyncio.Event) -> None:
        if self.task is None and self.enabled:
            self.task = asyncio.get_running_loop().create_task(
                self._loop(sess, stop_event), name="distrib-supervisor-checkpoints")

    def cancel(self) -> None:
        """Stop at once (the role moved away: a non-chief must not save)."""
        task, self.task = self.task, None
        if task is not None:
            task.cancel()

    async def stop(self, grace_s: float) -> None:
        """Wait (up to ``grace_s``) for the loop, woken by the stop event, to end."""
        task, self.task = self.task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_s)
        except asyncio.TimeoutError:
            logger.warning("checkpoint task did not stop within stop_grace_secs=%s; cancelling",
                           grace_s)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def save(self, sess: Any) -> str:
        if self.lock is None:
            self.bind()
        assert self.lock is not None and self.save_path is not None
        async with self.lock:  # the final save never overlaps a periodic one
            term = self.role.term
            if term is not None:   # the folder refuses an older chief's checkpoints
                await asyncio.to_thread(fence_directory, self.logdir, term)
            return await self.saver.save(sess, self.save_path, global_step=self.global_step)

    def checkpoint_candidates(self) -> list[str]:
        """Checkpoints of ``logdir`` that exist, newest first (from the state file)."""
        return [] if self.saver is None else state_file.checkpoint_candidates(self.logdir)

    async def restore_latest(self, sess: Any) -> str | None:
        """Restore the newest checkpoint that reads back intact; None if there is none
        (the chief's first step when its session opens)."""
        for path in self.checkpoint_candidates():
            try:
                await self.saver.restore(sess, path, options=self.role.run_options())
            except DataLossError as exc:
                logger.warning("checkpoint %s is unusable (%s); trying an older one", path, exc)
                continue
            logger.info("chief restored the model from %s", path)
            self._recover_saver_history()
            return path
        return None

    def _recover_saver_history(self) -> None:
        # So max_to_keep keeps counting the files of the run that wrote them.
        if self.saver.last_checkpoints:
            return
        state = state_file.get_checkpoint_state(self.logdir)
        if state is not None:
            self.saver.recover_last_checkpoints(list(state.all_model_checkpoint_paths))

    async def _loop(self, sess: Any, stop_event: asyncio.Event) -> None:
        saved_at, saved_step = time.monotonic(), None
        due = True
        while not stop_event.is_set():
            if not self.role.is_chief:   # the role moved (or its lease ran out): stop saving
                self.task = None
                return
            if due:
                outcome = await self._save_once(sess)
                if outcome is None:
                    self.task = None
                    return
                saved_at = time.monotonic()
                if outcome:
                    saved_step = await self._step(sess)
            due = await self._wait(sess, stop_event, saved_at, saved_step)

    async def _save_once(self, sess: Any) -> bool | None:
        """True: saved; False: skipped (the cluster recovers); None: stop the loop."""
        try:
            await self.save(sess)
            return True
        except OpError as exc:
            if isinstance(exc, FencedError):
                logger.warning("no longer chief, checkpoints stop: %s", exc)
                return None
            if not recoverable(exc):
                logger.error("periodic checkpoint failed: %s", exc)
                self.request_stop(exc)
                return None
            # a ps restarting: never save its empty variables; try next time
            logger.warning("periodic checkpoint skipped while the cluster recovers: %s", exc)
            return False
        except Exception as exc:  # a failed save stops training, as in TF
            logger.error("periodic checkpoint failed: %s", exc)
            self.request_stop(exc)
            return None

    async def _wait(self, sess: Any, stop_event: asyncio.Event, saved_at: float,
                    saved_step: int | None) -> bool:
        """Sleep until the next save is due (True) or the stop event is set."""
        while not stop_event.is_set():
            left = None if self.save_secs is None else saved_at + self.save_secs - time.monotonic()
            if left is not None and left <= 0:
                return True
            nap = _STEP_POLL_S if self.save_steps else left
            if left is not None:
                nap = min(nap, left)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop_event.wait(), nap)
            if self.save_steps and not stop_event.is_set():
                step = await self._step(sess)
                if step is not None and (saved_step is None or step - saved_step >= self.save_steps):
                    return True
        return False

    async def _step(self, sess: Any) -> int | None:
        if self.global_step is None:
            return None
        try:
            value = await run_fetches(sess, self.global_step)
        except OpError:
            return None   # the cluster recovers: the next look decides
        # a scalar, or a one-element tensor (a global step of shape [1])
        return int(np.asarray(value).reshape(-1)[0])
