"""The op catalogue's entries for TF's everyday vocabulary (issue 39): the
``tf.math`` family (trigonometry, rounding, ``erf``, floor division ...), the
activations and their gradient ops, cumulative sums, stacking and splitting,
``one_hot``, ``range``, ``squeeze``, ``check_numerics``, truncated normals
and categorical draws, and the update ops of TF1's remaining optimizers
(Adadelta, FTRL, the proximal ones, Adagrad-DA).

This module only *describes*: :data:`ENTRIES` is a list of keyword sets for
:func:`distrib.framework.op_def.register_op`, which the catalogue registers
at its own import (so this module need not import it, and no cycle forms);
the shape functions of these ops live here, beside their entries. Names,
input orders and attrs are TF's (``math_ops.cc``, ``nn_ops.cc``,
``array_ops.cc``, ``training_ops.cc``), except where a value TF takes as an
input tensor is an attr here because the graph must know it to give the
output its shape (``OneHot``'s ``depth``, ``Split``'s ``num_split``,
``Range``'s bounds, ``Multinomial``'s ``num_samples``).
"""
from __future__ import annotations

import math
from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_shapes
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape, unknown_shape

__all__ = ["ENTRIES", "UNARY_FLOAT", "UNARY_NUMERIC", "PREDICATES", "BINARY", "ACTIVATION_GRADS",
           "APPLY_OPS"]


def _fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


# -- shape functions ---------------------------------------------------------------------
def predicate(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """``IsNan``, ``IsInf``, ``IsFinite``: a bool of the input's shape (floats only)."""
    if not inputs[0].dtype.is_floating:
        raise _fail(op_type, name, f"needs a floating-point tensor, got {inputs[0].dtype.name}")
    return [(dtypes.bool, inputs[0].shape)]


def bool_reduction(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """``All``, ``Any``: a reduction of a bool tensor."""
    x = inputs[0]
    if not x.dtype.is_bool:
        raise _fail(op_type, name, f"reduce_all/reduce_any need a bool tensor, got {x.dtype.name}")
    return [(dtypes.bool, op_shapes.reduced_shape(x.shape, attrs.get("axis"),
                                                  bool(attrs.get("keepdims"))))]


def numeric_same(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    if not inputs[0].dtype.is_numeric:
        raise _fail(op_type, name, f"needs a numeric tensor, got {inputs[0].dtype.name}")
    return [(inputs[0].dtype, inputs[0].shape)]


def one_hot(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    idx = inputs[0]
    if not idx.dtype.is_integer:
        raise _fail(op_type, name, f"indices must be integers, got {idx.dtype.name}")
    depth = int(attrs["depth"])
    if depth < 0:
        raise _fail(op_type, name, f"depth must be non-negative, got {depth}")
    if idx.shape.rank is None:
        return [(dtypes.as_dtype(attrs["dtype"]), unknown_shape())]
    dims = list(idx.shape.dims)
    axis = int(attrs.get("axis", -1))
    if not -1 <= axis <= len(dims):
        raise _fail(op_type, name, f"axis {axis} is out of range for indices {idx.shape}")
    dims.insert(len(dims) if axis == -1 else axis, depth)
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape(dims))]


def range_(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    start, limit, delta = attrs["start"], attrs["limit"], attrs["delta"]
    if delta == 0:
        raise _fail(op_type, name, "delta must not be 0")
    n = max(0, math.ceil((limit - start) / delta))
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape([n]))]


def squeeze(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, axes = inputs[0], list(attrs.get("squeeze_dims") or [])
    if x.shape.rank is None:
        return [(x.dtype, unknown_shape())]
    dims, rank = list(x.shape.dims), x.shape.rank
    for a in axes:
        if not -rank <= a < rank:
            raise _fail(op_type, name, f"axis {a} is out of range for input {x.shape}")
    wanted = {a % rank for a in axes}
    out = []
    for i, d in enumerate(dims):
        if i in wanted:
            if d is not None and d != 1:
                raise _fail(op_type, name, f"cannot squeeze dimension {i} of {x.shape}: "
                            f"its size is {d}, not 1")
            continue
        if not wanted and d == 1:
            continue
        if not wanted and d is None:
            return [(x.dtype, unknown_shape())]   # it may be 1 when the step runs
        out.append(d)
    return [(x.dtype, TensorShape(out))]


def pack(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dtype = inputs[0].dtype
    shape = TensorShape(None)
    for t in inputs:
        if t.dtype != dtype:
            raise _fail(op_type, name, f"every value must have dtype {dtype.name}, got "
                        f"{[x.dtype.name for x in inputs]}")
        try:
            shape = shape.merge_with(t.shape)
        except ValueError:
            raise _fail(op_type, name, "values have different shapes: "
                        f"{[str(x.shape) for x in inputs]}") from None
    if shape.rank is None:
        return [(dtype, unknown_shape())]
    dims, axis = list(shape.dims), int(attrs.get("axis", 0))
    if not -len(dims) - 1 <= axis <= len(dims):
        raise _fail(op_type, name, f"axis {axis} is out of range for values of shape {shape}")
    dims.insert(axis if axis >= 0 else len(dims) + 1 + axis, len(inputs))
    return [(dtype, TensorShape(dims))]


def unpack(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, num, axis = inputs[0], int(attrs["num"]), int(attrs.get("axis", 0))
    if x.shape.rank is None:
        return [(x.dtype, unknown_shape())] * num
    dims = list(x.shape.dims)
    if not -len(dims) <= axis < len(dims):
        raise _fail(op_type, name, f"axis {axis} is out of range for value {x.shape}")
    axis %= len(dims)
    if dims[axis] is not None and dims[axis] != num:
        raise _fail(op_type, name, f"num {num} differs from dimension {axis} of {x.shape}")
    del dims[axis]
    return [(x.dtype, TensorShape(dims))] * num


def split(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    sizes = list(attrs.get("size_splits") or [])
    n = len(sizes) if op_type == "SplitV" else int(attrs["num_split"])
    if x.shape.rank is None:
        return [(x.dtype, unknown_shape())] * n
    dims, axis = list(x.shape.dims), int(attrs.get("axis", 0))
    if not -len(dims) <= axis < len(dims):
        raise _fail(op_type, name, f"axis {axis} is out of range for value {x.shape}")
    axis %= len(dims)
    total = dims[axis]
    if op_type == "Split":
        if n <= 0 or (total is not None and total % n):
            raise _fail(op_type, name, f"dimension {axis} of {x.shape} does not split evenly "
                        f"into {n} parts")
        sizes = [None if total is None else total // n] * n
    elif total is not None and sum(sizes) != total:
        raise _fail(op_type, name, f"size_splits {sizes} do not add up to dimension {axis} "
                    f"of {x.shape}")
    out = []
    for s in sizes:
        d = list(dims)
        d[axis] = s
        out.append((x.dtype, TensorShape(d)))
    return out


def mirror_pad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """``MirrorPad``: each dimension grown by its pair; ``MirrorPadGrad``: shrunk by it.
    REFLECT needs each pad below the dimension, SYMMETRIC at most the dimension."""
    x, pairs = inputs[0], [list(p) for p in attrs["paddings"]]
    mode = str(attrs.get("mode", "REFLECT")).upper()
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise _fail(op_type, name, f"mode must be REFLECT or SYMMETRIC, got {mode!r}")
    if x.shape.rank is None:
        return [(x.dtype, TensorShape([None] * len(pairs)))]
    if len(pairs) != x.shape.rank or any(v < 0 for p in pairs for v in p):
        raise _fail(op_type, name, f"paddings {pairs} need one non-negative [before, after] pair "
                    f"per dimension of {x.shape}")
    sign = 1 if op_type == "MirrorPad" else -1
    out = []
    for d, (a, b) in zip(x.shape.as_list(), pairs):
        if d is not None and op_type == "MirrorPad":
            limit = d - 1 if mode == "REFLECT" else d
            if a > limit or b > limit:
                raise _fail(op_type, name, f"paddings {pairs} must be at most {limit} in a "
                            f"dimension of size {d} for mode {mode} ({x.shape})")
        out.append(None if d is None else d + sign * (a + b))
    return [(x.dtype, TensorShape(out))]


def multinomial(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    logits = inputs[0]
    if logits.shape.rank is not None and logits.shape.rank != 2:
        raise _fail(op_type, name, f"logits must be [batch, classes], got {logits.shape}")
    batch = None if logits.shape.rank is None else logits.shape.dims[0]
    return [(dtypes.as_dtype(attrs.get("output_dtype", "int64")),
             TensorShape([batch, int(attrs["num_samples"])]))]


def where_coordinates(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    rank = inputs[0].shape.rank
    return [(dtypes.int64, TensorShape([None, rank]))]


# -- the entries ---------------------------------------------------------------------------
_X, _XY = ("x",), ("x", "y")
UNARY_FLOAT = ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
               "Atanh", "Log1p", "Expm1", "Rsqrt", "Erf", "Erfc", "Lgamma", "Digamma",
               "Ceil", "Rint", "Softplus", "Softsign", "Elu", "Selu")
UNARY_NUMERIC = ("Round", "Reciprocal", "Relu6", "LeakyRelu")
PREDICATES = ("IsNan", "IsInf", "IsFinite")
BINARY = ("FloorDiv", "FloorMod", "SquaredDifference", "Atan2", "Xlogy", "Xdivy", "DivNoNan")
# TF's activation gradient ops: (gradients, outputs) or (gradients, features)
ACTIVATION_GRADS = {"EluGrad": ("gradients", "outputs"), "SeluGrad": ("gradients", "outputs"),
                    "Relu6Grad": ("gradients", "features"),
                    "LeakyReluGrad": ("gradients", "features"),
                    "SoftplusGrad": ("gradients", "features"),
                    "SoftsignGrad": ("gradients", "features")}
# TF1's remaining optimizers' dense updates: inputs after [var, *slots], and the slots
APPLY_OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ApplyAdadelta": (("lr", "rho", "epsilon", "grad"), ("accum", "accum_update")),
    "ApplyFtrl": (("grad", "lr", "l1", "l2", "lr_power"), ("accum", "linear")),
    "ApplyFtrlV2": (("grad", "lr", "l1", "l2", "l2_shrinkage", "lr_power"), ("accum", "linear")),
    "ApplyProximalAdagrad": (("lr", "l1", "l2", "grad"), ("accum",)),
    "ApplyProximalGradientDescent": (("alpha", "l1", "l2", "delta"), ()),
    "ApplyAdagradDA": (("grad", "lr", "l1", "l2", "global_step"),
                       ("gradient_accumulator", "gradient_squared_accumulator")),
}

ENTRIES: list[dict[str, Any]] = [
    *({"name": t, "inputs": _X, "shape_fn": op_shapes.float_unary} for t in UNARY_FLOAT),
    *({"name": t, "inputs": _X, "shape_fn": numeric_same} for t in UNARY_NUMERIC),
    *({"name": t, "inputs": _X, "shape_fn": predicate} for t in PREDICATES),
    *({"name": t, "inputs": _XY, "shape_fn": op_shapes.binary} for t in BINARY),
    *({"name": t, "inputs": names, "shape_fn": op_shapes.activation_grad}
      for t, names in ACTIVATION_GRADS.items()),
    {"name": "All", "inputs": _X, "shape_fn": bool_reduction},
    {"name": "Any", "inputs": _X, "shape_fn": bool_reduction},
    {"name": "ArgMin", "inputs": _X, "shape_fn": op_shapes.argmax},
    {"name": "Cumsum", "inputs": _X, "shape_fn": numeric_same},
    {"name": "Cumprod", "inputs": _X, "shape_fn": numeric_same},
    {"name": "OneHot", "inputs": ("indices",), "shape_fn": one_hot},
    {"name": "Range", "shape_fn": range_},
    {"name": "Squeeze", "inputs": ("input",), "shape_fn": squeeze},
    {"name": "Pack", "inputs": ("values*",), "shape_fn": pack},
    {"name": "Unpack", "inputs": ("value",), "shape_fn": unpack},
    {"name": "Split", "inputs": ("value",), "shape_fn": split},
    {"name": "SplitV", "inputs": ("value",), "shape_fn": split},
    {"name": "Where", "inputs": ("input",), "shape_fn": where_coordinates},
    # tf.pad's REFLECT and SYMMETRIC modes (paddings an attr, as Pad's static form)
    {"name": "MirrorPad", "inputs": ("input",), "shape_fn": mirror_pad},
    {"name": "MirrorPadGrad", "inputs": ("input",), "shape_fn": mirror_pad},
    {"name": "CheckNumerics", "inputs": ("tensor",), "shape_fn": op_shapes.float_unary},
    {"name": "TruncatedNormal", "shape_fn": op_shapes.from_attrs},
    # draws fixed by their seed alone (TF's stateless ops; shape and seed as attrs here)
    *({"name": t, "shape_fn": op_shapes.from_attrs}
      for t in ("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal")),
    {"name": "Multinomial", "inputs": ("logits",), "shape_fn": multinomial},
    *({"name": t, "inputs": inputs, "is_stateful": True, "is_update": True, "slot_attrs": slots}
      for t, (inputs, slots) in APPLY_OPS.items()),
]
