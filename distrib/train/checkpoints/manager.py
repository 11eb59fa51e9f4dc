"""``dt.train.CheckpointManager``: numbered checkpoints of a ``Checkpoint`` in one
folder, the old ones deleted (TF's ``checkpoint_management.CheckpointManager``).

    manager = dt.train.CheckpointManager(ckpt, "ckpts", max_to_keep=3)
    await manager.restore_or_initialize()        # the newest checkpoint, else init_fn
    path = await manager.save()                  # ckpts/ckpt-<save_counter>

TF's rules, kept because programs rely on them:

* The folder's ``checkpoint`` state file is the manager's memory: it lists
  the managed checkpoints, oldest first, with the time each was written and
  the time one was last kept for good (``keep_checkpoint_every_n_hours``), so
  a manager made again in the folder (a restarted job) carries on: the same
  list, the same deletions, ``latest_checkpoint`` at once. Only checkpoints
  written later than the last one kept for good are managed (a folder of
  ``Checkpoint.save``'s files, without times, is taken over but never
  deleted from), and a clock set back is not trusted to delete anything.
* ``save`` writes the new checkpoint, names it in the state file, then deletes
  what is beyond ``max_to_keep`` (oldest first) and writes the state file
  again: a crash in between leaves a state file whose checkpoints all exist.
  A checkpoint about to be deleted is kept for good instead when
  ``keep_checkpoint_every_n_hours`` have passed since the last one kept so;
  it leaves the list (the state file does not grow without end).
* With ``checkpoint_interval`` (steps of ``step_counter``) ``save`` writes
  only when that many steps passed since the last checkpoint, never twice
  for one step; ``check_interval=False`` forces it.

Checkpoints are written in distrib's format (one checksummed file each, see
``object_checkpoint.py``), so deleting one is deleting one file. Under a
multi-worker strategy every worker calls ``save`` (its read step is a
collective step on first use) and, as TF's, every worker's manager writes and
manages its own folder (the tutorials give a non-chief a temporary one and
delete it), the chief's first: ``save`` returns on every worker once the
chief's checkpoint and state file are written (``worker_saves.py``). A
non-chief whose folder is the chief's writes nothing there and keeps the
chief's list.
"""
from __future__ import annotations

import collections
import inspect
import logging
import os
import time
from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.train.checkpoints import state_file, trackable

logger = logging.getLogger(__name__)

__all__ = ["CheckpointManager"]


class CheckpointManager:
    """``CheckpointManager(checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None,
    checkpoint_name='ckpt', step_counter=None, checkpoint_interval=None, init_fn=None)``."""

    def __init__(self, checkpoint: Any, directory: Any, max_to_keep: int | None,
                 keep_checkpoint_every_n_hours: float | None = None,
                 checkpoint_name: str = "ckpt", step_counter: Any = None,
                 checkpoint_interval: int | None = None,
                 init_fn: Callable[[], Any] | None = None) -> None:
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"Expected a positive integer or `None` for `max_to_keep`, got "
                             f"{max_to_keep}.")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is "
                             "not None.")
        self._checkpoint = checkpoint
        self._max_to_keep = max_to_keep
        self._keep_every_n_hours = keep_checkpoint_every_n_hours
        self._directory = os.fspath(directory)
        self._prefix = os.path.join(self._directory, checkpoint_name)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._last_checkpoint_step: int | None = None
        self._init_fn = init_fn
        self._maybe_delete: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._recover()

    def _recover(self) -> None:
        """Take over the state file's list (TF's constructor, see the module header)."""
        state = state_file.get_checkpoint_state(self._directory)
        now = time.time()
        if state is None:
            self._latest_checkpoint: str | None = None
            # a little in the past: a manager made again at once must not keep its
            # predecessor's first checkpoint for good
            self._last_preserved_timestamp = now - 1.0
            return
        self._latest_checkpoint = state.model_checkpoint_path
        self._last_preserved_timestamp = state.last_preserved_timestamp
        if now < self._last_preserved_timestamp:
            logger.warning("time.time() returned a value %f seconds behind the last preserved "
                           "checkpoint timestamp.", self._last_preserved_timestamp - now)
            self._last_preserved_timestamp = now
        paths = state.all_model_checkpoint_paths
        stamps = state.all_model_checkpoint_timestamps or \
            (self._last_preserved_timestamp,) * len(paths)
        for path, stamp in zip(paths, stamps):
            stamp = min(stamp, now)
            if stamp > self._last_preserved_timestamp:
                self._maybe_delete[path] = stamp

    # -- what it manages ---------------------------------------------------------------------
    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoint(self) -> Any:
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        return self._checkpoint_interval

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest checkpoint's path (what ``Checkpoint.restore`` takes), or None."""
        return self._latest_checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """The managed checkpoints, oldest first (not those kept for good)."""
        return list(self._maybe_delete)

    # -- save --------------------------------------------------------------------------------
    async def save(self, checkpoint_number: Any = None, check_interval: bool = True,
                   options: Any = None) -> str | None:
        """Write a new checkpoint and manage it; its path, or None when
        ``checkpoint_interval`` says not yet (module header).

        ``checkpoint_number`` (an int or an integer variable) numbers the file;
        by default the checkpoint's ``save_counter``, which is incremented either way.
        """
        if self._checkpoint_interval is not None:
            step = await self._current_step()
            last = self._last_checkpoint_step
            if last is not None:
                if step == last:
                    return None
                if check_interval and step < last + self._checkpoint_interval:
                    return None
            self._last_checkpoint_step = step
        written: list[str] = []

        def manage(path: str) -> None:   # in this worker's turn, before the others go on
            written.append(path)
            self._remember(path)
            # named first, deleted after: a crash between leaves only existing files named
            self._record_state()
            self._sweep()
            self._record_state()
        path = await self._checkpoint.save(self._prefix, checkpoint_number=checkpoint_number,
                                           write_state=False, after_write=manage)
        if not written:
            # a worker given the chief's folder keeps the chief's list (the chief
            # deletes the files), so its list stays bounded too
            self._remember(path)
            self._sweep(delete=False)
        return path

    def _remember(self, path: str) -> None:
        self._maybe_delete.pop(path, None)   # written again: to the end of the queue
        self._maybe_delete[path] = time.time()
        self._latest_checkpoint = path

    def _sweep(self, delete: bool = True) -> None:
        if not self._max_to_keep:
            return   # None: everything stays in the managed list
        while len(self._maybe_delete) > self._max_to_keep:
            path, stamp = self._maybe_delete.popitem(last=False)
            if self._keep_every_n_hours and \
                    stamp - self._keep_every_n_hours * 3600.0 >= self._last_preserved_timestamp:
                self._last_preserved_timestamp = stamp
                logger.info("keeping checkpoint %s for good (keep_checkpoint_every_n_hours)",
                            path)
                continue
            if delete:
                state_file.delete_checkpoints([path])
                logger.info("deleted old checkpoint %s (max_to_keep=%d)", path,
                            self._max_to_keep)

    def _record_state(self) -> None:
        state_file.update_checkpoint_state(
            self._directory, self._latest_checkpoint, list(self._maybe_delete),
            all_model_checkpoint_timestamps=list(self._maybe_delete.values()),
            last_preserved_timestamp=self._last_preserved_timestamp)

    async def _current_step(self) -> int:
        value = self._step_counter
        if trackable.is_value(value):
            value = await self._checkpoint.value_of(value)
        array = np.asarray(value)
        if array.size != 1 or array.dtype.kind not in "iu":
            raise InvalidArgumentError(f"step_counter must hold one integer, got {value!r}")
        return int(array.reshape(-1)[0])

    # -- restore -----------------------------------------------------------------------------
    async def restore_or_initialize(self) -> str | None:
        """Restore the newest checkpoint and return its path; with none, call
        ``init_fn`` (a function or a coroutine function) and return None."""
        if self._latest_checkpoint is not None:
            await self._checkpoint.restore(self._latest_checkpoint)
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = await self._current_step()
            return self._latest_checkpoint
        if self._init_fn is not None:
            result = self._init_fn()
            if inspect.isawaitable(result):
                await result
        return None

    def __repr__(self) -> str:
        return (f"<dt.train.CheckpointManager {self._directory!r} max_to_keep="
                f"{self._max_to_keep} checkpoints={self.checkpoints}>")
