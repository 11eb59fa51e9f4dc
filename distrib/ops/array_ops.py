"""Joining and cutting tensors along an axis: ``dt.concat`` (TF's ``tf.concat``,
a ``ConcatV2`` op) and its gradient, one ``SliceAxis`` per input. The
strategies build ``strategy.gather`` and ``ReplicaContext.all_gather`` on it."""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.framework.op_shapes import INFER
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.gradients import register_gradient

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
        return ops._out("ConcatV2", tensors, {"axis": int(axis)}, scope)


def slice_rows(t: Any, begin: int, size: int, axis: int = 0, name: str | None = None
               ) -> Tensor:
    """Rows ``[begin, begin + size)`` of ``t`` along ``axis`` (a ``SliceAxis`` op)."""
    t = ops.convert_to_tensor(t)
    return ops._out("SliceAxis", [t], {"axis": int(axis), "begin": int(begin),
                                       "size": int(size)}, name or "SliceAxis")


def _concat_shape(op_type: str, name: str, inputs: list, attrs: dict) -> list:
    dtype = inputs[0].dtype
    if any(t.dtype != dtype for t in inputs):
        raise InvalidArgumentError(f"{op_type} op {name!r}: every input must have dtype "
                                   f"{dtype.name}, got {[t.dtype.name for t in inputs]}")
    ranks = {t.shape.rank for t in inputs if t.shape.rank is not None}
    if not ranks:
        return [(dtype, TensorShape(None))]
    if len(ranks) > 1:
        raise InvalidArgumentError(f"{op_type} op {name!r}: inputs of different ranks "
                                   f"{[str(t.shape) for t in inputs]}")
    rank = ranks.pop()
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise InvalidArgumentError(f"{op_type} op {name!r}: axis {axis} is out of range for "
                                   f"rank {rank}")
    axis %= rank
    dims: list[int | None] = [None] * rank
    total: int | None = 0
    for t in inputs:
        if t.shape.rank is None:
            total = None
            continue
        for i, d in enumerate(t.shape.dims):
            if i == axis:
                total = None if total is None or d is None else total + d
            elif d is not None:
                if dims[i] is not None and dims[i] != d:
                    raise InvalidArgumentError(
                        f"{op_type} op {name!r}: dimension {i} differs between inputs "
                        f"{[str(x.shape) for x in inputs]}")
                dims[i] = d
    dims[axis] = total
    return [(dtype, TensorShape(dims))]


def _slice_shape(op_type: str, name: str, inputs: list, attrs: dict) -> list:
    x = inputs[0]
    if x.shape.rank is None:
        return [(x.dtype, TensorShape(None))]
    dims = list(x.shape.dims)
    dims[int(attrs["axis"]) % len(dims)] = int(attrs["size"])
    return [(x.dtype, TensorShape(dims))]


INFER["ConcatV2"] = _concat_shape
INFER["SliceAxis"] = _slice_shape


@register_gradient("ConcatV2")
def _concat_grad(op: Operation, g: Tensor) -> list:
    axis = int(op.get_attr("axis"))
    sizes = [t.shape.dims[axis] if t.shape.rank is not None else None for t in op.inputs]
    if None in sizes:
        raise InvalidArgumentError(f"the gradient of {op.name} needs the inputs' sizes along "
                                   f"axis {axis} known when the graph is built")
    grads, begin = [], 0
    for size in sizes:
        grads.append(ops._out("SliceAxis", [g], {"axis": axis, "begin": begin, "size": size},
                              None))
        begin += size
    return grads
