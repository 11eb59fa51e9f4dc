"""The status rows as a person reads them: aligned columns, human units.

One line per task. A down task shows why in its STATE column ("down
(refused)") and dashes elsewhere; an unknown value is a dash too, never a
zero that could be mistaken for a measurement. Connections are counted by
transport ("2 shm, 1 tcp"); ``--json`` lists them one by one.
"""
from __future__ import annotations

from collections import Counter

from distrib.status.query import TaskStatus

__all__ = ["render_table", "human_bytes", "human_seconds"]

_DASH = "-"
_HEADERS = ("TASK", "ADDRESS", "STATE", "INCARNATION", "UPTIME", "ROLE", "STEP", "STEPS/S",
            "LOSS", "CHECKPOINT", "AGE", "SESSIONS", "PEERS", "RSS", "MEMBERS")


def human_seconds(s: float | None) -> str:
    """12s, 3m05s, 2h07m, 4d03h."""
    if s is None:
        return _DASH
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def human_bytes(n: int | None) -> str:
    """812 B, 45.3 MiB, 1.2 GiB."""
    if n is None:
        return _DASH
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return _DASH   # not reached


def _role(row: TaskStatus) -> str:
    if row.role is None:
        return _DASH if row.term is None else f"(term {row.term})"
    return row.role if row.term is None else f"{row.role} (term {row.term})"


def _peers(row: TaskStatus) -> str:
    if not row.up:
        return _DASH
    counts = Counter(p["transport"] for p in row.peers)
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "0"


def _cells(row: TaskStatus) -> tuple[str, ...]:
    def opt(v: object) -> str:
        return _DASH if v is None else str(v)
    state = "up" if row.up else f"down ({row.reason})" if row.reason else "down"
    rate = _DASH if row.steps_per_s is None else f"{row.steps_per_s:.1f}"
    loss = _DASH if row.last_loss is None else f"{row.last_loss:.4g}"
    ckpt = _DASH if row.last_checkpoint is None else row.last_checkpoint.rsplit("/", 1)[-1]
    inc = _DASH if row.incarnation is None else f"{row.incarnation:016x}"[:8]
    return (row.name, row.address, state, inc, human_seconds(row.uptime_s), _role(row),
            opt(row.global_step), rate, loss, ckpt, human_seconds(row.checkpoint_age_s),
            opt(row.sessions), _peers(row), human_bytes(row.rss_bytes),
            _DASH if row.membership_version is None else f"v{row.membership_version}")


def render_table(rows: list[TaskStatus]) -> str:
    """The rows as aligned text, with a header line and a summary line."""
    lines = [_HEADERS, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEADERS))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
            for line in lines]
    up = sum(r.up for r in rows)
    text.append(f"{up} of {len(rows)} tasks up")
    return "\n".join(text)
