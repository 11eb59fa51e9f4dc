"""The gradients of the everyday vocabulary's ops (TF's ``math_grad.py``,
``nn_grad.py``, ``array_grad.py`` for the same ops): trigonometry, ``erf``,
``log1p``/``expm1``, ``rsqrt``, ``reciprocal``, ``lgamma``, the floor
division family, ``atan2``, ``xlogy``/``xdivy``/``div_no_nan``, the scans,
the activations (through TF's gradient ops ``EluGrad`` ...), ``Squeeze``,
``Pack``/``Unpack``, ``Split``/``SplitV``, ``Tile`` and ``CheckNumerics``.

A gradient family as :mod:`distrib.ops.math_grad` describes it: ``GRADIENTS``
and ``NOT_DIFFERENTIABLE``, installed into the op catalogue by
:mod:`distrib.ops.gradients`; importing this writes nothing. Each formula
is TF's; broadcasting is undone with :func:`distrib.ops.math_grad.sum_to`.
"""
from __future__ import annotations

import math
from typing import Callable

from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat
from distrib.ops.math_grad import sum_to

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


def _u(op_type: str, x: Tensor) -> Tensor:
    return ops.unary_op(op_type, x, None)


def _select(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return ops.op_output("SelectV2", [cond, a, b], None, "Select")


def _one_minus_sq(x: Tensor) -> Tensor:
    return ops.subtract(ops.ones_like(x), ops.square(x))


# -- unary math ------------------------------------------------------------------------------
def _sin_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, _u("Cos", op.inputs[0]))]


def _cos_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(ops.multiply(g, _u("Sin", op.inputs[0])))]


def _tan_grad(op: Operation, g: Tensor) -> list:
    sec = _u("Reciprocal", _u("Cos", op.inputs[0]))
    return [ops.multiply(g, ops.square(sec))]


def _asin_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, _u("Rsqrt", _one_minus_sq(op.inputs[0])))]


def _acos_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(ops.multiply(g, _u("Rsqrt", _one_minus_sq(op.inputs[0]))))]


def _atan_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.divide(g, ops.add(ops.ones_like(x), ops.square(x)))]


def _sinh_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, _u("Cosh", op.inputs[0]))]


def _cosh_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, _u("Sinh", op.inputs[0]))]


def _asinh_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, _u("Cosh", op.outputs[0]))]


def _acosh_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, _u("Sinh", op.outputs[0]))]


def _atanh_grad(op: Operation, g: Tensor) -> list:
    return [ops.divide(g, _one_minus_sq(op.inputs[0]))]


def _log1p_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.divide(g, ops.add(ops.ones_like(x), x))]


def _expm1_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, ops.exp(op.inputs[0]))]


def _rsqrt_grad(op: Operation, g: Tensor) -> list:
    y = op.outputs[0]   # d/dx x^-1/2 = -y^3 / 2
    return [ops.multiply(ops.multiply(g, ops.multiply(ops.square(y), y)), -0.5)]


def _reciprocal_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(ops.multiply(g, ops.square(op.outputs[0])))]


def _erf_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.multiply(g, ops.multiply(2.0 / math.sqrt(math.pi), ops.exp(ops.negative(
        ops.square(x)))))]


def _erfc_grad(op: Operation, g: Tensor) -> list:
    return [ops.negative(_erf_grad(op, g)[0])]


def _lgamma_grad(op: Operation, g: Tensor) -> list:
    return [ops.multiply(g, _u("Digamma", op.inputs[0]))]


# -- binary ---------------------------------------------------------------------------------
def _floor_mod_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gy = ops.multiply(g, ops.negative(ops.op_output("FloorDiv", [x, y], None, "FloorDiv")))
    return [sum_to(g, x), sum_to(gy, y)]


def _squared_difference_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    d = ops.multiply(ops.multiply(g, 2.0), ops.subtract(x, y))
    return [sum_to(d, x), sum_to(ops.negative(d), y)]


def _atan2_grad(op: Operation, g: Tensor) -> list:
    y, x = op.inputs   # TF's atan2(y, x)
    inv = ops.divide(g, ops.add(ops.square(x), ops.square(y)))
    return [sum_to(ops.multiply(x, inv), y), sum_to(ops.negative(ops.multiply(y, inv)), x)]


def _nonzero(x: Tensor) -> Tensor:
    return ops.cast(ops.not_equal(x, ops.zeros_like(x)), x.dtype)


def _binop(op_type: str, x: Tensor, y: Tensor) -> Tensor:
    return ops.op_output(op_type, [x, y], None, op_type)


def _xlogy_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gx = ops.multiply(_binop("Xlogy", _nonzero(x), y), g)
    gy = ops.multiply(_binop("Xdivy", x, y), g)
    return [sum_to(gx, x), sum_to(gy, y)]


def _xdivy_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gx = ops.multiply(_binop("Xdivy", _nonzero(x), y), g)
    gy = ops.multiply(_binop("Xdivy", ops.negative(x), ops.square(y)), g)
    return [sum_to(gx, x), sum_to(gy, y)]


def _div_no_nan_grad(op: Operation, g: Tensor) -> list:
    x, y = op.inputs
    gx = _binop("DivNoNan", g, y)
    gy = ops.multiply(g, _binop("DivNoNan", _binop("DivNoNan", ops.negative(x), y), y))
    return [sum_to(gx, x), sum_to(gy, y)]


# -- scans ----------------------------------------------------------------------------------
def _scan_attrs(op: Operation, flip: bool = True) -> dict:
    return {"axis": op.get_attr("axis"), "exclusive": op.get_attr("exclusive"),
            "reverse": (not op.get_attr("reverse")) if flip else op.get_attr("reverse")}


def _cumsum_grad(op: Operation, g: Tensor) -> list:
    return [ops.op_output("Cumsum", [g], _scan_attrs(op), "Cumsum")]


def _cumprod_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]   # TF's: fails where x is 0, as TF's
    prod = ops.op_output("Cumprod", [x], _scan_attrs(op, flip=False), "Cumprod")
    out = ops.op_output("Cumsum", [ops.multiply(prod, g)], _scan_attrs(op), "Cumsum")
    return [ops.divide(out, x)]


# -- activations ----------------------------------------------------------------------------
def _with_output(grad_op: str) -> Callable[..., list]:
    def grad(op: Operation, g: Tensor) -> list:
        return [ops.op_output(grad_op, [g, op.outputs[0]], None, grad_op)]
    return grad


def _with_features(grad_op: str, *attr_names: str) -> Callable[..., list]:
    def grad(op: Operation, g: Tensor) -> list:
        attrs = {a: op.get_attr(a) for a in attr_names} or None
        return [ops.op_output(grad_op, [g, op.inputs[0]], attrs, grad_op)]
    return grad


def _piecewise_grad_grad(op: Operation, g: Tensor) -> list:
    # Relu6Grad, LeakyReluGrad: linear in the gradients, flat in the features
    attrs = {"alpha": op.get_attr("alpha")} if op.type == "LeakyReluGrad" else None
    f = op.inputs[1]
    return [ops.op_output(op.type, [g, f], attrs, op.type), ops.zeros_like(f)]


def _from_output_grad_grad(op: Operation, g: Tensor) -> list:
    # EluGrad, SeluGrad (gradients, outputs): linear in the gradients; where the output
    # is negative the derivative in it is the incoming gradient (TF's _EluGradGrad)
    dy, y = op.inputs
    neg = ops.less(y, ops.zeros_like(y))
    return [ops.op_output(op.type, [g, y], None, op.type),
            _select(neg, ops.multiply(g, dy), ops.zeros_like(y))]


def _softplus_grad_grad(op: Operation, g: Tensor) -> list:
    dy, x = op.inputs   # d/dx of dy * sigmoid(x): dy / (e^-x + 2 + e^x)
    denom = ops.add(ops.add(ops.exp(ops.negative(x)), 2.0), ops.exp(x))
    return [ops.op_output("SoftplusGrad", [g, x], None, "SoftplusGrad"),
            ops.divide(ops.multiply(g, dy), denom)]


def _softsign_grad_grad(op: Operation, g: Tensor) -> list:
    dy, f = op.inputs   # d/df of dy / (1 + |f|)^2: -2 dy sign(f) / (1 + |f|)^3
    d = ops.add(ops.abs(f), 1.0)
    df = ops.divide(ops.multiply(ops.multiply(g, dy), ops.multiply(-2.0, ops.sign(f))),
                    ops.multiply(ops.square(d), d))
    return [ops.op_output("SoftsignGrad", [g, f], None, "SoftsignGrad"), df]


# -- arrays ----------------------------------------------------------------------------------
def _like(g: Tensor, x: Tensor) -> Tensor:
    dims = x.shape.as_list()
    if dims is not None and None not in dims:
        return ops.reshape(g, dims)
    return ops.reshape(g, ops.shape(x))


def _squeeze_grad(op: Operation, g: Tensor) -> list:
    return [_like(g, op.inputs[0])]


def _pack_grad(op: Operation, g: Tensor) -> list:
    n, axis = len(op.inputs), op.get_attr("axis")
    parts = ops.make_op("Unpack", [g], {"num": n, "axis": axis}, "unstack").outputs
    return list(parts)


def _filled(grads: tuple, outputs: list) -> list:
    return [ops.zeros_like(o) if gr is None else gr for gr, o in zip(grads, outputs)]


def _unpack_grad(op: Operation, *grads: Tensor) -> list:
    parts = _filled(grads, list(op.outputs))
    return [ops.op_output("Pack", parts, {"axis": op.get_attr("axis")}, "stack")]


def _split_grad(op: Operation, *grads: Tensor) -> list:
    return [concat(_filled(grads, list(op.outputs)), op.get_attr("axis"))]


def _tile_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    m = op.get_attr("multiples") if len(op.inputs) == 1 else None
    mult = ops.constant(m, dtype=dtypes.int32) if m is not None else \
        ops.cast(op.inputs[1], dtypes.int32)
    rank = len(m) if m is not None else x.shape.rank
    pairs = ops.op_output("Pack", [mult, ops.shape(x)], {"axis": 0}, "stack")   # [2, rank]
    split_shape = ops.reshape(ops.transpose(pairs), [-1])    # m0, d0, m1, d1 ...
    summed = ops.reduce_sum(ops.reshape(g, split_shape), axis=list(range(0, 2 * rank, 2)))
    return [_like(summed, x)] + ([None] if len(op.inputs) > 1 else [])


def _strided_slice_grad_grad(op: Operation, g: Tensor) -> list:
    # StridedSliceGrad scatters dy into zeros: its own gradient is the same slice of g
    keys = ("begin", "end", "strides", "begin_mask", "end_mask", "ellipsis_mask",
            "new_axis_mask", "shrink_axis_mask")
    attrs = {k: op.get_attr(k) for k in keys}
    return [ops.op_output("StridedSlice", [g], attrs, "StridedSlice"), None]


def _mirror_pad_grad(op: Operation, g: Tensor) -> list:
    attrs = {"paddings": op.get_attr("paddings"), "mode": op.get_attr("mode")}
    return [ops.op_output("MirrorPadGrad", [g], attrs, "MirrorPadGrad")]


def _mirror_pad_grad_grad(op: Operation, g: Tensor) -> list:
    attrs = {"paddings": op.get_attr("paddings"), "mode": op.get_attr("mode")}
    return [ops.op_output("MirrorPad", [g], attrs, "MirrorPad")]


def _check_numerics_grad(op: Operation, g: Tensor) -> list:
    msg = ("Not a number (NaN) or infinity (Inf) values detected in gradient. "
           + str(op.get_attr("message")))
    return [ops.op_output("CheckNumerics", [g], {"message": msg}, "CheckNumerics")]


GRADIENTS: dict[str, Callable[..., list]] = {
    "Sin": _sin_grad, "Cos": _cos_grad, "Tan": _tan_grad, "Asin": _asin_grad,
    "Acos": _acos_grad, "Atan": _atan_grad, "Sinh": _sinh_grad, "Cosh": _cosh_grad,
    "Asinh": _asinh_grad, "Acosh": _acosh_grad, "Atanh": _atanh_grad,
    "Log1p": _log1p_grad, "Expm1": _expm1_grad, "Rsqrt": _rsqrt_grad,
    "Reciprocal": _reciprocal_grad, "Erf": _erf_grad, "Erfc": _erfc_grad,
    "Lgamma": _lgamma_grad,
    "FloorMod": _floor_mod_grad, "SquaredDifference": _squared_difference_grad,
    "Atan2": _atan2_grad, "Xlogy": _xlogy_grad, "Xdivy": _xdivy_grad,
    "DivNoNan": _div_no_nan_grad,
    "Cumsum": _cumsum_grad, "Cumprod": _cumprod_grad,
    "Elu": _with_output("EluGrad"), "Selu": _with_output("SeluGrad"),
    "Relu6": _with_features("Relu6Grad"), "LeakyRelu": _with_features("LeakyReluGrad", "alpha"),
    "Softplus": _with_features("SoftplusGrad"), "Softsign": _with_features("SoftsignGrad"),
    "Relu6Grad": _piecewise_grad_grad, "LeakyReluGrad": _piecewise_grad_grad,
    "EluGrad": _from_output_grad_grad, "SeluGrad": _from_output_grad_grad,
    "SoftplusGrad": _softplus_grad_grad, "SoftsignGrad": _softsign_grad_grad,
    "Squeeze": _squeeze_grad, "Pack": _pack_grad, "Unpack": _unpack_grad,
    "Split": _split_grad, "SplitV": _split_grad, "Tile": _tile_grad,
    "CheckNumerics": _check_numerics_grad, "StridedSliceGrad": _strided_slice_grad_grad,
    "MirrorPad": _mirror_pad_grad, "MirrorPadGrad": _mirror_pad_grad_grad,
}

# rounding, predicates, integer division, index-valued and random ops: nothing flows back
NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "Ceil", "Rint", "Round", "IsNan", "IsInf", "IsFinite", "FloorDiv", "All", "Any", "ArgMin",
    "OneHot", "Range", "Where", "TruncatedNormal", "Multinomial", "StatelessRandomUniform",
    "StatelessRandomNormal", "StatelessTruncatedNormal",
)
