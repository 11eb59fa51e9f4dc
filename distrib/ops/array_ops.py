"""Joining and cutting tensors along an axis: ``dt.concat`` (TF's ``tf.concat``,
a ``ConcatV2`` op) and ``slice_rows`` (a ``SliceAxis``), which its gradient
(:mod:`distrib.ops.array_grad`) is made of; ``dt.expand_dims`` (an
``ExpandDims``: an axis of size 1, how the CIFAR-10 tutorial's
``average_gradients`` stacks its towers' gradients). The strategies build
``strategy.gather`` and ``ReplicaContext.all_gather`` on them."""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Tensor, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops

__all__ = ["concat", "expand_dims", "slice_rows"]


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


def expand_dims(input: Any, axis: int, name: str | None = None) -> Tensor:  # noqa: A002 - TF's name
    """``input`` with a dimension of size 1 inserted at ``axis`` (TF's ``tf.expand_dims``;
    ``axis`` may be negative, counted from the end of the result)."""
    x = ops.convert_to_tensor(input)
    axis = int(axis)
    dims = x.shape.as_list()
    if dims is not None:
        if not -len(dims) - 1 <= axis <= len(dims):
            raise InvalidArgumentError(f"dt.expand_dims: axis {axis} is out of range for a "
                                       f"rank-{len(dims)} tensor (use -{len(dims) + 1}..{len(dims)})")
        where = axis if axis >= 0 else len(dims) + 1 + axis
        dims = dims[:where] + [1] + dims[where:]
    out = TensorShape(dims)
    return x.graph.create_op("ExpandDims", [x], {"axis": axis}, name or "ExpandDims",
                             output_specs=[(x.dtype, out)]).outputs[0]


def slice_rows(t: Any, begin: int, size: int, axis: int = 0, name: str | None = None
               ) -> Tensor:
    """Rows ``[begin, begin + size)`` of ``t`` along ``axis`` (a ``SliceAxis`` op)."""
    t = ops.convert_to_tensor(t)
    return ops.op_output("SliceAxis", [t], {"axis": int(axis), "begin": int(begin),
                                       "size": int(size)}, name or "SliceAxis")

