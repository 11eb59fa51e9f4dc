"""Op builders: ``dt.constant``, ``dt.matmul``, ``dt.reduce_sum`` ... (TF1 signatures).

Every builder converts its arguments with :func:`convert_to_tensor`, adds one
op of a type from ``docs/ops.md`` to the default graph, and returns its output
(or the op, for ``group``/``no_op``). Shapes and dtypes are checked when the
op is built (by its shape function in the op catalogue,
:mod:`distrib.framework.op_def`), so a mismatch fails at the line that made it,
naming the op and both shapes.

Conversion follows TF: a Python value next to a tensor takes the tensor's
dtype (``2.0 * x`` is float64 when x is), a bare Python float is float32 and a
bare int int32, numpy arrays keep their dtype unless one is asked for.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_def, op_shapes
from distrib.framework.dtypes import DType
from distrib.framework.graph import Graph, Operation, Tensor, get_default_graph, name_scope
from distrib.framework.operation import bind_operators
from distrib.framework.tensor_shape import TensorShape

__all__ = [
    "convert_to_tensor", "constant", "placeholder", "matmul", "add", "subtract", "multiply",
    "divide", "truediv", "log", "exp", "square", "sqrt", "negative", "abs", "sign", "maximum",
    "minimum", "pow", "reduce_sum", "reduce_mean", "reduce_min", "reduce_max", "reduce_prod",
    "argmax", "equal", "not_equal", "less", "greater", "less_equal", "greater_equal",
    "logical_and", "logical_not", "logical_or", "cast", "reshape", "transpose", "zeros", "ones",
    "zeros_like", "ones_like", "random_normal", "random_uniform", "identity", "group", "no_op",
    "shape", "sigmoid", "tanh", "add_n", "set_random_seed", "is_tensor",
]


# The builders' shared steps (make_op ... convert_operand) are public names because
# the sibling builder modules (array_ops, nn, gradients) build their ops with them;
# they stay out of __all__, so they are not part of ``dt.*``.
def make_op(op_type: str, inputs: Sequence[Tensor], attrs: dict | None, name: str | None,
            graph: Graph | None = None) -> Operation:
    """Add one op with inferred outputs to the inputs' graph (else the default graph)."""
    if graph is None:
        graph = inputs[0].graph if inputs else get_default_graph()
    return graph.create_op(op_type, inputs, attrs, name,
                           infer=lambda n, i, a: op_def.infer(op_type, n, i, a))


def op_output(op_type: str, inputs: Sequence[Tensor], attrs: dict | None, name: str | None) -> Tensor:
    """Add one op (as :func:`make_op`) and return its first output."""
    return make_op(op_type, inputs, attrs, name).outputs[0]


# -- conversion ---------------------------------------------------------------
def is_tensor(x: Any) -> bool:
    """True for a Tensor or a tensor-like object (Variable)."""
    return isinstance(x, Tensor) or hasattr(x, "_as_tensor")


def convert_to_tensor(value: Any, dtype: Any = None, name: str | None = None,
                      preferred_dtype: Any = None) -> Tensor:
    """A Tensor for ``value``: tensors pass through, variables give their value,
    anything else becomes a Const (``dtype`` requested, else inferred as TF does)."""
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if hasattr(value, "_as_tensor") and not isinstance(value, Tensor):
        # the conversion hook of variable-like objects, private by design as TF's
        # ``_as_graph_element``: no unrelated object's public attribute is taken for it
        value = value._as_tensor()  # noqa: SLF001 - the conversion hook
    if isinstance(value, Tensor):
        if want is not None and value.dtype != want:
            raise InvalidArgumentError(
                f"tensor {value.name} has dtype {value.dtype.name}, but {want.name} is needed "
                f"here (shape {value.shape}); convert it with dt.cast(x, dt.{want.name})")
        return value
    if isinstance(value, Operation):
        raise InvalidArgumentError(f"operation {value.name!r} has no value to use as a tensor; "
                                   "use one of its outputs (op.outputs[0])")
    if want is None and preferred_dtype is not None:
        try:
            return constant(value, dtype=preferred_dtype, name=name or "Const")
        except InvalidArgumentError:
            pass
    return constant(value, dtype=want, name=name or "Const")


def _to_numpy(value: Any, dtype: DType | None) -> tuple[np.ndarray, DType]:
    is_np = isinstance(value, (np.ndarray, np.generic))
    try:
        arr = np.asarray(value)
    except ValueError:  # numpy refuses ragged nesting
        arr = np.array([None], dtype=object)
    if arr.dtype == object and not is_np and not _all_strings(arr):
        raise InvalidArgumentError(f"cannot convert {value!r} to a tensor: nested lists must be "
                                   "rectangular and hold numbers, bools or strings")
    if dtype is None:
        dtype = _infer_dtype(arr, is_np, value)
    if not _compatible(arr, dtype, is_np):
        raise InvalidArgumentError(f"cannot convert {value!r} ({arr.dtype}) to a tensor of dtype "
                                   f"{dtype.name}; pass a value of that kind or cast afterwards")
    if dtype is dtypes.string:
        return (arr if arr.dtype.kind in "UO" else arr.astype(str)), dtype
    return arr.astype(dtype.as_numpy_dtype, copy=False), dtype


def _all_strings(arr: np.ndarray) -> bool:
    return all(isinstance(v, (str, bytes)) for v in arr.flat)


def _infer_dtype(arr: np.ndarray, is_np: bool, value: Any) -> DType:
    kind = arr.dtype.kind
    if kind in "USO":
        return dtypes.string
    if is_np:
        return dtypes.as_dtype(arr.dtype)
    if kind == "b":
        return dtypes.bool
    if kind in "iu":
        fits = arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31)
        return dtypes.int32 if fits else dtypes.int64
    if kind == "f":
        return dtypes.float32
    raise InvalidArgumentError(f"cannot convert {value!r} to a tensor (numpy dtype {arr.dtype})")


def _compatible(arr: np.ndarray, dtype: DType, is_np: bool) -> bool:
    kind = arr.dtype.kind
    if dtype is dtypes.string:
        return kind in "USO"
    if kind in "USO":
        return False
    if dtype.is_bool:
        return kind == "b"
    if is_np:  # numpy values are cast, as tf.constant(np_array, dtype=...) does
        return True
    if dtype.is_integer:
        return kind in "iu"
    return kind in "iuf"  # floats take Python ints and floats, not bools (TF)


def constant(value: Any, dtype: Any = None, shape: Any = None, name: str | None = "Const",
             verify_shape: bool = False) -> Tensor:
    """A Const. With ``shape``, a flat list is reshaped and a scalar broadcast, as in TF."""
    arr, dt = _to_numpy(value, None if dtype is None else dtypes.as_dtype(dtype))
    if shape is not None:
        dims = op_shapes.check_shape_arg("Const", shape)
        arr = _fit(arr, dims, verify_shape, name)
    return op_output("Const", [], {"value": arr, "dtype": dt}, name or "Const")


def _fit(arr: np.ndarray, dims: list[int], verify_shape: bool, name: str | None) -> np.ndarray:
    if list(arr.shape) == dims:
        return arr
    need = int(np.prod(dims)) if dims else 1
    if not verify_shape and arr.size == 1:
        return np.full(dims, arr.reshape(()), dtype=arr.dtype)
    if not verify_shape and arr.size == need:
        return arr.reshape(dims)
    raise InvalidArgumentError(f"constant {name!r}: value of shape {list(arr.shape)} "
                               f"({arr.size} elements) does not fit shape {dims} ({need} "
                               "elements); give one value or exactly that many")


def placeholder(dtype: Any, shape: Any = None, name: str | None = None) -> Tensor:
    """A value fed at run time; ``shape`` may hold None dims, or be None (any rank)."""
    dims = None if shape is None else TensorShape(shape).as_list()
    return op_output("Placeholder", [], {"dtype": dtypes.as_dtype(dtype), "shape": dims},
                name or "Placeholder")


def convert_pair(x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """Convert two operands; a non-tensor takes the other's dtype (TF's rule).

    Constants are made in the graph of the tensor operand, not the default graph.
    """
    with _graph_of(x, y).as_default():
        if is_tensor(x):
            x = convert_to_tensor(x)
            return x, convert_to_tensor(y, dtype=None if is_tensor(y) else x.dtype, name="y")
        if is_tensor(y):
            y = convert_to_tensor(y)
            return convert_to_tensor(x, dtype=y.dtype, name="x"), y
        x = convert_to_tensor(x, name="x")
        return x, convert_to_tensor(y, dtype=x.dtype, name="y")


def _graph_of(*values: Any) -> Graph:
    for v in values:
        g = getattr(v, "graph", None)
        if isinstance(g, Graph):
            return g
    return get_default_graph()


def _binary(op_type: str, x: Any, y: Any, name: str | None) -> Tensor:
    # TF's layout: constants made from Python operands live under the op's scope ("add/y")
    with name_scope(name, op_type, [x, y]) as scope:
        x, y = convert_pair(x, y)
        return op_output(op_type, [x, y], None, scope)


def unary_op(op_type: str, x: Any, name: str | None) -> Tensor:
    """An op of ``op_type`` on one operand, converted in its own graph; its output."""
    return op_output(op_type, [convert_operand(x)], None, name or op_type)


def convert_operand(x: Any) -> Tensor:
    """``x`` as a Tensor; a constant made from it goes in the graph of ``x``
    (a tensor's, a variable's), not the default graph."""
    with _graph_of(x).as_default():
        return convert_to_tensor(x)


# -- elementwise ---------------------------------------------------------------
def add(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Add", x, y, name)


def subtract(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Sub", x, y, name)


def multiply(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Mul", x, y, name)


def divide(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x / y`` with TF's truediv rule: integers are cast to float first."""
    with name_scope(name, "truediv", [x, y]) as scope:
        x, y = convert_pair(x, y)
        if x.dtype.is_integer and y.dtype == x.dtype:
            fdt = dtypes.float64 if x.dtype in (dtypes.int32, dtypes.int64) else dtypes.float32
            x, y = cast(x, fdt), cast(y, fdt)
        return op_output("RealDiv", [x, y], None, scope)


truediv = divide


def maximum(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Maximum", x, y, name)


def minimum(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Minimum", x, y, name)


def pow(x: Any, y: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TF's name
    return _binary("Pow", x, y, name)


def log(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Log", x, name)


def exp(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Exp", x, name)


def square(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Square", x, name)


def sqrt(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Sqrt", x, name)


def negative(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Neg", x, name)


def abs(x: Any, name: str | None = None) -> Tensor:  # noqa: A001 - TF's name
    return unary_op("Abs", x, name)


def sign(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Sign", x, name)


def sigmoid(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Sigmoid", x, name)


def tanh(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Tanh", x, name)


def identity(x: Any, name: str | None = None) -> Tensor:
    return unary_op("Identity", x, name)


def stop_gradient(input: Any, name: str | None = None) -> Tensor:  # noqa: A002 (TF's name)
    """``input`` as it is, but a constant to ``gradients`` and ``GradientTape``
    (TF's ``StopGradient``: no gradient flows back through it)."""
    return unary_op("StopGradient", input, name)


def add_n(inputs: Sequence[Any], name: str | None = None) -> Tensor:
    """The sum of same-shaped tensors, as a chain of Adds."""
    if not inputs:
        raise InvalidArgumentError("add_n needs at least one tensor")
    tensors = [convert_operand(t) for t in inputs]
    if len(tensors) == 1:
        return identity(tensors[0], name=name or "AddN")
    total = tensors[0]
    for t in tensors[1:-1]:
        total = add(total, t)
    return add(total, tensors[-1], name=name or "AddN")


# -- comparisons and logic ------------------------------------------------------
def equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Equal", x, y, name)


def not_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("NotEqual", x, y, name)


def less(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Less", x, y, name)


def greater(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("Greater", x, y, name)


def less_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x <= y`` as ``not (x > y)`` (no LessEqual op in the catalogue)."""
    with name_scope(name, "LessEqual", [x, y]) as scope:
        return logical_not(greater(x, y), name=scope)


def greater_equal(x: Any, y: Any, name: str | None = None) -> Tensor:
    with name_scope(name, "GreaterEqual", [x, y]) as scope:
        return logical_not(less(x, y), name=scope)


def logical_and(x: Any, y: Any, name: str | None = None) -> Tensor:
    return _binary("LogicalAnd", x, y, name)


def logical_not(x: Any, name: str | None = None) -> Tensor:
    return unary_op("LogicalNot", x, name)


def logical_or(x: Any, y: Any, name: str | None = None) -> Tensor:
    """``x or y`` as ``not (not x and not y)`` (no LogicalOr op in the catalogue)."""
    with name_scope(name, "LogicalOr", [x, y]) as scope:
        x, y = convert_pair(x, y)
        return logical_not(logical_and(logical_not(x), logical_not(y)), name=scope)


# -- types and shapes -------------------------------------------------------------
def cast(x: Any, dtype: Any, name: str | None = None) -> Tensor:
    """``x`` as ``dtype``; a tensor that already has it is returned unchanged (TF)."""
    want = dtypes.as_dtype(dtype)
    x = convert_operand(x)
    if x.dtype == want:
        return x
    return op_output("Cast", [x], {"dtype": want}, name or "Cast")


def reshape(tensor: Any, shape: Any, name: str | None = None) -> Tensor:
    """Reshape to ``shape`` (ints, at most one -1), or to a runtime int32 shape tensor."""
    x = convert_operand(tensor)
    if isinstance(shape, Tensor):
        # dynamic form: the kernel takes the shape from a second input (docs/ops.md)
        n = shape.shape[0] if shape.shape.rank == 1 else None
        out_shape = TensorShape(None if n is None else [None] * n)
        return x.graph.create_op("Reshape", [x, shape], {"shape": None}, name or "Reshape",
                                 output_specs=[(x.dtype, out_shape)]).outputs[0]
    if isinstance(shape, TensorShape):
        shape = shape.as_list()
    dims = [-1 if d is None else int(d) for d in np.atleast_1d(np.asarray(shape, dtype=object))]
    return op_output("Reshape", [x], {"shape": dims}, name or "Reshape")


def transpose(a: Any, perm: Sequence[int] | None = None, name: str | None = "transpose") -> Tensor:
    perm = None if perm is None else [int(p) for p in perm]
    return op_output("Transpose", [convert_operand(a)], {"perm": perm}, name or "transpose")


def shape(input: Any, name: str | None = None, out_type: Any = dtypes.int32) -> Tensor:  # noqa: A002
    attrs = {} if dtypes.as_dtype(out_type) == dtypes.int32 else {"out_type": out_type}
    return op_output("Shape", [convert_operand(input)], attrs, name or "Shape")


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
           name: str | None = None) -> Tensor:
    with name_scope(name, "MatMul", [a, b]) as scope:
        a, b = convert_pair(a, b)
        return op_output("MatMul", [a, b], {"transpose_a": bool(transpose_a),
                                       "transpose_b": bool(transpose_b)}, scope)


# -- reductions --------------------------------------------------------------------
def _reduce(op_type: str, x: Any, axis: Any, keepdims: Any, name: str | None,
            reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    x = convert_operand(x)
    axis = reduction_indices if axis is None else axis  # TF1's old argument names
    keep = bool(keep_dims if keepdims is None else keepdims)
    axis = op_shapes.normalize_axis(axis, x.shape.rank, op_type, name or op_type, x.shape)
    return op_output(op_type, [x], {"axis": axis, "keepdims": keep}, name or op_type)


def reduce_sum(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
               reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    return _reduce("Sum", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_mean(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
                reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    return _reduce("Mean", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_min(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
               reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    return _reduce("Min", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_max(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
               reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    return _reduce("Max", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def reduce_prod(input_tensor: Any, axis: Any = None, keepdims: Any = None, name: str | None = None,
                reduction_indices: Any = None, keep_dims: Any = None) -> Tensor:
    return _reduce("Prod", input_tensor, axis, keepdims, name, reduction_indices, keep_dims)


def argmax(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002
           dimension: Any = None, output_type: Any = dtypes.int64) -> Tensor:
    """Index of the largest value along ``axis`` (default 0, as TF1's tf.argmax)."""
    x = convert_operand(input)
    axis = dimension if axis is None else axis
    axis = op_shapes.normalize_axis(0 if axis is None else int(axis), x.shape.rank, "ArgMax",
                                    name or "ArgMax", x.shape)
    return op_output("ArgMax", [x], {"axis": axis, "output_type": dtypes.as_dtype(output_type)},
                name or "ArgMax")


# -- sources ---------------------------------------------------------------------------
def _filled(op_type: str, shape: Any, dtype: Any, name: str | None) -> Tensor:
    dims = op_shapes.check_shape_arg(op_type, shape)
    return op_output(op_type, [], {"shape": dims, "dtype": dtypes.as_dtype(dtype)}, name or op_type)


def zeros(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    return _filled("Zeros", shape, dtype, name or "zeros")


def ones(shape: Any, dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    return _filled("Ones", shape, dtype, name or "ones")


def zeros_like(tensor: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    out = op_output("ZerosLike", [convert_operand(tensor)], None, name or "zeros_like")
    return out if dtype is None else cast(out, dtype)


def ones_like(tensor: Any, dtype: Any = None, name: str | None = None) -> Tensor:
    out = op_output("OnesLike", [convert_operand(tensor)], None, name or "ones_like")
    return out if dtype is None else cast(out, dtype)


def set_random_seed(seed: int | None) -> None:
    """The graph-level seed: random ops without their own seed derive one from it (TF1)."""
    get_default_graph().seed = seed


def _seed(seed: int | None) -> int | None:
    if seed is not None:
        return int(seed)
    graph_seed = get_default_graph().seed
    if graph_seed is None:
        return None
    return (int(graph_seed) * 1_000_003 + len(get_default_graph())) % (2**31 - 1)


def random_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = dtypes.float32,
                  seed: int | None = None, name: str | None = None) -> Tensor:
    dims = op_shapes.check_shape_arg("RandomStandardNormal", shape)
    attrs = {"shape": dims, "dtype": dtypes.as_dtype(dtype), "mean": float(mean),
             "stddev": float(stddev), "seed": _seed(seed)}
    return op_output("RandomStandardNormal", [], attrs, name or "random_normal")


def random_uniform(shape: Any, minval: Any = 0, maxval: Any = None, dtype: Any = dtypes.float32,
                   seed: int | None = None, name: str | None = None) -> Tensor:
    dt = dtypes.as_dtype(dtype)
    if dt.is_integer and maxval is None:
        raise InvalidArgumentError("random_uniform with an integer dtype needs maxval (TF1 rule)")
    maxval = 1.0 if maxval is None else maxval
    conv = float if dt.is_floating else int
    attrs = {"shape": op_shapes.check_shape_arg("RandomUniform", shape), "dtype": dt,
             "minval": conv(minval), "maxval": conv(maxval), "seed": _seed(seed)}
    return op_output("RandomUniform", [], attrs, name or "random_uniform")


# -- grouping --------------------------------------------------------------------------
def no_op(name: str | None = None) -> Operation:
    return make_op("NoOp", [], None, name or "NoOp")


def group(*inputs: Any, name: str | None = None) -> Operation:
    """A NoOp that runs after all ``inputs`` (ops, tensors, variables, or lists of them)."""
    flat: list[Any] = []
    for item in inputs:
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    graph = next((x.graph for x in flat if hasattr(x, "graph")), None) or get_default_graph()
    with graph.as_default(), graph.control_dependencies(flat):
        return make_op("NoOp", [], None, name or "group_deps", graph=graph)


# a + b, x @ w, -t ... on any tensor build the ops of this module
bind_operators(sys.modules[__name__])
