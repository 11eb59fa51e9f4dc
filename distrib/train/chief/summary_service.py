"""The chief's summaries, for a Supervisor (TF's ``SVSummaryThread`` and
``SVStepCounterThread``).

Set up as TF's Supervisor sets them up: ``summary_op`` by default is the
graph's ``GraphKeys.SUMMARY_OP`` or else ``merge_all()`` (None when the graph
has no summary); ``summary_writer`` by default is a ``FileWriter`` on
``logdir``, and only the chief has one (a non-chief writes nothing; a task
elected chief later makes its writer then). While
the chief's standard services run, every ``save_summaries_secs`` (a first
time at once) the service runs ``summary_op`` with the global step and
writes the result, and writes ``<global step name>/sec``: the global steps
per second since the last time. ``summary_computed`` writes a summary the
training loop computed itself. The writes are buffered appends (a thread
of the writer does the disk I/O).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Callable

import numpy as np

from distrib.errors import FailedPreconditionError, FencedError, OpError
from distrib.summary import FileWriter, merge_all, proto
from distrib.train.checkpoints.readiness import run_fetches
from distrib.train.chief.ps_recovery import recoverable
from distrib.train.chief.role import ChiefRole

logger = logging.getLogger(__name__)

__all__ = ["SummaryService", "SUMMARY_OP"]

SUMMARY_OP = "summary_op"   # TF's GraphKeys.SUMMARY_OP collection


class SummaryService:
    """Periodic summaries of one Supervisor (see the module header)."""

    def __init__(self, graph: Any, summary_op: Any, summary_writer: Any, use_default: Any,
                 is_chief: bool, logdir: str | None, global_step: Any, role: ChiefRole,
                 save_secs: float | None, request_stop: Callable[[BaseException], None]) -> None:
        if summary_op is use_default:
            found = graph.get_collection(SUMMARY_OP)
            summary_op = found[0] if found else merge_all()
            if summary_op is not None and not found:
                graph.add_to_collection(SUMMARY_OP, summary_op)
        self.summary_op = summary_op
        # the writer of the chief: made now on the preferred chief, else once this
        # task is chief (an elected cluster moves the role: a successor writes on)
        self._logdir = logdir
        self._given = None if summary_writer is use_default else summary_writer
        self.writer: Any = None
        if is_chief:
            self._ensure_writer()
        self.global_step = global_step
        self.role = role
        self.save_secs = save_secs or None
        self.request_stop = request_stop
        self.task: asyncio.Task | None = None
        self._last: tuple[float, int] | None = None   # (time, global step) of the last count

    def start(self, sess: Any, stop_event: asyncio.Event) -> None:
        """The periodic loop, when there is a writer and an interval (and the
        SessionLog START event TF writes when the services start)."""
        if self.task is not None or self._ensure_writer() is None:
            return
        if getattr(self.writer, "reopen", None) is not None:
            self.writer.reopen()   # a closed writer (an earlier session's stop) writes on
        if self.save_secs:
            self.task = asyncio.get_running_loop().create_task(
                self._loop(sess, stop_event), name="distrib-supervisor-summaries")

    def cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()

    async def stop(self, grace_s: float, close_writer: bool) -> None:
        task, self.task = self.task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), grace_s)
            except asyncio.TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.writer is not None:
            await asyncio.to_thread(self.writer.close if close_writer else self.writer.flush)

    async def summary_computed(self, sess: Any, summary: Any, global_step: Any = None) -> None:
        """Write ``summary`` (a summary op's value) at ``global_step`` (the global
        step's value when None), as TF's ``sv.summary_computed``."""
        if self.writer is None and self.role.is_chief:
            self._ensure_writer()
        if self.writer is None:
            raise FailedPreconditionError("Writing a summary requires a summary writer "
                                          "(only the chief has one)")
        if global_step is None and self.global_step is not None:
            global_step = _as_int(await run_fetches(sess, self.global_step))
        self.writer.add_summary(summary, global_step)

    def _ensure_writer(self) -> Any:
        """The writer; made (a ``FileWriter`` on ``logdir``, or the one given)
        the first time this task is chief. None without a logdir."""
        if self.writer is None and self._logdir:
            self.writer = self._given if self._given is not None else FileWriter(self._logdir)
        return self.writer

    async def _loop(self, sess: Any, stop_event: asyncio.Event) -> None:
        while not stop_event.is_set() and self.role.is_chief:
            try:
                await self.write_once(sess)
            except OpError as exc:
                if isinstance(exc, FencedError) or recoverable(exc):
                    logger.warning("summaries skipped: %s", exc)
                else:
                    logger.error("summary computation failed: %s", exc)
                    self.request_stop(exc)
                    return
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop_event.wait(), self.save_secs)
        self.task = None

    async def write_once(self, sess: Any) -> None:
        """Compute ``summary_op`` (with the global step) once and write it, and
        the global steps per second since the last time."""
        fetches = [f for f in (self.summary_op, self.global_step) if f is not None]
        if not fetches:
            return
        values = await run_fetches(sess, fetches)
        step = _as_int(values[-1]) if self.global_step is not None else None
        if self.summary_op is not None:
            self.writer.add_summary(values[0], step)
        if step is not None:
            now = time.monotonic()
            if self._last is not None and now > self._last[0]:
                rate = (step - self._last[1]) / (now - self._last[0])
                name = getattr(getattr(self.global_step, "op", None), "name", "global_step")
                m = proto.messages()
                self.writer.add_summary(m.Summary(value=[m.Summary.Value(
                    tag=f"{name}/sec", simple_value=rate)]), step)
            self._last = (now, step)


def _as_int(value: Any) -> int:
    return int(np.asarray(value).reshape(-1)[0])   # a scalar, or a step of shape [1]
