"""The rest of ``tf.math``: builders over the catalogue's vocabulary ops
(distrib/framework/vocabulary_ops.py) and TF's composites of them, with TF's
names and arguments (``tf.math.sin``, ``tf.math.floordiv``,
``tf.math.cumsum(x, axis, exclusive, reverse)``, ``tf.math.reduce_logsumexp``,
``tf.debugging.check_numerics`` ...).

Composites are built as TF builds them: ``log_sigmoid(x) = -softplus(-x)``,
``reduce_logsumexp`` by the max-shifted sum (the max held out of the
gradient, as TF's ``stop_gradient``), ``reduce_variance`` as the mean of the
squared deviation, ``logical_xor`` as ``(x or y) and not (x and y)``,
``count_nonzero`` as the sum of a ``!= 0`` cast. Where an op has no CPU
kernel for an integer dtype, TF has none either.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_shapes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = [
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "log1p", "expm1", "rsqrt", "erf", "erfc", "lgamma", "digamma", "ceil", "rint", "round",
    "reciprocal", "is_nan", "is_inf", "is_finite", "floordiv", "floor_div", "floormod", "mod",
    "truncatemod", "squared_difference", "atan2", "xlogy", "xdivy", "divide_no_nan",
    "multiply_no_nan", "reduce_all", "reduce_any", "argmin", "cumsum", "cumprod",
    "log_sigmoid", "reduce_logsumexp", "reduce_variance", "reduce_std", "reduce_euclidean_norm",
    "logical_xor", "count_nonzero", "scalar_mul", "floor", "check_numerics", "verify_tensor_all_finite",
]


def _unary(op_type: str, default: str):  # noqa: ANN202 - a builder's factory
    def build(x: Any, name: str | None = None) -> Tensor:
        return ops.unary_op(op_type, x, name or default)
    build.__name__ = build.__qualname__ = default
    build.__doc__ = f"TF's ``tf.math.{default.lower()}`` (op ``{op_type}``), elementwise."
    return build


sin, cos, tan = _unary("Sin", "Sin"), _unary("Cos", "Cos"), _unary("Tan", "Tan")
asin, acos, atan = _unary("Asin", "Asin"), _unary("Acos", "Acos"), _unary("Atan", "Atan")
sinh, cosh = _unary("Sinh", "Sinh"), _unary("Cosh", "Cosh")
asinh, acosh, atanh = _unary("Asinh", "Asinh"), _unary("Acosh", "Acosh"), _unary("Atanh", "Atanh")
log1p, expm1, rsqrt = _unary("Log1p", "Log1p"), _unary("Expm1", "Expm1"), _unary("Rsqrt", "Rsqrt")
erf, erfc = _unary("Erf", "Erf"), _unary("Erfc", "Erfc")
lgamma, digamma = _unary("Lgamma", "Lgamma"), _unary("Digamma", "Digamma")
ceil, rint, round = _unary("Ceil", "Ceil"), _unary("Rint", "Rint"), _unary("Round", "Round")  # noqa: A001
reciprocal = _unary("Reciprocal", "Reciprocal")
is_nan, is_inf = _unary("IsNan", "IsNan"), _unary("IsInf", "IsInf")
is_finite = _unary("IsFinite", "IsFinite")
floor = _unary("Floor", "Floor")


def _binary(op_type: str, default: str):  # noqa: ANN202 - a builder's factory
    def build(x: Any, y: Any, name: str | None = None) -> Tensor:
        with name_scope(name, default, [x, y]) as scope:
            a, b = ops.convert_pair(x, y)
            return ops.op_output(op_type, [a, b], None, scope)
    build.__name__ = build.__qualname__ = default
    build.__doc__ = f"TF's op ``{op_type}``, numpy broadcasting."
    return build


floordiv = floor_div = _binary("FloorDiv", "floordiv")
floormod = mod = _binary("FloorMod", "floormod")
squared_difference = _binary("SquaredDifference", "SquaredDifference")
atan2 = _binary("Atan2", "Atan2")
xlogy, xdivy = _binary("Xlogy", "xlogy"), _binary("Xdivy", "xdivy")
divide_no_nan = _binary("DivNoNan", "div_no_nan")


def truncatemod(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x - y * trunc(x / y)`` (C's ``%``): the remainder with ``x``'s sign."""
    with name_scope(name, "TruncateMod", [x, y]) as scope:
        a, b = ops.convert_pair(x, y)
        m = floormod(a, b)
        fix = ops.logical_and(ops.not_equal(m, ops.zeros_like(m)),
                              ops.not_equal(ops.less(a, ops.zeros_like(a)),
                                            ops.less(b, ops.zeros_like(b))))
        return ops.subtract(m, ops.multiply(ops.cast(fix, b.dtype), b), name=scope)


def multiply_no_nan(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x * y``, but 0 where ``y`` is 0 even if ``x`` is inf or nan."""
    with name_scope(name, "MulNoNan", [x, y]) as scope:
        a, b = ops.convert_pair(x, y)
        product = ops.multiply(a, b)
        return _select(ops.equal(b, ops.zeros_like(b)), ops.zeros_like(product), product, scope)


def _select(cond: Tensor, t: Tensor, e: Tensor, name: str) -> Tensor:
    return ops.op_output("SelectV2", [cond, t, e], None, name)


# -- reductions and scans ----------------------------------------------------------------
def _bool_reduce(op_type: str, x: Any, axis: Any, keepdims: Any, name: str | None,
                 reduction_indices: Any, keep_dims: Any) -> Tensor:
    t = ops.convert_operand(x)
    axis = reduction_indices if axis is None else axis
    keep = bool(keep_dims if keepdims is None else keepdims)
    axis = op_shapes.normalize_axis(axis, t.shape.rank, op_type, name or op_type, t.shape)
    return ops.op_output(op_type, [t], {"axis": axis, "keepdims": keep}, name or op_type)


def reduce_all(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
               reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    """Logical and over ``axis`` (TF's ``tf.reduce_all``)."""
    return _bool_reduce("All", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_any(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
               reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    """Logical or over ``axis`` (TF's ``tf.reduce_any``)."""
    return _bool_reduce("Any", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def argmin(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002 - TF's name
           dimension: Any = None, output_type: Any = dtypes.int64) -> Tensor:
    """Index of the smallest value along ``axis`` (default 0, as TF1's ``tf.argmin``)."""
    x = ops.convert_operand(input)
    axis = dimension if axis is None else axis
    axis = op_shapes.normalize_axis(0 if axis is None else int(axis), x.shape.rank, "ArgMin",
                                    name or "ArgMin", x.shape)
    return ops.op_output("ArgMin", [x], {"axis": axis,
                                         "output_type": dtypes.as_dtype(output_type)},
                         name or "ArgMin")


def _scan(op_type: str, x: Any, axis: Any, exclusive: bool, reverse: bool,
          name: str | None) -> Tensor:
    t = ops.convert_operand(x)
    if not isinstance(axis, int) and ops.is_tensor(axis):
        raise InvalidArgumentError(f"{op_type.lower()}: axis must be a Python int here")
    return ops.op_output(op_type, [t], {"axis": int(axis), "exclusive": bool(exclusive),
                                        "reverse": bool(reverse)}, name or op_type)


def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           name: str | None = None) -> Tensor:
    """Running sums along ``axis`` (``exclusive``: each leaves its own element out;
    ``reverse``: from the end), TF's ``tf.cumsum``."""
    return _scan("Cumsum", x, axis, exclusive, reverse, name)


def cumprod(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False,
            name: str | None = None) -> Tensor:
    """Running products along ``axis``, TF's ``tf.math.cumprod``."""
    return _scan("Cumprod", x, axis, exclusive, reverse, name)


def log_sigmoid(x: Any, name: str | None = None) -> Tensor:
    """``log(sigmoid(x)) = -softplus(-x)``, without overflow."""
    with name_scope(name, "LogSigmoid", [x]) as scope:
        t = ops.convert_operand(x)
        return ops.negative(ops.unary_op("Softplus", ops.negative(t), None), name=scope)


def reduce_logsumexp(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                     name: str | None = None, reduction_indices: Any = None,
                     keep_dims: Any = None) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, shifted by the max (held out of the gradient)."""
    keep = bool(keep_dims if keep_dims is not None else keepdims)
    axis = reduction_indices if axis is None else axis
    with name_scope(name, "ReduceLogSumExp", [input_tensor]) as scope:
        x = ops.convert_operand(input_tensor)
        raw_max = ops.reduce_max(x, axis=axis, keepdims=True)
        finite = ops.unary_op("IsFinite", raw_max, None)
        my_max = ops.stop_gradient(_select(finite, raw_max, ops.zeros_like(raw_max), "Select"))
        summed = ops.log(ops.reduce_sum(ops.exp(ops.subtract(x, my_max)), axis=axis,
                                        keepdims=keep))
        shift = my_max if keep else ops.reshape(my_max, ops.shape(summed))
        return ops.add(summed, shift, name=scope)


def reduce_variance(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                    name: str | None = None) -> Tensor:
    """The mean of the squared deviation from the mean over ``axis``."""
    with name_scope(name, "reduce_variance", [input_tensor]) as scope:
        x = ops.convert_operand(input_tensor)
        mean = ops.reduce_mean(x, axis=axis, keepdims=True)
        return ops.reduce_mean(squared_difference(x, mean), axis=axis, keepdims=keepdims,
                               name=scope)


def reduce_std(input_tensor: Any, axis: Any = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """The square root of :func:`reduce_variance`."""
    with name_scope(name, "reduce_std", [input_tensor]) as scope:
        return ops.sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims), name=scope)


def reduce_euclidean_norm(input_tensor: Any, axis: Any = None, keepdims: bool = False,
                          name: str | None = None) -> Tensor:
    """``sqrt(sum(x**2))`` over ``axis``."""
    with name_scope(name, "reduce_euclidean_norm", [input_tensor]) as scope:
        x = ops.convert_operand(input_tensor)
        return ops.sqrt(ops.reduce_sum(ops.square(x), axis=axis, keepdims=keepdims), name=scope)


def logical_xor(x: Any, y: Any, name: str = "LogicalXor") -> Tensor:
    """``(x or y) and not (x and y)``, as TF builds it."""
    with name_scope(name, "LogicalXor", [x, y]) as scope:
        return ops.logical_and(ops.logical_or(x, y), ops.logical_not(ops.logical_and(x, y)),
                               name=scope)


def count_nonzero(input_tensor: Any = None, axis: Any = None, keepdims: Any = None,
                  dtype: Any = dtypes.int64, name: str | None = None,
                  reduction_indices: Any = None, keep_dims: Any = None, input: Any = None  # noqa: A002
                  ) -> Tensor:
    """How many elements of ``input_tensor`` are not zero, over ``axis``."""
    x = ops.convert_operand(input if input_tensor is None else input_tensor)
    with name_scope(name, "count_nonzero", [x]) as scope:
        nonzero = ops.not_equal(x, ops.zeros_like(x))
        axis = reduction_indices if axis is None else axis
        keep = bool(keep_dims if keepdims is None else keepdims)
        return ops.cast(ops.reduce_sum(ops.cast(nonzero, dtypes.int64), axis=axis, keepdims=keep),
                        dtype, name=scope)


def scalar_mul(scalar: Any, x: Any, name: str | None = None) -> Tensor:
    """``scalar * x`` for a scalar ``scalar``."""
    return ops.multiply(scalar, x, name=name or "scalar_mul")


def check_numerics(tensor: Any, message: str, name: str | None = None) -> Tensor:
    """``tensor`` unchanged, or an ``InvalidArgumentError`` carrying ``message``
    when it holds an inf or a NaN at run time (TF's ``tf.debugging.check_numerics``)."""
    t = ops.convert_operand(tensor)
    return ops.op_output("CheckNumerics", [t], {"message": str(message)}, name or "CheckNumerics")


def verify_tensor_all_finite(t: Any = None, msg: str = "", name: str | None = None,
                             x: Any = None, message: str | None = None) -> Tensor:
    """TF1's ``tf.verify_tensor_all_finite``: :func:`check_numerics` by another name."""
    return check_numerics(t if x is None else x, msg if message is None else message, name)
