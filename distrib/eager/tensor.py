"""``EagerTensor``: a value an op computed at once, as TF's ``tf.Tensor`` in eager mode.

It is a thin wrapper of one array (a numpy array on the CPU, a device array
on a GPU): ``numpy()``, ``shape``, ``dtype``, ``__array__`` (so numpy takes
it as it is), Python's numbers and truth (``float(t)``, ``if t:`` on one
element), iteration over its first dimension, and the operators of every
tensor. Two rules keep it cheap, because an eager program pays them per op
(the issue's bar: ``x + y`` on small tensors within 5 µs; TF 2.21 takes 12):

* **No graph on the common path.** ``x + y`` of two host tensors of one
  dtype, while eager execution is on and no tape records, calls the CPU
  kernel of ``Add`` (looked up once per op type, from the same registry the
  executor uses) and wraps its result; nothing is named, inferred or added.
  Anything else (a Python number beside it, two dtypes, a GPU value, a
  recording tape, a graph being built) goes the general way: the op
  builders of :mod:`distrib.ops`, whose ops the eager runner
  (:mod:`distrib.eager.execute`) runs with the catalogue's checks.
* **Value semantics.** An eager tensor never changes: kernels never mutate
  their inputs, and a variable's store copies on write while a tensor read
  from it is alive.

Where a ``dt.function`` takes one as an argument it is fed like a numpy
array (its trace key is its dtype and shape: ``_function_signature`` and the
two hooks beside it, read by ``distrib.distribute.functions.inputs``); built
into a graph (a trace capturing it), it becomes a constant.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

import kernels
from distrib.eager import context
from distrib.framework import dtypes
from distrib.framework.graph import get_default_graph, is_process_graph
from distrib.framework.operation import TensorOperators, operator_builders
from distrib.framework.tensor_shape import TensorShape, as_shape

__all__ = ["EagerTensor", "wrap", "dtype_of", "host_value"]

_DTYPES: dict[Any, dtypes.DType] = {}
_KERNELS: dict[str, Any] = {}   # op type -> its CPU kernel, looked up once
_NO_ATTRS: dict = {}


def dtype_of(value: Any) -> dtypes.DType:
    """The DType of an array's numpy dtype (cached: a dict lookup per op)."""
    np_dtype = value.dtype
    found = _DTYPES.get(np_dtype)
    if found is None:
        found = _DTYPES[np_dtype] = dtypes.as_dtype(
            "string" if np_dtype.kind in "USO" else np_dtype)
    return found


def host_value(value: Any) -> np.ndarray:
    """``value`` on the host: a GPU array copied out, a host one as it is."""
    if isinstance(value, np.ndarray):
        return value
    copy = getattr(value, "copy_to_host", None)
    return copy() if copy is not None else np.asarray(value)


def _cpu_kernel(op_type: str) -> Any:
    fn = _KERNELS.get(op_type)
    if fn is None:
        fn = _KERNELS[op_type] = kernels.get_kernel(op_type, kernels.CPU)
    return fn


def _eager_now() -> bool:
    # context.executing_eagerly, inlined for the operators' fast path
    return (context.eager_enabled() and not context.building_graph()
            and is_process_graph(get_default_graph()))


def _fast(op_type: str, x: Any, y: Any) -> Any:
    """``op_type`` of two eager tensors the quick way, or None: the caller then
    builds the op (see the module header for when this applies)."""
    if type(y) is not EagerTensor or context.recording() or not _eager_now():
        return None
    a, b = x._value, y._value  # noqa: SLF001 - this module's own class
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.dtype != b.dtype:
        return None
    try:
        out = _cpu_kernel(op_type)([a, b], _NO_ATTRS)[0]
    except (ValueError, TypeError):   # the general path names what is wrong
        return None
    t = _new(EagerTensor)
    t._value = out  # noqa: SLF001 - this module's own class
    return t


class EagerTensor(TensorOperators):
    """A computed value (``dt.Tensor`` in eager mode): ``numpy()``, ``shape``, ``dtype``."""

    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    # -- the value ------------------------------------------------------------------
    def numpy(self) -> Any:
        """The value as a numpy array (a 0-d tensor gives a numpy scalar, as TF's)."""
        value = host_value(self._value)
        return value[()] if value.ndim == 0 else value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = host_value(self._value)
        return value if dtype is None else value.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """numpy's functions take eager tensors as their arrays (``np.add(t, 1)`` is an
        ndarray, as with TF's); the graph tensors' ``None`` here would refuse them."""
        args = [np.asarray(a) if isinstance(a, EagerTensor) else a for a in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    dtype = property(lambda self: dtype_of(self._value))
    ndim = property(lambda self: self._value.ndim)
    device = property(lambda self: "/job:localhost/replica:0/task:0/device:" + (
        "CPU:0" if isinstance(self._value, np.ndarray) else "GPU:0"))

    @property
    def shape(self) -> TensorShape:
        return TensorShape(list(self._value.shape))

    def get_shape(self) -> TensorShape:
        return self.shape

    def set_shape(self, shape: Any) -> None:
        """Check ``shape`` against the value's (an eager value's shape is known)."""
        if not as_shape(shape).is_compatible_with(self.shape):
            raise ValueError(f"Tensor's shape {self.shape} is not compatible with supplied "
                             f"shape {as_shape(shape)}")

    @property
    def graph(self) -> Any:
        """The graph ops on this value go to: the process-wide one while eager (the
        eager runner runs them), else the graph being built (which captures it)."""
        return get_default_graph()

    @property
    def name(self) -> str:
        raise AttributeError("Tensor.name is undefined when eager execution is enabled "
                             "(an eager value is not an op's output)")

    @property
    def op(self) -> Any:
        raise AttributeError("Tensor.op is undefined when eager execution is enabled "
                             "(an eager value is not an op's output)")

    # -- Python's protocols -------------------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    def __float__(self) -> float:
        return float(self.numpy())

    def __index__(self) -> int:
        return self.numpy().__index__()

    def __len__(self) -> int:
        if not self._value.ndim:
            raise TypeError("Scalar tensor has no `len()`")
        return int(self._value.shape[0])

    def __iter__(self) -> Iterator[EagerTensor]:
        if not self._value.ndim:
            raise TypeError("Cannot iterate over a scalar tensor.")
        for row in host_value(self._value):
            yield EagerTensor(np.asarray(row))

    def __getitem__(self, key: Any) -> Any:
        getitem = getattr(TensorOperators, "__getitem__", None)
        if getitem is not None:   # TF's slicing (with its gradient) where the builders have it
            return getitem(self, key)
        return EagerTensor(np.asarray(host_value(self._value)[_plain_key(key)]))

    def __format__(self, spec: str) -> str:
        return format(self.numpy(), spec) if not self._value.ndim else str(self)

    def __str__(self) -> str:
        return (f"dt.Tensor({np.array2string(host_value(self._value), separator=' ')}, "
                f"shape={tuple(self._value.shape)}, dtype={self.dtype.name})")

    def __repr__(self) -> str:
        return (f"<dt.Tensor: shape={tuple(self._value.shape)}, dtype={self.dtype.name}, "
                f"numpy={np.array_repr(host_value(self._value))}>")

    # TF2's equality: elementwise; an eager tensor is not hashable (use .ref() as TF)
    def __eq__(self, other: object) -> Any:   # type: ignore[override]
        return False if other is None else operator_builders().equal(self, other)

    def __ne__(self, other: object) -> Any:   # type: ignore[override]
        return True if other is None else operator_builders().not_equal(self, other)

    __hash__ = None   # type: ignore[assignment]

    def ref(self) -> _Reference:
        """A hashable reference to this tensor (TF's ``Tensor.ref()``)."""
        return _Reference(self)

    # -- operators: the quick way first (see the module header) ----------------------
    def __add__(self, other: Any) -> Any:
        out = _fast("Add", self, other)
        return out if out is not None else TensorOperators.__add__(self, other)

    def __sub__(self, other: Any) -> Any:
        out = _fast("Sub", self, other)
        return out if out is not None else TensorOperators.__sub__(self, other)

    def __mul__(self, other: Any) -> Any:
        out = _fast("Mul", self, other)
        return out if out is not None else TensorOperators.__mul__(self, other)

    # -- a dt.function argument (distrib.distribute.functions.inputs) ------------------
    def _function_signature(self) -> tuple:
        return ("array", self._value.dtype.str, tuple(self._value.shape))

    def _function_placeholders(self, out: list) -> Any:
        spec = [(self.dtype, self.shape)]
        ph = get_default_graph().create_op(
            "Placeholder", [], {"dtype": self.dtype, "shape": list(self._value.shape)},
            "input", output_specs=spec).outputs[0]
        out.append(ph)
        return ph

    def _function_leaves(self, out: list) -> None:
        out.append(host_value(self._value))


_new = object.__new__


def wrap(value: Any) -> EagerTensor:
    """An EagerTensor of ``value`` (an array the caller will not change)."""
    t = _new(EagerTensor)
    t._value = value  # noqa: SLF001 - this module's own class
    return t


class _Reference:
    """``tensor.ref()``: hashable by identity, ``deref()`` gives the tensor back."""

    __slots__ = ("_tensor",)

    def __init__(self, tensor: EagerTensor) -> None:
        self._tensor = tensor

    def deref(self) -> EagerTensor:
        return self._tensor

    def __hash__(self) -> int:
        return id(self._tensor)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reference) and other._tensor is self._tensor


def _plain_key(key: Any) -> Any:
    if isinstance(key, EagerTensor):
        return key.numpy()
    if isinstance(key, tuple):
        return tuple(_plain_key(k) for k in key)
    return key
