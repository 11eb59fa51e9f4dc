"""Distributed values: one value per replica (TF's ``tf.distribute`` values).

* ``PerReplica``: what ``strategy.run`` returns and what a distributed
  dataset yields: each replica's own value (a tensor while building a
  graph, a numpy array once a ``dt.function`` ran).
* ``Mirrored``: one value per replica, all equal (a reduced gradient).
* ``MirroredVariable``: one ``dt.Variable`` per replica device, kept equal:
  every replica reads and updates its own copy, so a step needs no
  parameter traffic; only the gradients are all-reduced. Inside
  ``strategy.run`` it stands for the current replica's copy (operators,
  ``dt.matmul``, ``tape.gradient``, optimizers); in the cross-replica
  context (the strategy's scope) it reads the first copy and assigns all of
  them.

Components are named as TF names them: ``w`` on the first device, then
``w/replica_1``, ``w/replica_2`` ... on the others.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.eager.context import graph_mode
from distrib.framework import distribution_context
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable, VariableAggregation

__all__ = ["DistributedValues", "PerReplica", "Mirrored", "MirroredVariable", "local_results",
           "replica_index", "tensor_operator"]


def replica_index() -> int | None:
    """The index of the replica being built among this worker's replicas (None:
    the cross-replica context or no strategy)."""
    replica = distribution_context.replica_context()
    return None if replica is None else getattr(replica, "local_index", None)


class DistributedValues:
    """One value per local replica (``values``), in the strategy's device order."""

    def __init__(self, values: Sequence[Any]) -> None:
        self._values = tuple(values)

    @property
    def values(self) -> tuple[Any, ...]:
        return self._values

    def _current(self) -> Any:
        index = replica_index()
        if index is None:
            raise ValueError(
                f"{type(self).__name__} has one value per replica: use it inside "
                "strategy.run, or combine it with strategy.reduce / strategy.gather / "
                "strategy.experimental_local_results")
        return self._values[index]

    def _as_tensor(self) -> Any:
        return ops.convert_to_tensor(self._current())

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{{inner}}}"


class PerReplica(DistributedValues):
    """Each replica's own value."""


class Mirrored(DistributedValues):
    """One value per replica, equal on all of them."""


class MirroredVariable(DistributedValues):
    """A variable with one copy per replica device, kept equal (see the module header)."""

    def __init__(self, components: Sequence[Variable], aggregation: Any = None) -> None:
        super().__init__(components)
        self.aggregation = VariableAggregation.NONE if aggregation is None else aggregation

    # -- the copy for the replica being built --------------------------------------------
    def _component(self) -> Variable:
        index = replica_index()
        return self._values[0 if index is None else index]

    # the variable hooks (conversion, fetch, gradients' reads: private by design, as
    # TF's _as_graph_element) answered by the replica's copy
    def _as_tensor(self) -> Any:
        return self._component()._as_tensor()  # noqa: SLF001 - a variable hook

    def _as_graph_element(self) -> Any:
        return self._component()._as_graph_element()  # noqa: SLF001 - a variable hook

    def _reads(self) -> list[Any]:
        return self._component()._reads()  # noqa: SLF001 - a variable hook

    def value(self) -> Any:
        return self._component().value()

    def read_value(self) -> Any:
        return self._component().read_value()

    def numpy(self) -> Any:   # eager values: a typed error naming `await v.read_value()`
        return self._component().numpy()

    # -- updates: the replica's copy inside strategy.run, every copy outside ------------
    def _update(self, method: str, value: Any, **kwargs: Any) -> Any:
        replica = distribution_context.replica_context()
        if replica is not None:
            return self._update_in_replica(replica, method, value, kwargs)
        return self._update_all(method, [value] * len(self._values), kwargs)

    def _update_in_replica(self, replica: Any, method: str, value: Any,
                           kwargs: dict[str, Any]) -> Any:
        """TF's rule: in a replica context the copies stay equal only through an
        aggregation (SUM, MEAN of the replicas' values, or the first replica's)."""
        how = self.aggregation
        if how == VariableAggregation.NONE:
            raise ValueError(
                "You must specify an aggregation method to update a MirroredVariable in "
                "Replica Context. You can do so by passing an explicit value for argument "
                "`aggregation` to dt.Variable(..), e.g. "
                "`dt.Variable(..., aggregation=dt.VariableAggregation.SUM)`")

        def merge(strategy: Any, per_replica: Any) -> Any:
            values = list(per_replica.values) if isinstance(per_replica, DistributedValues) \
                else [per_replica] * len(self._values)
            if how == VariableAggregation.ONLY_FIRST_REPLICA:
                combined = [values[0]] * len(self._values)
            else:
                op = "SUM" if how == VariableAggregation.SUM else "MEAN"
                combined = strategy.reduce_to_replicas(op, values)
            return Mirrored(list(self._update_all(method, combined, kwargs, each=True)))
        return replica.merge_call(merge, args=(value,))

    def _update_all(self, method: str, values: list[Any], kwargs: dict[str, Any],
                    each: bool = False) -> Any:
        """Update every copy (copy i with ``values[i]``): one op, or one per copy."""
        updates = []
        for component, value in zip(self._values, values):
            with component.graph.device(component.device):
                updates.append(getattr(component, method)(value, **kwargs))
        if each:
            return updates
        if kwargs.get("read_value", True) is False:
            return ops.group(*updates)
        with self._values[0].graph.control_dependencies(updates):
            return ops.identity(self._values[0].value())

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None,
               read_value: bool = True) -> Any:
        return self._update("assign", value, name=name, read_value=read_value)

    def assign_add(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        return self._update("assign_add", delta, name=name, read_value=read_value)

    def assign_sub(self, delta: Any, use_locking: bool = False, name: str | None = None,
                   read_value: bool = True) -> Any:
        return self._update("assign_sub", delta, name=name, read_value=read_value)

    # -- the variable's description: the first copy's -------------------------------------
    primary = property(lambda self: self._values[0])
    name = property(lambda self: self._values[0].name)
    dtype = property(lambda self: self._values[0].dtype)
    shape = property(lambda self: self._values[0].shape)
    graph = property(lambda self: self._values[0].graph)
    trainable = property(lambda self: self._values[0].trainable)
    initial_value = property(lambda self: self._values[0].initial_value)
    shared_name = property(lambda self: self._values[0].shared_name)

    @property
    def op(self) -> Any:
        return self._component().op

    @property
    def device(self) -> str:
        return self._component().device

    @property
    def initializer(self) -> Any:
        with graph_mode():   # a graph op, also when built outside a trace with eager on
            return ops.group(*[c.initializer for c in self._values])

    def get_shape(self) -> Any:
        return self.shape

    # -- dt.train.Checkpoint's value protocol (distrib.train.checkpoints.trackable): saved once,
    # from the first copy, and restored into every copy, so a checkpoint moves
    # between any numbers of replicas ----------------------------------------------------
    def checkpoint_parts(self) -> list[Variable]:
        return [self._values[0]]

    def checkpoint_join(self, parts: Sequence[Any]) -> Any:
        return parts[0]

    def checkpoint_split(self, value: Any) -> list[tuple[Variable, Any]]:
        return [(copy, value) for copy in self._values]

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __repr__(self) -> str:
        return (f"<MirroredVariable {self.name!r} shape={self.shape} dtype={self.dtype.name} "
                f"on {[c.device for c in self._values]}>")


def local_results(value: Any) -> tuple[Any, ...]:
    """The values of this worker's replicas (a plain value: itself, once)."""
    if isinstance(value, DistributedValues):
        return value.values
    return (value,)


# the operators of a tensor (a + b, -a, a @ b ...) on a mirrored variable
def tensor_operator(name: str) -> Any:
    """Operator ``name`` of a tensor, on an object that converts to one (``_as_tensor``)."""
    def method(self: Any, *args: Any) -> Any:
        return getattr(self._as_tensor(), name)(*args)
    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__",
              "__pow__", "__rpow__", "__getitem__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(MirroredVariable, _name, tensor_operator(_name))
