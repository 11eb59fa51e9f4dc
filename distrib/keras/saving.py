"""``save_weights``/``load_weights``: a model's weights (and its optimizer's
state) in distrib's checkpoint format (``distrib.train.checkpoints.file_format``: one
checksummed file, written atomically, with TF's ``checkpoint`` state file
beside it, so ``dt.train.latest_checkpoint(folder)`` finds the newest).

Keys follow the model's structure, not its variables' process-wide names, as
Keras' TF-format checkpoints do: ``layer_with_weights-0/kernel`` is the
kernel of the first layer that has weights, whatever it is called, so a
second model of the same architecture (``dense_2`` ...) loads the first one's
file. The optimizer's state goes under ``optimizer/`` (``iterations``, each
weight's slots as ``optimizer/layer_with_weights-0/kernel/m``, Adam's
``beta1_power``), so a backup resumes exactly; a file without it loads into
a fresh optimizer.

A variable with one copy per replica is saved once (its first copy) and
restored into every copy. Values travel through two ``dt.function``\\ s per
model (read all, assign all) on the model's strategy target, so saving is one
step and loading is one step. Optimizer state that does not exist yet (its
slots are made when the train step is first traced) is kept and assigned
right after that trace (``StateIO.apply_pending``), as TF defers restores.
Under a multi-worker strategy every worker calls ``save_weights``; the chief
writes first, and ``save_weights`` returns on every worker once the chief's
file is whole; a non-chief writes its own copy where its path is not the
chief's (``distrib.train.checkpoints.worker_saves``, TF's collective save).
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Mapping

import numpy as np

from distrib.distribute.core.values import local_results
from distrib.distribute.functions.def_function import function
from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.train.checkpoints import file_format, state_file, trackable, worker_saves

logger = logging.getLogger(__name__)

__all__ = ["StateIO", "weight_keys"]


def weight_keys(model: Any) -> dict[str, Any]:
    """``{key: weight}`` of the model's weights, in layer order."""
    out: dict[str, Any] = {}
    index = 0
    for layer in model.layers:
        if not layer.weights:
            continue
        names = layer.weight_names()
        for var in layer.weights:
            out[f"layer_with_weights-{index}/{names[id(var)]}"] = var
        index += 1
    return out


class StateIO:
    """Reads and assigns a model's state in one step each (see the module header)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._readers: dict[tuple[str, ...], Any] = {}
        self._writers: dict[tuple[str, ...], Any] = {}
        self.pending: dict[str, np.ndarray] = {}
        self._steps: trackable.StepRunner | None = None   # the save's meeting step

    # -- what the state is ------------------------------------------------------------------
    def state(self, include_optimizer: bool = True) -> dict[str, list[Any]]:
        """``{key: [copies]}``: the weights, then the optimizer's state when built."""
        model = self._model
        weights = weight_keys(model)
        out = {key: list(local_results(var)) for key, var in weights.items()}
        optimizer = getattr(model, "optimizer", None)
        if include_optimizer and optimizer is not None:
            by_id = {id(v): k for k, v in weights.items()}
            trainable = model.trainable_weights
            with model.function_scope():
                state = optimizer.state_variables(trainable)
            for key, copies in state.items():
                head, _, slot = key.partition("/")
                if slot and head.isdigit():
                    key = f"{by_id[id(trainable[int(head)])]}/{slot}"
                out[f"optimizer/{key}"] = copies
        return out

    # -- one step each way ------------------------------------------------------------------
    async def read(self, state: Mapping[str, list[Any]]) -> dict[str, np.ndarray]:
        keys = tuple(state)
        reader = self._readers.get(keys)
        if reader is None:
            firsts = [state[k][0] for k in keys]

            def read_state() -> list[Any]:
                return [v.value() for v in firsts]
            reader = self._readers[keys] = function(read_state)
        with self._model.function_scope():
            values = await reader()
        return dict(zip(keys, (np.asarray(v) for v in values)))

    async def assign(self, state: Mapping[str, list[Any]], values: Mapping[str, Any]) -> None:
        keys = tuple(k for k in state if k in values)
        if not keys:
            return
        writer = self._writers.get(keys)
        if writer is None:
            targets = [state[k] for k in keys]

            def assign_state(arrays: list[Any]) -> None:
                for copies, value in zip(targets, arrays):
                    for copy in copies:
                        copy.assign(value, read_value=False)
            writer = self._writers[keys] = function(assign_state)
        arrays = [_checked(k, state[k][0], values[k]) for k in keys]
        with self._model.function_scope():
            await writer(arrays)

    async def apply_pending(self) -> None:
        """Assign the optimizer state that ``load`` found before it existed."""
        if not self.pending:
            return
        state = self.state()
        ready = {k: v for k, v in self.pending.items() if k in state}
        await self.assign(state, ready)
        self.pending = {k: v for k, v in self.pending.items() if k not in ready}
        if ready:
            logger.info("restored %d deferred optimizer values", len(ready))

    # -- files ---------------------------------------------------------------------------
    async def save(self, path: str, extra: Mapping[str, np.ndarray] | None = None,
                   include_optimizer: bool = True) -> str:
        """Write the state (and ``extra`` entries) to ``path`` in this worker's turn
        (module header); returns the path."""
        values = await self.read(self.state(include_optimizer))
        values.update({k: np.asarray(v) for k, v in (extra or {}).items()})
        path = os.fspath(path)

        async def write() -> None:
            await asyncio.to_thread(_write, path, values)
        if self._steps is None:
            self._steps = trackable.step_runner()
        with self._model.function_scope():
            await worker_saves.write_in_turn(self._model.distribute_strategy, path, write,
                                             self._steps)
        return path

    async def load(self, path: str) -> dict[str, np.ndarray]:
        """Assign the state saved at ``path`` (or the newest checkpoint of the folder
        ``path``); returns the file's entries that are not model or optimizer state."""
        path = _resolve(os.fspath(path))
        stored = await asyncio.to_thread(file_format.read_checkpoint, path)
        state = self.state()
        weights = [k for k in state if not k.startswith("optimizer/")]
        missing = [k for k in weights if k not in stored]
        if missing:
            raise NotFoundError(
                f"checkpoint {path!r} has no value for {missing} (it holds "
                f"{sorted(stored)}); load weights saved from a model of the same layers")
        await self.assign(state, stored)
        known = set(state)
        self.pending = {k: v for k, v in stored.items()
                        if k.startswith("optimizer/") and k not in known}
        return {k: v for k, v in stored.items() if not k.startswith(("layer_with_weights-",
                                                                       "optimizer/"))}


def _checked(key: str, var: Any, value: Any) -> np.ndarray:
    want = np.dtype(var.dtype.as_numpy_dtype)
    array = np.asarray(value)
    shape = var.shape.as_list()
    if list(array.shape) != shape:
        raise InvalidArgumentError(f"{key}: the checkpoint holds shape {list(array.shape)}, "
                                   f"the model's weight {var.name} has {shape}; load weights "
                                   "saved from a model of the same layers and units")
    return array.astype(want, copy=False)


def _write(path: str, values: dict[str, np.ndarray]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    file_format.write_checkpoint(path, values)
    try:
        state_file.update_checkpoint_state(folder, path, [path])
    except InvalidArgumentError:
        pass   # the file is called "checkpoint": no state file beside it
    logger.info("saved weights to %s", path)


def _resolve(path: str) -> str:
    if os.path.isdir(path):
        latest = state_file.latest_checkpoint(path)
        if latest is None:
            raise NotFoundError(f"no checkpoint in folder {path!r}; pass the file that "
                                "save_weights wrote")
        return latest
    if not os.path.exists(path):
        raise NotFoundError(f"no weights file {path!r}: pass the path given to save_weights")
    return path
