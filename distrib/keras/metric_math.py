"""The few operations a metric's result is made of, for numbers and for graph tensors.

A metric keeps summed statistics (totals, confusion counts per threshold) and
works its result out of them in two places: in the client, from the totals
``compile``'s step returned (numpy), and in a graph, from its state variables
(``metric.result()``). One formula serves both through ``NUMPY`` and
``GRAPH``, which offer the same small set of operations, so the two results
cannot drift apart.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.ops import math_ops as ops
from distrib.ops.array_ops import slice_rows

__all__ = ["NUMPY", "GRAPH"]


class _Numpy:
    """The operations on numpy values (float64)."""

    @staticmethod
    def div_no_nan(a: Any, b: Any) -> Any:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)

    @staticmethod
    def head(v: Any, n: int) -> Any:
        return np.asarray(v)[:n]

    @staticmethod
    def tail(v: Any, n: int) -> Any:
        return np.asarray(v)[-n:]

    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    log = staticmethod(np.log)

    @staticmethod
    def total(v: Any) -> Any:
        return np.sum(v)

    @staticmethod
    def where_positive(cond_a: Any, cond_b: Any, x: Any, other: Any) -> Any:
        """``x`` where both ``cond_a > 0`` and ``cond_b > 0``, else ``other``."""
        return np.where((np.asarray(cond_a) > 0) & (np.asarray(cond_b) > 0), x, other)


class _Graph:
    """The same operations as graph ops (float32)."""

    @staticmethod
    def div_no_nan(a: Any, b: Any) -> Any:
        b = ops.convert_to_tensor(b)
        nonzero = ops.cast(ops.not_equal(b, 0.0), b.dtype)
        return a / (b + (1.0 - nonzero)) * nonzero

    @staticmethod
    def head(v: Any, n: int) -> Any:
        return slice_rows(v, 0, n)

    @staticmethod
    def tail(v: Any, n: int) -> Any:
        size = v.shape.as_list()[0]
        return slice_rows(v, size - n, n)

    maximum = staticmethod(ops.maximum)
    minimum = staticmethod(ops.minimum)
    log = staticmethod(ops.log)

    @staticmethod
    def total(v: Any) -> Any:
        return ops.reduce_sum(v)

    @staticmethod
    def where_positive(cond_a: Any, cond_b: Any, x: Any, other: Any) -> Any:
        both = ops.cast(ops.logical_and(ops.greater(cond_a, 0.0), ops.greater(cond_b, 0.0)),
                        "float32")
        return both * x + (1.0 - both) * other


NUMPY = _Numpy()
GRAPH = _Graph()
