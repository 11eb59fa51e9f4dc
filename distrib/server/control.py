"""The ``server`` actor of a task (:class:`ServerControl`, door ``ServerDoor``):
how a chief tells a task that training is over, how ``python -m
distrib.status`` gets each task's own view (its step rate, memory, last
loss), and how a preempted worker's notice reaches its peers
(:class:`PreemptionNotices`, held here until the training loop takes it).
Kept apart from ``server_lib``, which starts and stops servers.
"""
from __future__ import annotations

import collections
import math
import os
import threading
import time
from typing import Any

from distrib.server import training_stats

__all__ = ["ServerControl", "PreemptionNotices", "last_loss", "GLOBAL_STEP"]

GLOBAL_STEP = "global_step"   # the variable's name (dt.train.get_or_create_global_step)


class PreemptionNotices:
    """Peers' termination notices (``ServerDoor.preemption_notice``): the earliest run
    any peer named, and who named it, until the training loop takes it. Written on
    the server's loop, taken from the training loop's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: tuple[int, str] | None = None

    def note(self, save_at: int, sender: str) -> None:
        """A peer got a notice: keep the earliest run named (concurrent notices name
        the same one; see distribute/preemption/signals.py)."""
        with self._lock:
            if self._held is None or save_at < self._held[0]:
                self._held = (int(save_at), str(sender))

    def take(self) -> tuple[int, str] | None:
        """The notice held, if any, and none after (a later handler sees only newer)."""
        with self._lock:
            held, self._held = self._held, None
        return held


class ServerControl:
    """Actor "server": lets a peer tell a task that training is over, and
    answers ``python -m distrib.status``."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self._steps = _StepRate()

    def request_stop(self) -> bool:
        self._core.note_stop_request()
        return True

    def task(self) -> str:
        return self._core.task

    def preemption_notice(self, save_at: int, sender: str) -> bool:
        self._core.preemption.note(save_at, sender)
        return True

    def status(self) -> dict[str, Any]:
        """This task's own view, for ``python -m distrib.status`` (which
        combines the answers of every task): ``lease`` is the chief lease
        this task arbitrates (term 0: none), ``term`` the newest chief term it
        has seen, ``peers`` [task, "shm" | "tcp"] per open connection to
        another task (clients are left out: their names are not task names),
        ``membership_version`` the elastic membership record it holds (None: none),
        ``last_loss`` the newest loss this process's summaries wrote (None: none)."""
        core = self._core
        step = _global_step(core.worker)
        lease = core.chief_lease.status()
        conns = core.system.connections()
        return {"task": core.task, "incarnation": core.system.incarnation,
                "uptime_s": time.monotonic() - core.started_at,
                "sessions": core.master.stats()["sessions_open"],
                "rss_bytes": _rss_bytes(),
                "term": max(core.worker.fencing.term, lease["term"]),
                "lease": {"term": lease["term"], "holder": lease["holder"]},
                "global_step": step, "steps_per_s": self._steps.rate(step),
                "membership_version": core.membership.version or None,
                "last_loss": last_loss(),
                "peers": [[c.peer.name, c.kind] for c in conns
                          if c.peer.name.startswith("/job:")]}


class _StepRate:
    """Steps per second of the global step, from the samples that status
    calls took: over the last ``window_s`` or less, None before two samples
    ``min_s`` apart. A step that went back (a ps restore) starts over."""

    def __init__(self, window_s: float = 30.0, min_s: float = 0.5) -> None:
        self.window_s, self.min_s = window_s, min_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def rate(self, step: int | None) -> float | None:
        if step is None:
            self._samples.clear()
            return None
        now = time.monotonic()
        if self._samples and step < self._samples[-1][1]:
            self._samples.clear()
        self._samples.append((now, step))
        while now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        t0, s0 = self._samples[0]
        return (step - s0) / (now - t0) if now - t0 >= self.min_s else None


def last_loss() -> float | None:
    """The newest training loss this process's summaries wrote (training_stats):
    of the tags ending in "loss" ("loss", "train/loss", "epoch_loss"), the one
    written last, leaving out evaluation ("validation/..." and "eval/...": an
    evaluation run's writer, see summary.event_writer; Keras' "val_..."); None
    before any, and for a NaN or infinite loss (status answers are JSON)."""
    def training(tag: str) -> bool:
        return tag.endswith("loss") and not tag.startswith(("validation/", "eval/", "val_"))
    losses = [v for tag, v in training_stats.last_scalars().items() if training(tag)]
    if not losses:
        return None
    value = float(max(losses, key=lambda v: v["wall_time"] or 0.0)["value"])
    return value if math.isfinite(value) else None


def _global_step(worker: Any) -> int | None:
    """The value of the variable named "global_step", where this task holds it."""
    if GLOBAL_STEP not in worker.variables:
        return None
    try:
        return int(worker.variables.get(GLOBAL_STEP))
    except (TypeError, ValueError):   # not a scalar (a variable that only shares the name)
        return None


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
