"""``dt.train.Checkpoint``: TF2's object-based checkpoint, in distrib's file format.

    ckpt = dt.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    path = await ckpt.save("ckpts/ckpt")        # ckpts/ckpt-1, then -2 ... (save_counter)
    status = await ckpt.restore(dt.train.latest_checkpoint("ckpts"))
    status.assert_consumed()                      # or assert_existing_objects_matched() ...

What it saves is the object graph below it (``object_graph.py``: values keyed
by their path, ``model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``,
plus the graph itself), so a program that builds the same objects restores
them whatever its variables are named, under another strategy, with another
number of replicas or shards. ``save_counter`` is a real ``dt.Variable``
(int64, a child of the checkpoint, as TF's), made on the first ``save`` or
``restore``; ``save`` increments it in the same step that reads the values,
so the file's number and its values come from one instant.

Why it is built so:

* **One step each way.** Reading every value is one ``dt.function`` step per
  graph (through the step runner of ``trackable.py``), with TF2's first-use
  initialization, then the file is written off the event loop; a restore
  reads and checks the whole file, then assigns every bound variable in one
  step. Variables restored so are marked ``restored_from_checkpoint``: a
  ``dt.function``'s first-use initialization leaves them alone.
* **distrib's format.** One checksummed file written atomically by
  :mod:`distrib.train.checkpoints.file_format` (a torn or flipped file is a
  ``DataLossError``, never half a restore); ``save`` updates the ``checkpoint``
  state file as TF does, ``write`` does not.
* **Every worker writes, the chief first.** Under a multi-worker strategy
  (the one whose scope is open, else the strategy of a Keras model in the
  graph) every worker calls ``save``/``write`` and runs the read step, so
  collectives of first-use initialization line up; then, as in TF, every
  worker writes where it was told (the tutorials give a non-chief a temporary
  folder and delete it), except a non-chief given the chief's very path, and
  ``save`` returns on every worker only once the chief's file is whole
  (``worker_saves.py``): ``latest_checkpoint(chief_dir)`` right after it
  finds the new file on every worker.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Awaitable, Callable, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import get_default_graph
from distrib.ops.variables import Variable
from distrib.train.checkpoints import file_format, object_graph, state_file, trackable, worker_saves
from distrib.train.checkpoints.restore_status import (
    CheckpointLoadStatus,
    InitializationOnlyStatus,
    RestoreState,
)

logger = logging.getLogger(__name__)

__all__ = ["Checkpoint", "Snapshot"]

_SAVE_COUNTER = "save_counter"


class Checkpoint:
    """``dt.train.Checkpoint(root=None, **kwargs)``: see the module header.

    ``kwargs`` are the checkpoint's named children (a Keras model, layer or
    optimizer, a ``dt.Variable`` or distributed variable, another
    ``Checkpoint``, a list or dict of them, any object with
    ``trackable_children()``); attributes set later join them. ``root``'s
    own children are the checkpoint's too.
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_children", {})
        self._root = root
        self._save_counter: Variable | None = None
        self._runner: trackable.StepRunner | None = None
        self._restore_state: RestoreState | None = None
        if root is not None:
            _assert_trackable(root, "root")
        for name, value in sorted(kwargs.items()):
            _assert_trackable(value, name)
            setattr(self, name, value)

    # -- the object graph ------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name == _SAVE_COUNTER:
            raise AttributeError("save_counter is the Checkpoint's own variable; it cannot "
                                 "be set (assign to it: ckpt.save_counter.assign(...))")
        object.__setattr__(self, name, value)
        if trackable.is_trackable(value):
            self._children[name] = value
            trackable.children_changed(self)
        else:
            self._children.pop(name, None)

    def trackable_children(self) -> dict[str, Any]:
        """The root's children, the keyword children, then ``save_counter``."""
        out = trackable.children(self._root) if self._root is not None else {}
        out.update(self._children)
        if self._save_counter is not None:
            out[_SAVE_COUNTER] = self._save_counter
        return out

    def defer_restore(self, name: str, restoration: trackable.Restoration) -> bool:
        """A restore's ``save_counter`` value, kept until the counter is made."""
        if name != _SAVE_COUNTER:
            return False
        trackable.defer(self, _SAVE_COUNTER, restoration)
        return True

    @property
    def save_counter(self) -> Variable:
        """An int64 variable: 0 until the first ``save``, which makes it 1 (numbers files)."""
        if self._save_counter is None:
            graph = self._graph()
            restored = trackable.deferred_value(self, _SAVE_COUNTER)
            initial = np.int64(0 if restored is None else np.asarray(restored).item())
            with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
                    distribution_context.variable_creation_paused():
                self._save_counter = Variable(initial, trainable=False, dtype=dtypes.int64,
                                              name=_SAVE_COUNTER)
        return self._save_counter

    def _graph(self) -> Any:
        """The graph of the checkpoint's variables (where ``save_counter`` goes)."""
        for _, value in object_graph.walk(self).values():
            parts = value.checkpoint_parts()
            if parts:
                return parts[0].graph
        return get_default_graph()

    def strategy(self, live: object_graph.LiveGraph | None = None) -> Any:
        """The strategy whose steps save and restore this checkpoint (and which says
        who writes): the one whose scope is open, else that of a Keras model in the
        graph, else None."""
        current = distribution_context.strategy()
        if current is not None:
            return current
        for obj in (live or object_graph.walk(self)).objects:
            found = getattr(obj, "distribute_strategy", None)
            if found is not None:
                return found
        return None

    def writes_files(self, live: object_graph.LiveGraph | None = None) -> bool:
        """Whether this process writes the shared copy (the chief under a multi-worker
        strategy; a non-chief writes its own copy where its path is another)."""
        return worker_saves.is_chief(self._writers(live))

    def _writers(self, live: object_graph.LiveGraph | None = None) -> Any:
        """The strategy whose workers take turns to write (``worker_saves``):
        ``strategy``'s, else the one the saved variables were made under (a
        checkpoint of mirrored variables saved outside the strategy's scope)."""
        live = live or object_graph.walk(self)
        found = self.strategy(live)
        if found is not None:
            return found
        for _, value in live.values():
            parts = value.checkpoint_parts()
            owner = getattr(parts[0], "owner_strategy", None) if parts else None
            if owner is not None:
                return owner
        return None

    async def value_of(self, variable: Any) -> np.ndarray:
        """``variable``'s value (any layout), read in a step as the checkpoint reads."""
        return (await trackable.read_values(self._steps(), [variable], self.strategy()))[0]

    def _steps(self) -> trackable.StepRunner:
        if self._runner is None:
            self._runner = trackable.step_runner()
        return self._runner

    # -- save ------------------------------------------------------------------------------
    async def save(self, file_prefix: Any, options: Any = None, *,
                   checkpoint_number: Any = None, write_state: bool = True,
                   after_write: Callable[[str], None] | None = None) -> str:
        """Increment ``save_counter``, write ``<file_prefix>-<save_counter>`` and name it
        in the folder's ``checkpoint`` state file; returns its path.

        distrib extensions (what ``CheckpointManager`` uses): ``checkpoint_number``
        (an int or an integer variable, read in the same step) numbers the file
        instead of the counter, which is incremented all the same;
        ``write_state=False`` leaves the state file alone; ``after_write(path)``
        runs (in a thread) right after this worker wrote the file, still in its
        turn (module header), and not at all where this worker writes nothing.
        """
        prefix = os.fspath(file_prefix)
        counter = self.save_counter
        live = object_graph.walk(self)
        extra = [checkpoint_number] if trackable.is_value(checkpoint_number) else []
        values, extras = await self._read(live, bump=counter, extra=extra)
        if checkpoint_number is None:
            number = _number(values[_key_of(live, counter)], "save_counter")
        elif extras:
            number = _number(extras[0], "checkpoint_number")
        else:
            number = _number(checkpoint_number, "checkpoint_number")
        path = f"{prefix}-{number}"
        snapshot = self._snapshot(live, values)
        await snapshot.write_in_turn(path, write_state=write_state, after_write=after_write)
        return path

    async def write(self, file_prefix: Any, options: Any = None) -> str:
        """Write the checkpoint to ``file_prefix`` as it is: no number, no state file,
        ``save_counter`` left as it is. Read it back with ``read``."""
        path = os.fspath(file_prefix)
        await (await self.snapshot()).write_in_turn(path)
        return path

    async def snapshot(self) -> Snapshot:
        """Every value read now, in one step every worker runs, to be written by
        ``Snapshot.write_in_turn`` (``model.save`` writes it into a folder it
        commits in its turn)."""
        live = object_graph.walk(self)
        values, _ = await self._read(live)
        return self._snapshot(live, values)

    def _snapshot(self, live: object_graph.LiveGraph, values: dict[str, np.ndarray]
                  ) -> Snapshot:
        tensors = dict(values)
        tensors[object_graph.OBJECT_GRAPH_KEY] = live.saved().to_tensor()
        return Snapshot(tensors, self._writers(live), self._steps())

    async def _read(self, live: object_graph.LiveGraph, bump: Any = None,
                    extra: Sequence[Any] = ()) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """Every value of ``live`` (and of ``extra`` value objects) in one step."""
        entries = live.values()
        objects = [obj for _, obj in entries] + list(extra)
        joined = await trackable.read_values(self._steps(), objects, self.strategy(live),
                                             bump=bump)
        values = {key: _as_saved(obj, array)
                  for (key, obj), array in zip(entries, joined[:len(entries)])}
        return values, joined[len(entries):]

    # -- restore ---------------------------------------------------------------------------
    async def restore(self, save_path: Any, options: Any = None) -> Any:
        """Restore the objects below this checkpoint from ``save_path`` (what ``save``
        or ``latest_checkpoint`` returned); ``None``: nothing to restore, variables
        start from their initial values. Returns a status (``assert_consumed()`` ...).

        Bound variables are assigned at once; values whose variables are not made
        yet are restored when they are (see ``restore_status.py``)."""
        if save_path is None:
            return InitializationOnlyStatus(self)
        _ = self.save_counter   # made now, so that the file's value restores it too
        return await self._restore_from(save_path)

    async def read(self, save_path: Any, options: Any = None) -> CheckpointLoadStatus:
        """``restore`` for a checkpoint made by ``write``: it does not make
        ``save_counter`` (a value of it in the file is kept for when it is made)."""
        return await self._restore_from(save_path)

    async def _restore_from(self, save_path: Any) -> CheckpointLoadStatus:
        path = os.fspath(save_path)
        try:
            stored = await asyncio.to_thread(file_format.read_checkpoint, path)
        except NotFoundError as exc:
            raise NotFoundError(
                f"Error when restoring from checkpoint at {path}: {exc.message}\nPlease "
                "double-check that the path is correct. You may be missing the checkpoint "
                "suffix (e.g. the '-1' in 'path/to/ckpt-1').") from None
        raw = stored.pop(object_graph.OBJECT_GRAPH_KEY, None)
        if raw is None:
            raise InvalidArgumentError(
                f"Checkpoint {path!r} has no object graph: it was written by dt.train.Saver "
                "(name-based) or Model.save_weights; restore it with a Saver (or "
                "load_weights), or write it again with dt.train.Checkpoint")
        saved = object_graph.SavedGraph.from_tensor(raw, path)
        state = RestoreState(path, saved, stored, self, self._assign)
        self._restore_state = state     # kept while the checkpoint lives (deferred values)
        await state.restore(state.match())
        logger.info("restored %d values from %s", len(state.restored), path)
        return CheckpointLoadStatus(state, self)

    async def _assign(self, pairs: list[tuple[Any, np.ndarray]]) -> None:
        # marked first: the step's first-use initialization must not run over them
        fresh = [v for v, _ in pairs if not getattr(v, "restored_from_checkpoint", False)]
        for v in fresh:
            v.restored_from_checkpoint = True
        try:
            await self._steps().assign(pairs, strategy=self.strategy())
        except BaseException:
            for v in fresh:
                v.restored_from_checkpoint = False
            raise

    def __repr__(self) -> str:
        return f"<dt.train.Checkpoint {sorted(self.trackable_children())}>"


class Snapshot:
    """A checkpoint's values, read in one step, and who writes them where
    (``worker_saves.write_in_turn``: the chief first, every worker returning
    once the chief's copy is whole)."""

    def __init__(self, tensors: dict[str, np.ndarray], strategy: Any,
                 runner: trackable.StepRunner) -> None:
        self.tensors, self.strategy, self._runner = tensors, strategy, runner

    def write_file(self, path: str, write_state: bool = False) -> None:
        """Write the checkpoint file ``path`` now, in this process (no turns)."""
        try:
            _write_file(path, self.tensors, write_state)
        except OSError as exc:
            raise file_format.write_error(exc, path) from exc

    async def write_in_turn(self, path: str, write: Callable[[], Awaitable[None]] | None = None,
                            *, write_state: bool = False,
                            after_write: Callable[[str], None] | None = None) -> bool:
        """``write`` (default: the file ``path``, then ``after_write(path)``, in a
        thread) in this worker's turn for ``path``; whether this worker wrote."""
        if write is None:
            def write_here() -> None:
                self.write_file(path, write_state)
                if after_write is not None:
                    after_write(path)

            async def write() -> None:
                await asyncio.to_thread(write_here)
        return await worker_saves.write_in_turn(self.strategy, path, write, self._runner)


def _assert_trackable(value: Any, name: str) -> None:
    if not trackable.is_trackable(value):
        raise ValueError(
            f"`Checkpoint` was expecting a trackable object for {name!r} (a dt.Variable or "
            "distributed variable, a Keras model, layer or optimizer, another Checkpoint, a "
            f"list or dict of them, or an object with trackable_children()), got {value!r}")


def _key_of(live: object_graph.LiveGraph, obj: Any) -> str:
    ident = trackable.identity(obj)
    for key, value in live.values():
        if trackable.identity(value) == ident:
            return key
    raise KeyError(obj)


def _as_saved(obj: Any, array: np.ndarray) -> np.ndarray:
    """A fetched value as the file keeps it (a string variable's as an object array)."""
    if np.dtype(obj.dtype.as_numpy_dtype).kind == "O":
        return np.asarray(array, dtype=object)
    return np.asarray(array)


def _number(value: Any, what: str) -> int:
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be one integer (an int or an integer "
                                   f"variable), got {value!r}")
    return int(array.reshape(-1)[0])


def _write_file(path: str, tensors: dict[str, np.ndarray], write_state: bool) -> None:
    file_format.write_checkpoint(path, tensors)
    if write_state:
        # TF's Checkpoint.save: the state file names this checkpoint only
        state_file.update_checkpoint_state(os.path.dirname(os.path.abspath(path)), path, [path])
    logger.info("saved checkpoint %s", path)


