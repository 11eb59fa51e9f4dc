"""The gradients of the array ops: identity, reshaping, transposing, joining
(TF's ``array_grad.py``), and the sources and shape readers gradients stop at.

A gradient family, as :mod:`distrib.ops.math_grad` describes: ``GRADIENTS``
and ``NOT_DIFFERENTIABLE`` are defined here and installed into the op
catalogue by :mod:`distrib.ops.gradients`; importing this writes nothing.
Gather, slicing, padding and tiling gradients belong here.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Operation, Tensor
from distrib.ops import array_ops
from distrib.ops import math_ops as ops

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


def _identity_grad(op: Operation, g: Tensor) -> list:
    return [g]


def _reshape_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    dims = x.shape.as_list()
    if dims is not None and sum(d is None for d in dims) <= 1:
        back = ops.reshape(g, [-1 if d is None else d for d in dims])
    else:
        back = ops.reshape(g, ops.shape(x))  # several unknown dims: the shape at run time
    return [back] + [None] * (len(op.inputs) - 1)


def _transpose_grad(op: Operation, g: Tensor) -> list:
    perm = op.get_attr("perm")
    inverse = None if perm is None else [int(i) for i in np.argsort(perm)]
    return [ops.transpose(g, inverse)]


def _concat_grad(op: Operation, g: Tensor) -> list:
    """One ``SliceAxis`` of ``g`` per input, at the input's offset along the axis."""
    axis = int(op.get_attr("axis"))
    sizes = [t.shape.dims[axis] if t.shape.rank is not None else None for t in op.inputs]
    if None in sizes:
        raise InvalidArgumentError(f"the gradient of {op.name} needs the inputs' sizes along "
                                   f"axis {axis} known when the graph is built")
    grads, begin = [], 0
    for size in sizes:
        grads.append(array_ops.slice_rows(g, begin, size, axis=axis))
        begin += size
    return grads


# -- the family's table -----------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "Identity": _identity_grad, "Reshape": _reshape_grad, "Transpose": _transpose_grad,
    "ConcatV2": _concat_grad, "ExpandDims": _reshape_grad,
}

# sources (nothing flows into them), readers of a shape only, and StopGradient
NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "Const", "Placeholder", "Zeros", "Ones", "RandomStandardNormal", "RandomUniform",
    "ZerosLike", "OnesLike", "Shape", "StopGradient",
)
