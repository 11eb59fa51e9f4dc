"""``dt.broadcast_to``: a tensor broadcast to a shape by numpy's rules (TF's
``tf.broadcast_to``, op ``BroadcastTo``; its kernel in
kernels/cpu/image_boxes.py, its entry in distrib.framework.image_box_shapes).

The shape is an input, as TF's, so ``broadcast_to(means, dt.shape(image))``
works when the image's size is known only at run time (ResNet's ImageNet
preprocessing subtracts its channel means so; in its dataset function the
op runs at once, as every op built there on values, see
:mod:`distrib.ops.value_mode`). The gradient sums the broadcast dimensions
back to the input's shape (``SumToShapeOf``).
"""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops

__all__ = ["broadcast_to", "GRADIENTS", "NOT_DIFFERENTIABLE"]


def broadcast_to(input: Any, shape: Any, name: str | None = None) -> Any:  # noqa: A002 - TF's
    """``input`` repeated along new or size-1 dimensions to ``shape`` (TF's)."""
    x = ops.convert_to_tensor(input)
    target = ops.convert_to_tensor(shape)
    if not target.dtype.is_integer:
        target = ops.convert_to_tensor(shape, dtype=dtypes.int32)
    return ops.op_output("BroadcastTo", [x, target], None, name or "BroadcastTo")


def _broadcast_to_grad(op: Operation, grad: Tensor) -> list:
    x = op.inputs[0]
    return [ops.op_output("SumToShapeOf", [grad, x], None, "SumToShapeOf"), None]


GRADIENTS: dict[str, Any] = {"BroadcastTo": _broadcast_to_grad}
NOT_DIFFERENTIABLE: tuple[str, ...] = ()
