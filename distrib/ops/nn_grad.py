"""The gradients of the neural-network ops: activations, ``BiasAdd``, softmax
and the cross-entropies (TF's ``nn_grad.py``), and of the ops their
gradients emit (``ReluGrad``, ``BiasAddGrad``), for second order.

A gradient family, as :mod:`distrib.ops.math_grad` describes: ``GRADIENTS``
and ``NOT_DIFFERENTIABLE`` are defined here and installed into the op
catalogue by :mod:`distrib.ops.gradients`; importing this writes nothing.
Convolution, pooling and normalization gradients are :mod:`distrib.ops.conv_grad`'s.
"""
from __future__ import annotations

from typing import Callable

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.math_grad import spread_to

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


# -- activations -------------------------------------------------------------------------
def _relu_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("ReluGrad", [g, op.outputs[0]], None, "ReluGrad")]


def _relu_grad_grad(op: Operation, g: Tensor) -> list:
    # dy * (y > 0): linear in dy, piecewise constant in y
    return [ops.op_output("ReluGrad", [g, op.inputs[1]], None, "ReluGrad"), None]


# -- bias ------------------------------------------------------------------------------------
def _bias_add_grad(op: Operation, g: Tensor) -> list:
    return [g, ops.op_output("BiasAddGrad", [g], None, "BiasAddGrad")]


def _bias_add_grad_grad(op: Operation, g: Tensor) -> list:
    # the sum over every axis but the last, spread back over them
    return [spread_to(g, op.inputs[0])]


# -- softmax and the cross-entropies ----------------------------------------------------
def _softmax_grad(op: Operation, g: Tensor) -> list:
    y = op.outputs[0]
    inner = ops.reduce_sum(ops.multiply(g, y), axis=-1, keepdims=True)
    return [ops.multiply(ops.subtract(g, inner), y)]


def _log_softmax_grad(op: Operation, g: Tensor) -> list:
    softmax = ops.exp(op.outputs[0])
    return [ops.subtract(g, ops.multiply(ops.reduce_sum(g, axis=-1, keepdims=True), softmax))]


def _xent_grad(op: Operation, g_loss: Tensor | None, g_backprop: Tensor | None) -> list:
    # the labels' gradient is -log_softmax(logits), as TF's op has it (the v1
    # builder stops it with a StopGradient on the labels, as TF's does); the
    # backprop output's own gradient (second order) is not supported and ignored
    if g_loss is None:
        return [None, None]
    column = ops.reshape(g_loss, [-1, 1])
    labels_grad = ops.multiply(column, ops.negative(ops.op_output(
        "LogSoftmax", [op.inputs[0]], None, "LogSoftmax")))
    return [ops.multiply(column, op.outputs[1]), labels_grad]


def _sparse_xent_grad(op: Operation, g_loss: Tensor | None, g_backprop: Tensor | None) -> list:
    # integer labels: no gradient
    if g_loss is None:
        return [None, None]
    column = ops.reshape(g_loss, [-1, 1])
    return [ops.multiply(column, op.outputs[1]), None]


# -- the family's table -----------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "Relu": _relu_grad, "ReluGrad": _relu_grad_grad,
    "BiasAdd": _bias_add_grad, "BiasAddGrad": _bias_add_grad_grad,
    "Softmax": _softmax_grad, "LogSoftmax": _log_softmax_grad,
    "SoftmaxCrossEntropyWithLogits": _xent_grad,
    "SparseSoftmaxCrossEntropyWithLogits": _sparse_xent_grad,
}

NOT_DIFFERENTIABLE: tuple[str, ...] = ()
