"""The ``checkpoint`` state file, and which checkpoints a folder keeps.

The state file is TensorFlow's text format (``model_checkpoint_path:
"model-100"``), paths relative to its folder when they lie in it, so a
checkpoint folder can be moved; it is written atomically, as every
checkpoint file is (``file_format.atomic_write``).

:func:`latest_checkpoint` skips a newest checkpoint that is missing or
unreadable and falls back to the previous one, with a warning, so one bad
save never strands a job. :class:`CheckpointRotation` is ``Saver``'s
``max_to_keep`` and ``keep_checkpoint_every_n_hours``;
:func:`checkpoint_candidates` is where a restore tries the next when one is corrupt.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from distrib.errors import DataLossError, InvalidArgumentError, NotFoundError
from distrib.train.checkpoints import file_format

logger = logging.getLogger(__name__)

__all__ = [
    "STATE_FILENAME", "CheckpointState", "update_checkpoint_state", "get_checkpoint_state",
    "latest_checkpoint", "CheckpointRotation", "delete_checkpoints", "checkpoint_candidates",
]

STATE_FILENAME = "checkpoint"


# -- the "checkpoint" state file --------------------------------------------------

@dataclass(frozen=True)
class CheckpointState:
    """TF's CheckpointState: the newest checkpoint and all kept ones, oldest first;
    ``CheckpointManager``'s bookkeeping (each kept one's time, the last time one
    was kept for good) when it wrote the file, else empty and 0.0 (TF's defaults)."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: tuple[str, ...]
    all_model_checkpoint_timestamps: tuple[float, ...] = ()
    last_preserved_timestamp: float = 0.0


def _relative_to(directory: str, path: str) -> str:
    # Paths inside the folder are stored relative to it, so the folder can move.
    if os.path.dirname(os.path.abspath(path)) == os.path.abspath(directory):
        return os.path.basename(path)
    return os.path.abspath(path)


def update_checkpoint_state(save_dir: str, model_checkpoint_path: str,
                            all_model_checkpoint_paths: Iterable[str] | None = None,
                            latest_filename: str | None = None,
                            all_model_checkpoint_timestamps: Iterable[float] | None = None,
                            last_preserved_timestamp: float | None = None) -> None:
    """Write the ``checkpoint`` state file of ``save_dir`` atomically, like TF's function.

    ``model_checkpoint_path`` is appended to ``all_model_checkpoint_paths``
    when it is not already last (TF's rule). The timestamps (TF's
    ``update_checkpoint_state_internal``, what ``CheckpointManager`` keeps) are
    written when given, one per path.
    """
    state_path = os.path.join(save_dir, latest_filename or STATE_FILENAME)
    if os.path.abspath(state_path) == os.path.abspath(model_checkpoint_path):
        # the state file would replace the checkpoint it names (TF refuses this too)
        raise InvalidArgumentError(
            f"Save path {model_checkpoint_path!r} conflicts with the path used for the "
            f"checkpoint state; name the checkpoint otherwise than {os.path.basename(state_path)!r}")
    all_paths = list(all_model_checkpoint_paths or [])
    if not all_paths or all_paths[-1] != model_checkpoint_path:
        all_paths.append(model_checkpoint_path)
    lines = [f"model_checkpoint_path: {json.dumps(_relative_to(save_dir, model_checkpoint_path))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(_relative_to(save_dir, p))}" for p in all_paths]
    lines += [f"all_model_checkpoint_timestamps: {float(t)!r}"
              for t in all_model_checkpoint_timestamps or ()]
    if last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {float(last_preserved_timestamp)!r}")
    text = ("\n".join(lines) + "\n").encode("utf-8")
    file_format.atomic_write(state_path, lambda f: f.write(text))


def _parse_state(text: str) -> CheckpointState:
    latest, all_paths = None, []
    stamps: list[float] = []
    preserved = 0.0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"line {number} has no 'key: \"value\"'")
        key = key.strip()
        if key == "all_model_checkpoint_timestamps":
            stamps.append(float(value))
            continue
        if key == "last_preserved_timestamp":
            preserved = float(value)
            continue
        if key not in ("model_checkpoint_path", "all_model_checkpoint_paths"):
            continue   # TF's other fields: not ours to read
        path = json.loads(value.strip())
        if not isinstance(path, str):
            raise ValueError(f"line {number}: the value is not a quoted path")
        if key == "model_checkpoint_path":
            latest = path
        else:
            all_paths.append(path)
    if latest is None:
        raise ValueError("no model_checkpoint_path")
    if stamps and len(stamps) != len(all_paths):
        stamps = []   # not one per path: TF's manager then treats them as absent
    return CheckpointState(latest, tuple(all_paths), tuple(stamps), preserved)


def get_checkpoint_state(checkpoint_dir: str, latest_filename: str | None = None) -> CheckpointState | None:
    """The state file of ``checkpoint_dir`` with relative paths joined to it; ``None`` if absent or bad.

    As in TF, an unreadable state file is logged and treated as absent.
    """
    path = os.path.join(checkpoint_dir, latest_filename or STATE_FILENAME)
    try:
        with open(path, encoding="utf-8") as f:
            state = _parse_state(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        logger.warning("%s: %s; checkpoint state ignored", path, exc)
        return None

    def absolute(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)

    return CheckpointState(absolute(state.model_checkpoint_path),
                           tuple(absolute(p) for p in state.all_model_checkpoint_paths),
                           state.all_model_checkpoint_timestamps,
                           state.last_preserved_timestamp)


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """The newest checkpoint of ``checkpoint_dir`` that exists and whose header reads, or ``None``.

    A newest checkpoint that is missing, truncated or corrupted in its header
    is skipped with a warning in favour of the previous one listed in the state
    file. Tensor checksums are checked at restore (:func:`read_checkpoint`).
    """
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is None:
        return None
    older = [p for p in reversed(state.all_model_checkpoint_paths) if p != state.model_checkpoint_path]
    for path in [state.model_checkpoint_path, *older]:
        try:
            file_format.check_header(path)
            return path
        except (NotFoundError, DataLossError) as exc:
            logger.warning("skipping checkpoint %s: %s", path, exc)
    return None


# -- rotation --------------------------------------------------------------------

class CheckpointRotation:
    """Which checkpoints ``Saver`` keeps: the newest ``max_to_keep``, deleting older files.

    ``max_to_keep`` None or 0 keeps every file and, as in TF, lists none of
    them (the state file then names only the newest). As TF's
    ``keep_checkpoint_every_n_hours``, a checkpoint about to be deleted is kept
    for good when at least that many hours passed since the last one kept so.
    """

    def __init__(self, max_to_keep: int | None = 5, keep_checkpoint_every_n_hours: float = 10000.0,
                 *, now: float | None = None) -> None:
        if max_to_keep is not None and max_to_keep < 0:
            raise ValueError(f"max_to_keep must be >= 0 or None, got {max_to_keep}")
        self._max_to_keep = max_to_keep or 0
        self._every_s = keep_checkpoint_every_n_hours * 3600.0
        self._next_preserve = (time.time() if now is None else now) + self._every_s
        self._last: list[tuple[str, float]] = []

    @property
    def paths(self) -> list[str]:
        """The kept checkpoints, oldest first (for ``update_checkpoint_state``)."""
        return [p for p, _ in self._last]

    def recover(self, paths: Iterable[str], timestamp: float | None = None) -> None:
        """Take over checkpoints of an earlier run (e.g. a state file's list), oldest first."""
        stamp = time.time() if timestamp is None else timestamp
        self._last = [(p, stamp) for p in paths if os.path.exists(p)]

    def record(self, path: str, timestamp: float | None = None, *, delete: bool = True) -> list[str]:
        """Note a newly written checkpoint; return the ones beyond ``max_to_keep``,
        deleted (or, with ``delete=False``, for the caller to delete with
        :func:`delete_checkpoints` once the state file no longer names them)."""
        if not self._max_to_keep:
            return []
        stamp = time.time() if timestamp is None else timestamp
        self._last = [(p, t) for p, t in self._last if p != path]
        self._last.append((path, stamp))
        expired = []
        while len(self._last) > self._max_to_keep:
            old, old_stamp = self._last.pop(0)
            if old_stamp > self._next_preserve:
                self._next_preserve += self._every_s
                logger.info("keeping checkpoint %s for good (keep_checkpoint_every_n_hours)", old)
                continue
            expired.append(old)
        if delete:
            delete_checkpoints(expired)
        return expired


    def take_back(self, paths: list[str], timestamp: float = 0.0) -> None:
        """Count ``paths`` (from :meth:`record`, not deleted) as kept again, oldest:
        the next :meth:`record` expires them first."""
        self._last[:0] = [(p, timestamp) for p in paths]


def delete_checkpoints(paths: Iterable[str]) -> None:
    for path in paths:
        _delete_checkpoint(path)


def _delete_checkpoint(path: str) -> None:
    try:
        os.remove(path)
        logger.debug("deleted old checkpoint %s", path)
    except FileNotFoundError:
        logger.warning("old checkpoint %s was already gone", path)


def checkpoint_candidates(checkpoint_dir: str | None) -> list[str]:
    """The checkpoints of ``checkpoint_dir`` that exist, newest first (from
    its state file): where a restore tries the next when one is corrupt."""
    if checkpoint_dir is None:
        return []
    state = get_checkpoint_state(checkpoint_dir)
    if state is None:
        return []
    ordered = [state.model_checkpoint_path, *reversed(state.all_model_checkpoint_paths)]
    return [p for p in dict.fromkeys(ordered) if os.path.exists(p)]
