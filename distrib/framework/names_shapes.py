"""Shape functions and catalogue entries of TF's everyday names that real
TF2 programs call (issue 39's remainder): the Python-function ops
(``PyFunc``, ``EagerPyFunc``), ``Fill``, ``Size``, ``Rank``, ``LinSpace``,
``Roll``, ``StringFormat``/``PrintV2`` and ``Assert`` (``tf.print``, the
``tf.debugging`` asserts), ``GatherNd``, ``ScatterNd``, the
``TensorScatter*`` ops, ``Einsum``, ``MatrixInverse``,
``MatrixDeterminant``, ``DepthToSpace``/``SpaceToDepth`` and
``LowerBound``/``UpperBound`` (``tf.searchsorted``).

Names, input orders and attrs are TF's (array_ops.cc, script_ops.cc,
logging_ops.cc, linalg_ops.cc). The ops a program runs for their effect
(``PrintV2``, ``Assert``) or that call a Python function (which may have
any, as TF marks them stateful) have side effects: a traced function runs
them unfetched and the graph optimizer never folds them. The Python
function ops' outputs are declared by their builder (``Tout``; no shape
function). Kernels: kernels/cpu/py_func.py, everyday_array.py,
gather_nd.py, linalg.py; builders: distrib.ops.py_func_ops,
everyday_ops, nd_ops, linalg_ops, asserts.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.gather_shapes import const_value
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape

__all__ = ["ENTRIES", "einsum_output"]

_UNKNOWN = TensorShape(None)


def _fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


def _dims(t: Any) -> list | None:
    return t.shape.as_list()


def fill(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dims, value = inputs
    if not dims.dtype.is_integer or dims.shape.rank not in (None, 1):
        raise _fail(op_type, name, f"dims must be an integer vector, got {dims.dtype.name} "
                    f"{dims.shape}")
    if value.shape.rank not in (None, 0):
        raise _fail(op_type, name, f"value must be a scalar, got shape {value.shape}")
    v = const_value(dims)
    if v is not None:
        shape = [int(d) for d in v.reshape(-1)]
        if any(d < 0 for d in shape):
            raise _fail(op_type, name, f"dims {shape} must be non-negative")
        return [(value.dtype, TensorShape(shape))]
    n = _dims(dims)
    return [(value.dtype, TensorShape(None if n is None or n[0] is None else [None] * n[0]))]


def size(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs.get("out_type") or "int32"), TensorShape([]))]


def rank(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.int32, TensorShape([]))]


def lin_space(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    start, stop, num = inputs
    if not start.dtype.is_floating or stop.dtype != start.dtype:
        raise _fail(op_type, name, f"start and stop must be floats of one dtype, got "
                    f"{start.dtype.name} and {stop.dtype.name}")
    if not num.dtype.is_integer:
        raise _fail(op_type, name, f"num must be an integer, got {num.dtype.name}")
    for t, what in ((start, "start"), (stop, "stop"), (num, "num")):
        if t.shape.rank not in (None, 0):
            raise _fail(op_type, name, f"{what} must be a scalar, got shape {t.shape}")
    n = const_value(num)
    if n is not None and int(n) <= 0:
        raise _fail(op_type, name, f"Requires num > 0: {int(n)}")
    return [(start.dtype, TensorShape([None if n is None else int(n)]))]


def same_as_first(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(inputs[0].dtype, inputs[0].shape)]


def roll(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    for t, what in ((inputs[1], "shift"), (inputs[2], "axis")):
        if not t.dtype.is_integer or t.shape.rank not in (None, 0, 1):
            raise _fail(op_type, name, f"{what} must be an integer scalar or vector, got "
                        f"{t.dtype.name} {t.shape}")
    return same_as_first(op_type, name, inputs, attrs)


def _space(op_type: str, name: str, x: Any, attrs: dict, to_space: bool) -> list[Spec]:
    b = int(attrs.get("block_size", 0))
    if b < 2:
        raise _fail(op_type, name, f"Block size should be > 1, got {b}")
    dims = _dims(x)
    if dims is None:
        return [(x.dtype, TensorShape([None] * 4))]
    if len(dims) != 4:
        raise _fail(op_type, name, f"input must be 4-D, got shape {x.shape}")
    nchw = (attrs.get("data_format") or "NHWC") == "NCHW"
    n, h, w, c = (dims[0], dims[2], dims[3], dims[1]) if nchw else dims

    def scale(d: Any, f: int, div: bool, what: str) -> Any:
        if d is None:
            return None
        if div and d % f:
            raise _fail(op_type, name, f"{what} {d} should be divisible by {f}")
        return d // f if div else d * f
    if to_space:
        c, h, w = (scale(c, b * b, True, "Input depth dimension"), scale(h, b, False, ""),
                   scale(w, b, False, ""))
    else:
        h, w, c = (scale(h, b, True, "Image height"), scale(w, b, True, "Image width"),
                   scale(c, b * b, False, ""))
    return [(x.dtype, TensorShape([n, c, h, w] if nchw else [n, h, w, c]))]


def depth_to_space(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return _space(op_type, name, inputs[0], attrs, True)


def space_to_depth(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return _space(op_type, name, inputs[0], attrs, False)


def bound(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    seq, values = inputs
    if seq.dtype != values.dtype:
        raise _fail(op_type, name, f"sorted_inputs and values must have one dtype, got "
                    f"{seq.dtype.name} and {values.dtype.name}")
    a, b = _dims(seq), _dims(values)
    if a is not None and b is not None and (len(a) != len(b) or not TensorShape(a[:-1])
                                            .is_compatible_with(TensorShape(b[:-1]))):
        raise _fail(op_type, name, f"sorted_inputs {seq.shape} and values {values.shape} must "
                    "have the same leading dimensions (all but the last)")
    return [(dtypes.as_dtype(attrs.get("out_type") or "int32"), values.shape)]


def string_format(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    count = str(attrs.get("template", "")).count(str(attrs.get("placeholder", "{}")))
    if count != len(inputs):
        raise _fail(op_type, name, f"{len(inputs)} inputs but the template "
                    f"{attrs.get('template')!r} has {count} placeholders")
    return [(dtypes.string, TensorShape([]))]


def print_v2(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    if inputs[0].dtype != dtypes.string or inputs[0].shape.rank not in (None, 0):
        raise _fail(op_type, name, f"input must be a string scalar, got {inputs[0].dtype.name} "
                    f"{inputs[0].shape}")
    return []


def assert_(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    cond = inputs[0]
    if cond.dtype != dtypes.bool or cond.shape.rank not in (None, 0):
        raise _fail(op_type, name, f"condition must be a bool scalar, got {cond.dtype.name} "
                    f"{cond.shape}")
    return []


# -- n-dimensional indices ------------------------------------------------------------------
def _index_depth(op_type: str, name: str, indices: Any) -> int | None:
    if not indices.dtype.is_integer:
        raise _fail(op_type, name, f"indices must be int32 or int64, got {indices.dtype.name}")
    dims = _dims(indices)
    if dims is not None and not dims:
        raise _fail(op_type, name, "indices must be at least a vector, got a scalar")
    return None if dims is None else dims[-1]


def gather_nd(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    params, indices = inputs
    k = _index_depth(op_type, name, indices)
    p, i = _dims(params), _dims(indices)
    if p is None or i is None or k is None:
        return [(params.dtype, _UNKNOWN)]
    if k > len(p):
        raise _fail(op_type, name, f"the index depth {k} (indices' last dimension) exceeds "
                    f"the rank of params {params.shape}")
    return [(params.dtype, TensorShape(i[:-1] + p[k:]))]


def _updates_fit(op_type: str, name: str, indices: Any, updates: Any, shape: Any) -> None:
    k, i, u = _index_depth(op_type, name, indices), _dims(indices), _dims(updates)
    if shape is None or i is None or u is None or k is None:
        return
    if k > len(shape):
        raise _fail(op_type, name, f"the index depth {k} exceeds the rank of shape {shape}")
    want = TensorShape(i[:-1] + list(shape[k:]))
    if not want.is_compatible_with(TensorShape(u)):
        raise _fail(op_type, name, f"updates must have shape indices.shape[:-1] + "
                    f"shape[indices.shape[-1]:] = {want}, got {updates.shape}")


def scatter_nd(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    indices, updates, shape = inputs
    if not shape.dtype.is_integer or shape.shape.rank not in (None, 1):
        raise _fail(op_type, name, f"shape must be an integer vector, got {shape.dtype.name} "
                    f"{shape.shape}")
    v = const_value(shape)
    dims = None if v is None else [int(d) for d in v.reshape(-1)]
    _updates_fit(op_type, name, indices, updates, dims)
    return [(updates.dtype, TensorShape(dims))]


def tensor_scatter(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    tensor, indices, updates = inputs
    if updates.dtype != tensor.dtype:
        raise _fail(op_type, name, f"updates must be {tensor.dtype.name}, got "
                    f"{updates.dtype.name}")
    _updates_fit(op_type, name, indices, updates, _dims(tensor))
    return [(tensor.dtype, tensor.shape)]


# -- linear algebra --------------------------------------------------------------------------
def _parse_equation(equation: str, ranks: list) -> tuple[list[str], str]:
    """The inputs' subscripts and the output's, ``...`` expanded to capital
    letters (numpy's rules: the output without ``->`` is the letters seen
    once, sorted, after the broadcast dimensions)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"the equation has {len(terms)} operands, {len(ranks)} inputs given")
    n_ell = 0
    for t, r in zip(terms, ranks):
        if "..." in t and r is not None:
            n_ell = max(n_ell, r - (len(t) - 3))
    ell = "".join(chr(ord("A") + j) for j in range(n_ell))
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = (r - (len(t) - 3)) if r is not None else n_ell
            t = t.replace("...", ell[n_ell - k:] if k else "")
        if r is not None and len(t) != r:
            raise ValueError(f"operand subscripts {t!r} do not match an input of rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        letters = "".join(out_terms)
        out = ell + "".join(sorted(c for c in set(letters) if c.islower() and
                                   letters.count(c) == 1))
    return out_terms, out


def einsum_output(equation: str, shapes: list) -> TensorShape:
    """The output shape of ``equation`` on inputs of ``shapes`` (lists, None: unknown)."""
    terms, out = _parse_equation(equation, [None if s is None else len(s) for s in shapes])
    size: dict[str, Any] = {}
    for t, s in zip(terms, shapes):
        if s is None:
            continue
        for c, d in zip(t, s):
            known = size.get(c)
            if d is None:
                size.setdefault(c, None)
            elif known is None or (c.isupper() and known == 1):
                size[c] = d
            elif known != d and not (c.isupper() and d == 1):
                raise ValueError(f"dimension {c!r} is {known} in one input and {d} in another")
    return TensorShape([size.get(c) for c in out])


def einsum(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    if not inputs:
        raise _fail(op_type, name, "needs at least one input")
    equation = str(attrs.get("equation", ""))
    try:
        shape = einsum_output(equation, [_dims(t) for t in inputs])
    except ValueError as e:
        raise _fail(op_type, name, f"equation {equation!r}: {e}") from None
    if any(t.dtype != inputs[0].dtype for t in inputs):
        raise _fail(op_type, name, f"inputs must have one dtype, got "
                    f"{[t.dtype.name for t in inputs]}")
    return [(inputs[0].dtype, shape)]


def _square(op_type: str, name: str, x: Any) -> list | None:
    if not x.dtype.is_floating:
        raise _fail(op_type, name, f"needs a float tensor, got {x.dtype.name}")
    dims = _dims(x)
    if dims is not None and (len(dims) < 2 or (None not in dims[-2:] and dims[-1] != dims[-2])):
        raise _fail(op_type, name, f"Input must be a batch of square matrices ([..., M, M]), "
                    f"got shape {x.shape}")
    return dims


def matrix_inverse(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _square(op_type, name, inputs[0])
    return [(inputs[0].dtype, inputs[0].shape)]


def matrix_determinant(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    dims = _square(op_type, name, inputs[0])
    return [(inputs[0].dtype, TensorShape(None if dims is None else dims[:-2]))]


_EFFECTS: dict[str, Any] = {"has_side_effects": True}

# register_op's keywords of each entry (op_def registers these)
ENTRIES: list[dict[str, Any]] = [
    {"name": "PyFunc", "inputs": ("input*",), **_EFFECTS},
    {"name": "EagerPyFunc", "inputs": ("input*",), **_EFFECTS},
    {"name": "Fill", "inputs": ("dims", "value"), "shape_fn": fill},
    {"name": "Size", "inputs": ("input",), "shape_fn": size, "shape_only_inputs": (0,)},
    {"name": "Rank", "inputs": ("input",), "shape_fn": rank, "shape_only_inputs": (0,)},
    {"name": "LinSpace", "inputs": ("start", "stop", "num"), "shape_fn": lin_space},
    {"name": "Roll", "inputs": ("input", "shift", "axis"), "shape_fn": roll},
    {"name": "DepthToSpace", "inputs": ("input",), "shape_fn": depth_to_space},
    {"name": "SpaceToDepth", "inputs": ("input",), "shape_fn": space_to_depth},
    {"name": "LowerBound", "inputs": ("sorted_inputs", "values"), "shape_fn": bound},
    {"name": "UpperBound", "inputs": ("sorted_inputs", "values"), "shape_fn": bound},
    {"name": "StringFormat", "inputs": ("inputs*",), "shape_fn": string_format},
    {"name": "PrintV2", "inputs": ("input",), "shape_fn": print_v2, **_EFFECTS},
    {"name": "Assert", "inputs": ("condition", "data*"), "shape_fn": assert_, **_EFFECTS},
    {"name": "GatherNd", "inputs": ("params", "indices"), "shape_fn": gather_nd},
    {"name": "ScatterNd", "inputs": ("indices", "updates", "shape"), "shape_fn": scatter_nd},
    {"name": "TensorScatterUpdate", "inputs": ("tensor", "indices", "updates"),
     "shape_fn": tensor_scatter},
    {"name": "TensorScatterAdd", "inputs": ("tensor", "indices", "updates"),
     "shape_fn": tensor_scatter},
    {"name": "TensorScatterSub", "inputs": ("tensor", "indices", "updates"),
     "shape_fn": tensor_scatter},
    {"name": "Einsum", "inputs": ("inputs*",), "shape_fn": einsum},
    {"name": "MatrixInverse", "inputs": ("input",), "shape_fn": matrix_inverse},
    {"name": "MatrixDeterminant", "inputs": ("input",), "shape_fn": matrix_determinant},
]
