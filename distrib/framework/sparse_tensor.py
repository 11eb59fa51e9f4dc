"""``dt.SparseTensor`` and ``dt.SparseTensorValue``: TF's sparse tensor, as its
three dense parts.

``indices`` (int64 ``[n, rank]``: where each value sits), ``values``
(``[n]``) and ``dense_shape`` (int64 ``[rank]``), TF's fields and only
those. A ``SparseTensor`` holds three graph tensors (what a parser's
``VarLenFeature`` gives in a graph); a ``SparseTensorValue`` three numpy
arrays (what one gives in a dataset function, and what a session returns).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from distrib.framework.graph import Tensor

__all__ = ["SparseTensor", "SparseTensorValue"]


class SparseTensorValue(NamedTuple):
    """A sparse tensor's value: ``indices``, ``values``, ``dense_shape`` arrays."""

    indices: Any
    values: Any
    dense_shape: Any

    def to_dense(self, default_value: Any = 0) -> np.ndarray:
        """The dense array (``default_value`` where no value sits)."""
        values = np.asarray(self.values)
        out = np.full(tuple(int(d) for d in np.asarray(self.dense_shape)), default_value,
                      dtype=values.dtype)
        idx = np.asarray(self.indices, dtype=np.int64)
        if idx.size:
            out[tuple(idx.T)] = values
        return out


class SparseTensor:
    """``dt.SparseTensor(indices, values, dense_shape)`` of graph tensors (TF's)."""

    def __init__(self, indices: Tensor, values: Tensor, dense_shape: Tensor) -> None:
        self._indices = indices
        self._values = values
        self._dense_shape = dense_shape

    @property
    def indices(self) -> Tensor:
        return self._indices

    @property
    def values(self) -> Tensor:
        return self._values

    @property
    def dense_shape(self) -> Tensor:
        return self._dense_shape

    @property
    def dtype(self) -> Any:
        return self._values.dtype

    @property
    def graph(self) -> Any:
        return self._values.graph

    def __iter__(self) -> Any:   # sess.run([st.indices, st.values, st.dense_shape]) spelled short
        return iter((self._indices, self._values, self._dense_shape))

    def __repr__(self) -> str:
        return (f"SparseTensor(indices={self._indices!r}, values={self._values!r}, "
                f"dense_shape={self._dense_shape!r})")
