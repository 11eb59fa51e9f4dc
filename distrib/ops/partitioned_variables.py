"""TF1's partitioned variables: ``get_variable(..., partitioner=)`` returns a
:class:`PartitionedVariable`, one ``dt.Variable`` shard per slice of the
partitioned axis (``<name>/part_<i>``), and the three partitioners that
decide the slices (``fixed_size_partitioner``,
``variable_axis_size_partitioner``, ``min_max_variable_partitioner``).

Each shard is an ordinary variable: ``replica_device_setter`` places the
shards round-robin over the ps tasks, they are in the variable collections
(so optimizers and savers see the shards, as in TF), and
``dt.nn.embedding_lookup`` reads rows from the shard that holds them, where
it lives. TF's slicing: a dimension of n rows in k shards gives the first
``n % k`` shards one row more than the others.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor
from distrib.framework.tensor_shape import TensorShape
from distrib.ops.array_ops import concat

__all__ = ["PartitionedVariable", "fixed_size_partitioner", "variable_axis_size_partitioner",
           "min_max_variable_partitioner", "create_partitioned_variable", "slice_sizes",
           "as_shards", "saved_whole", "checkpoint_keys", "split_saved"]

Partitioner = Callable[..., Sequence[int]]


class PartitionInfo(NamedTuple):
    """What a partition-aware initializer gets (TF's ``_PartitionInfo``)."""

    full_shape: list[int]
    var_offset: list[int]

    def single_offset(self, shape: Sequence[int]) -> int:
        return self.var_offset[0]


class SaveSliceInfo(NamedTuple):
    """Where a shard sits in its whole (TF's ``Variable.SaveSliceInfo``)."""

    full_name: str
    full_shape: list[int]
    var_offset: list[int]
    var_shape: list[int]

    def index(self) -> tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.var_offset, self.var_shape))


def slice_sizes(n: int, k: int) -> list[int]:
    """TF's slicing of ``n`` rows into ``k`` shards: the first ``n % k`` get one more."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


class PartitionedVariable:
    """A variable stored as shards along one axis (TF1's ``PartitionedVariable``):
    iterable over its shards; reads as the whole (``as_tensor``: a concat)."""

    def __init__(self, name: str, shape: Sequence[int], dtype: Any,
                 variable_list: Sequence[Any], partitions: Sequence[int]) -> None:
        self._name = name
        self._shape = TensorShape(list(shape))
        self._dtype = dtypes.as_dtype(dtype)
        self._variables = list(variable_list)
        self._partitions = list(partitions)
        self._concat: Tensor | None = None

    def __iter__(self) -> Iterator[Any]:
        return iter(self._variables)

    def __len__(self) -> int:
        return len(self._variables)

    name = property(lambda self: self._name)
    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: self._shape)
    graph = property(lambda self: self._variables[0].graph)
    op = property(lambda self: self._variables[0].op)   # (colocate_with: the first shard)

    def get_shape(self) -> TensorShape:
        return self._shape

    def _get_variable_list(self) -> list[Any]:
        return list(self._variables)

    def _get_partitions(self) -> list[int]:
        return list(self._partitions)

    def _partition_axis(self) -> int:
        return next((i for i, p in enumerate(self._partitions) if p > 1), 0)

    def as_tensor(self) -> Tensor:
        """The whole value: the shards joined along the partitioned axis."""
        if self._concat is None:
            with self.graph.as_default():
                self._concat = concat([v.value() for v in self._variables],
                                      self._partition_axis(), name=self._name + "/ConcatPartitions")
        return self._concat

    def _as_tensor(self) -> Tensor:
        return self.as_tensor()

    def _as_graph_element(self) -> Tensor:
        return self.as_tensor()

    # -- dt.train.Checkpoint's value protocol: saved whole, restored into any partitioning
    def checkpoint_parts(self) -> list[Any]:
        return list(self._variables)

    def checkpoint_join(self, parts: Sequence[Any]) -> Any:
        return np.concatenate([np.asarray(p) for p in parts], axis=self._partition_axis())

    def checkpoint_split(self, value: Any) -> list[tuple[Any, Any]]:
        array = np.asarray(value)
        return [(v, array[v.save_slice_info.index()]) for v in self._variables]

    def _reads(self) -> list[Tensor]:
        raise InvalidArgumentError(
            f"differentiate the shards of partitioned variable {self._name} (list(var)), as TF "
            "does; a gradient with respect to the whole is not defined")

    def __repr__(self) -> str:
        return (f"<dt.PartitionedVariable {self._name!r} shape={self._shape} "
                f"partitions={self._partitions}>")


def _check_shape(shape: Any, name: str) -> list[int]:
    dims = TensorShape(shape).as_list()
    if dims is None or None in dims:
        raise InvalidArgumentError(f"partitioned variable {name!r} needs a fully known shape, "
                                   f"got {shape}")
    return dims


def fixed_size_partitioner(num_shards: int, axis: int = 0) -> Partitioner:
    """``num_shards`` shards along ``axis`` (fewer when the axis is smaller)."""
    def _partitioner(shape: Any, dtype: Any = None, **_: Any) -> list[int]:
        dims = TensorShape(shape).as_list() or []
        if not 0 <= axis < len(dims):
            raise InvalidArgumentError(f"fixed_size_partitioner: axis {axis} is not an axis of "
                                       f"shape {dims}")
        out = [1] * len(dims)
        out[axis] = min(int(num_shards), int(dims[axis]))
        return out
    return _partitioner


def variable_axis_size_partitioner(max_shard_bytes: int, axis: int = 0,
                                   bytes_per_string_element: int = 16,
                                   max_shards: int | None = None) -> Partitioner:
    """As many shards along ``axis`` as keep each under ``max_shard_bytes`` (TF's rule)."""
    if max_shard_bytes < 1 or bytes_per_string_element < 1:
        raise InvalidArgumentError("Both max_shard_bytes and bytes_per_string_element must be "
                                   "positive.")
    if max_shards is not None and max_shards < 1:
        raise InvalidArgumentError("max_shards must be positive.")

    def _partitioner(shape: Any, dtype: Any, **_: Any) -> list[int]:
        dims = TensorShape(shape).as_list() or []
        dt = dtypes.as_dtype(dtype)
        elem = bytes_per_string_element if dt == dtypes.string else dt.size
        slice_bytes = math.prod(d for i, d in enumerate(dims) if i != axis) * elem
        per_shard = max(1, max_shard_bytes // max(slice_bytes, 1))
        shards = int(math.ceil(dims[axis] / per_shard))
        if max_shards:
            shards = min(shards, max_shards)
        out = [1] * len(dims)
        out[axis] = max(1, min(shards, dims[axis]))
        return out
    return _partitioner


def min_max_variable_partitioner(max_partitions: int = 1, axis: int = 0,
                                 min_slice_size: int = 256 << 10,
                                 bytes_per_string_element: int = 16) -> Partitioner:
    """Shards of at least ``min_slice_size`` bytes each, at most ``max_partitions``."""
    def _partitioner(shape: Any, dtype: Any, **_: Any) -> list[int]:
        dims = TensorShape(shape).as_list() or []
        dt = dtypes.as_dtype(dtype)
        elem = bytes_per_string_element if dt == dtypes.string else dt.size
        total = math.prod(dims) * elem
        shards = min(max_partitions, dims[axis], max(1, total // max(min_slice_size, 1)))
        out = [1] * len(dims)
        out[axis] = int(max(1, shards))
        return out
    return _partitioner


def create_partitioned_variable(name: str, shape: Any, dtype: Any, initializer: Any,
                                partitioner: Partitioner,
                                make_shard: Callable[[str, list[int], Any], Any]
                                ) -> PartitionedVariable:
    """The shards of ``name`` that ``partitioner`` asks for, each made by
    ``make_shard(shard name, shard shape, its initializer)`` (the store's)."""
    if shape is None and initializer is not None and not callable(initializer):
        shape = np.shape(initializer)   # a constant's shape
    dims = _check_shape(shape, name)
    parts = [int(p) for p in partitioner(shape=TensorShape(dims), dtype=dtypes.as_dtype(dtype))]
    if len(parts) != len(dims) or any(p < 1 for p in parts) or sum(p > 1 for p in parts) > 1:
        raise InvalidArgumentError(f"partitioner of {name!r} returned {parts} for shape {dims}: "
                                   "one positive count per dimension, more than 1 in one at most")
    axis = next((i for i, p in enumerate(parts) if p > 1), 0)
    shards, offset = [], 0
    for i, size in enumerate(slice_sizes(dims[axis], parts[axis])):
        shard_dims = list(dims)
        shard_dims[axis] = size
        var_offset = [0] * len(dims)
        var_offset[axis] = offset
        info = PartitionInfo(list(dims), var_offset)
        shard = make_shard(f"{name}/part_{i}", shard_dims, _sliced(initializer, info, axis,
                                                                  size))
        # what a Saver needs to save the shards as one entry and restore any partitioning
        shard.save_slice_info = SaveSliceInfo(name, list(dims), var_offset, shard_dims)
        shards.append(shard)
        offset += size
    return PartitionedVariable(name, dims, shards[0].dtype, shards, parts)


def _sliced(initializer: Any, info: PartitionInfo, axis: int, size: int) -> Any:
    """A shard's initializer: a constant's rows, else the initializer itself
    (called with the shard's shape)."""
    if initializer is None or callable(initializer):
        return initializer
    if isinstance(initializer, Tensor):
        raise InvalidArgumentError("a tensor initializer of a partitioned variable is not "
                                   "supported; pass an initializer object or a numpy value")
    arr = np.asarray(initializer)
    index = [slice(None)] * arr.ndim
    index[axis] = slice(info.var_offset[axis], info.var_offset[axis] + size)
    return arr[tuple(index)]


# -- the Saver's side: shards saved as one entry, restored by slicing it -------------------
def as_shards(var_list: Any) -> Any:
    """A Saver's ``var_list`` with each ``PartitionedVariable`` replaced by its shards
    (TF1's Saver takes one, in a list or as a dict value under its own name; its
    shards are then saved as one entry, :func:`saved_whole`)."""
    if isinstance(var_list, dict):
        out = {}
        for key, var in var_list.items():
            if not isinstance(var, PartitionedVariable):
                out[key] = var
                continue
            if key != var.name:
                raise InvalidArgumentError(
                    f"Saver: partitioned variable {var.name!r} is saved under its own name, "
                    f"not {key!r}; use {{{var.name!r}: variable}} or a list")
            out.update((shard.op.name, shard) for shard in var)
        return out
    out_list = []
    for var in var_list:
        out_list.extend(var if isinstance(var, PartitionedVariable) else [var])
    return out_list


def saved_whole(values: dict[str, Any], named: dict[str, Any]) -> dict[str, Any]:
    """``values`` (checkpoint name -> array) with every fully present partitioned
    variable's shards joined under its own name (TF's one entry per variable)."""
    groups: dict[str, list[tuple[SaveSliceInfo, str]]] = {}
    for name, var in named.items():
        info = getattr(var, "save_slice_info", None)
        if info is not None and name in values:
            groups.setdefault(info.full_name, []).append((info, name))
    out = dict(values)
    for full, parts in groups.items():
        shape = parts[0][0].full_shape
        if sum(math.prod(i.var_shape) for i, _ in parts) != math.prod(shape) or full in out:
            continue   # a subset of the shards (a var_list of some): kept as they are
        whole = np.empty(shape, np.asarray(values[parts[0][1]]).dtype)
        for info, name in parts:
            whole[info.index()] = out.pop(name)
        out[full] = whole
    return out


def checkpoint_keys(named: dict[str, Any], stored: Any) -> dict[str, str]:
    """The entry each variable restores from: its own, else its whole's."""
    keys = {}
    for name, var in named.items():
        info = getattr(var, "save_slice_info", None)
        keys[name] = name if info is None or name in stored else info.full_name
    return keys


def split_saved(values: dict[str, Any], named: dict[str, Any], keys: dict[str, str]
                ) -> dict[str, Any]:
    """Each variable's value: its entry, or its rows of its whole's entry (so a
    checkpoint restores into another partitioning of the same variable)."""
    out = {}
    for name, var in named.items():
        key = keys[name]
        if key == name:
            out[name] = values[key]
            continue
        info = var.save_slice_info
        whole = np.asarray(values[key])
        if list(whole.shape) != list(info.full_shape):
            raise InvalidArgumentError(f"partitioned variable {info.full_name!r} has shape "
                                       f"{info.full_shape} but the checkpoint holds "
                                       f"{list(whole.shape)}")
        out[name] = whole[info.index()]
    return out
