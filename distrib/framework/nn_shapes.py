"""Static shapes of the normalization and top-k ops: ``LRN``, ``FusedBatchNormV3``
and their gradients, ``TopKV2``, ``InTopKV2`` (TF's shape functions in
``nn_ops.cc``), with the rules and helpers of
:mod:`distrib.framework.conv_shapes`.

``FusedBatchNormV3`` in training may take empty ``mean`` and ``variance``
(``dt.nn.fused_batch_norm`` without moving statistics); its statistics
(dtype ``U``: the dtype of ``scale``) are vectors of the channels, and
``reserve_space_3`` has an unknown shape, as TF's (the CPU kernel's is a
placeholder). ``TopKV2``'s ``k`` is an input: the output's last dimension is
known when ``k`` is a constant.
"""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.framework.conv_shapes import (
    data_format_of,
    fail,
    known_int_values,
    merge_dim,
    rank4,
    same_float,
    spatial_axes,
)
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape, unknown_shape

__all__ = ["lrn", "lrn_grad", "fused_batch_norm", "fused_batch_norm_grad", "top_k", "in_top_k"]


# -- normalization --------------------------------------------------------------------------
def lrn(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    same_float(op_type, name, x)
    if int(attrs.get("depth_radius", 5)) < 0:
        raise fail(op_type, name, f"depth_radius must be >= 0, got {attrs['depth_radius']}")
    return [(x.dtype, TensorShape(rank4(op_type, name, x, "input")))]


def lrn_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """LRNGrad (input_grads, input_image, output_image): their common shape."""
    dtype = same_float(op_type, name, *inputs)
    shape = TensorShape(rank4(op_type, name, inputs[0], "input_grads"))
    for t in inputs[1:]:
        try:
            shape = shape.merge_with(TensorShape(rank4(op_type, name, t, t.name)))
        except ValueError:
            raise fail(op_type, name, "input_grads, input_image and output_image differ: "
                        + ", ".join(str(x.shape) for x in inputs)) from None
    return [(dtype, shape)]


def _vector(op_type: str, name: str, t: Any, what: str, depth: int | None,
            empty_ok: bool = False) -> int | None:
    if t.shape.rank is None:
        return depth
    n = t.shape.dims[0] if t.shape.rank == 1 else -1
    if n == -1 or (n is not None and depth is not None and n != depth
                   and not (empty_ok and n == 0)):
        raise fail(op_type, name, f"{what} must be a vector of the {depth} channels, got "
                    f"{t.name} of shape {t.shape}" + (" (or empty in training)" if empty_ok else ""))
    return depth if depth is not None or n == 0 else n


def fused_batch_norm(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """FusedBatchNormV3 (x, scale, offset, mean, variance) -> y, batch_mean,
    batch_variance, reserve_space_1, reserve_space_2, reserve_space_3."""
    x, scale, offset, mean, variance = inputs
    if not x.dtype.is_floating:
        raise fail(op_type, name, f"x {x.name} has dtype {x.dtype.name}; a floating-point "
                    "tensor is needed")
    u = same_float(op_type, name, scale, offset, mean, variance)
    fmt = data_format_of(op_type, name, attrs)
    dims = rank4(op_type, name, x, "x")
    depth = dims[spatial_axes(fmt)[2]]
    training = bool(attrs.get("is_training", True))
    depth = _vector(op_type, name, scale, "scale", depth)
    depth = _vector(op_type, name, offset, "offset", depth)
    for t, what in ((mean, "mean"), (variance, "variance")):
        _vector(op_type, name, t, what, depth, empty_ok=training)
    stat = (u, TensorShape([depth]))
    return [(x.dtype, TensorShape(dims)), stat, stat, stat, stat, (u, unknown_shape())]


def fused_batch_norm_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """FusedBatchNormGradV3 (y_backprop, x, scale, reserve_space_1, reserve_space_2,
    reserve_space_3) -> x_backprop, scale_backprop, offset_backprop, reserve_space_4,
    reserve_space_5."""
    dy, x, scale = inputs[:3]
    same_float(op_type, name, dy, x)
    u = scale.dtype
    fmt = data_format_of(op_type, name, attrs)
    try:
        shape = TensorShape(rank4(op_type, name, dy, "y_backprop")).merge_with(
            TensorShape(rank4(op_type, name, x, "x")))
    except ValueError:
        raise fail(op_type, name, f"y_backprop {dy.shape} and x {x.shape} differ") from None
    depth = shape.dims[spatial_axes(fmt)[2]]
    for t, what in zip(inputs[2:5], ("scale", "reserve_space_1", "reserve_space_2")):
        depth = _vector(op_type, name, t, what, depth)
    stat = (u, TensorShape([depth]))
    return [(x.dtype, shape), stat, stat, (u, TensorShape([0])), (u, TensorShape([0]))]


# -- top k -------------------------------------------------------------------------------------
def _scalar_k(op_type: str, name: str, k: Any) -> int | None:
    if not k.dtype.is_integer or k.shape.rank not in (None, 0):
        raise fail(op_type, name, f"k must be an integer scalar, got {k.name} {k.dtype.name} "
                    f"of shape {k.shape}")
    known = known_int_values(k) if k.op.type == "Const" else None
    if known is not None and known[0] < 0:
        raise fail(op_type, name, f"k must be >= 0, got {known[0]}")
    return None if known is None else known[0]


def top_k(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """TopKV2 (input, k) -> values, indices (attr ``index_type``, int32 by default)."""
    x, k = inputs
    if not x.dtype.is_numeric:
        raise fail(op_type, name, f"input {x.name} has dtype {x.dtype.name}; a numeric tensor "
                    "is needed")
    kv = _scalar_k(op_type, name, k)
    index = dtypes.as_dtype(attrs.get("index_type", "int32"))
    if x.shape.rank is None:
        return [(x.dtype, unknown_shape()), (index, unknown_shape())]
    if x.shape.rank == 0:
        raise fail(op_type, name, f"input must have rank >= 1, got a scalar {x.name}")
    last = x.shape.dims[-1]
    if kv is not None and last is not None and last < kv:
        raise fail(op_type, name, f"input must have at least k={kv} columns, got shape {x.shape}")
    shape = TensorShape(list(x.shape.dims[:-1]) + [kv])
    return [(x.dtype, shape), (index, shape)]


def in_top_k(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """InTopKV2 (predictions [batch, classes] float32, targets [batch], k) -> bool [batch]."""
    predictions, targets, k = inputs
    if not predictions.dtype.is_floating:
        raise fail(op_type, name, f"predictions must be floating-point, got "
                    f"{predictions.dtype.name}")
    if targets.dtype not in (dtypes.int32, dtypes.int64) or k.dtype != targets.dtype:
        raise fail(op_type, name, f"targets and k must both be int32 or both int64, got "
                    f"{targets.dtype.name} and {k.dtype.name}")
    _scalar_k(op_type, name, k)
    if predictions.shape.rank not in (None, 2) or targets.shape.rank not in (None, 1):
        raise fail(op_type, name, f"predictions must be [batch, classes] and targets [batch], "
                    f"got {predictions.shape} and {targets.shape}")
    batch = (predictions.shape.dims or (None,))[0]
    batch = merge_dim(op_type, name, batch, (targets.shape.dims or (None,))[0],
                   f"predictions {predictions.shape} and targets {targets.shape} have different "
                   "batch sizes")
    return [(dtypes.bool, TensorShape([batch]))]
