"""Variables: named, mutable tensors that live on a task's server (``dt.Variable``).

A variable is a ``VariableV2`` op whose attr ``var`` (its *shared name*, the
op's full name) keys the storage in the owning worker's variable store; a new
graph or session that declares the same name sees the same storage. Every op
that touches it (``Assign``, ``AssignAdd``, reads, optimizer updates) is
colocated with the ``VariableV2`` op, so it runs where the storage is: the
device stack places the variable once, at creation, and the rest follows.

As in TF1 the initializer is built outside any control-dependency scope (it
must be runnable on its own) and the variable reads through a snapshot
``name/read`` (an Identity), which is what operators and ops consume.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.eager.context import executing_eagerly
from distrib.eager.remote import RemoteRead, numpy_unavailable
from distrib.errors import InvalidArgumentError
from distrib.framework import auto_deps, distribution_context, dtypes
from distrib.framework.graph import GraphKeys, Operation, Tensor, get_default_graph, name_scope
from distrib.framework.operation import TensorOperators
from distrib.framework.tensor_shape import TensorShape, unknown_shape
from distrib.ops import array_gather
from distrib.ops import math_ops as ops

__all__ = [
    "Variable", "VariableAggregation", "VariableSynchronization", "global_variables", "trainable_variables", "local_variables",
    "global_variables_initializer", "local_variables_initializer", "variables_initializer",
    "is_variable_initialized", "initialize_all_variables",
]


# the class dt.Variable makes while eager values are on (distrib.ops.eager_variables),
# registered by the process runtime
_EAGER_CLASS: list[type] = []


def register_eager_variable(cls: type) -> None:
    """Make ``dt.Variable(...)`` return a ``cls`` while eager execution is on."""
    _EAGER_CLASS[:] = [cls]


class VariableAggregation:
    """How a distributed variable combines the replicas' updates in a replica
    context (``dt.VariableAggregation``, TF's names and values)."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization:
    """When a distributed variable is synchronized (TF's names; AUTO and ON_WRITE
    behave alike here: mirrored copies are written together)."""
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class Variable(TensorOperators):
    """``dt.Variable(initial_value, trainable=True, collections=None, validate_shape=True,
    caching_device=None, name=None, dtype=None)``: TF1's argument order.

    Usable wherever a tensor is (operators, ``dt.matmul(x, w)``, fetches):
    it stands for its snapshot ``value()``.

    In a distribution strategy's scope (or its ``run``), ``dt.Variable(...)``
    returns the strategy's distributed variable instead (a MirroredVariable
    for the mirrored strategies), as TF's variable creator scopes do.
    """

    # Set by the strategies and the Saver on the copies they make or restore:
    # the distributed variable this one is a copy of (TF's _distributed_container)
    distributed_container: Any = None
    # the first copy of a mirrored variable: the one a checkpoint names; this
    # copy is saved as it and restored from its entry
    mirror_primary: Variable | None = None
    # restored by a Saver: a dt.function's first-use initialization leaves it alone
    restored_from_checkpoint: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        strategy = distribution_context.creating_variable() if cls is Variable else None
        if strategy is not None:
            return strategy.create_variable(*args, **kwargs)   # not a Variable: no __init__
        if cls is Variable and _EAGER_CLASS and executing_eagerly():
            return super().__new__(_EAGER_CLASS[0])   # its value in this process (eager)
        return super().__new__(cls)

    def __init__(self, initial_value: Any = None, trainable: bool = True,
                 collections: Sequence[str] | None = None, validate_shape: bool = True,
                 caching_device: Any = None, name: str | None = None, dtype: Any = None,
                 expected_shape: Any = None, shape: Any = None, synchronization: Any = None,
                 aggregation: Any = None) -> None:
        if "_variable_op" in self.__dict__:
            return   # made by a strategy's create_variable (see __new__): Python calls __init__ again
        if initial_value is None:
            raise InvalidArgumentError("dt.Variable needs an initial_value (a tensor, a Python "
                                       "or numpy value, or a callable returning one)")
        graph = getattr(initial_value, "graph", None) or get_default_graph()
        self._trainable = bool(trainable)
        # init_scope, as in TF1: the initializer must not wait on surrounding control deps
        with graph.as_default(), graph.control_dependencies(None):
            with name_scope(name, "Variable", []) as scope:
                self._build(scope, initial_value, validate_shape, dtype, shape)
        self._add_to_collections(graph, collections)

    def _build(self, scope: str, initial_value: Any, validate_shape: bool, dtype: Any,
               shape: Any) -> None:
        graph = get_default_graph()
        from_fn, first = callable(initial_value), len(graph)
        if from_fn:
            with name_scope("Initializer"):
                initial_value = initial_value()
        init = ops.convert_to_tensor(initial_value, dtype=dtype, name="initial_value")
        var_shape = self._checked_shape(scope, init, validate_shape, shape)
        shared = scope[:-1]
        self._variable_op = graph.create_op(
            "VariableV2", [], {"var": shared, "dtype": init.dtype, "shape": var_shape.as_list()},
            name=scope, output_specs=[(init.dtype, var_shape)])
        if from_fn:   # the initializer runs where the variable lives (TF's colocation)
            made = graph.get_operations()[first:]
            if made and made[-1] is self._variable_op:
                graph.colocate_built_ops(made[:-1], self._variable_op)
        self._initial_value = init
        with graph.colocate_with(self._variable_op):
            self._initializer_op = self._update("Assign", init, "Assign", validate_shape).op
            self._snapshot = ops.identity(self._variable_op.outputs[0], name="read")

    @staticmethod
    def _checked_shape(scope: str, init: Tensor, validate_shape: bool, shape: Any) -> TensorShape:
        if shape is not None:
            want = TensorShape(shape)
            if not want.is_compatible_with(init.shape):
                raise InvalidArgumentError(f"variable {scope[:-1]!r}: shape {want} is not "
                                           f"compatible with the initial value's {init.shape}")
            return want
        if not validate_shape:
            return unknown_shape() if not init.shape.is_fully_defined() else init.shape
        if not init.shape.is_fully_defined():
            raise InvalidArgumentError(
                f"variable {scope[:-1]!r}: the initial value's shape {init.shape} is not fully "
                "known; give a fully shaped initial value, or pass validate_shape=False")
        return init.shape

    def _add_to_collections(self, graph: Any, collections: Sequence[str] | None) -> None:
        names = list(collections) if collections is not None else [GraphKeys.GLOBAL_VARIABLES]
        if self._trainable and GraphKeys.TRAINABLE_VARIABLES not in names:
            names.append(GraphKeys.TRAINABLE_VARIABLES)
        graph.add_to_collections(names, self)

    # -- updates --------------------------------------------------------------
    def _update(self, op_type: str, value: Any, name: str | None,
                validate_shape: bool = True) -> Tensor:
        graph = self.graph
        with graph.as_default():
            value = ops.convert_to_tensor(value, dtype=self.dtype)
            if validate_shape and not self.shape.is_compatible_with(value.shape):
                raise InvalidArgumentError(
                    f"{op_type} to variable {self.op.name!r}: value shape {value.shape} does not "
                    f"match the variable's shape {self.shape}")
            attrs: dict[str, Any] = {"var": self.shared_name}
            if op_type == "Assign":
                attrs["validate_shape"] = bool(validate_shape)
            out_shape = self.shape if validate_shape else value.shape
            with graph.colocate_with(self._variable_op):
                op = graph.create_op(op_type, [value], attrs, name or op_type,
                                     output_specs=[(self.dtype, out_shape)])
        return op.outputs[0]

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None,
               read_value: bool = True) -> Any:
        """Set the variable to ``value``; returns the new value (or the op)."""
        out = self._update("Assign", value, name or "Assign")
        return out if read_value else out.op

    def assign_add(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        out = self._update("AssignAdd", delta, name or "AssignAdd")
        return out if read_value else out.op

    def assign_sub(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        out = self._update("AssignSub", delta, name or "AssignSub")
        return out if read_value else out.op

    # -- rows (distrib.ops.array_gather: run where the variable lives) ----------------
    def sparse_read(self, indices: Any, name: str | None = None) -> Tensor:
        """The rows ``indices``, gathered on the variable's task (a ``ResourceGather``)."""
        return array_gather.sparse_read(self, indices, name=name)

    def scatter_add(self, sparse_delta: Any, use_locking: bool = False,
                    name: str | None = None) -> Tensor:
        """Add an ``IndexedSlices`` into its rows (``ScatterAdd``); the new value."""
        return array_gather.scatter_add(self, sparse_delta.indices, sparse_delta.values,
                                        use_locking, name)

    def scatter_sub(self, sparse_delta: Any, use_locking: bool = False,
                    name: str | None = None) -> Tensor:
        return array_gather.scatter_sub(self, sparse_delta.indices, sparse_delta.values,
                                        use_locking, name)

    def scatter_update(self, sparse_delta: Any, use_locking: bool = False,
                       name: str | None = None) -> Tensor:
        return array_gather.scatter_update(self, sparse_delta.indices, sparse_delta.values,
                                           use_locking, name)

    def scatter_nd_update(self, indices: Any, updates: Any, name: str | None = None) -> Tensor:
        return array_gather.scatter_nd_update(self, indices, updates, name=name)

    # -- reading --------------------------------------------------------------------
    def value(self) -> Tensor:
        """The snapshot ``name/read`` that ops consume (in a ``dt.function``'s
        trace, a fresh read that ``auto_deps`` orders after earlier writes)."""
        if auto_deps.tracing():
            return self.read_value()
        return self._snapshot

    def read_value(self) -> Tensor:
        """A fresh read, ordered by the current control dependencies.

        The runtime reads a variable when its ``VariableV2`` node runs (docs/ops.md),
        so a read that must see an update gets its own ``VariableV2`` node (same
        ``var``, colocated) carrying the control inputs; an Identity of the shared
        node could run before them.
        """
        if executing_eagerly():   # its value is on a task: read in a step, awaited
            return RemoteRead(self)
        graph = self.graph
        with graph.as_default(), graph.colocate_with(self._variable_op):
            op = graph.create_op("VariableV2", [], dict(self._variable_op.attrs), "read",
                                 output_specs=[(self.dtype, self.shape)])
        return op.outputs[0]

    def numpy(self) -> Any:
        """TF2's ``v.numpy()``: a graph variable's value is on a task; the error says
        to ``await v.read_value()`` (eager variables, ``eager_variables``, have it)."""
        raise numpy_unavailable(self)

    def _ref(self) -> Tensor:
        """The ``VariableV2`` output itself: what gradients treat as the leaf."""
        return self._variable_op.outputs[0]

    def _reads(self) -> list[Tensor]:
        """Every ``VariableV2`` output of this variable in its graph (see read_value)."""
        shared = self.shared_name
        return [op.outputs[0] for op in self.graph.get_operations()
                if op.type == "VariableV2" and op.attrs.get("var") == shared]

    def _as_tensor(self) -> Tensor:
        return self.value()

    def _as_graph_element(self) -> Tensor:
        return self.value()

    # -- properties --------------------------------------------------------------------
    name = property(lambda self: self._variable_op.name + ":0")
    op = property(lambda self: self._variable_op)
    graph = property(lambda self: self._variable_op.graph)
    device = property(lambda self: self._variable_op.device)
    dtype = property(lambda self: self._variable_op.outputs[0].dtype)
    shape = property(lambda self: self._variable_op.outputs[0].shape)
    initializer = property(lambda self: self._initializer_op)
    initial_value = property(lambda self: self._initial_value)
    trainable = property(lambda self: self._trainable)

    @property
    def shared_name(self) -> str:
        """The key of the variable's storage on its server (attr ``var`` of its ops)."""
        return self._variable_op.get_attr("var")

    def get_shape(self) -> TensorShape:
        return self.shape

    # -- dt.train.Checkpoint's value protocol (distrib.train.checkpoints.trackable) -----------------
    def checkpoint_parts(self) -> list[Variable]:
        """What a checkpoint reads to save this variable: itself."""
        return [self]

    def checkpoint_join(self, parts: Sequence[Any]) -> Any:
        return parts[0]

    def checkpoint_split(self, value: Any) -> list[tuple[Variable, Any]]:
        """What a checkpoint assigns to restore ``value``: itself."""
        return [(self, value)]

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __repr__(self) -> str:
        return f"<dt.Variable {self.name!r} shape={self.shape} dtype={self.dtype.name}>"


# -- collections and initializers -------------------------------------------------------
def global_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES, scope)


def trainable_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.TRAINABLE_VARIABLES, scope)


def local_variables(scope: str | None = None) -> list[Variable]:
    return get_default_graph().get_collection(GraphKeys.LOCAL_VARIABLES, scope)


def variables_initializer(var_list: Sequence[Variable], name: str = "init") -> Operation:
    """One op that runs the initializers of ``var_list`` (a NoOp when it is empty)."""
    var_list = list(var_list)
    if not var_list:
        return ops.no_op(name=name)
    return ops.group(*[v.initializer for v in var_list], name=name)


def global_variables_initializer() -> Operation:
    return variables_initializer(global_variables(), name="init")


initialize_all_variables = global_variables_initializer


def local_variables_initializer() -> Operation:
    return variables_initializer(local_variables(), name="init")


def is_variable_initialized(variable: Variable) -> Tensor:
    """A bool scalar: whether the variable's storage exists on its server."""
    graph = variable.graph
    with graph.as_default(), graph.colocate_with(variable.op):
        op = graph.create_op("IsVariableInitialized", [], {"var": variable.shared_name,
                                                           "dtype": variable.dtype},
                             "IsVariableInitialized",
                             output_specs=[(dtypes.bool, [])])
    return op.outputs[0]
