"""``EagerVariable``: what ``dt.Variable(...)`` makes while eager values are on.

TF2's variables hold their value in the program; so does this one, in the
eager runner's store (:mod:`distrib.eager.store`), under a shared name from
the same name scopes a graph variable's comes from. It is a ``dt.Variable``
(``isinstance`` holds, Keras and the optimizers take it) whose every op runs
at once: ``numpy()``, ``read_value()``, ``assign``, ``assign_add``,
``assign_sub`` and an optimizer's ``Apply*`` update through the eager runner
(``Graph.create_op``'s hook), so a bare ``v.assign_add(1)`` changes ``v``.

A read while a ``GradientTape`` records is noted on the tape, which then
differentiates through every read of the variable (TF's watched variables).

It belongs to no graph collection (TF2 has none): ``dt.function`` never
tries to initialize it on a server. While a ``dt.function`` traces, the
variable stands for its twin graph variable (``distrib.ops.eager_captures``):
reads, updates, gradients and slots are the twin's, and the function keeps
the twin and this process's value equal around each call.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from distrib.eager import context, tape
from distrib.eager.tensor import EagerTensor
from distrib.errors import InvalidArgumentError
from distrib.framework import auto_deps
from distrib.framework.graph import get_default_graph, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.eager_captures import twin_of
from distrib.ops.variables import Variable

__all__ = ["EagerVariable"]


class _VariableOp:
    """The variable's op as TF code reads it (``v.op.name``, ``get_attr("var")``)."""

    type = "VariableV2"

    def __init__(self, name: str, attrs: dict) -> None:
        self.name, self.attrs = name, attrs

    graph = property(lambda self: get_default_graph())
    device = property(lambda self: "")
    inputs = property(lambda self: ())
    outputs = property(lambda self: ())

    def get_attr(self, name: str) -> Any:
        return self.attrs[name]


class EagerVariable(Variable):
    """``dt.Variable`` with eager values on: its value lives in this process."""

    def __init__(self, initial_value: Any = None, trainable: bool = True,
                 collections: Any = None, validate_shape: bool = True,
                 caching_device: Any = None, name: str | None = None, dtype: Any = None,
                 expected_shape: Any = None, shape: Any = None, synchronization: Any = None,
                 aggregation: Any = None) -> None:
        if initial_value is None:
            raise InvalidArgumentError("dt.Variable needs an initial_value (a tensor, a Python "
                                       "or numpy value, or a callable returning one)")
        self._trainable = bool(trainable)
        with name_scope(name, "Variable", []) as scope:
            if callable(initial_value):
                initial_value = initial_value()
            init = ops.convert_to_tensor(initial_value, dtype=dtype, name="initial_value")
        store = context.runner().store   # type: ignore[attr-defined]
        shared = store.unique(scope[:-1])
        var_shape = TensorShape(shape) if shape is not None else init.shape
        if not var_shape.is_compatible_with(init.shape):
            raise InvalidArgumentError(f"variable {shared!r}: shape {var_shape} is not "
                                       f"compatible with the initial value's {init.shape}")
        self._dtype, self._shape = init.dtype, var_shape
        self._variable_op = _VariableOp(shared, {"var": shared, "dtype": init.dtype.name,
                                                 "shape": var_shape.as_list()})
        self._initial_value = init
        self._initializer_op = None
        self._validate_shape = bool(validate_shape)
        store.run("Assign", [np.asarray(init)], {"var": shared, "validate_shape": False,
                                                 "dtype": init.dtype.name})
        weakref.finalize(self, store.delete, shared)

    # -- inside a dt.function's trace: the twin (module header) ----------------------------
    def _twin(self) -> Any:
        """The twin graph variable while a dt.function traces, else None."""
        return twin_of(self) if auto_deps.tracing() and not context.executing_eagerly() else None

    op = property(lambda self: self._twin_or_self("op", self._variable_op))
    initializer = property(lambda self: self._twin_or_self("initializer", None))

    def _twin_or_self(self, attr: str, own: Any) -> Any:
        twin = self._twin()
        return own if twin is None else getattr(twin, attr)

    def _reads(self) -> list:
        twin = self._twin()
        return [] if twin is None else twin._reads()  # noqa: SLF001 - the variables' hook

    # -- reading ----------------------------------------------------------------------
    def read_value(self) -> Any:
        """The current value, read now (an EagerTensor that later updates leave as it is)."""
        twin = self._twin()
        if twin is not None:
            return twin.read_value()
        if not context.executing_eagerly():
            raise InvalidArgumentError(
                f"variable {self.shared_name!r} was made eagerly: its value lives in this "
                "process, and a graph (a dt.function's trace, a strategy's scope) cannot read "
                "it; make the variable inside the function or the strategy's scope")
        for t in tape.recording_tapes():
            t.accessed(self)
        return get_default_graph().create_op(
            "VariableV2", [], self._variable_op.attrs, "read").outputs[0]

    def value(self) -> Any:
        return self.read_value()

    def numpy(self) -> Any:
        return self.read_value().numpy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.numpy(), dtype=dtype)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """numpy's functions take it as its value (``np.add(v, 1)``, ``np.sqrt(v)``), as
        TF's eager variables; a graph variable's ``None`` here would refuse them."""
        args = [np.asarray(a) if isinstance(a, (EagerVariable, EagerTensor)) else a
                for a in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def _ref(self) -> Any:
        twin = self._twin()
        return self.read_value() if twin is None else twin._ref()  # noqa: SLF001

    def __bool__(self) -> bool:
        return bool(self.numpy())

    def __float__(self) -> float:
        return float(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    # -- updates ----------------------------------------------------------------------
    def _update(self, op_type: str, value: Any, name: str | None,
                validate_shape: bool = True) -> Any:
        twin = self._twin()
        if twin is not None:
            return twin._update(op_type, value, name, validate_shape).op  # noqa: SLF001
        value = ops.convert_to_tensor(value, dtype=self.dtype)
        if validate_shape and not self._shape.is_compatible_with(value.shape):
            raise InvalidArgumentError(
                f"{op_type} to variable {self.shared_name!r}: value shape {value.shape} does "
                f"not match the variable's shape {self._shape}")
        attrs: dict[str, Any] = {"var": self.shared_name}
        if op_type == "Assign":
            attrs["validate_shape"] = bool(validate_shape)
        return get_default_graph().create_op(op_type, [value], attrs, name or op_type)

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None,
               read_value: bool = True) -> Any:
        op = self._update("Assign", value, name)
        return op.outputs[0] if read_value else op

    def assign_add(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        op = self._update("AssignAdd", delta, name)
        return op.outputs[0] if read_value else op

    def assign_sub(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        op = self._update("AssignSub", delta, name)
        return op.outputs[0] if read_value else op

    # -- properties -------------------------------------------------------------------
    name = property(lambda self: self._variable_op.name + ":0")
    graph = property(lambda self: get_default_graph())
    device = property(lambda self: self._twin_or_self(
        "device", "/job:localhost/replica:0/task:0/device:CPU:0"))
    dtype = property(lambda self: self._dtype)
    shape = property(lambda self: self._shape)

    def __repr__(self) -> str:
        try:
            shown = f", numpy={np.array_repr(np.asarray(self.numpy()))}"
        except Exception:   # noqa: BLE001 - a repr must not fail (say, inside a trace)
            shown = ""
        return f"<dt.Variable {self.name!r} shape={self._shape} dtype={self._dtype.name}{shown}>"
