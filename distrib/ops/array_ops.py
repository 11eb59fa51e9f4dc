"""Joining and cutting tensors along an axis: ``dt.concat`` (TF's ``tf.concat``,
a ``ConcatV2`` op) and its gradient, one ``SliceAxis`` per input. The
strategies build ``strategy.gather`` and ``ReplicaContext.all_gather`` on it."""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Operation, Tensor, name_scope
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
        return ops.op_output("ConcatV2", tensors, {"axis": int(axis)}, scope)


def slice_rows(t: Any, begin: int, size: int, axis: int = 0, name: str | None = None
               ) -> Tensor:
    """Rows ``[begin, begin + size)`` of ``t`` along ``axis`` (a ``SliceAxis`` op)."""
    t = ops.convert_to_tensor(t)
    return ops.op_output("SliceAxis", [t], {"axis": int(axis), "begin": int(begin),
                                       "size": int(size)}, name or "SliceAxis")


@register_gradient("ConcatV2")
def _concat_grad(op: Operation, g: Tensor) -> list:
    axis = int(op.get_attr("axis"))
    sizes = [t.shape.dims[axis] if t.shape.rank is not None else None for t in op.inputs]
    if None in sizes:
        raise InvalidArgumentError(f"the gradient of {op.name} needs the inputs' sizes along "
                                   f"axis {axis} known when the graph is built")
    grads, begin = [], 0
    for size in sizes:
        grads.append(ops.op_output("SliceAxis", [g], {"axis": axis, "begin": begin, "size": size},
                              None))
        begin += size
    return grads
