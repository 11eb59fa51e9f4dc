"""The strategy API shared by every strategy: scope, run, reduce, gather,
local results, distributed datasets, replica contexts (TF's ``distribute_lib``).

This runtime builds graphs, so a strategy is a *builder*: ``strategy.run(fn)``
builds ``fn`` once per local replica, each under its device, and returns the
replicas' outputs as ``PerReplica`` tensors; the step runs when the graph
does (a ``dt.function`` traces the whole thing once and runs it per call).
A strategy subclass says which devices its replicas have, how variables are
made (``create_variable``) and how values are combined
(``reduce_to_replicas``, ``gather_all``); everything else is here.

Contexts, as in TF: inside ``strategy.scope()`` code is in the
*cross-replica* context (``dt.distribute.get_replica_context()`` is None);
inside ``strategy.run`` it is in a *replica* context. Outside every strategy
the default strategy applies (one replica, nothing distributed).

Variables belong to the strategy they were made under (in its scope or its
``run``: the distributed variables, their copies, an optimizer's slots), as
in TF2 a variable belongs to its object: ``variable_owner`` says which, and a
``dt.function`` initializes on first use only the variables of its own
strategy, of one that runs on the same target, or of none (see
``def_function``), so a later strategy in the same process (a notebook, a
test suite) never touches an earlier one's.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator, Sequence

from distrib.distribute.core.cross_device_ops import ReduceOp
from distrib.distribute.core.input_lib import (
    DistributedDataset,
    DistributedDatasetsFromFunction,
    InputContext,
)
from distrib.distribute.core.mirrored_run import run_replicas
from distrib.distribute.core.values import DistributedValues, Mirrored, PerReplica, local_results
from distrib.framework import distribution_context
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat
from distrib.ops.custom_gradient import set_custom_gradient
from distrib.ops.variables import Variable

__all__ = ["Strategy", "ReplicaContext", "strategies_used", "InputContext", "get_strategy", "has_strategy",
           "get_replica_context", "in_cross_replica_context", "get_cross_replica_context",
           "variable_owner", "owning_new_variables"]


_collectors: list[list[Strategy]] = []   # open strategies_used() blocks (dt.function traces)


@contextlib.contextmanager
def strategies_used() -> Iterator[list[Strategy]]:
    """The strategies whose ``run`` is called inside (a ``dt.function``'s trace)."""
    found: list[Strategy] = []
    _collectors.append(found)
    try:
        yield found
    finally:
        _collectors.remove(found)


@contextlib.contextmanager
def owning_new_variables(strategy: Strategy) -> Iterator[None]:
    """The global variables the default graph gains inside belong to ``strategy``
    (unless an inner block, a ``run`` in a scope, claimed them first). The variable
    holds its strategy (attribute ``owner_strategy``), so a strategy a program
    dropped still owns its variables: ``with MirroredStrategy().scope(): ...``."""
    variables = get_default_graph().get_collection_ref(GraphKeys.GLOBAL_VARIABLES)
    start = len(variables)   # the collection only grows
    try:
        yield
    finally:
        for v in variables[start:]:
            if getattr(v, "owner_strategy", None) is None:
                v.owner_strategy = strategy


def variable_owner(variable: Any) -> Strategy | None:
    """The strategy ``variable`` (or a distributed variable's first copy or shard)
    was made under; None for one made outside every strategy, or in a scope still
    open (claimed when the scope closes)."""
    if isinstance(variable, DistributedValues) and variable.values:
        variable = variable.values[0]
    return getattr(variable, "owner_strategy", None)


class ReplicaContext:
    """``dt.distribute.get_replica_context()`` inside ``strategy.run``."""

    def __init__(self, strategy: Strategy, local_index: int, replica_id: int) -> None:
        self.strategy = strategy
        self.local_index = local_index              # among this worker's replicas
        self.replica_id_in_sync_group = replica_id  # among all replicas of the step
        # this replica's build thread while strategy.run builds it (set and cleared by
        # mirrored_run.run_replicas); merge_call parks it there
        self.replica_thread: Any = None

    @property
    def num_replicas_in_sync(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def devices(self) -> tuple[str, ...]:
        return (self.strategy.replica_devices[self.local_index],)

    def merge_call(self, merge_fn: Callable[..., Any], args: tuple = (),
                   kwargs: dict | None = None) -> Any:
        """Run ``merge_fn(strategy, *args)`` once for all replicas (cross-replica
        context; each argument a ``PerReplica`` where the replicas' differ) and
        return this replica's part of its result."""
        if self.replica_thread is None:
            raise RuntimeError("merge_call is only valid inside strategy.run")
        return self.replica_thread.merge_call(merge_fn, tuple(args), dict(kwargs or {}))

    def all_reduce(self, reduce_op: Any, value: Any, options: Any = None) -> Any:
        """``value`` (a tensor or a nested structure) combined over every replica.
        Its gradient is TF's: the same all-reduce of the replicas' upstream
        gradients (``_all_reduce_output``)."""
        op = ReduceOp.check(reduce_op)
        flat, pack = _flatten(value)
        flat = [ops.convert_to_tensor(v) for v in flat]

        def merge(strategy: Strategy, *per_replica: Any) -> Any:
            results = [strategy.reduce_to_replicas(op, _values(v)) for v in per_replica]
            return tuple(Mirrored(r) for r in results)
        reduced = self.merge_call(merge, tuple(flat))
        return pack([self._all_reduce_output(op, x, y) for x, y in zip(flat, reduced)])

    def _all_reduce_output(self, reduce_op: str, x: Any, reduced: Any) -> Any:
        """``reduced`` behind an ``Identity`` whose gradient with respect to ``x``
        is ``all_reduce(reduce_op, dy)`` (TF's ``ReplicaContext.all_reduce``
        gradient): d/dx of ``all_reduce(SUM, x) * c`` is the sum of every
        replica's ``c``, not this replica's alone. The all-reduce of ``dy`` is
        built when the gradient is, so every replica must take the gradient
        inside ``strategy.run`` (as in TF); taken outside it, the gradient
        follows the graph (the sum of the replicas' losses differentiated at
        once gets the same answer where the graph is one process's)."""
        out = ops.identity(reduced)

        def grad(_op: Any, dy: Any) -> list[Any]:
            return [self.all_reduce(reduce_op, dy)]
        set_custom_gradient(out.op, [x], grad, when=lambda: self.replica_thread is not None)
        return out

    def all_gather(self, value: Any, axis: int, options: Any = None) -> Any:
        """``value`` of every replica joined along ``axis``, in replica order."""
        flat, pack = _flatten(value)

        def merge(strategy: Strategy, *per_replica: Any) -> Any:
            out = []
            for v in per_replica:
                joined = strategy.gather_all(_values(v), axis)
                out.append(Mirrored([ops.identity(joined) for _ in strategy.replica_devices]))
            return tuple(out)
        return pack(list(self.merge_call(merge, tuple(flat))))


class Strategy:
    """Base of the strategies (see the module header)."""

    def __init__(self, devices: Sequence[str], num_workers: int = 1, worker_index: int = 0
                 ) -> None:
        self._devices = list(devices)          # this worker's replica devices
        self._num_workers = num_workers
        self._worker_index = worker_index
        self._scope_depth = threading.local()
        self.extended = _Extended(self)

    # -- what subclasses decide ------------------------------------------------------------
    def create_variable(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def reduce_to_replicas(self, reduce_op: str, values: list[Any]) -> list[Any]:
        """One combined tensor per local replica device (``values``: one per replica)."""
        raise NotImplementedError

    def _reduce_cross_replica(self, reduce_op: str, values: list[Any]) -> Any:
        """One combined tensor, for the caller (on the first device)."""
        return self.reduce_to_replicas(reduce_op, values)[0]

    def gather_all(self, values: list[Any], axis: int) -> Any:
        """Every replica's value (of every worker) joined along ``axis``."""
        with get_default_graph().device(self._devices[0]):
            return concat(values, axis)

    @property
    def target(self) -> str:
        """Where this strategy's steps run (a server's target)."""
        raise NotImplementedError

    # -- what the replica contexts, distributed datasets and ``extended`` read -------------
    @property
    def replica_devices(self) -> tuple[str, ...]:
        """This worker's replica devices, one per local replica."""
        return tuple(self._devices)

    @property
    def num_workers(self) -> int:
        """How many workers build and run each step (1: this process alone)."""
        return self._num_workers

    @property
    def worker_index(self) -> int:
        """This worker's index among them (0 on the chief)."""
        return self._worker_index

    # -- the API ---------------------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices) * self._num_workers

    @contextlib.contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Variables made inside are this strategy's (mirrored ...); ``dt.function``
        steps run on its target."""
        current = distribution_context.strategy()
        if current is not None and current is not self:
            raise ValueError("Mixing different tf.distribute.Strategy objects: a strategy's "
                             "scope is open already")
        with distribution_context.enter(self, None), owning_new_variables(self):
            yield self

    def run(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
            options: Any = None) -> Any:
        """Build ``fn`` once per replica (its args split: a PerReplica gives each
        replica its own value); returns the outputs, PerReplica where they differ."""
        kwargs = dict(kwargs or {})
        self._note_use()
        n = len(self._devices)
        contexts = [ReplicaContext(self, i, self._worker_index * n + i) for i in range(n)]
        per_args = [_select(tuple(args), i) for i in range(n)]
        per_kwargs = [_select(kwargs, i) for i in range(n)]
        with owning_new_variables(self):
            results = run_replicas(self, contexts, fn, per_args, per_kwargs, self._devices)
        return _regroup(results)

    def _note_use(self) -> None:
        for found in _collectors:   # a dt.function being traced runs on this strategy's target
            if self not in found:
                found.append(self)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """``value``'s replicas combined (SUM or MEAN), over ``axis`` of each too."""
        self._note_use()
        op = ReduceOp.check(reduce_op)
        if not isinstance(value, DistributedValues):
            # the same on every replica (TF's reduce_non_distributed_value)
            if op == ReduceOp.SUM and self.num_replicas_in_sync > 1:
                raise ValueError(f"A non-DistributedValues value {value!r} cannot be reduced "
                                 "with ReduceOp.SUM across replicas: reduce strategy.run's output")
            return ops.convert_to_tensor(value)
        values = [ops.convert_to_tensor(v) for v in value.values]
        graph = get_default_graph()
        if axis is None:
            return self._reduce_cross_replica(op, values)
        with graph.device(self._devices[0]):
            sums = [ops.reduce_sum(v, axis=axis) for v in values]
        total = self._reduce_cross_replica(ReduceOp.SUM, sums)
        if op == ReduceOp.SUM:
            return total
        with graph.device(self._devices[0]):
            counts = [ops.cast(ops.shape(v)[axis], total.dtype) if v.shape.rank is None
                      or v.shape.dims[axis] is None else float(v.shape.dims[axis])
                      for v in values]
            local = counts[0] if len(counts) == 1 else ops.add_n(
                [ops.convert_to_tensor(c, dtype=total.dtype) for c in counts])
        count = self._reduce_cross_replica(ReduceOp.SUM, [local])
        with graph.device(self._devices[0]):
            return ops.divide(total, count)

    def gather(self, value: Any, axis: int) -> Any:
        """Every replica's ``value`` joined along ``axis`` (of every worker)."""
        self._note_use()
        if not isinstance(value, DistributedValues):
            value = PerReplica([value] * len(self._devices))
        return self.gather_all([ops.convert_to_tensor(v) for v in value.values], axis)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        self._note_use()
        return local_results(value)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        return DistributedDataset(self, dataset)

    def distribute_datasets_from_function(self, dataset_fn: Callable[[InputContext], Any],
                                          options: Any = None) -> Any:
        return DistributedDatasetsFromFunction(self, dataset_fn)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def __repr__(self) -> str:
        return f"<{type(self).__name__} devices={self._devices} workers={self._num_workers}>"


class _Extended:
    """``strategy.extended``: the few attributes scripts read."""

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy

    worker_devices = property(lambda self: self._strategy.replica_devices)
    parameter_devices = property(lambda self: self._strategy.replica_devices)

    @property
    def experimental_between_graph(self) -> bool:
        return self._strategy.num_workers > 1

    @property
    def should_checkpoint(self) -> bool:
        return self._strategy.worker_index == 0


class _DefaultStrategy(Strategy):
    """The strategy in effect outside every strategy: one replica, no distribution."""

    def __init__(self) -> None:
        super().__init__([""])

    def create_variable(self, *args: Any, **kwargs: Any) -> Any:
        with distribution_context.variable_creation_paused():
            return Variable(*args, **kwargs)

    def reduce_to_replicas(self, reduce_op: str, values: list[Any]) -> list[Any]:
        return [ops.convert_to_tensor(values[0])]

    def run(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
            options: Any = None) -> Any:
        return fn(*args, **(kwargs or {}))

    @property
    def target(self) -> str:
        return ""


_DEFAULT = _DefaultStrategy()


def get_strategy() -> Strategy:
    """The strategy whose scope (or run) is open, else the default strategy."""
    return distribution_context.strategy() or _DEFAULT


def has_strategy() -> bool:
    return distribution_context.strategy() is not None


def in_cross_replica_context() -> bool:
    return has_strategy() and distribution_context.replica_context() is None


def get_replica_context() -> ReplicaContext | None:
    """The replica context inside ``strategy.run``; None in a strategy's scope
    (cross-replica); a one-replica context outside every strategy."""
    current = distribution_context.current()
    if current is None:
        return _DefaultReplicaContext()
    return current[1]


def get_cross_replica_context() -> Strategy | None:
    return distribution_context.strategy() if in_cross_replica_context() else None


class _DefaultReplicaContext(ReplicaContext):
    def __init__(self) -> None:
        super().__init__(_DEFAULT, 0, 0)

    def merge_call(self, merge_fn: Callable[..., Any], args: tuple = (),
                   kwargs: dict | None = None) -> Any:
        return merge_fn(_DEFAULT, *args, **(kwargs or {}))

    def all_reduce(self, reduce_op: Any, value: Any, options: Any = None) -> Any:
        ReduceOp.check(reduce_op)
        return value

    def all_gather(self, value: Any, axis: int, options: Any = None) -> Any:
        return value


# -- splitting arguments and regrouping results -------------------------------------------
def _select(value: Any, index: int) -> Any:
    if isinstance(value, DistributedValues) and not hasattr(value, "_component"):
        return value.values[index]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_select(v, index) for v in value)
    if isinstance(value, list):
        return [_select(v, index) for v in value]
    if isinstance(value, dict):
        return {k: _select(v, index) for k, v in value.items()}
    return value


def _regroup(results: list[Any]) -> Any:
    first = results[0]
    if isinstance(first, tuple) and not hasattr(first, "_fields"):
        return tuple(_regroup([r[i] for r in results]) for i in range(len(first)))
    if isinstance(first, list):
        return [_regroup([r[i] for r in results]) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: _regroup([r[k] for r in results]) for k in first}
    if first is None:
        return None
    if all(r is first for r in results) and hasattr(first, "_component"):
        return first   # a mirrored variable returned by every replica
    return PerReplica(results)


def _values(value: Any) -> list[Any]:
    return list(value.values) if isinstance(value, DistributedValues) else [value]


def _flatten(value: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    if isinstance(value, (list, tuple)):
        items = list(value)
        kind = type(value)
        return items, lambda flat: kind(flat) if kind in (list, tuple) else kind(*flat)
    if isinstance(value, dict):
        keys = list(value)
        return [value[k] for k in keys], lambda flat: dict(zip(keys, flat))
    return [value], lambda flat: flat[0]
