"""The eager runner: an op built on the process-wide graph, run at once.

``Graph.create_op`` hands the runner every op of the process-wide default
graph while :mod:`distrib.eager.context` says eager values are on; the op
builders of :mod:`distrib.ops` are unchanged, so an eager op has the same
arguments, attrs, checks and numbers as its graph twin. Per op:

1. its inputs are eager tensors (a graph tensor here is an error that says
   how to read it: ``await v.read_value()`` for a variable a strategy
   placed on a task);
2. the op catalogue's shape function checks them, as at graph building, so
   a bad shape or dtype is the same ``InvalidArgumentError``;
3. the kernel runs: the CPU kernel from the one registry (looked up once
   per op type), or the GPU kernel where an input already lives on a GPU
   and the op has one; a stateful op runs against the eager variables'
   store (:mod:`distrib.eager.store`); a seeded random op draws the next
   numbers of its sequence, as a session's executor does;
4. the outputs are wrapped (:class:`~distrib.eager.tensor.EagerTensor`),
   and every tape recording on this thread notes the op
   (:mod:`distrib.eager.tape`).

What comes back is an :class:`EagerOperation`: enough of an ``Operation``
(``type``, ``inputs``, ``outputs``, ``get_attr``) for the builders that
return ``op.outputs[0]`` and for the gradient functions a tape calls.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import kernels
from distrib.eager import context, tape
from distrib.eager.store import EagerStore
from distrib.eager.tensor import EagerTensor, dtype_of, host_value, wrap
from distrib.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from distrib.framework import dtypes
from distrib.framework.graph import get_default_graph
from distrib.framework.op_def import find_op_def
from distrib.framework.operation import DTYPE_ATTRS
from distrib.framework.tensor_shape import TensorShape
from kernels.cpu.math import RANDOM_OPS, rng_attrs

__all__ = ["EagerRunner", "EagerOperation", "SYMBOLIC"]

# a graph tensor that stands for values to come (keras.Input's, and what is made from it
# while eager): ops on it build graph ops; keras.node reads and sets the same mark
SYMBOLIC = "_keras_symbolic"


class EagerOperation:
    """An op that ran eagerly: what the builders and gradient functions read of it."""

    __slots__ = ("type", "name", "inputs", "outputs", "attrs")

    def __init__(self, op_type: str, name: str, inputs: tuple, attrs: dict,
                 outputs: tuple) -> None:
        self.type, self.name, self.inputs = op_type, name, inputs
        self.attrs, self.outputs = attrs, outputs

    graph = property(lambda self: get_default_graph())
    device = property(lambda self: "")
    control_inputs = property(lambda self: ())

    def values(self) -> tuple:
        return self.outputs

    def get_attr(self, name: str) -> Any:
        if name not in self.attrs:
            raise NotFoundError(f"operation {self.name!r} ({self.type}) has no attr {name!r}")
        value = self.attrs[name]
        return dtypes.as_dtype(value) if name in DTYPE_ATTRS and isinstance(value, str) else value

    def __repr__(self) -> str:
        return f"<dt.EagerOperation {self.type}>"


class _ConstView:
    """An input as the shape functions see it: a named tensor whose op is a Const
    holding its value (so a shape function reads a shape argument's value)."""

    __slots__ = ("name", "dtype", "shape", "_value")
    type = "Const"

    def __init__(self, name: str, value: Any) -> None:
        self.name, self._value = name, value
        self.dtype, self.shape = dtype_of(value), TensorShape(list(value.shape))

    op = property(lambda self: self)
    attrs = property(lambda self: {"value": host_value(self._value)})   # (conv_shapes reads it)

    def get_attr(self, name: str) -> Any:
        if name == "value":
            return host_value(self._value)
        return dtype_of(self._value) if name == "dtype" else None


class EagerRunner:
    """Runs the process-wide graph's ops at once (``Graph.create_op``'s hook)."""

    def __init__(self) -> None:
        self.store = EagerStore()
        self._generators: dict = {}   # a seeded random op's sequence, by (type, seed)

    def active(self) -> bool:
        return not context.building_graph()

    def run(self, op_type: str, inputs: Sequence[Any], attrs: dict | None, name: str | None,
            output_specs: Any = None, device: str | None = None) -> EagerOperation:
        entry = find_op_def(op_type)
        if entry is None:
            raise NotFoundError(f"op type {op_type!r} is not in the op catalogue")
        label = (name or op_type).rstrip("/")
        attrs = {k: (v.name if isinstance(v, dtypes.DType) else v) for k, v in (attrs or {}).items()}
        inputs = tuple(_eager_input(t, op_type, label) for t in inputs)
        values = [t._value for t in inputs]  # noqa: SLF001 - the eager layer's own value
        if entry.is_stateful:
            outs = self.store.run(op_type, [host_value(v) for v in values], attrs)
        elif not entry.runs_kernel:
            outs = _no_kernel(op_type)
        else:
            if entry.shape_fn is not None:   # TF's checks, the graph's errors
                entry.shape_fn(op_type, label, [_ConstView(f"{label}:in{i}", v)
                                                for i, v in enumerate(values)], attrs)
            if op_type in RANDOM_OPS:
                attrs = rng_attrs(attrs, op_type, self._generators)
            outs = _call(op_type, label, values, attrs)
        outputs = tuple(wrap(o if _is_array(o) else np.asarray(o)) for o in outs)
        op = EagerOperation(op_type, label, inputs, attrs, outputs)
        if context.recording():
            tape.record(op)
        return op

    def symbolic(self, graph: Any, op_type: str, inputs: Sequence[Any], attrs: dict | None,
                 name: str | None, **kwargs: Any) -> Any:
        """``op_type`` on a graph tensor while eager (a layer called on ``keras.Input``'s
        tensor, a plain op between functional layers): a graph op, as TF2's symbolic
        KerasTensors build one; an eager input becomes a constant of the graph. Any
        other graph tensor (a variable a strategy placed) is the eager run's error."""
        graph_tensors = [t for t in inputs if not isinstance(t, (EagerTensor, np.ndarray))]
        if not all(getattr(t, "__dict__", {}).get(SYMBOLIC) for t in graph_tensors):
            return self.run(op_type, inputs, attrs, name, kwargs.get("output_specs"),
                            kwargs.get("device"))
        with context.graph_mode():
            graph_inputs = [t if not isinstance(t, EagerTensor) else _constant(graph, t)
                            for t in inputs]
            op = graph.create_op(op_type, graph_inputs, attrs, name, **kwargs)
        for out in op.outputs:
            out.__dict__[SYMBOLIC] = True
        return op

    def reset_random(self) -> None:
        """Start every seeded random op's sequence over (``dt.random.set_seed``)."""
        self._generators.clear()


def _constant(graph: Any, t: EagerTensor) -> Any:
    value = host_value(t._value)  # noqa: SLF001 - the eager layer's own value
    return graph.create_op("Const", [], {"value": value, "dtype": t.dtype},
                           "Const", output_specs=[(t.dtype, list(value.shape))]).outputs[0]


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or hasattr(value, "copy_to_host")


def _eager_input(t: Any, op_type: str, label: str) -> EagerTensor:
    if type(t) is EagerTensor:
        return t
    if isinstance(t, (np.ndarray, np.generic)):
        return wrap(np.asarray(t))
    name = getattr(t, "name", repr(t))
    raise InvalidArgumentError(
        f"{op_type} op {label!r}: input {name} is a graph tensor, but eager execution runs "
        "ops at once; a variable a strategy placed on a task is read with "
        "`await v.read_value()`, other graph values by running their graph (a dt.function)")


def _no_kernel(op_type: str) -> list:
    if op_type == "NoOp":
        return []
    if op_type == "Placeholder":
        raise UnimplementedError("dt.placeholder() is not compatible with eager execution: "
                                 "pass values, or build the graph inside a dt.function")
    raise UnimplementedError(f"{op_type} does not run eagerly: build it in a dt.function")


def _call(op_type: str, label: str, values: list, attrs: dict) -> list:
    on_gpu = any(not isinstance(v, np.ndarray) for v in values) and \
        kernels.has_kernel(op_type, kernels.GPU)
    fn = kernels.get_kernel(op_type, kernels.GPU if on_gpu else kernels.CPU)
    args = values if on_gpu else [host_value(v) for v in values]
    try:
        return fn(args, attrs)
    except (kernels.KernelError, ValueError, TypeError, ArithmeticError) as e:
        raise InvalidArgumentError(f"{op_type} op {label!r}: {e}") from e
