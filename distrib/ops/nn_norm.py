"""Normalization: ``dt.nn.lrn`` (``local_response_normalization``),
``fused_batch_norm``, ``moments``, ``batch_normalization``, ``l2_normalize``
(TF's ``nn_impl.py`` and ``nn_ops.py``, ``tf.compat.v1`` signatures).

``lrn`` and ``fused_batch_norm`` are one op each (``LRN``,
``FusedBatchNormV3``) with TF's attrs; the others are composites of existing
ops, as in TF: ``moments`` is two means (the variance around a
``stop_gradient`` of the mean, so its gradient is TF's),
``batch_normalization`` ``x * inv + (offset - mean * inv)`` with
``inv = scale / sqrt(variance + epsilon)``, ``l2_normalize``
``x / sqrt(max(sum(x * x), epsilon))``.

``fused_batch_norm`` keeps TF's rules: ``epsilon`` is raised to 1.001e-5 (the
least cuDNN takes), training without moving statistics passes empty ``mean``
and ``variance``, and inference or an ``exponential_avg_factor`` other than 1
needs both. Its statistics have the dtype of ``scale`` (float32 for float16
and float32 ``x``; float64 ``x`` takes float64 statistics, which TF's op
does not have).
"""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.nn_conv import NNArgumentError, pick

__all__ = ["lrn", "local_response_normalization", "fused_batch_norm", "moments",
           "batch_normalization", "l2_normalize"]

# the least epsilon cuDNN's batch norm takes; TF's fused_batch_norm raises smaller ones to it
MIN_EPSILON = 1.001e-5


def local_response_normalization(input: Any, depth_radius: int = 5,  # noqa: A002 - TF's name
                                 bias: float = 1, alpha: float = 1, beta: float = 0.5,
                                 name: str | None = None) -> Tensor:
    """``input / (bias + alpha * sqr_sum) ** beta`` where ``sqr_sum`` sums the
    squares of the ``2 * depth_radius + 1`` channels around each (an ``LRN`` op)."""
    attrs = {"depth_radius": int(depth_radius), "bias": float(bias), "alpha": float(alpha),
             "beta": float(beta)}
    with name_scope(name, "LRN", [input]) as scope:
        return ops.op_output("LRN", [ops.convert_operand(input)], attrs, scope)


lrn = local_response_normalization


def _stat_dtype(x: Tensor) -> dtypes.DType:
    return dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32


def fused_batch_norm(x: Any, scale: Any, offset: Any, mean: Any = None, variance: Any = None,
                     epsilon: float = 0.001, data_format: str = "NHWC", is_training: bool = True,
                     name: str | None = None, exponential_avg_factor: float = 1.0
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """Batch normalization of a 4-d ``x`` over all but its channels, in one
    ``FusedBatchNormV3`` op: ``(y, mean, variance)``. Training normalizes by the
    batch's statistics and returns them (the variance unbiased, for moving
    averages; blended with the given ones by ``exponential_avg_factor``);
    inference normalizes by ``mean`` and ``variance`` and returns them."""
    factor = float(exponential_avg_factor)
    if (not is_training or factor != 1.0) and (mean is None or variance is None):
        raise NNArgumentError("both 'mean' and 'variance' must be a 1-D tensor when "
                              "is_training is False or exponential_avg_factor != 1.0")
    with name_scope(name, "FusedBatchNorm", [x, scale, offset]) as scope:
        x = ops.convert_operand(x)
        u = _stat_dtype(x)
        stats = [ops.convert_to_tensor(v if v is not None else [], dtype=u)
                 for v in (scale, offset, mean, variance)]
        attrs = {"epsilon": max(float(epsilon), MIN_EPSILON), "exponential_avg_factor": factor,
                 "data_format": data_format or "NHWC", "is_training": bool(is_training)}
        op = ops.make_op("FusedBatchNormV3", [x, *stats], attrs, scope)
        return op.outputs[0], op.outputs[1], op.outputs[2]


def _squeeze(t: Tensor, axes: list[int]) -> Tensor:
    """``t`` without its reduced (size 1) ``axes``: a Reshape where the result's
    shape is static enough, else a Sum over them (exact: each sums one element)."""
    dims = t.shape.as_list()
    if dims is not None:
        kept = [d for i, d in enumerate(dims) if i not in axes]
        if sum(d is None for d in kept) <= 1:
            return ops.reshape(t, [-1 if d is None else d for d in kept], name="Squeeze")
    return ops.reduce_sum(t, axis=axes, name="Squeeze")


def moments(x: Any, axes: Any, shift: Any = None, name: str | None = None,
            keep_dims: bool | None = None, keepdims: bool | None = None
            ) -> tuple[Tensor, Tensor]:
    """The mean and variance of ``x`` over ``axes`` (``shift`` is unused, as in TF).
    float16 is computed in float32 and cast back."""
    keep = bool(pick("keepdims", keepdims, "keep_dims", keep_dims))
    with name_scope(name, "moments", [x]):
        x = ops.convert_operand(x)
        y = ops.cast(x, dtypes.float32) if x.dtype == dtypes.float16 else x
        axes = [int(a) for a in ([axes] if isinstance(axes, int) else axes)]
        if y.shape.rank is not None:
            axes = sorted(a % max(y.shape.rank, 1) for a in axes)
        mean = ops.reduce_mean(y, axes, keepdims=True, name="mean")
        variance = ops.reduce_mean(ops.square(ops.subtract(y, ops.stop_gradient(mean))), axes,
                                   keepdims=True, name="variance")
        if not keep:
            mean, variance = _squeeze(mean, axes), _squeeze(variance, axes)
        if x.dtype == dtypes.float16:
            return ops.cast(mean, dtypes.float16), ops.cast(variance, dtypes.float16)
        return mean, variance


def batch_normalization(x: Any, mean: Any, variance: Any, offset: Any, scale: Any,
                        variance_epsilon: float, name: str | None = None) -> Tensor:
    """``(x - mean) * scale / sqrt(variance + variance_epsilon) + offset``, by
    broadcasting (``offset`` and ``scale`` may be None)."""
    with name_scope(name, "batchnorm", [x, mean, variance, scale, offset]):
        x = ops.convert_operand(x)
        mean, variance = ops.convert_operand(mean), ops.convert_operand(variance)
        inv = ops.divide(1.0, ops.sqrt(ops.add(variance, variance_epsilon)), name="Rsqrt")
        if scale is not None:
            inv = ops.multiply(inv, scale)
        shift = ops.multiply(mean, inv)
        shift = ops.subtract(offset, shift) if offset is not None else ops.negative(shift)
        return ops.add(ops.multiply(x, ops.cast(inv, x.dtype)), ops.cast(shift, x.dtype))


def l2_normalize(x: Any, axis: Any = None, epsilon: float = 1e-12, name: str | None = None,
                 dim: Any = None) -> Tensor:
    """``x / sqrt(max(sum(x ** 2, axis), epsilon))`` (``axis`` None: every axis)."""
    axis = pick("axis", axis, "dim", dim)
    with name_scope(name, "l2_normalize", [x]) as scope:
        x = ops.convert_operand(x)
        square_sum = ops.reduce_sum(ops.square(x), axis, keepdims=True)
        inv_norm = ops.divide(1.0, ops.sqrt(ops.maximum(square_sum, epsilon)), name="Rsqrt")
        return ops.multiply(x, inv_norm, name=scope)
