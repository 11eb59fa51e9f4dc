"""Per-step device counters: kernel launches, driver allocations, copies, syncs.

The runtime opens a :func:`counting` scope around one partition's run on one
device when the step asks for its run metadata; the GPU code calls
:func:`note` at each launch, driver allocation, host-to-device or
device-to-host copy and synchronization. Outside a scope :func:`note` costs
one context-variable lookup. A scope follows the step into the threads its
kernels run on only where the caller copies the context
(``contextvars.copy_context().run``, as ``asyncio.to_thread`` does).
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import asdict, dataclass

__all__ = ["StepCounters", "counting", "note", "KINDS"]

KINDS = ("launches", "allocations", "h2d_copies", "d2h_copies", "syncs")


@dataclass
class StepCounters:
    """What one step did on one device (bytes beside the two copy counts)."""

    launches: int = 0
    allocations: int = 0
    h2d_copies: int = 0
    d2h_copies: int = 0
    syncs: int = 0
    h2d_bytes: int = 0
    d2h_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


_current: contextvars.ContextVar[StepCounters | None] = contextvars.ContextVar(
    "distrib_step_counters", default=None)


@contextlib.contextmanager
def counting(counters: StepCounters) -> Iterator[StepCounters]:
    """Count every :func:`note` in this context into ``counters``."""
    token = _current.set(counters)
    try:
        yield counters
    finally:
        _current.reset(token)


def note(kind: str, n: int = 1, nbytes: int = 0) -> None:
    """Count ``n`` events of ``kind`` (one of :data:`KINDS`) in the open scope,
    if any; a copy also adds its ``nbytes``."""
    counters = _current.get()
    if counters is None:
        return
    setattr(counters, kind, getattr(counters, kind) + n)
    if nbytes and kind in ("h2d_copies", "d2h_copies"):
        field = kind[:3] + "_bytes"
        setattr(counters, field, getattr(counters, field) + nbytes)
