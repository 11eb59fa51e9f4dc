"""``dt.summary.trace_on`` / ``trace_off`` / ``trace_export``: TF2's function tracing.

    dt.summary.trace_on(graph=True, profiler=True)
    train_step(x, y)                       # a dt.function: runs traced
    with writer.as_default():
        dt.summary.trace_export("train_step", step=0)

While tracing is on, every ``dt.function`` call runs with
``RunOptions(trace_level=FULL_TRACE)`` (``distrib.client.run_metadata``'s
``function_tracing``, which ``dt.function`` asks at each call; process-wide,
as TF's trace context). ``trace_export`` writes the newest traced call's
step as a Chrome trace where TensorBoard's profile plugin looks for one:
``<logdir>/plugins/profile/<run>/<host>.trace.json.gz``, the logdir being
``profiler_outdir`` or else the default writer's, the run ``name`` (with
``_<step>`` when a step is given). Then tracing is off, as in TF.

Where the format does not allow: TF also writes the graph and the
``RunMetadata`` protocol buffer into the event file as a tagged run
metadata summary; distrib's run metadata is no protocol buffer, so the
trace goes to the profile folder only (``graph`` is accepted and recorded).
"""
from __future__ import annotations

import gzip
import logging
import os
import re
import socket
from typing import Any

from distrib.client.run_metadata import FunctionTracing, function_tracing, set_function_tracing
from distrib.client.timeline import Timeline
from distrib.summary.writer import default_writer

logger = logging.getLogger(__name__)

__all__ = ["trace_on", "trace_off", "trace_export"]

_options: dict[str, bool] = {}   # the flags of the trace now on


def trace_on(graph: bool = True, profiler: bool = False) -> None:
    """Trace every ``dt.function`` call from now on (until ``trace_export``
    or ``trace_off``); a second ``trace_on`` while on warns and changes nothing."""
    if function_tracing() is not None:
        logger.warning("trace_on: a trace is already on; call trace_export or trace_off first")
        return
    _options.update(graph=bool(graph), profiler=bool(profiler))
    set_function_tracing(FunctionTracing())


def trace_off() -> None:
    """Stop tracing, keeping nothing."""
    set_function_tracing(None)
    _options.clear()


def trace_export(name: str, step: Any = None, profiler_outdir: str | None = None) -> str | None:
    """Write the newest traced call's step as a Chrome trace (see the module
    header) and stop tracing: the file's path, or None when there was nothing
    to write (no trace on, no traced call, or no logdir)."""
    tracing = function_tracing()
    try:
        if tracing is None:
            logger.warning("trace_export: no trace is on (call dt.summary.trace_on first)")
            return None
        metadata = tracing.last
        if metadata is None or not metadata.step_stats.dev_stats:
            logger.warning("trace_export %r: no dt.function call ran while tracing", name)
            return None
        writer = default_writer()
        logdir = profiler_outdir or (writer.logdir if writer is not None else "")
        if not logdir:
            logger.warning("trace_export %r: no default summary writer and no profiler_outdir: "
                           "nothing written", name)
            return None
        return _write_trace(logdir, _run_name(name, step), metadata.step_stats)
    finally:
        trace_off()


def _run_name(name: str, step: Any) -> str:
    run = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)) or "trace"
    if step is not None:
        run += f"_{int(step)}"
    return run


def _write_trace(logdir: str, run: str, step_stats: Any) -> str:
    folder = os.path.join(logdir, "plugins", "profile", run)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{socket.gethostname()}.trace.json.gz")
    trace = Timeline(step_stats).generate_chrome_trace_format()
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(trace)
    return path
