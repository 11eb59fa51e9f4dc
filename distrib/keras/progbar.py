"""The per-epoch progress bar of ``fit``/``evaluate``/``predict`` (Keras 3's format).

    Epoch 3/10
    32/32 ━━━━━━━━━━━━━━━━━━━━ 1s 9ms/step - accuracy: 0.9012 - loss: 0.3310 - 3550 examples/s

``verbose=1``: on a terminal the line is redrawn in place (``\\r``, at most
every ``interval`` seconds, with the time left while running and the epoch's
time at the end); elsewhere (a log file, a pipe) only the final line of each
epoch is written, so logs stay readable. ``verbose=2``: one line per epoch,
``32/32 - 1s - 9ms/step - ...``. ``verbose=0``: nothing. Metrics are shown
alphabetically (Keras 3's order, so ``accuracy`` before ``loss``), then the
throughput in examples per second, which Keras does not show.

This writes to ``sys.stdout`` as Keras does: it is the program's output,
not a log record.
"""
from __future__ import annotations

import re
import sys
import time
from typing import Mapping, TextIO

__all__ = ["Progbar", "format_duration", "format_per_step", "format_value"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")   # colour codes take no room on the screen


def format_duration(seconds: float) -> str:
    """``7s``, ``2:05``, ``1:02:05`` (Keras' ETA and epoch times)."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    return f"{s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def format_per_step(seconds: float, unit: str = "step") -> str:
    if seconds >= 1.0:
        return f"{seconds:.0f}s/{unit}"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.0f}ms/{unit}"
    return f"{seconds * 1e6:.0f}us/{unit}"


def format_value(value: float) -> str:
    return f"{value:.4f}" if abs(value) > 1e-3 or value == 0 else f"{value:.4e}"


class Progbar:
    """``Progbar(target, width=20, verbose=1, interval=0.05, unit_name='step')``:
    ``update(current, values, examples=n)`` after each step, ``finalize=True`` at
    the end (see the module header)."""

    def __init__(self, target: int | None, width: int = 20, verbose: int = 1,
                 interval: float = 0.05, unit_name: str = "step",
                 stream: TextIO | None = None) -> None:
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        self._stream = stream
        self._start = time.perf_counter()
        self._last_draw = 0.0
        self._drawn_width = 0
        self._dynamic: bool | None = None

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def _is_dynamic(self) -> bool:
        if self._dynamic is None:
            isatty = getattr(self.stream, "isatty", None)
            self._dynamic = bool(isatty and isatty())
        return self._dynamic

    def update(self, current: int, values: Mapping[str, float] | None = None,
               finalize: bool | None = None, examples: int | None = None) -> None:
        """Show ``current`` steps done with the running ``values``."""
        if self.verbose == 0:
            return
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        now = time.perf_counter()
        if not finalize and (self.verbose == 2 or not self._is_dynamic()
                             or now - self._last_draw < self.interval):
            return
        self._last_draw = now
        line = self._line(current, values or {}, now - self._start, finalize, examples)
        if self.verbose == 1 and self._is_dynamic():
            width = len(_ANSI.sub("", line))
            pad = max(0, self._drawn_width - width)
            self.stream.write("\r" + line + " " * pad + ("\n" if finalize else ""))
            self._drawn_width = width
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _line(self, current: int, values: Mapping[str, float], elapsed: float, final: bool,
              examples: int | None) -> str:
        per_step = elapsed / current if current else 0.0
        tail = "".join(f" - {k}: {format_value(float(v))}" for k, v in sorted(values.items()))
        if examples and elapsed > 0:
            tail += f" - {examples / elapsed:.0f} examples/s"
        if self.verbose == 2:
            return (f"{current}/{self.target if self.target is not None else current} - "
                    f"{format_duration(elapsed)} - {format_per_step(per_step, self.unit_name)}"
                    f"{tail}")
        if self.target is None:
            head = f"{current}/Unknown {format_duration(elapsed)}"
        else:
            digits = len(str(self.target))
            shown = elapsed if final else per_step * max(self.target - current, 0)
            head = f"{current:>{digits}}/{self.target} {self._bar(current)} " \
                   f"{format_duration(shown)}"
        return f"{head} {format_per_step(per_step, self.unit_name)}{tail}"

    def _bar(self, current: int) -> str:
        assert self.target is not None
        done = self.width if not self.target else min(self.width,
                                                      int(self.width * current / self.target))
        rest = self.width - done
        if self._is_dynamic() and rest:
            return "━" * done + "\x1b[2m" + "━" * rest + "\x1b[0m"
        return "━" * done + " " * rest
