"""``SummarySaverHook``: TF's hook that writes the graph's summaries every N
steps or seconds (``MonitoredTrainingSession``'s ``save_summaries_steps`` /
``save_summaries_secs`` add it on the chief).

Its summary op is ``summary_op``, else the scaffold's, else the graph's
``summary_op`` collection or ``merge_all()`` (made in ``begin``, before the
graph is finalized); a step that is due fetches it beside the caller's
fetches (no extra step) and writes it at the global step, through
``summary_writer`` or the ``FileWriterCache``'s writer of ``output_dir``.
The writer is made on the first write, so a task that never writes (a
non-chief: the chief-only wrapper passes it no step) makes no event file.
A ``SessionLog`` START is written at the first step, as TF does.
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import get_default_graph
from distrib.summary import FileWriterCache, merge_all, proto
from distrib.train.sessions.session_run_hooks import (
    SecondOrStepTimer,
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
    as_int,
    global_step_or_fail,
    run_fetch,
)

__all__ = ["SummarySaverHook"]

SUMMARY_OP = "summary_op"   # TF's GraphKeys.SUMMARY_OP


class SummarySaverHook(SessionRunHook):
    """Saves summaries every ``save_steps`` steps or ``save_secs`` seconds (TF's)."""

    def __init__(self, save_steps: int | None = None, save_secs: float | None = None,
                 output_dir: str | None = None, summary_writer: Any = None, scaffold: Any = None,
                 summary_op: Any = None) -> None:
        if (scaffold is None) == (summary_op is None):
            raise ValueError("Exactly one of scaffold or summary_op must be provided.")
        if output_dir is None and summary_writer is None:
            raise ValueError("Either output_dir or summary_writer must be provided.")
        self._timer = SecondOrStepTimer(every_secs=save_secs, every_steps=save_steps)
        self._output_dir = output_dir
        self._writer = summary_writer
        self._scaffold = scaffold
        self._summary_op = summary_op
        self._made_op: Any = None
        self._next_step: int | None = None
        self._request = False
        self._global_step: Any = None

    def begin(self) -> None:
        self._global_step = global_step_or_fail("SummarySaverHook")
        self._next_step = None
        if self._summary_op is None and getattr(self._scaffold, "summary_op", None) is None:
            graph = get_default_graph()
            found = graph.get_collection(SUMMARY_OP)
            self._made_op = found[0] if found else None
            if self._made_op is None and not graph.finalized:
                self._made_op = merge_all()
                if self._made_op is not None:
                    graph.add_to_collection(SUMMARY_OP, self._made_op)

    def summary_op(self) -> Any:
        if self._summary_op is not None:
            return self._summary_op
        return getattr(self._scaffold, "summary_op", None) or self._made_op

    def writer(self) -> Any:
        """The writer, made on first use (see the module header)."""
        if self._writer is None:
            self._writer = FileWriterCache.get(self._output_dir)
        return self._writer

    def before_run(self, run_context: SessionRunContext) -> SessionRunArgs:
        self._request = self._next_step is None or self._timer.should_trigger_for_step(self._next_step)
        fetches = {"global_step": self._global_step}
        op = self.summary_op()
        if self._request and op is not None:
            fetches["summary"] = op
        return SessionRunArgs(fetches)

    async def after_run(self, run_context: SessionRunContext, run_values: SessionRunValues) -> None:
        results = run_values.results or {}
        step = as_int(results["global_step"]) + 1
        if self._next_step is None or self._request:
            step = as_int(await run_fetch(run_context.session, self._global_step))
        if self._next_step is None:
            m = proto.messages()
            self.writer().add_session_log(m.SessionLog(status=1), step)   # START
        if self._request:
            self._timer.update_last_triggered_step(step)
            if "summary" in results:
                self.writer().add_summary(results["summary"], step)
        self._next_step = step + 1

    def end(self, session: Any) -> None:
        if self._writer is not None:
            self._writer.flush()
