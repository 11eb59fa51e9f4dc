"""``dt.IndexedSlices``: a gradient that names a few rows of a big tensor
(TF's ``tf.IndexedSlices``), and ``IndexedSlicesValue``, what ``sess.run``
returns for one.

The gradient of a gather (an embedding lookup) with respect to its table is
``IndexedSlices(values, indices, dense_shape)``: row ``indices[i]`` of the
table gets ``values[i]``, repeated indices add. It stays sparse through the
gradient walk (two of them meeting are joined, values and indices
concatenated, as TF's ``_AggregateIndexedSlicesGradients``) and reaches the
optimizer, whose sparse update runs where the variable lives; so a step
that touches k rows moves k rows over the wire, never the table.

Where a dense tensor is needed (an op that takes a tensor, ``dt.add_n``,
``dt.convert_to_tensor``) it densifies, as TF does: an
``UnsortedSegmentSum`` of the values into ``dense_shape[0]`` rows, built
once per object.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Tensor
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import array_gather
from distrib.ops import math_ops as ops

__all__ = ["IndexedSlices", "IndexedSlicesValue", "convert_to_tensor_or_indexed_slices"]


class IndexedSlicesValue(NamedTuple):
    """``sess.run`` of an :class:`IndexedSlices`: numpy ``values``,
    ``indices`` and ``dense_shape`` (None when the slices have none)."""

    values: np.ndarray
    indices: np.ndarray
    dense_shape: np.ndarray | None

    def to_dense(self) -> np.ndarray:
        """The dense array (repeated indices added), for tests and users."""
        if self.dense_shape is None:
            raise InvalidArgumentError("IndexedSlicesValue.to_dense needs a dense_shape")
        out = np.zeros([int(d) for d in self.dense_shape], self.values.dtype)
        np.add.at(out, self.indices, self.values)
        return out


class IndexedSlices:
    """``dt.IndexedSlices(values, indices, dense_shape=None)``: rows
    ``indices`` of a tensor of shape ``dense_shape`` hold ``values``."""

    __array_priority__ = 100

    def __init__(self, values: Any, indices: Any, dense_shape: Any = None) -> None:
        self._values = ops.convert_to_tensor(values)
        self._indices = ops.convert_operand(indices) if ops.is_tensor(indices) else \
            ops.convert_to_tensor(indices)
        if not self._indices.dtype.is_integer:
            raise InvalidArgumentError(f"IndexedSlices: indices must be integers, got "
                                       f"{self._indices.dtype.name}")
        self._dense_shape = None if dense_shape is None else (
            dense_shape if isinstance(dense_shape, Tensor) else
            ops.constant(np.asarray(dense_shape, np.int64), name="dense_shape"))
        self._dense: Tensor | None = None

    values = property(lambda self: self._values)
    indices = property(lambda self: self._indices)
    dense_shape = property(lambda self: self._dense_shape)
    dtype = property(lambda self: self._values.dtype)
    graph = property(lambda self: self._values.graph)
    op = property(lambda self: self._values.op)
    name = property(lambda self: self._values.name)
    device = property(lambda self: self._values.device)

    @property
    def shape(self) -> TensorShape:
        """The dense tensor's static shape (from a constant ``dense_shape``)."""
        if self._dense_shape is not None and self._dense_shape.op.type == "Const":
            return TensorShape([int(d) for d in self._dense_shape.op.get_attr("value")])
        rest = self._values.shape.as_list()
        return TensorShape(None if rest is None else [None] + rest[1:])

    def _as_tensor(self) -> Tensor:
        """The dense tensor (TF's conversion of an IndexedSlices densifies)."""
        if self._dense is None:
            if self._dense_shape is None:
                raise InvalidArgumentError(
                    "cannot convert an IndexedSlices without dense_shape to a tensor: give "
                    "dense_shape, or use its values and indices")
            with self.graph.as_default(), self.graph.colocate_with(self._values.op):
                rows = array_gather.slice_first(self._dense_shape)
                self._dense = array_gather.unsorted_segment_sum(
                    self._values, self._indices, rows, name="densify")
        return self._dense

    def _fetch_components(self) -> tuple[list[Tensor], Any]:
        """What ``sess.run`` fetches for it, and how the values make its result."""
        parts = [self._values, self._indices]
        if self._dense_shape is not None:
            parts.append(self._dense_shape)

        def rebuild(vals: list[Any]) -> IndexedSlicesValue:
            return IndexedSlicesValue(vals[0], vals[1], vals[2] if len(vals) > 2 else None)
        return parts, rebuild

    def __neg__(self) -> IndexedSlices:
        return IndexedSlices(ops.negative(self._values), self._indices, self._dense_shape)

    def __repr__(self) -> str:
        return (f"IndexedSlices(indices={self._indices.name}, values={self._values.name}, "
                f"dense_shape={None if self._dense_shape is None else self._dense_shape.name})")


def convert_to_tensor_or_indexed_slices(value: Any, dtype: Any = None, name: str | None = None
                                        ) -> Any:
    """``value`` itself when it is an IndexedSlices, else a tensor (TF's name)."""
    if isinstance(value, IndexedSlices):
        return value
    return ops.convert_to_tensor(value, dtype=dtype, name=name)
