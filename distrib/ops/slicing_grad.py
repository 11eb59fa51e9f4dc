"""The gradients of cutting, padding, reversing and choosing (TF's
``array_grad.py`` for ``StridedSlice``, ``Slice``, ``Pad``, ``ReverseV2``,
``SelectV2``) and of the image op ``AdjustContrastv2``; ``DecodeRaw`` and ``RandomShuffle`` stop
gradients, as TF's.

A gradient family, as :mod:`distrib.ops.math_grad` describes: ``GRADIENTS``
and ``NOT_DIFFERENTIABLE`` are defined here and installed into the op
catalogue by :mod:`distrib.ops.gradients`; importing this writes nothing.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Operation, Tensor
from distrib.ops import array_ops
from distrib.ops import math_ops as ops
from distrib.ops.math_grad import sum_to

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


def _strided_slice_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.op_output("StridedSliceGrad", [g, x], dict(op.attrs), "StridedSliceGrad")]


def _slice_grad(op: Operation, g: Tensor) -> list:
    """``g`` padded back to the input's shape (TF's: a Pad)."""
    x = op.inputs[0]
    dims = x.shape.as_list()
    size = list(op.get_attr("size"))
    if dims is None or None in dims:
        raise InvalidArgumentError(f"the gradient of {op.name} needs its input's shape known "
                                   "when the graph is built")
    if len(op.inputs) == 1:   # a static begin
        begin = [int(b) for b in op.get_attr("begin")]
        size = [d - b if s == -1 else s for d, b, s in zip(dims, begin, size)]
        pads = [[b, d - b - s] for d, b, s in zip(dims, begin, size)]
        return [ops.op_output("Pad", [g], {"paddings": pads}, "Pad")]
    if -1 in size:
        raise InvalidArgumentError(f"the gradient of {op.name} needs its size without -1 when "
                                   "begin is a tensor")
    begin = op.inputs[1]
    rank = len(dims)
    after = ops.subtract(ops.constant(np.array(dims, np.int32) - np.array(size, np.int32)),
                         begin)
    pads = array_ops.concat([ops.reshape(begin, [rank, 1]), ops.reshape(after, [rank, 1])], 1)
    out = g.graph.create_op("Pad", [g, pads], {"paddings": None}, "Pad",
                            output_specs=[(g.dtype, x.shape)])
    return [out.outputs[0], None]


def _pad_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    dims = x.shape.as_list()
    if dims is None or None in dims or len(op.inputs) > 1:
        raise InvalidArgumentError(f"the gradient of {op.name} needs its input's shape and "
                                   "paddings known when the graph is built")
    begin = [int(a) for a, _ in op.get_attr("paddings")]
    return [ops.op_output("Slice", [g], {"begin": begin, "size": dims}, "Slice")]


def _reverse_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("ReverseV2", [g], {"axis": list(op.get_attr("axis"))}, "ReverseV2")]


def _select_grad(op: Operation, g: Tensor) -> list:
    cond, t, e = op.inputs
    zeros = ops.zeros_like(g)
    on_t = ops.op_output("SelectV2", [cond, g, zeros], None, "SelectV2")
    on_e = ops.op_output("SelectV2", [cond, zeros, g], None, "SelectV2")
    return [None, sum_to(on_t, t), sum_to(on_e, e)]


def _adjust_contrast_grad(op: Operation, g: Tensor) -> list:
    """``y = (x - m) * f + m`` with ``m`` the mean over height and width:
    ``dx = f * g + (1 - f) * mean(g)``, ``df = sum(g * (x - m))``."""
    x, factor = op.inputs
    rank = x.shape.rank
    if rank is None:
        raise InvalidArgumentError(f"the gradient of {op.name} needs its input's rank")
    axes = [rank - 3, rank - 2]
    f = ops.cast(factor, x.dtype)
    mean_g = ops.reduce_mean(g, axis=axes, keepdims=True)
    dx = ops.add(ops.multiply(g, f), ops.multiply(mean_g, ops.subtract(1.0, f)))
    centered = ops.subtract(x, ops.reduce_mean(x, axis=axes, keepdims=True))
    df = ops.cast(ops.reduce_sum(ops.multiply(g, centered)), factor.dtype)
    return [dx, df]


# -- the family's table -----------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "StridedSlice": _strided_slice_grad, "Slice": _slice_grad, "Pad": _pad_grad,
    "ReverseV2": _reverse_grad, "SelectV2": _select_grad,
    "AdjustContrastv2": _adjust_contrast_grad,
}

NOT_DIFFERENTIABLE: tuple[str, ...] = ("DecodeRaw", "RandomShuffle")
