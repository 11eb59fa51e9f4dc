"""The last scalars this process's training logged, for ``python -m distrib.status``.

A summary writer of the process (``dt.summary.scalar`` through a writer, a
``FileWriter``, the Supervisor's or a hook's summaries) notes every scalar it
writes here; the task's status answer reports them, so ``--watch`` shows the
last loss the chief logged beside its steps/s. Process-wide: a process runs
one task, and the chief's summaries are written where its server lives.
"""
from __future__ import annotations

import threading
import time

__all__ = ["record_scalar", "last_scalars", "clear"]

_lock = threading.Lock()
_last: dict[str, tuple[float, int | None, float]] = {}   # tag -> (value, step, wall time)


def record_scalar(tag: str, value: float, step: int | None = None) -> None:
    """Note the newest value written for ``tag`` (and at which step)."""
    with _lock:
        _last[tag] = (float(value), None if step is None else int(step), time.time())


def last_scalars() -> dict[str, dict[str, float | int | None]]:
    """``{tag: {"value", "step", "wall_time"}}`` for every tag noted so far."""
    with _lock:
        return {tag: {"value": v, "step": s, "wall_time": t} for tag, (v, s, t) in _last.items()}


def clear() -> None:
    """Forget every noted scalar (tests; a process that starts a new run)."""
    with _lock:
        _last.clear()
