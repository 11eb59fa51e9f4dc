"""Tensors from Python values, and the one way every op builder adds an op.

``convert_to_tensor``, ``constant`` and ``placeholder`` (TF's ``constant_op``
and ``ops.convert_to_tensor``), and the steps every builder module shares:
``make_op``/``op_output`` add one op whose outputs the op catalogue's shape
function infers (:mod:`distrib.framework.op_def`), so a mismatch fails at the
line that made it, naming the op and both shapes; ``convert_pair`` and
``convert_operand`` convert operands in the graph of the tensor beside them.
The shared steps are public because the sibling modules (``math_ops``,
``array_ops``, ``nn``, the gradient families) build their ops with them;
they stay out of ``__all__``, so they are not part of ``dt.*``.
:mod:`distrib.ops.math_ops` re-exports all of them: ``math_ops as ops`` is
the one namespace builder code reads.

Conversion follows TF: a Python value next to a tensor takes the tensor's
dtype (``2.0 * x`` is float64 when x is), a bare Python float is float32 and a
bare int int32, numpy arrays keep their dtype unless one is asked for.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.eager.context import executing_eagerly
from distrib.eager.tensor import EagerTensor, wrap
from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_def, op_shapes
from distrib.framework.dtypes import DType
from distrib.framework.graph import Graph, Operation, Tensor, get_default_graph
from distrib.framework.tensor_shape import TensorShape

__all__ = ["convert_to_tensor", "constant", "placeholder", "is_tensor"]


# -- the builders' shared steps ------------------------------------------------
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
    """True for a Tensor, an eager tensor or a tensor-like object (Variable)."""
    return isinstance(x, (Tensor, EagerTensor)) or hasattr(x, "_as_tensor")


def convert_to_tensor(value: Any, dtype: Any = None, name: str | None = None,
                      preferred_dtype: Any = None) -> Tensor:
    """A Tensor for ``value``: tensors pass through, variables give their value,
    anything else becomes a Const (``dtype`` requested, else inferred as TF does)."""
    want = None if dtype is None else dtypes.as_dtype(dtype)
    if hasattr(value, "_as_tensor") and not isinstance(value, Tensor):
        # the conversion hook of variable-like objects, private by design as TF's
        # ``_as_graph_element``: no unrelated object's public attribute is taken for it
        value = value._as_tensor()  # noqa: SLF001 - the conversion hook
    if type(value) is EagerTensor:   # an eager value: itself while eager, else a constant
        if not executing_eagerly():
            return constant(value.numpy(), dtype=want if want is not None else value.dtype,
                            name=name or "Const")
        if want is not None and value.dtype != want:
            raise InvalidArgumentError(
                f"an eager tensor of dtype {value.dtype.name} is used where {want.name} is "
                f"needed (shape {value.shape}); convert it with dt.cast(x, dt.{want.name})")
        return value
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
    if isinstance(value, bytes):   # binary data (a JPEG, a record): kept whole, as bytes
        value = np.array(value, dtype=object)   # (numpy's 'S' drops trailing zero bytes)
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
    if executing_eagerly():   # a value at once, the caller's array copied (TF's)
        return wrap(np.array(arr))
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


def convert_operand(x: Any) -> Tensor:
    """``x`` as a Tensor; a constant made from it goes in the graph of ``x``
    (a tensor's, a variable's), not the default graph."""
    with _graph_of(x).as_default():
        return convert_to_tensor(x)
