"""Neural-network ops: ``dt.nn.relu``, ``dt.nn.softmax_cross_entropy_with_logits`` ...

Thin builders over the op catalogue (docs/ops.md) with TF1 signatures. The
convolutional families live in their own modules and are re-exported here,
so ``dt.nn`` is one namespace: convolutions (:mod:`distrib.ops.nn_conv`),
pooling (``nn_pool``), normalization (``nn_norm``) and the classifier's
helpers (``nn_classification``). The
cross-entropy ops compute the loss and its gradient (``softmax - labels``) in
one kernel; the builders return the loss (output 0) and the gradient function
uses output 1, so backprop costs no second softmax. As in
``tf.compat.v1.nn.softmax_cross_entropy_with_logits``, labels get no gradient.

``dropout`` is TF 1.15's (``keep_prob`` or ``rate``; the kept values scaled by
``1 / keep_prob``) built from existing ops: a ``RandomUniform`` draw of the
noise shape, ``>= rate``, a cast and two multiplies. When the shape is known
only at run time (a batch of ``None`` rows), the draw takes it as an input
(``Shape`` of ``x``), as TF's ``RandomUniform`` does.
"""
from __future__ import annotations

import logging
import numbers
from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import Tensor, get_default_graph, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.math_ops import sigmoid, tanh  # noqa: F401 - dt.nn.sigmoid, dt.nn.tanh
from distrib.ops.nn_activations import (  # noqa: F401 - re-exported
    crelu,
    elu,
    gelu,
    leaky_relu,
    relu6,
    selu,
    silu,
    softplus,
    softsign,
    swish,
)
from distrib.ops.nn_classification import (  # noqa: F401 - re-exported
    in_top_k,
    sigmoid_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2,
    top_k,
    xw_plus_b,
    zero_fraction,
)
from distrib.ops.nn_conv import (  # noqa: F401 - re-exported
    NNArgumentError,
    conv2d,
    conv2d_backprop_filter,
    conv2d_backprop_input,
    conv2d_transpose,
    depthwise_conv2d,
    depthwise_conv2d_native,
    depthwise_conv2d_native_backprop_filter,
    depthwise_conv2d_native_backprop_input,
    separable_conv2d,
)
from distrib.ops.nn_norm import (  # noqa: F401 - re-exported
    batch_normalization,
    fused_batch_norm,
    l2_normalize,
    local_response_normalization,
    lrn,
    moments,
)
from distrib.ops.nn_pool import avg_pool, avg_pool2d, max_pool, max_pool2d  # noqa: F401
from distrib.ops.nn_regularization import scale_regularization_loss  # noqa: F401

__all__ = [
    "relu", "sigmoid", "tanh", "softmax", "log_softmax", "bias_add",
    "softmax_cross_entropy_with_logits", "sparse_softmax_cross_entropy_with_logits",
    "l2_loss", "compute_average_loss", "scale_regularization_loss", "dropout", "DropoutArgumentError",
    # nn_conv, nn_pool, nn_norm, nn_classification
    "conv2d", "conv2d_transpose", "conv2d_backprop_input", "conv2d_backprop_filter",
    "depthwise_conv2d", "depthwise_conv2d_native", "depthwise_conv2d_native_backprop_input",
    "depthwise_conv2d_native_backprop_filter", "separable_conv2d", "NNArgumentError",
    "max_pool", "max_pool2d", "avg_pool", "avg_pool2d",
    "lrn", "local_response_normalization", "fused_batch_norm", "moments",
    "batch_normalization", "l2_normalize",
    "top_k", "in_top_k", "sigmoid_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "xw_plus_b", "zero_fraction",
    # nn_activations (issue 39)
    "elu", "selu", "gelu", "leaky_relu", "relu6", "silu", "swish", "softplus", "softsign", "crelu",
]

logger = logging.getLogger(__name__)


class DropoutArgumentError(InvalidArgumentError, ValueError):
    """A bad argument to ``dt.nn.dropout``. It is also a ``ValueError``, which is what
    TF raises, so ported ``except ValueError`` code keeps working."""


def relu(features: Any, name: str | None = None) -> Tensor:
    return ops.unary_op("Relu", features, name)


def _last_axis_only(op: str, logits: Tensor, axis: Any) -> None:
    rank = logits.shape.rank
    if axis is None or axis == -1 or (rank is not None and axis == rank - 1):
        return
    raise InvalidArgumentError(f"{op}: only the last axis is supported (got axis={axis} for "
                               f"logits {logits.shape}); transpose the axis to the end first")


def softmax(logits: Any, axis: Any = None, name: str | None = None, dim: Any = None) -> Tensor:
    logits = ops.convert_operand(logits)
    _last_axis_only("softmax", logits, dim if axis is None else axis)
    return ops.op_output("Softmax", [logits], None, name or "Softmax")


def log_softmax(logits: Any, axis: Any = None, name: str | None = None, dim: Any = None) -> Tensor:
    logits = ops.convert_operand(logits)
    _last_axis_only("log_softmax", logits, dim if axis is None else axis)
    return ops.op_output("LogSoftmax", [logits], None, name or "LogSoftmax")


def bias_add(value: Any, bias: Any, data_format: str | None = None,
             name: str | None = None) -> Tensor:
    """``value + bias``, ``bias`` along the channel axis: the last one (``NHWC``,
    the default), or axis 1 (``NCHW``, ``NC...``: a ``[C, 1, ...]`` view of
    ``bias`` added by broadcasting, whose gradient is the sum over the rest)."""
    if data_format not in (None, "NHWC", "N...C", "NCHW", "NC..."):
        raise InvalidArgumentError(f"bias_add: data_format {data_format!r} is not supported; "
                                   "use 'NHWC' (channels last) or 'NCHW' (channels first)")
    value, bias = ops.convert_pair(value, bias)
    if data_format in ("NCHW", "NC..."):
        rank = value.shape.rank
        if rank is None or rank < 3 or bias.shape.rank != 1:
            raise InvalidArgumentError(f"bias_add with data_format {data_format!r} needs a "
                                       f"value of known rank >= 3 and a vector bias; got "
                                       f"value {value.shape}, bias {bias.shape}")
        channels, n = value.shape.dims[1], bias.shape.dims[0]
        if channels is not None and n is not None and channels != n:
            raise InvalidArgumentError(f"bias_add: bias length {n} != dimension 1 of value "
                                       f"(NCHW): value {value.shape}, bias {bias.shape}")
        with name_scope(name, "BiasAdd", [value, bias]) as scope:
            return ops.add(value, ops.reshape(bias, [-1] + [1] * (rank - 2)), name=scope)
    return ops.op_output("BiasAdd", [value, bias], None, name or "BiasAdd")


def _keywords_only(fn: str, sentinel: Any, labels: Any, logits: Any) -> None:
    if sentinel is not None:
        raise InvalidArgumentError(f"{fn} takes only named arguments: "
                                   f"{fn}(labels=..., logits=...)")
    if labels is None or logits is None:
        raise InvalidArgumentError(f"{fn} needs both labels= and logits=")


def softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None,
                                      logits: Any = None, dim: int = -1,
                                      name: str | None = None, axis: Any = None) -> Tensor:
    """Per-example loss ``-sum(labels * log_softmax(logits), -1)``, shape [batch]."""
    fn = "softmax_cross_entropy_with_logits"
    _keywords_only(fn, _sentinel, labels, logits)
    logits = ops.convert_operand(logits)
    _last_axis_only(fn, logits, dim if axis is None else axis)
    with logits.graph.as_default():
        labels = ops.convert_to_tensor(labels, dtype=logits.dtype)
        if labels.op.type != "Const":   # TF1: the labels get no gradient
            labels = ops.stop_gradient(labels)
    op = ops.make_op("SoftmaxCrossEntropyWithLogits", [logits, labels], None,
                   name or "SoftmaxCrossEntropyWithLogits")
    return op.outputs[0]


def sparse_softmax_cross_entropy_with_logits(_sentinel: Any = None, labels: Any = None,
                                             logits: Any = None, name: str | None = None) -> Tensor:
    """Per-example loss with integer class labels (shape [batch]); returns shape [batch]."""
    _keywords_only("sparse_softmax_cross_entropy_with_logits", _sentinel, labels, logits)
    logits = ops.convert_operand(logits)
    with logits.graph.as_default():
        labels = ops.convert_to_tensor(labels)
    op = ops.make_op("SparseSoftmaxCrossEntropyWithLogits", [logits, labels], None,
                   name or "SparseSoftmaxCrossEntropyWithLogits")
    return op.outputs[0]


def l2_loss(t: Any, name: str | None = None) -> Tensor:
    """``sum(t ** 2) / 2``."""
    t = ops.convert_operand(t)
    with name_scope(name, "L2Loss", [t]) as scope:
        return ops.multiply(ops.reduce_sum(ops.square(t)), 0.5, name=scope)



def compute_average_loss(per_example_loss: Any, sample_weight: Any = None,
                         global_batch_size: Any = None) -> Tensor:
    """``sum(per_example_loss * sample_weight) / global_batch_size`` (TF's).

    Inside ``strategy.run`` each replica sees its part of the global batch and
    the strategy sums the replicas' gradients, so each replica divides by the
    *global* batch size; ``global_batch_size=None`` takes this replica's batch
    (the first dimension of ``per_example_loss``) times the replicas in sync."""
    loss = ops.convert_operand(per_example_loss)
    with name_scope(None, "compute_average_loss", [loss]) as scope:
        if sample_weight is not None:
            loss = ops.multiply(loss, ops.cast(ops.convert_operand(sample_weight), loss.dtype))
        total = ops.reduce_sum(loss)
        if global_batch_size is None:
            replicas = distribution_context.num_replicas_in_sync()
            rows = loss.shape[0] if loss.shape.ndims else None
            if rows is not None and getattr(rows, "value", rows) is not None:
                # (an empty last batch sums to 0: any positive divisor gives TF's 0)
                global_batch_size = max(int(getattr(rows, "value", rows)) * replicas, 1)
            else:   # the rows counted at run time (the other dimensions known, or none)
                rest = [d for d in (loss.shape.dims or [])[1:]]
                per_row = 1
                for d in rest:
                    per_row *= int(getattr(d, "value", d) or 1)
                rows = ops.divide(ops.reduce_sum(ops.ones_like(loss)), float(per_row))
                global_batch_size = ops.multiply(rows, float(replicas))
        if isinstance(global_batch_size, (int, float)):
            if global_batch_size <= 0:
                raise InvalidArgumentError(f"global_batch_size must be positive, got "
                                           f"{global_batch_size}")
            global_batch_size = float(global_batch_size)
        return ops.divide(total, ops.cast(ops.convert_operand(global_batch_size), loss.dtype)
                          if not isinstance(global_batch_size, float) else global_batch_size,
                          name=scope)


def dropout(x: Any, keep_prob: Any = None, noise_shape: Any = None, seed: int | None = None,
            name: str | None = None, rate: Any = None) -> Tensor:
    """``dt.nn.dropout(x, keep_prob=None, noise_shape=None, seed=None, name=None,
    rate=None)`` (TF1's signature): each element of ``x`` (or each slice along the
    dimensions where ``noise_shape`` is 1) is kept with probability ``1 - rate``
    and scaled by ``1 / (1 - rate)``, else zeroed. Give exactly one of
    ``keep_prob`` and ``rate`` (``rate = 1 - keep_prob``); either may be a scalar
    tensor (a placeholder fed 1.0 at evaluation, say)."""
    try:
        keep = 1.0 - keep_prob if keep_prob is not None else None
    except TypeError:
        raise DropoutArgumentError(f"keep_prob must be a floating point number or Tensor "
                                   f"(got {keep_prob!r})") from None
    if keep is not None:
        if rate is not None:
            raise DropoutArgumentError("Cannot specify both 'keep_prob' and 'rate'")
        rate = keep
    if rate is None:
        raise DropoutArgumentError("You must provide a rate to dropout.")
    return _dropout_v2(x, rate, noise_shape, seed, name)


def _dropout_v2(x: Any, rate: Any, noise_shape: Any, seed: int | None,
                name: str | None) -> Tensor:
    x = ops.convert_operand(x)
    with name_scope(name, "dropout", [x]):
        if not x.dtype.is_floating:
            raise DropoutArgumentError(
                "x has to be a floating point tensor since it's going to be scaled. Got a "
                f"{x.dtype.name} tensor instead.")
        if isinstance(rate, numbers.Real):
            if not 0 <= rate < 1:
                raise DropoutArgumentError(f"rate must be a scalar tensor or a float in the "
                                           f"range [0, 1), got {rate:g}")
            if rate > 0.5:
                logger.warning("Large dropout rate: %g (>0.5). In TensorFlow 2.x, dropout() "
                               "uses dropout rate instead of keep_prob. Please ensure that "
                               "this is intended.", rate)
            if rate == 0:
                return x
        rate_t = ops.convert_to_tensor(rate, dtype=x.dtype, name="rate")
        if rate_t.shape.rank not in (None, 0):
            raise DropoutArgumentError(f"rate must be a scalar, got shape {rate_t.shape}")
        draw = _uniform_draw(x, noise_shape, seed)
        scale = ops.divide(1.0, ops.subtract(1.0, rate_t))
        keep_mask = ops.cast(ops.greater_equal(draw, rate_t), x.dtype)
        return ops.multiply(ops.multiply(x, scale), keep_mask)


def _uniform_draw(x: Tensor, noise_shape: Any, seed: int | None) -> Tensor:
    """``U[0, 1)`` of the noise shape: ``x``'s where not given, dimensions of
    ``noise_shape`` left None filled from ``x``'s (TF's ``_get_noise_shape``)."""
    if ops.is_tensor(noise_shape):
        shape_t = ops.convert_to_tensor(noise_shape)
        n = shape_t.shape.as_list()[0] if shape_t.shape.rank == 1 else None
        return _dynamic_uniform(shape_t, None if n is None else [None] * n, x.dtype, seed)
    if noise_shape is None:
        known = x.shape
    else:
        known = TensorShape(noise_shape)
        if known.rank is not None and known.rank == x.shape.rank:
            known = TensorShape([n if n is not None else d
                                 for n, d in zip(known.as_list(), x.shape.as_list())])
        if not known.is_fully_defined():
            raise DropoutArgumentError(
                f"noise_shape {list(noise_shape)} has dimensions that x {x.shape} does not "
                "know either; give them, or pass noise_shape as a tensor")
    if known.is_fully_defined():
        return ops.random_uniform(known.as_list(), dtype=x.dtype, seed=seed)
    return _dynamic_uniform(ops.shape(x), known.as_list(), x.dtype, seed)


def _dynamic_uniform(shape_t: Tensor, known: list | None, dtype: Any, seed: int | None) -> Tensor:
    """A ``RandomUniform`` whose shape is the tensor ``shape_t`` (``known``: what is
    known of it, for the graph's static shapes)."""
    graph = get_default_graph()
    if seed is None and graph.seed is not None:   # as math_ops.random_uniform derives it
        seed = (int(graph.seed) * 1_000_003 + len(graph)) % (2**31 - 1)
    attrs = {"shape": known, "dtype": dtypes.as_dtype(dtype), "minval": 0.0, "maxval": 1.0,
             "seed": None if seed is None else int(seed)}
    return ops.op_output("RandomUniform", [ops.cast(shape_t, dtypes.int32)], attrs,
                         "random_uniform")
