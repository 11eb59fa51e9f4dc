"""Joining and cutting tensors along an axis: ``dt.concat`` (TF's ``tf.concat``,
a ``ConcatV2`` op) and ``slice_rows`` (a ``SliceAxis``), which its gradient
(:mod:`distrib.ops.array_grad`) is made of. The strategies build
``strategy.gather`` and ``ReplicaContext.all_gather`` on them."""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["concat", "slice_rows"]


def concat(values: Sequence[Any], axis: int, name: str = "concat") -> Tensor:
    """The tensors ``values`` joined along ``axis`` (every other dimension equal)."""
    values = list(values)
    if not values:
        raise InvalidArgumentError("dt.concat needs at least one tensor")
    with name_scope(name, "concat", values) as scope:
        tensors = [ops.convert_to_tensor(v) for v in values]
        if len(tensors) == 1:
            return ops.identity(tensors[0], name=scope)
        return ops.op_output("ConcatV2", tensors, {"axis": int(axis)}, scope)


def slice_rows(t: Any, begin: int, size: int, axis: int = 0, name: str | None = None
               ) -> Tensor:
    """Rows ``[begin, begin + size)`` of ``t`` along ``axis`` (a ``SliceAxis`` op)."""
    t = ops.convert_to_tensor(t)
    return ops.op_output("SliceAxis", [t], {"axis": int(axis), "begin": int(begin),
                                       "size": int(size)}, name or "SliceAxis")

