"""``dt.train.load_checkpoint`` and ``dt.train.list_variables``: a checkpoint's
contents without a program to restore them into (TF's ``checkpoint_utils``).

Both take a checkpoint file or a folder (its newest checkpoint, from the
``checkpoint`` state file) and read any file of distrib's format: a
``Checkpoint``'s (keys are object paths, and its object graph is one entry,
``_CHECKPOINTABLE_OBJECT_GRAPH``, as ``tf.train.list_variables`` shows it), a
``Saver``'s (keys are variable names) or ``save_weights``'. Shapes and dtypes
come from the file's header alone; a value is read, and its checksum checked,
when asked for (``get_tensor``), so a corrupt file is a ``DataLossError``
naming it.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from distrib.errors import NotFoundError
from distrib.framework import dtypes
from distrib.train.checkpoints import file_format, state_file

__all__ = ["CheckpointReader", "load_checkpoint", "list_variables"]


def _checkpoint_file(ckpt_dir_or_file: Any) -> str:
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = state_file.latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"Couldn't find 'checkpoint' file or checkpoints in given "
                             f"directory {path}")
        return latest
    return path


class CheckpointReader:
    """The tensors of one checkpoint file (TF's ``CheckpointReader``)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._entries = file_format.list_checkpoint_tensors(path)   # header checked here

    @property
    def path(self) -> str:
        return self._path

    def has_tensor(self, name: str) -> bool:
        return name in self._entries

    def get_tensor(self, name: str) -> np.ndarray:
        """The value saved under ``name`` (checksum verified)."""
        if name not in self._entries:
            raise NotFoundError(f"Key {name} not found in checkpoint {self._path!r}; it holds "
                                f"{sorted(self._entries)}")
        return file_format.read_checkpoint(self._path, [name])[name]

    def get_variable_to_shape_map(self) -> dict[str, list[int]]:
        return {name: list(shape) for name, (_, shape) in self._entries.items()}

    def get_variable_to_dtype_map(self) -> dict[str, dtypes.DType]:
        return {name: _dtype(dtype) for name, (dtype, _) in self._entries.items()}

    def __repr__(self) -> str:
        return f"<dt.train.CheckpointReader {self._path!r} ({len(self._entries)} tensors)>"


def _dtype(numpy_dtype: np.dtype) -> dtypes.DType:
    if numpy_dtype.kind in "OSU":
        return dtypes.string
    return dtypes.as_dtype(numpy_dtype)


def load_checkpoint(ckpt_dir_or_file: Any) -> CheckpointReader:
    """A reader of the checkpoint ``ckpt_dir_or_file`` (a folder: its newest one)."""
    return CheckpointReader(_checkpoint_file(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file: Any) -> list[tuple[str, list[int]]]:
    """``(name, shape)`` of every tensor in the checkpoint, sorted by name."""
    reader = load_checkpoint(ckpt_dir_or_file)
    return sorted(reader.get_variable_to_shape_map().items())
