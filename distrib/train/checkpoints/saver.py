"""``Saver``: save variables to checkpoint files and restore them, through a session.

TF1's ``tf.train.Saver`` with ``await`` added: ``await saver.save(sess,
"ckpt/model", global_step=gs)`` and ``await saver.restore(sess, path)``. A
``SyncSession`` (whose ``run`` blocks) works too, and ``save_sync`` /
``restore_sync`` are the blocking twins for scripts.

How it works, and why:

* **Save** fetches every variable's value in ONE ``sess.run`` (with the
  global step, so the file name and the values come from the same instant),
  then writes one checksummed file with :mod:`distrib.train.checkpoints.file_format`
  (temporary file, fsync, rename), rotates old files and rewrites the
  ``checkpoint`` state file. The file write runs off the event loop, so a big
  checkpoint does not stall the process's other tasks.
* **Restore** reads and verifies the file (a corrupt one is a
  ``DataLossError`` naming it), then assigns every variable in ONE
  ``sess.run`` through graph ops built once at construction: per variable a
  placeholder and an ``Assign`` colocated with the variable, so each value
  travels straight to the ps task that owns it. Building at construction (as
  TF does) keeps the graph unchanged afterwards, so a Supervisor can
  finalize it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework.graph import Graph, GraphKeys, Operation, Tensor, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops import partitioned_variables
from distrib.ops.variables import Variable
from distrib.train.checkpoints import file_format, state_file
from distrib.train.checkpoints.readiness import run_fetches
from distrib.train.checkpoints.state_file import latest_checkpoint

logger = logging.getLogger(__name__)

__all__ = ["Saver", "SaverArgumentError", "latest_checkpoint"]


class SaverArgumentError(InvalidArgumentError, ValueError):
    """A bad argument to ``Saver`` or ``Saver.save``. It is also a ``ValueError``,
    which is what TF1 raises, so ported ``except ValueError`` code keeps working."""


def _var_name(var: Any) -> str:
    """The checkpoint key of a variable: its op name (``"layer1/w"``), as in TF."""
    op = getattr(var, "op", None)
    if op is None:
        raise InvalidArgumentError(f"Saver: {var!r} is not a variable; pass dt.Variable objects")
    return op.name


def _named_variables(var_list: Sequence[Variable] | Mapping[str, Variable] | None,
                     allow_empty: bool) -> tuple[dict[str, Variable], dict[int, list[Variable]]]:
    """The checkpoint name of each variable to save, and the mirrored copies of
    each (by ``id`` of the first copy): a MirroredStrategy variable, its slots
    and its optimizer's scalars are saved once, under the first copy's name,
    and restored into every copy (TF's mirrored saveables), so a checkpoint
    moves between one replica and many."""
    if var_list is None:
        var_list = get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES)
    var_list = partitioned_variables.as_shards(var_list)   # a PartitionedVariable: its shards
    if isinstance(var_list, Mapping):
        named = dict(var_list)
    else:
        named = {}
        for var in var_list:
            name = _var_name(var)
            if name in named:
                raise SaverArgumentError(f"Saver: at least two variables have the same name: {name}")
            named[name] = var
    # a {name: variable} var_list names its checkpoint entries itself: kept as given
    mirrors = {} if isinstance(var_list, Mapping) else _fold_mirrors(named)
    first_name: dict[str, str] = {}   # shared name -> the first checkpoint name it was given
    for name, var in sorted(named.items(), key=lambda item: str(item[0])):
        if not isinstance(var, Variable):
            raise InvalidArgumentError(f"Saver: {name!r} maps to {var!r}, not a dt.Variable")
        # one variable under two names would be restored twice from two different
        # tensors, and the later assign silently wins (TF refuses it too)
        earlier = first_name.setdefault(var.shared_name, name)
        if earlier != name:
            raise SaverArgumentError(
                f"Saver: the same saveable will be restored with two names: variable "
                f"{var.op.name!r} is specified more than once in var_list (as {earlier!r} and "
                f"{name!r}); give each variable one checkpoint name")
    if not named and not allow_empty:
        raise SaverArgumentError("Saver: no variables to save; create variables before the "
                                 "Saver, pass var_list, or pass allow_empty=True for a Saver "
                                 "that saves nothing")
    return named, mirrors


def _fold_mirrors(named: dict[str, Variable]) -> dict[int, list[Variable]]:
    """Take each mirrored copy whose first copy is also saved out of ``named``;
    the copies of each first copy, by its ``id``."""
    kept = {id(v) for v in named.values()}
    mirrors: dict[int, list[Variable]] = {}
    for name, var in list(named.items()):
        primary = getattr(var, "mirror_primary", None)
        if primary is not None and id(primary) in kept:
            del named[name]
            mirrors.setdefault(id(primary), []).append(var)
    return mirrors


def _run_blocking(coro: Any) -> Any:
    """Run ``coro`` to completion from blocking code (``save_sync`` and ``restore_sync``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("save_sync/restore_sync block the thread; inside a coroutine use "
                       "`await saver.save(...)` / `await saver.restore(...)`")


class _Restorer:
    """The graph ops that assign a checkpoint's values: one placeholder + Assign per variable."""

    def __init__(self, graph: Graph, named: dict[str, Variable], scope: str,
                 mirrors: dict[int, list[Variable]]) -> None:
        self.placeholders: dict[str, Tensor] = {}
        self.assigns: dict[str, Operation] = {}
        with graph.as_default(), graph.name_scope(None), graph.name_scope(scope):
            for name, var in named.items():
                with graph.colocate_with(var.op):
                    ph = ops.placeholder(var.dtype, var.shape.as_list(), name="restore_value")
                    assign = var.assign(ph, name="restore", read_value=False)
                copies = []
                for copy in mirrors.get(id(var), ()):
                    with graph.colocate_with(copy.op):
                        copies.append(copy.assign(ph, name="restore", read_value=False))
                self.assigns[name] = ops.group(assign, *copies, name="restore") if copies else assign
                self.placeholders[name] = ph
            self.op = ops.group(*self.assigns.values(), name="restore_all")

    def feeds(self, values: Mapping[str, np.ndarray]) -> dict[Tensor, np.ndarray]:
        return {self.placeholders[name]: value for name, value in values.items()}


class Saver:
    """``Saver(var_list=None, max_to_keep=5, keep_checkpoint_every_n_hours=10000.0, name=None, ...)``.

    ``var_list`` is a list of variables (saved under their op names) or a dict
    ``{checkpoint name: variable}``; by default all global variables.
    ``sharded`` is accepted for TF compatibility: a checkpoint is always one
    file (the values are gathered by the session either way).
    """

    def __init__(self, var_list: Sequence[Variable] | Mapping[str, Variable] | None = None,
                 reshape: bool = False, sharded: bool = False, max_to_keep: int | None = 5,
                 keep_checkpoint_every_n_hours: float = 10000.0, name: str | None = None,
                 restore_sequentially: bool = False, saver_def: Any = None, builder: Any = None,
                 defer_build: bool = False, allow_empty: bool = False,
                 write_version: Any = None, pad_step_number: bool = False,
                 save_relative_paths: bool = False, filename: str | None = None) -> None:
        if reshape:
            raise InvalidArgumentError("Saver(reshape=True) is not supported: restore into "
                                       "variables of the saved shapes")
        self._named, self._mirrors = _named_variables(var_list, allow_empty)
        self._graph = next(iter(self._named.values())).graph if self._named else get_default_graph()
        self._name = name or "save"
        self._rotation = state_file.CheckpointRotation(max_to_keep, keep_checkpoint_every_n_hours)
        self._write_lock = threading.Lock()
        self._restorer: _Restorer | None = None
        self._filename = filename
        if not defer_build:
            self.build()

    def build(self) -> None:
        """Build the restore ops (done by the constructor unless ``defer_build=True``)."""
        if self._restorer is None and self._named:
            self._restorer = _Restorer(self._graph, self._named, self._name, self._mirrors)

    # -- properties ---------------------------------------------------------------
    @property
    def last_checkpoints(self) -> list[str]:
        """The checkpoints this saver keeps, oldest first."""
        return self._rotation.paths

    def recover_last_checkpoints(self, checkpoint_paths: Sequence[str]) -> None:
        """Take over the checkpoints of an earlier run (those that still exist), oldest first."""
        self._rotation.recover(checkpoint_paths)

    def set_last_checkpoints(self, last_checkpoints: Sequence[str]) -> None:
        self._rotation.recover(last_checkpoints)

    @property
    def var_list(self) -> dict[str, Variable]:
        return dict(self._named)

    # -- save -------------------------------------------------------------------------
    async def save(self, sess: Any, save_path: str, global_step: Any = None,
                   latest_filename: str | None = None, meta_graph_suffix: str = "meta",
                   write_meta_graph: bool = True, write_state: bool = True,
                   strip_default_attrs: bool = False, save_debug_info: bool = False) -> str | None:
        """Write the variables to ``save_path`` (``save_path-<step>`` with ``global_step``).

        ``global_step`` is an int or a variable/tensor (a scalar or of shape
        ``[1]``, as TF allows) whose value is fetched with the variables.
        Returns the path written, or None for an empty Saver
        (``allow_empty=True`` and no variables), which writes nothing (TF).
        """
        if latest_filename is not None and os.path.basename(latest_filename) != latest_filename:
            raise SaverArgumentError(f"latest_filename {latest_filename!r} must be a file name, "
                                     "not a path: the state file lives beside the checkpoints")
        state_name = latest_filename or state_file.STATE_FILENAME
        if global_step is None and os.path.basename(os.fspath(save_path)) == state_name:
            # the checkpoint would be written over the state file (and the state
            # file then over the checkpoint): TF refuses this name, so do we
            raise SaverArgumentError(
                f"'latest_filename' collides with 'save_path': {state_name!r} and "
                f"{os.fspath(save_path)!r}; the state file {state_name!r} lives beside the "
                "checkpoints, so name the checkpoint otherwise (e.g. 'dir/model')")
        if not self._named:
            logger.debug("Saver has no variables (allow_empty=True): nothing saved to %s",
                         save_path)
            return None
        # One save at a time, from its fetch to its state file (a user's beside
        # the Supervisor's periodic one, maybe from another thread's loop):
        # otherwise two rotations interleave, and the state file may name an
        # older checkpoint as the newest.
        await self._acquire_write_lock()
        held_by_write = False
        try:
            values, step = await self._fetch(sess, global_step)
            write = asyncio.ensure_future(asyncio.to_thread(
                self._write, os.fspath(save_path), values, step, latest_filename, write_state))
            # the write's end lets go of the lock, also when this call is
            # cancelled meanwhile (the thread finishes its files regardless)
            write.add_done_callback(self._write_done)
            held_by_write = True
            try:
                return await asyncio.shield(write)
            except OSError as exc:
                raise file_format.write_error(exc, save_path, "lower max_to_keep") from exc
        finally:
            if not held_by_write:
                self._write_lock.release()

    async def _acquire_write_lock(self) -> None:
        # polled, not awaited in a thread: a cancelled wait must not leave a
        # thread that takes the lock later and never lets it go
        while not self._write_lock.acquire(blocking=False):
            await asyncio.sleep(0.005)

    def _write_done(self, write: asyncio.Future) -> None:
        self._write_lock.release()
        if not write.cancelled():
            write.exception()   # retrieved: a cancelled caller no longer waits for it

    async def _fetch(self, sess: Any, global_step: Any) -> tuple[dict[str, np.ndarray], int | None]:
        reads = {name: var.value() for name, var in self._named.items()}
        if global_step is None or isinstance(global_step, (int, np.integer, np.ndarray)):
            values = await run_fetches(sess, reads)
            step = None if global_step is None else _step_number(global_step, global_step)
        else:
            values, step = await run_fetches(sess, [reads, global_step])
            step = _step_number(step, global_step)
        # a fetched string tensor comes back as str or fixed-width unicode:
        # stored as the variable's own (string) dtype, it restores into it
        for name, var in self._named.items():
            if np.dtype(var.dtype.as_numpy_dtype).kind == "O":
                values[name] = np.asarray(values[name], dtype=object)
        return partitioned_variables.saved_whole(values, self._named), step

    def _write(self, save_path: str, values: dict[str, np.ndarray], step: int | None,
               latest_filename: str | None, write_state: bool) -> str:
        save_dir = os.path.dirname(os.path.abspath(save_path))
        path = file_format.write_checkpoint(save_path, values, global_step=step)
        expired = self._rotation.record(path, delete=False)
        if write_state:
            try:
                state_file.update_checkpoint_state(save_dir, path, self._rotation.paths,
                                                   latest_filename=latest_filename)
            except BaseException:
                self._rotation.take_back(expired)   # deleted by the next save that succeeds
                raise
        # deleted only once the state file no longer names them: a failed
        # write of it leaves a state whose checkpoints all still exist
        state_file.delete_checkpoints(expired)
        for old in expired:
            logger.info("deleted old checkpoint %s (max_to_keep)", old)
        logger.info("saved checkpoint %s", path)
        return path

    # -- restore ------------------------------------------------------------------------
    async def restore(self, sess: Any, save_path: str | None,
                      options: dict | None = None,
                      only_task: str | None = None) -> None:
        """Set every variable to its value in the checkpoint ``save_path``.

        A missing file or variable is a ``NotFoundError`` naming it; a
        corrupted file is a ``DataLossError`` naming the file. An empty Saver
        (``allow_empty=True``, no variables) does nothing. ``options``: the
        run's options (a chief's restore carries its ``fencing_term``).
        ``only_task`` (a distrib extension, e.g. ``"/job:ps/task:1"``):
        restore only the variables placed on that task (a restarted ps), and
        leave the live ones elsewhere as they are.
        """
        if only_task is not None:
            await self._restore_task(sess, save_path, options, only_task)
            return
        if not self._named:
            return   # an empty Saver (allow_empty=True) restores nothing, as in TF
        if save_path is None:
            raise SaverArgumentError("Can't load save_path when it is None; pass a checkpoint "
                                     "path (dt.train.latest_checkpoint(folder) finds the newest)")
        self.build()
        assert self._restorer is not None
        values = await asyncio.to_thread(self._read, os.fspath(save_path))
        await run_fetches(sess, self._restorer.op, feed_dict=self._restorer.feeds(values),
                   options=options)
        for var in self._named.values():
            # a dt.function's first-use initialization leaves a restored variable alone
            var.restored_from_checkpoint = True
            for copy in self._mirrors.get(id(var), ()):
                copy.restored_from_checkpoint = True
        logger.info("restored %d variables from %s", len(values), save_path)

    def variables_on(self, task: str) -> dict[str, Variable]:
        """This Saver's variables placed on ``task`` (``/job:J/task:T``), by checkpoint name."""
        return {n: v for n, v in self._named.items() if device_task(v.device) == task}

    async def _restore_task(self, sess: Any, save_path: str | None, options: dict | None,
                            task: str) -> None:
        names = self.variables_on(task)
        if not names or save_path is None:
            return
        self.build()
        assert self._restorer is not None
        values = await asyncio.to_thread(self._read, os.fspath(save_path))
        values = {n: values[n] for n in names}
        await run_fetches(sess, [self._restorer.assigns[n] for n in names],
                   feed_dict=self._restorer.feeds(values), options=options)
        logger.info("restored the %d variables of %s from %s", len(values), task, save_path)

    def _read(self, path: str) -> dict[str, np.ndarray]:
        stored = file_format.list_checkpoint_tensors(path)
        keys = partitioned_variables.checkpoint_keys(self._named, stored)  # shards: their whole
        missing = [name for name in self._named if keys[name] not in stored]
        if missing:
            raise NotFoundError(
                f"Key(s) {missing} not found in checkpoint {path!r}: the checkpoint does not hold "
                f"these variables (it holds {sorted(stored)}); restore with a Saver whose var_list "
                "matches the checkpoint")
        for name, var in self._named.items():
            if keys[name] == name:
                _check_compatible(name, var, stored[name], path)
        values = file_format.read_checkpoint(path, sorted(set(keys.values())))
        return partitioned_variables.split_saved(values, self._named, keys)

    # -- blocking twins --------------------------------------------------------------------
    def save_sync(self, sess: Any, save_path: str, global_step: Any = None,
                  latest_filename: str | None = None, write_state: bool = True) -> str | None:
        """``save`` for blocking code (e.g. with a ``SyncSession``)."""
        return _run_blocking(self.save(sess, save_path, global_step=global_step,
                                       latest_filename=latest_filename, write_state=write_state))

    def restore_sync(self, sess: Any, save_path: str | None) -> None:
        """``restore`` for blocking code (e.g. with a ``SyncSession``)."""
        _run_blocking(self.restore(sess, save_path))

    def __repr__(self) -> str:
        return f"<dt.train.Saver {len(self._named)} variables, keeping {self.last_checkpoints}>"


def device_task(device: str | None) -> str | None:
    """The task of a device string: ``"/job:ps/replica:0/task:1/device:CPU:0"``
    -> ``"/job:ps/task:1"`` (None when it names no job)."""
    parts = dict(p.split(":", 1) for p in (device or "").strip("/").split("/") if ":" in p)
    if "job" not in parts:
        return None
    return f"/job:{parts['job']}/task:{parts.get('task', '0')}"


def _step_number(value: Any, what: Any) -> int:
    """The global step as an int: TF takes ``int(sess.run(step))``, so a scalar
    or a one-element tensor (a global step of shape ``[1]``) both count."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise SaverArgumentError(
            f"global_step {getattr(what, 'name', what)!r} has value {value!r}; it must be one "
            "integer (a scalar or a one-element tensor, e.g. dt.train.get_or_create_global_step())")
    return int(array.reshape(-1)[0])


def _check_compatible(name: str, var: Variable, stored: tuple[np.dtype, tuple[int, ...]],
                      path: str) -> None:
    dtype, shape = stored
    if not var.shape.is_compatible_with(list(shape)):
        raise InvalidArgumentError(
            f"variable {name!r} has shape {var.shape} but checkpoint {path!r} holds shape "
            f"{list(shape)} for it; restore into a variable of the saved shape")
    if np.dtype(var.dtype.as_numpy_dtype) != dtype:
        raise InvalidArgumentError(
            f"variable {name!r} has dtype {var.dtype.name} but checkpoint {path!r} holds "
            f"{dtype} for it; restore into a variable of the saved dtype")
