"""Static shape and dtype inference: the shape functions of the op catalogue.

Each function takes the op's type, its final name, its input tensors and attrs
(GraphDef form) and returns its outputs as (dtype, TensorShape) pairs, or
raises InvalidArgumentError naming the op and the shapes or dtypes that
disagree, at build time, as TF does. Unknown dims (None) and unknown ranks
pass silently: only two known, conflicting facts are an error.

Which op type uses which function is a fact of its catalogue entry
(``shape_fn`` in :mod:`distrib.framework.op_def`, TF's ``SetShapeFn``), not
kept here, so that one file says everything about an op type; one function
serves every op type with the same rule (``binary``: Add, Sub, Mul ...).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.dtypes import DType
from distrib.framework.tensor_shape import TensorShape, unknown_shape

__all__ = [
    "Spec", "ShapeFn", "broadcast_shape", "reduced_shape", "normalize_axis", "check_shape_arg",
    "binary", "compare", "logical", "logical_not", "float_unary", "numeric_unary", "unchanged",
    "cast", "activation_grad", "const", "from_attrs", "no_outputs", "matmul", "bias_add",
    "bias_add_grad", "cross_entropy", "reduction", "argmax", "reshape", "transpose",
    "shape_vector", "to_shape_of", "concat", "slice_axis",
]

Spec = tuple[DType, TensorShape]
# fn(op_type, name, inputs, attrs) -> the outputs' (dtype, shape)
ShapeFn = Callable[[str, str, list, dict], list[Spec]]


def _fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


def _same_dtype(op_type: str, name: str, inputs: list) -> DType:
    first = inputs[0].dtype
    for t in inputs[1:]:
        if t.dtype != first:
            raise _fail(op_type, name, f"inputs have different dtypes: {inputs[0].name} is "
                        f"{first.name} {inputs[0].shape}, {t.name} is {t.dtype.name} {t.shape}; "
                        "convert one with dt.cast")
    return first


def _need(op_type: str, name: str, t: Any, ok: Callable[[DType], bool], what: str) -> None:
    if not ok(t.dtype):
        raise _fail(op_type, name, f"input {t.name} has dtype {t.dtype.name}, but {op_type} "
                    f"needs a {what} tensor")


def broadcast_shape(a: TensorShape, b: TensorShape, op_type: str = "", name: str = "") -> TensorShape:
    """numpy broadcasting over partial shapes."""
    if a.rank is None or b.rank is None:
        return unknown_shape()
    da, db = list(a.dims), list(b.dims)
    n = max(len(da), len(db))
    da, db = [1] * (n - len(da)) + da, [1] * (n - len(db)) + db
    out: list[int | None] = []
    for x, y in zip(da, db):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            raise _fail(op_type, name, f"shapes {a} and {b} are not broadcast-compatible "
                        f"(dimension {x} vs {y})")
    return TensorShape(out)


# -- elementwise ---------------------------------------------------------------
def binary(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dtype = _same_dtype(op_type, name, inputs)
    if dtype == dtypes.string or dtype == dtypes.bool:
        raise _fail(op_type, name, f"{op_type} needs numeric tensors, got {dtype.name}")
    return [(dtype, broadcast_shape(inputs[0].shape, inputs[1].shape, op_type, name))]


def compare(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _same_dtype(op_type, name, inputs)
    return [(dtypes.bool, broadcast_shape(inputs[0].shape, inputs[1].shape, op_type, name))]


def logical(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    for t in inputs:
        _need(op_type, name, t, lambda d: d.is_bool, "bool")
    return [(dtypes.bool, broadcast_shape(inputs[0].shape, inputs[1].shape, op_type, name))]


def logical_not(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _need(op_type, name, inputs[0], lambda d: d.is_bool, "bool")
    return [(dtypes.bool, inputs[0].shape)]


def float_unary(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _need(op_type, name, inputs[0], lambda d: d.is_floating, "floating-point")
    if op_type in ("Softmax", "LogSoftmax") and inputs[0].shape.rank == 0:
        raise _fail(op_type, name, "logits must have rank >= 1, got a scalar")
    return [(inputs[0].dtype, inputs[0].shape)]


def numeric_unary(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _need(op_type, name, inputs[0], lambda d: d.is_numeric, "numeric")
    return [(inputs[0].dtype, inputs[0].shape)]


def unchanged(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(inputs[0].dtype, inputs[0].shape)]


def cast(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs["dtype"]), inputs[0].shape)]


def activation_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dtype = _same_dtype(op_type, name, inputs)
    try:
        shape = inputs[0].shape.merge_with(inputs[1].shape)
    except ValueError:
        raise _fail(op_type, name, f"shapes differ: {inputs[0].shape} vs {inputs[1].shape}") from None
    return [(dtype, shape)]


# -- sources ---------------------------------------------------------------------
def const(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape(np.shape(attrs["value"])))]


def from_attrs(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape(attrs["shape"]))]


def no_outputs(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return []


def string_scalar(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """One string scalar: a serialized ``Summary`` (the summary ops)."""
    return [(dtypes.string, TensorShape([]))]


# -- linear algebra / nn -----------------------------------------------------------
def matmul(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    a, b = inputs
    dtype = _same_dtype(op_type, name, inputs)
    _need(op_type, name, a, lambda d: d.is_numeric, "numeric")
    for t in (a, b):
        if t.shape.rank is not None and t.shape.rank != 2:
            raise _fail(op_type, name, f"MatMul needs rank-2 inputs; {t.name} has shape {t.shape}"
                        f" (a {a.shape} x b {b.shape})")
    ad = a.shape.dims or (None, None)
    bd = b.shape.dims or (None, None)
    m, k1 = (ad[1], ad[0]) if attrs.get("transpose_a") else (ad[0], ad[1])
    k2, n = (bd[1], bd[0]) if attrs.get("transpose_b") else (bd[0], bd[1])
    if k1 is not None and k2 is not None and k1 != k2:
        raise _fail(op_type, name, f"inner dimensions differ: a {a.shape} x b {b.shape} "
                    f"(transpose_a={bool(attrs.get('transpose_a'))}, "
                    f"transpose_b={bool(attrs.get('transpose_b'))}): {k1} != {k2}")
    return [(dtype, TensorShape([m, n]))]


def bias_add(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, bias = inputs
    dtype = _same_dtype(op_type, name, inputs)
    if bias.shape.rank is not None and bias.shape.rank != 1:
        raise _fail(op_type, name, f"bias must be a vector; value {x.shape}, bias {bias.shape}")
    if x.shape.rank is not None and x.shape.rank < 2:
        raise _fail(op_type, name, f"value must have rank >= 2; value {x.shape}, bias {bias.shape}")
    if x.shape.rank is not None and bias.shape.rank is not None:
        last, nb = x.shape.dims[-1], bias.shape.dims[0]
        if last is not None and nb is not None and last != nb:
            raise _fail(op_type, name, f"bias length {nb} != last dimension of value: "
                        f"value {x.shape}, bias {bias.shape}")
    return [(dtype, x.shape)]


def bias_add_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dy = inputs[0]
    return [(dy.dtype, TensorShape([None if dy.shape.rank is None else dy.shape.dims[-1]]))]


def cross_entropy(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    logits, labels = inputs
    _need(op_type, name, logits, lambda d: d.is_floating, "floating-point")
    if logits.shape.rank is not None and logits.shape.rank != 2:
        raise _fail(op_type, name, f"logits must be [batch, classes]; logits {logits.shape}, "
                    f"labels {labels.shape}")
    ld = logits.shape.dims or (None, None)
    if op_type == "SparseSoftmaxCrossEntropyWithLogits":
        _need(op_type, name, labels, lambda d: d in (dtypes.int32, dtypes.int64), "int32/int64")
        ok = labels.shape.is_compatible_with([ld[0]])
    else:
        _same_dtype(op_type, name, inputs)
        ok = labels.shape.is_compatible_with(ld)
    if not ok:
        raise _fail(op_type, name, f"labels and logits disagree: logits {logits.shape}, "
                    f"labels {labels.shape}")
    batch = ld[0] if ld[0] is not None else (labels.shape.dims or (None,))[0]
    return [(logits.dtype, TensorShape([batch])), (logits.dtype, TensorShape([batch, ld[1]]))]


# -- reductions ----------------------------------------------------------------------
def normalize_axis(axis: Any, rank: int | None, op_type: str, name: str, shape: Any) -> Any:
    """None, an int or a sorted list; negative axes made positive when the rank is known."""
    if axis is None:
        return None
    single = isinstance(axis, (int, np.integer))
    axes = [int(axis)] if single else [int(a) for a in axis]
    if rank is not None:
        for a in axes:
            if not -max(rank, 1) <= a < max(rank, 1):
                raise _fail(op_type, name, f"axis {a} is out of range for input of shape {shape}")
        axes = [a % max(rank, 1) for a in axes]
    return axes[0] if single else sorted(set(axes))


def reduced_shape(shape: TensorShape, axis: Any, keepdims: bool) -> TensorShape:
    if shape.rank is None:
        return unknown_shape()
    if axis is None:
        return TensorShape([1] * shape.rank if keepdims else [])
    axes = {a % max(shape.rank, 1) for a in ([axis] if isinstance(axis, int) else axis)}
    if keepdims:
        return TensorShape([1 if i in axes else d for i, d in enumerate(shape.dims)])
    return TensorShape([d for i, d in enumerate(shape.dims) if i not in axes])


def reduction(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    _need(op_type, name, x, lambda d: d.is_numeric or (d.is_bool and op_type in ("Min", "Max")),
          "numeric")
    return [(x.dtype, reduced_shape(x.shape, attrs.get("axis"), bool(attrs.get("keepdims"))))]


def argmax(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    _need(op_type, name, x, lambda d: d.is_numeric, "numeric")
    return [(dtypes.as_dtype(attrs.get("output_type", "int64")),
             reduced_shape(x.shape, attrs["axis"], False))]


# -- shape ops -------------------------------------------------------------------------
def reshape(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, target = inputs[0], list(attrs["shape"])
    if sum(1 for d in target if d == -1) > 1:
        raise _fail(op_type, name, f"shape {target} has more than one -1")
    known = int(np.prod([d for d in target if d != -1])) if target else 1
    n = x.shape.num_elements()
    if -1 in target:
        if n is not None and (known == 0 or n % known):
            raise _fail(op_type, name, f"cannot reshape {x.shape} ({n} elements) to {target}")
        fill = n // known if n is not None else None
        return [(x.dtype, TensorShape([fill if d == -1 else d for d in target]))]
    if n is not None and n != known:
        raise _fail(op_type, name, f"cannot reshape {x.shape} ({n} elements) to {target} "
                    f"({known} elements)")
    return [(x.dtype, TensorShape(target))]


def transpose(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, perm = inputs[0], attrs.get("perm")
    if x.shape.rank is None:
        return [(x.dtype, unknown_shape(None if perm is None else len(perm)))]
    dims = x.shape.dims
    if perm is None:
        return [(x.dtype, TensorShape(dims[::-1]))]
    if sorted(perm) != list(range(len(dims))):
        raise _fail(op_type, name, f"perm {list(perm)} is not a permutation of the axes of {x.shape}")
    return [(x.dtype, TensorShape([dims[p] for p in perm]))]


def shape_vector(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs.get("out_type", "int32")), TensorShape([inputs[0].shape.rank]))]


def to_shape_of(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(inputs[0].dtype, inputs[1].shape)]


def concat(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """ConcatV2: every input of one dtype and rank, equal off ``axis``."""
    dtype = inputs[0].dtype
    if any(t.dtype != dtype for t in inputs):
        raise _fail(op_type, name, f"every input must have dtype {dtype.name}, got "
                    f"{[t.dtype.name for t in inputs]}")
    ranks = {t.shape.rank for t in inputs if t.shape.rank is not None}
    if not ranks:
        return [(dtype, TensorShape(None))]
    if len(ranks) > 1:
        raise _fail(op_type, name, f"inputs of different ranks {[str(t.shape) for t in inputs]}")
    rank = ranks.pop()
    axis = int(attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise _fail(op_type, name, f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    dims: list[int | None] = [None] * rank
    total: int | None = 0
    for t in inputs:
        if t.shape.rank is None:
            total = None
            continue
        for i, d in enumerate(t.shape.dims):
            if i == axis:
                total = None if total is None or d is None else total + d
            elif d is not None:
                if dims[i] is not None and dims[i] != d:
                    raise _fail(op_type, name, f"dimension {i} differs between inputs "
                                f"{[str(x.shape) for x in inputs]}")
                dims[i] = d
    dims[axis] = total
    return [(dtype, TensorShape(dims))]


def slice_axis(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    if x.shape.rank is None:
        return [(x.dtype, TensorShape(None))]
    dims = list(x.shape.dims)
    dims[int(attrs["axis"]) % len(dims)] = int(attrs["size"])
    return [(x.dtype, TensorShape(dims))]


def check_shape_arg(op_type: str, shape: Sequence[Any]) -> list[int]:
    """A fully known shape argument (zeros, random_normal...) as a list of ints."""
    if isinstance(shape, TensorShape):
        shape = shape.as_list()
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        dims = [-1]
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{op_type}: shape {shape!r} must be a list of non-negative "
                                   "ints (fully known; use zeros_like for dynamic shapes)")
    return dims
