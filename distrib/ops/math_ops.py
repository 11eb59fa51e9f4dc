"""Op builders: ``dt.matmul``, ``dt.add``, ``dt.reduce_sum`` ... (TF1 signatures).

Every builder converts its arguments with ``convert_to_tensor``, adds one
op of a type from ``docs/ops.md`` to the default graph, and returns its output
(or the op, for ``group``/``no_op``). Conversion and the steps of adding an op
(``constant``, ``placeholder``, ``make_op``, ``op_output`` ...) live in
:mod:`distrib.ops.constant_op` and are re-exported here, so ``math_ops as ops``
stays the one namespace builder code reads. Binding this module to the
tensors' operators (``a + b``, ``x @ w``) is the last thing it does.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from distrib.eager import context as eager_context
from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_shapes
from distrib.framework.graph import Operation, Tensor, get_default_graph, name_scope
from distrib.framework.operation import bind_operators
from distrib.framework.tensor_shape import TensorShape
from distrib.ops.constant_op import (  # re-exported: see the module header
    constant,
    convert_operand,
    convert_pair,
    convert_to_tensor,
    is_tensor,
    make_op,
    op_output,
    placeholder,
)

__all__ = [
    "convert_to_tensor", "constant", "placeholder", "matmul", "add", "subtract", "multiply",
    "divide", "truediv", "log", "exp", "square", "sqrt", "negative", "abs", "sign", "maximum",
    "minimum", "pow", "reduce_sum", "reduce_mean", "reduce_min", "reduce_max", "reduce_prod",
    "argmax", "equal", "not_equal", "less", "greater", "less_equal", "greater_equal",
    "logical_and", "logical_not", "logical_or", "cast", "reshape", "transpose", "zeros", "ones",
    "zeros_like", "ones_like", "random_normal", "random_uniform", "identity", "group", "no_op",
    "shape", "sigmoid", "tanh", "add_n", "set_random_seed", "is_tensor",
]


def _binary(op_type: str, x: Any, y: Any, name: str | None) -> Tensor:
    # TF's layout: constants made from Python operands live under the op's scope ("add/y")
    with name_scope(name, op_type, [x, y]) as scope:
        x, y = convert_pair(x, y)
        return op_output(op_type, [x, y], None, scope)


def unary_op(op_type: str, x: Any, name: str | None) -> Tensor:
    """An op of ``op_type`` on one operand, converted in its own graph; its output."""
    return op_output(op_type, [convert_operand(x)], None, name or op_type)


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
    """The graph-level seed: random ops without their own seed derive one from it (TF1);
    with eager values on, the eager random ops' sequences start over (TF2's set_seed)."""
    get_default_graph().seed = seed
    if eager_context.executing_eagerly():
        eager_context.runner().reset_random()  # type: ignore[attr-defined]


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


def bind_tensor_operators() -> None:
    """Make ``a + b``, ``x @ w``, ``-t`` ... on any tensor build this module's
    ops (the process runtime calls it: the graph's tensors cannot import the
    ops built on them)."""
    bind_operators(sys.modules[__name__])
