"""The classifier's helpers that CIFAR-10's model and Keras CNNs call:
``dt.nn.top_k``, ``in_top_k``, ``sigmoid_cross_entropy_with_logits``,
``softmax_cross_entropy_with_logits_v2``, ``xw_plus_b`` and ``zero_fraction``
(TF's ``nn_ops.py`` and ``nn_impl.py``, ``tf.compat.v1`` signatures).

``top_k`` and ``in_top_k`` are TF's ``TopKV2`` and ``InTopKV2`` (``k`` an
input, as TF's); the rest are composites of existing ops.
``sigmoid_cross_entropy_with_logits`` is TF's stable form
``max(x, 0) - x * z + log(1 + exp(-|x|))``, built with a ``x >= 0`` mask as
TF builds it with ``where``, so its gradient at ``x == 0`` is TF's
``sigmoid(0) - z``. ``softmax_cross_entropy_with_logits_v2`` differs from
the v1 builder in one way, TF's: the labels get a gradient.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.nn_conv import NNArgumentError, pick

__all__ = ["top_k", "in_top_k", "sigmoid_cross_entropy_with_logits",
           "softmax_cross_entropy_with_logits_v2", "xw_plus_b", "zero_fraction"]


def top_k(input: Any, k: Any = 1, sorted: bool = True,  # noqa: A002 - TF's names
          name: str | None = None, index_type: Any = dtypes.int32) -> tuple[Tensor, Tensor]:
    """``(values, indices)`` of the ``k`` largest entries of each last-axis row
    (ties to the lower index; a ``TopKV2`` op)."""
    with name_scope(name, "TopKV2", [input]) as scope:
        x = ops.convert_operand(input)
        k_t = ops.cast(ops.convert_to_tensor(k), dtypes.int32) if ops.is_tensor(k) else \
            ops.constant(int(k), dtype=dtypes.int32, name="k")
        op = ops.make_op("TopKV2", [x, k_t], {"sorted": bool(sorted),
                                              "index_type": dtypes.as_dtype(index_type)}, scope)
        return op.outputs[0], op.outputs[1]


def in_top_k(predictions: Any, targets: Any, k: Any, name: str | None = None) -> Tensor:
    """Whether each ``targets[i]`` is among the ``k`` largest ``predictions[i]``
    (TF1's argument order; a target whose prediction ties the k-th is in; an
    ``InTopKV2`` op)."""
    with name_scope(name, "in_top_k", [predictions, targets]) as scope:
        p = ops.convert_operand(predictions)
        t = ops.convert_to_tensor(targets)
        k_t = ops.cast(ops.convert_to_tensor(k), t.dtype) if ops.is_tensor(k) else \
            ops.constant(int(k), dtype=t.dtype, name="k")
        return ops.op_output("InTopKV2", [p, t, k_t], None, scope)


def sigmoid_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None,
                                      logits: Any = None, name: str | None = None) -> Tensor:
    """Elementwise ``-z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x))`` of labels
    ``z`` and logits ``x``, in TF's overflow-free form."""
    if _sentinel is not None:
        raise NNArgumentError("sigmoid_cross_entropy_with_logits takes only named arguments: "
                              "(labels=..., logits=...)")
    if labels is None or logits is None:
        raise NNArgumentError("sigmoid_cross_entropy_with_logits needs both labels= and logits=")
    with name_scope(name, "logistic_loss", [logits, labels]) as scope:
        x = ops.convert_operand(logits)
        z = ops.convert_to_tensor(labels, dtype=x.dtype)
        if not z.shape.is_compatible_with(x.shape):
            raise NNArgumentError(f"logits and labels must have the same shape ({x.shape} vs "
                                  f"{z.shape})")
        positive = ops.cast(ops.greater_equal(x, 0.0), x.dtype)
        relu_logits = ops.multiply(x, positive)                    # where(x >= 0, x, 0)
        neg_abs = ops.subtract(x, ops.multiply(relu_logits, 2.0))  # where(x >= 0, -x, x)
        return ops.add(ops.subtract(relu_logits, ops.multiply(x, z)),
                       ops.log(ops.add(ops.exp(neg_abs), 1.0)), name=scope)


def softmax_cross_entropy_with_logits_v2(labels: Any, logits: Any, axis: Any = None,
                                         name: str | None = None, dim: Any = None) -> Tensor:
    """Per-example ``-sum(labels * log_softmax(logits))`` over the last axis; the
    labels get a gradient (``-log_softmax(logits)``), unlike the v1 builder's."""
    axis = pick("axis", axis, "dim", dim)
    with name_scope(name, "softmax_cross_entropy_with_logits", [logits, labels]) as scope:
        x = ops.convert_operand(logits)
        z = ops.convert_to_tensor(labels, dtype=x.dtype)
        rank = x.shape.rank
        if axis not in (None, -1) and (rank is None or axis != rank - 1):
            raise InvalidArgumentError(f"softmax_cross_entropy_with_logits_v2: only the last "
                                       f"axis is supported (got axis={axis} for logits "
                                       f"{x.shape}); transpose the axis to the end first")
        if rank == 2 or rank is None:
            return ops.make_op("SoftmaxCrossEntropyWithLogits", [x, z], None,
                               scope).outputs[0]
        lead, classes = x.shape.as_list()[:-1], x.shape.as_list()[-1]
        if classes is None or sum(d is None for d in lead) > 1:
            raise InvalidArgumentError(f"softmax_cross_entropy_with_logits_v2: logits {x.shape} "
                                       "have an unknown class count or several unknown "
                                       "leading dimensions; reshape them "
                                       "to [batch, classes] first")
        rows = [ops.reshape(x, [-1, classes]), ops.reshape(z, [-1, classes])]
        loss = ops.make_op("SoftmaxCrossEntropyWithLogits", rows, None, "xent").outputs[0]
        return ops.reshape(loss, [-1 if d is None else d for d in lead], name=scope)


def xw_plus_b(x: Any, weights: Any, biases: Any, name: str | None = None) -> Tensor:
    """``matmul(x, weights) + biases`` (a ``MatMul`` and a ``BiasAdd``)."""
    with name_scope(name, "xw_plus_b", [x, weights, biases]) as scope:
        mm = ops.matmul(x, weights)
        return ops.op_output("BiasAdd", list(ops.convert_pair(mm, biases)), None, scope)


def zero_fraction(value: Any, name: str | None = None) -> Tensor:
    """The fraction of ``value``'s elements that are zero, a float32 scalar
    (cifar10.py's activation summaries)."""
    with name_scope(name, "zero_fraction", [value]) as scope:
        v = ops.convert_operand(value)
        zero = ops.cast(ops.equal(v, 0), dtypes.float32)
        return ops.reduce_mean(zero, name=scope)
