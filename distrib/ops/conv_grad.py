"""The gradients of the convolution, pooling, normalization and top-k ops
(TF's ``nn_grad.py``): ``Conv2D``'s are its two backprop ops, and each
backprop's is a convolution again (so ``conv2d_transpose`` trains);
``DepthwiseConv2dNative``'s are its backprops; ``MaxPool``'s is
``MaxPoolGrad``, ``AvgPool``'s ``AvgPoolGrad`` (whose own is an ``AvgPool``);
``LRN``'s is ``LRNGrad``; ``FusedBatchNormV3``'s is ``FusedBatchNormGradV3``
(of ``y`` only, as TF's: the statistics it outputs feed moving averages, not
the loss); ``TopKV2``'s puts each value's gradient back where it was taken.

A gradient family, as :mod:`distrib.ops.math_grad` describes: ``GRADIENTS``
and ``NOT_DIFFERENTIABLE`` are defined here and installed into the op
catalogue by :mod:`distrib.ops.gradients`; importing this writes nothing.
The gradient ops (``MaxPoolGrad``, ``LRNGrad``, ``FusedBatchNormGradV3``, the
depthwise backprops) have no gradient of their own: a second derivative
through them is a ``NotFoundError`` naming the op, never a silent zero.

Each backprop op gets the forward op's attrs, and the shape it must produce
as a constant when the shape is static, else as a ``Shape`` of the forward
input (the shape functions read either).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]

_CONV = ("strides", "padding", "explicit_paddings", "data_format", "dilations",
         "use_cudnn_on_gpu")
_POOL = ("ksize", "strides", "padding", "explicit_paddings", "data_format")
_LRN = ("depth_radius", "bias", "alpha", "beta")


def _attrs(op: Operation, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: op.attrs[k] for k in keys if k in op.attrs}


def _shape_of(t: Tensor) -> Tensor:
    """``t``'s shape as an int32 vector: a constant when it is static."""
    if t.shape.is_fully_defined():
        return ops.constant(t.shape.as_list(), dtype=dtypes.int32, name="Shape")
    return ops.shape(t)


# -- convolutions ------------------------------------------------------------------------------
def _conv2d_grad(op: Operation, g: Tensor) -> list:
    x, f = op.inputs
    attrs = _attrs(op, _CONV)
    return [ops.op_output("Conv2DBackpropInput", [_shape_of(x), f, g], attrs,
                          "Conv2DBackpropInput"),
            ops.op_output("Conv2DBackpropFilter", [x, _shape_of(f), g], attrs,
                          "Conv2DBackpropFilter")]


def _conv2d_backprop_input_grad(op: Operation, g: Tensor) -> list:
    # out_backprop -> input is linear: its adjoint is the forward convolution
    _, f, dy = op.inputs
    attrs = _attrs(op, _CONV)
    return [None,
            ops.op_output("Conv2DBackpropFilter", [g, _shape_of(f), dy], attrs,
                          "Conv2DBackpropFilter"),
            ops.op_output("Conv2D", [g, f], attrs, "Conv2D")]


def _conv2d_backprop_filter_grad(op: Operation, g: Tensor) -> list:
    x, _, dy = op.inputs
    attrs = _attrs(op, _CONV)
    return [ops.op_output("Conv2DBackpropInput", [_shape_of(x), g, dy], attrs,
                          "Conv2DBackpropInput"),
            None,
            ops.op_output("Conv2D", [x, g], attrs, "Conv2D")]


def _depthwise_grad(op: Operation, g: Tensor) -> list:
    x, f = op.inputs
    attrs = _attrs(op, _CONV)
    return [ops.op_output("DepthwiseConv2dNativeBackpropInput", [_shape_of(x), f, g], attrs,
                          "DepthwiseConv2dNativeBackpropInput"),
            ops.op_output("DepthwiseConv2dNativeBackpropFilter", [x, _shape_of(f), g], attrs,
                          "DepthwiseConv2dNativeBackpropFilter")]


# -- pooling and LRN ------------------------------------------------------------------------
def _max_pool_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("MaxPoolGrad", [op.inputs[0], op.outputs[0], g], _attrs(op, _POOL),
                          "MaxPoolGrad")]


def _avg_pool_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("AvgPoolGrad", [_shape_of(op.inputs[0]), g], _attrs(op, _POOL),
                          "AvgPoolGrad")]


def _avg_pool_grad_grad(op: Operation, g: Tensor) -> list:
    return [None, ops.op_output("AvgPool", [g], _attrs(op, _POOL), "AvgPool")]


def _lrn_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("LRNGrad", [g, op.inputs[0], op.outputs[0]], _attrs(op, _LRN),
                          "LRNGrad")]


# -- batch norm ---------------------------------------------------------------------------------
def _fused_batch_norm_grad(op: Operation, g_y: Tensor | None, *_stats: Any) -> list:
    if g_y is None:
        return [None] * 5
    x, scale, _, mean, variance = op.inputs
    training = bool(op.attrs.get("is_training", True))
    # training: the batch's statistics the forward kept; inference: the given ones
    rs1, rs2 = (op.outputs[3], op.outputs[4]) if training else (mean, variance)
    attrs = {"epsilon": op.attrs.get("epsilon", 1e-4),
             "data_format": op.attrs.get("data_format", "NHWC"), "is_training": training}
    grad = ops.make_op("FusedBatchNormGradV3", [g_y, x, scale, rs1, rs2, op.outputs[5]], attrs,
                       "FusedBatchNormGradV3")
    return [grad.outputs[0], grad.outputs[1], grad.outputs[2], None, None]


# -- top k ----------------------------------------------------------------------------------------
def _top_k_grad(op: Operation, g_values: Tensor | None, g_indices: Tensor | None) -> list:
    """Each value's gradient back at its column: a one-hot of the indices
    ([rows, k, n]) weighted by the gradient and summed over k."""
    if g_values is None:
        return [None, None]
    x, indices = op.inputs[0], op.outputs[1]
    n, k = x.shape[-1], indices.shape[-1]
    if n is None or k is None:
        raise InvalidArgumentError(f"the gradient of {op.name} needs the input's last dimension "
                                   f"and k known when the graph is built (input {x.shape}, "
                                   f"indices {indices.shape})")
    columns = ops.constant(np.arange(n), dtype=indices.dtype, name="columns")
    onehot = ops.cast(ops.equal(ops.reshape(indices, [-1, k, 1]), columns), g_values.dtype)
    rows = ops.reduce_sum(ops.multiply(onehot, ops.reshape(g_values, [-1, k, 1])), axis=1)
    dims = x.shape.as_list()
    back = ops.reshape(rows, [-1 if d is None else d for d in dims]) \
        if sum(d is None for d in dims) <= 1 else ops.reshape(rows, ops.shape(x))
    return [back, None]


# -- the family's table ---------------------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "Conv2D": _conv2d_grad,
    "Conv2DBackpropInput": _conv2d_backprop_input_grad,
    "Conv2DBackpropFilter": _conv2d_backprop_filter_grad,
    "DepthwiseConv2dNative": _depthwise_grad,
    "MaxPool": _max_pool_grad, "AvgPool": _avg_pool_grad, "AvgPoolGrad": _avg_pool_grad_grad,
    "LRN": _lrn_grad,
    "FusedBatchNormV3": _fused_batch_norm_grad,
    "TopKV2": _top_k_grad,
}

NOT_DIFFERENTIABLE: tuple[str, ...] = ("InTopKV2",)
