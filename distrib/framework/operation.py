"""Operations and tensors: the nodes and edges of a :class:`distrib.framework.graph.Graph`.

An :class:`Operation` is one node (type, name, inputs, attrs in GraphDef form,
requested device, control inputs); a :class:`Tensor` is one of its outputs,
with a static dtype and a partial shape. Tensors compare by identity, so they
hash and serve as feed keys; Python operators on them (``a + b``, ``2 * x``,
``a @ b``) build ops through :mod:`distrib.ops.math_ops`, which binds
itself here when it loads (``bind_operators``): the framework sits below the
op builders and never imports them, as TF's ``math_ops`` overrides
``Tensor``'s operators from above. Only a Graph creates them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.tensor_shape import TensorShape, as_shape

if TYPE_CHECKING:
    from distrib.framework.graph import Graph

__all__ = ["Operation", "Tensor", "NodeDef", "DTYPE_ATTRS", "OutputSpec", "TensorOperators",
           "bind_operators", "operator_builders", "bind_extra_operators"]

# attrs that hold a dtype: kept as names in the GraphDef, returned as DType by get_attr
DTYPE_ATTRS = frozenset({"dtype", "output_type", "out_type", "T", "SrcT", "DstT"})

OutputSpec = tuple[dtypes.DType, TensorShape]


class TensorOperators:
    """Python operators for anything tensor-like (Tensor, Variable), via distrib.ops."""

    __array_ufunc__ = None  # numpy defers to our reflected operators: np.ones(3) + t works
    __array_priority__ = 100

    def __add__(self, other): return _ops().add(self, other, name="add")
    def __radd__(self, other): return _ops().add(other, self, name="add")
    def __sub__(self, other): return _ops().subtract(self, other, name="sub")
    def __rsub__(self, other): return _ops().subtract(other, self, name="sub")
    def __mul__(self, other): return _ops().multiply(self, other, name="mul")
    def __rmul__(self, other): return _ops().multiply(other, self, name="mul")
    def __truediv__(self, other): return _ops().divide(self, other, name="truediv")
    def __rtruediv__(self, other): return _ops().divide(other, self, name="truediv")
    def __matmul__(self, other): return _ops().matmul(self, other, name="matmul")
    def __rmatmul__(self, other): return _ops().matmul(other, self, name="matmul")
    def __pow__(self, other): return _ops().pow(self, other, name="pow")
    def __rpow__(self, other): return _ops().pow(other, self, name="pow")
    def __neg__(self): return _ops().negative(self, name="neg")
    def __abs__(self): return _ops().abs(self, name="Abs")
    def __lt__(self, other): return _ops().less(self, other, name="Less")
    def __gt__(self, other): return _ops().greater(self, other, name="Greater")
    def __le__(self, other): return _ops().less_equal(self, other, name="LessEqual")
    def __ge__(self, other): return _ops().greater_equal(self, other, name="GreaterEqual")
    def __and__(self, other): return _ops().logical_and(self, other, name="and")
    def __rand__(self, other): return _ops().logical_and(other, self, name="and")
    def __or__(self, other): return _ops().logical_or(self, other, name="or")
    def __ror__(self, other): return _ops().logical_or(other, self, name="or")
    def __invert__(self): return _ops().logical_not(self, name="LogicalNot")
    # TF's slicing and integer operators (distrib.ops.tensor_indexing, bound by the runtime)
    def __getitem__(self, key): return _extra("getitem")(self, key)
    def __floordiv__(self, other): return _extra("floordiv")(self, other)
    def __rfloordiv__(self, other): return _extra("floordiv")(other, self)
    def __mod__(self, other): return _extra("mod")(self, other)
    def __rmod__(self, other): return _extra("mod")(other, self)

    def __bool__(self) -> bool:
        raise TypeError("using a dt.Tensor as a Python bool is not allowed: its value exists "
                        "only when a session runs it; fetch it with sess.run first")

    def __iter__(self):
        raise TypeError("a dt.Tensor is not iterable while the graph is built; "
                        "fetch its value with sess.run to iterate over it")


# the op builders behind the operators (distrib.ops.math_ops, once it has loaded)
_OPERATORS: list[Any] = []


def bind_operators(builders: Any) -> None:
    """Make ``builders`` (a module with ``add``, ``matmul``, ``logical_not``
    ...) the op builders behind every tensor's Python operators."""
    _OPERATORS[:] = [builders]


# the builders of the operators above that distrib.ops.math_ops does not hold:
# name -> fn (getitem, floordiv, mod), bound by the process runtime
_EXTRA_OPERATORS: dict[str, Any] = {}


def bind_extra_operators(table: dict[str, Any]) -> None:
    """Make ``table``'s builders those of ``tensor[...]``, ``//`` and ``%``."""
    _EXTRA_OPERATORS.update(table)


def _extra(name: str) -> Any:
    fn = _EXTRA_OPERATORS.get(name)
    if fn is None:
        raise TypeError(f"this tensor operator ({name}) needs the op builders: `import distrib` "
                        "makes the process runtime that binds them")
    return fn


def operator_builders() -> Any:
    """The op builders behind the operators (``equal`` for an eager tensor's ``==``)."""
    return _ops()


def _ops() -> Any:
    if not _OPERATORS:
        raise RuntimeError("tensor operators need the op builders: `import distrib` "
                           "makes the process runtime that binds them")
    return _OPERATORS[0]


class Tensor(TensorOperators):
    """Output ``value_index`` of ``op``. Equality is identity, so tensors are dict keys."""

    def __init__(self, op: Operation, value_index: int, dtype: dtypes.DType,
                 shape: TensorShape) -> None:
        self._op = op
        self._value_index = value_index
        self._dtype = dtype
        self._shape = shape

    op = property(lambda self: self._op)
    value_index = property(lambda self: self._value_index)
    dtype = property(lambda self: self._dtype)
    graph = property(lambda self: self._op.graph)
    device = property(lambda self: self._op.device)
    shape = property(lambda self: self._shape)

    @property
    def name(self) -> str:
        return f"{self._op.name}:{self._value_index}"

    def get_shape(self) -> TensorShape:
        return self._shape

    def set_shape(self, shape: Any) -> None:
        """Refine the static shape; InvalidArgumentError if it contradicts the known one."""
        try:
            self._shape = self._shape.merge_with(as_shape(shape))
        except ValueError:
            raise InvalidArgumentError(
                f"set_shape on {self.name}: shape {as_shape(shape)} is incompatible with "
                f"the inferred shape {self._shape}") from None

    def consumers(self) -> list[Operation]:
        return [op for op in self.graph.get_operations() if self in op.inputs]

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:  # identity, like TF1: keeps tensors hashable
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __repr__(self) -> str:
        return f"<dt.Tensor {self.name!r} shape={self._shape} dtype={self._dtype.name}>"


class NodeDef:
    """A read-only view of an op in NodeDef form (``.name .op .input .device .attr``).

    Device functions written for TF (``replica_device_setter``) read
    ``op.node_def.op``; this keeps that code unchanged.
    """

    __slots__ = ("name", "op", "input", "device", "attr")

    def __init__(self, name: str, op: str, input: list[str], device: str, attr: dict) -> None:
        self.name, self.op, self.input, self.device, self.attr = name, op, input, device, attr


class Operation:
    """A node of the graph. Created by :meth:`Graph.create_op`, never directly."""

    def __init__(self, graph: Graph, op_type: str, name: str, inputs: Sequence[Tensor],
                 attrs: dict[str, Any], outputs: Sequence[OutputSpec]) -> None:
        self._graph = graph
        self._type = op_type
        self._name = name
        self._inputs = tuple(inputs)
        self._attrs = attrs
        self._outputs = tuple(Tensor(self, i, dt, sh) for i, (dt, sh) in enumerate(outputs))
        self._control_inputs: list[Operation] = []
        self._device = ""
        self._colocation_op: Operation | None = None

    name = property(lambda self: self._name)
    type = property(lambda self: self._type)
    graph = property(lambda self: self._graph)
    inputs = property(lambda self: self._inputs)
    outputs = property(lambda self: self._outputs)
    attrs = property(lambda self: self._attrs)
    device = property(lambda self: self._device)

    @property
    def control_inputs(self) -> tuple[Operation, ...]:
        return tuple(self._control_inputs)

    @property
    def node_def(self) -> NodeDef:
        return NodeDef(self._name, self._type, self.input_names(), self._device, self._attrs)

    def values(self) -> tuple[Tensor, ...]:
        return self._outputs

    def to_wire(self) -> dict[str, Any]:
        """This node as the plain data of a GraphDef (docs/ops.md): attrs with
        dtypes as names, and the static output dtypes and shapes, so a reader
        needs no op registry to rebuild its tensors."""
        return {
            "name": self._name,
            "op": self._type,
            "inputs": self.input_names(),
            "device": self._device,
            "attrs": dict(self._attrs),
            "output_dtypes": [t.dtype.name for t in self._outputs],
            "output_shapes": [t.shape.as_list() for t in self._outputs],
        }

    def input_names(self) -> list[str]:
        """Inputs in GraphDef form: ``"op:i"`` for data, ``"^op"`` for control inputs."""
        return [t.name for t in self._inputs] + ["^" + c.name for c in self._control_inputs]

    def get_attr(self, name: str) -> Any:
        if name not in self._attrs:
            raise NotFoundError(f"operation {self._name!r} ({self._type}) has no attr {name!r}; "
                                f"its attrs are {sorted(self._attrs)}")
        value = self._attrs[name]
        if name in DTYPE_ATTRS and isinstance(value, str):
            return dtypes.as_dtype(value)
        return value

    def add_control_input(self, op: Operation) -> None:
        """Run this op after ``op`` (once; never after itself); a change of the graph."""
        if op is not self and op not in self._control_inputs:
            self._control_inputs.append(op)
            self._graph.bump_version()

    def add_control_inputs(self, ops: Sequence[Operation]) -> None:
        """:meth:`add_control_input` for each of ``ops``."""
        for op in ops:
            self.add_control_input(op)

    # TF's private names, which TF scripts call
    _add_control_input = add_control_input
    _add_control_inputs = add_control_inputs

    def __repr__(self) -> str:
        device = f" device={self._device!r}" if self._device else ""
        return f"<dt.Operation {self._name!r} type={self._type}{device}>"
