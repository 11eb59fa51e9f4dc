"""The steps ``dt.train.Checkpoint`` moves values with: ``dt.function``\\ s.

A checkpoint lives in ``distrib.train`` but its values live on servers, where
TF2-style code runs them through ``dt.function`` (this layer): on the target
of the strategy the variables belong to, with TF2's first-use initialization
(under MultiWorkerMirroredStrategy the chief's initial values, broadcast).
So this module gives ``distrib.train.checkpoints.trackable`` its step runner when
``distrib.distribute`` is imported: per graph, one traced function that reads
all the variables asked for (after incrementing the save counter, in the same
step) and one that assigns them all, each made once per set of variables and
then called, so a periodic save is one step with no graph building.

``agree`` is the one step a multi-worker save adds (``distrib.train.checkpoints.worker_saves``):
an element-wise max of a few integers over the workers, a collective with a
group key of its own (no strategy hands it out) on each worker's first
replica device, one function per runner, worker count and device (a trace
per strategy within it: ``dt.function`` keys its traces by the strategy,
which each trace holds).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

from distrib.distribute.functions.def_function import Function, function
from distrib.framework import distribution_context
from distrib.framework.graph import get_default_graph
from distrib.ops import collective_ops

__all__ = ["FunctionSteps", "SAVE_AGREEMENT_GROUP_KEY"]

# MWMS's group is 7, the preemption agreement's 8, CollectiveKeys hand out 1000 and up
SAVE_AGREEMENT_GROUP_KEY = 9
_AGREE_INSTANCE_KEY = 1   # the one op of the group: each call pairs by its sequence number


@contextlib.contextmanager
def _scope(graph: Any, strategy: Any) -> Iterator[None]:
    """The variables' graph and, when not in it already, the strategy's scope."""
    with graph.as_default():
        if strategy is not None and distribution_context.strategy() is None:
            with strategy.scope():
                yield
        else:
            yield


def _by_graph(variables: Sequence[Any]) -> dict[int, tuple[Any, list[int]]]:
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, v in enumerate(variables):
        groups.setdefault(id(v.graph), (v.graph, []))[1].append(i)
    return groups


class FunctionSteps:
    """A checkpoint's reads and assigns as ``dt.function`` steps (module header)."""

    def __init__(self) -> None:
        self._readers: dict[tuple, Function] = {}
        self._writers: dict[tuple, Function] = {}

    async def read(self, variables: Sequence[Any], strategy: Any = None,
                   bump: Any = None) -> list[np.ndarray]:
        out: list[Any] = [None] * len(variables)
        for graph, indices in _by_graph(variables).values():
            chosen = [variables[i] for i in indices]
            counter = bump if bump is not None and any(v is bump for v in chosen) else None
            key = (id(graph), tuple(id(v) for v in chosen), counter is not None)
            reader = self._readers.get(key)
            if reader is None:
                reader = self._readers[key] = function(_reader(chosen, counter))
            with _scope(graph, strategy):
                values = await reader()
            for i, value in zip(indices, values):
                out[i] = np.asarray(value)
        return out

    async def agree(self, values: Sequence[int], strategy: Any) -> np.ndarray:
        array = np.asarray(values, dtype=np.int64)
        workers = int(getattr(strategy, "num_workers", 1)) if strategy is not None else 1
        if workers <= 1:
            return array
        device = strategy.replica_devices[0]
        # keyed by what the traced function depends on, never by id(strategy): a new
        # strategy at a freed one's id reused its worker count and device
        key = ("agree", workers, device, array.shape)
        agreement = self._readers.get(key)
        if agreement is None:
            def max_over_workers(local: Any) -> Any:
                with get_default_graph().device(device):
                    return collective_ops.all_reduce(local, workers, SAVE_AGREEMENT_GROUP_KEY,
                                                     _AGREE_INSTANCE_KEY, merge_op="Max",
                                                     name="SaveAgreement")
            agreement = self._readers[key] = function(max_over_workers)
        with _scope(get_default_graph(), strategy):
            return np.asarray(await agreement(array))

    async def assign(self, pairs: Sequence[tuple[Any, np.ndarray]], strategy: Any = None
                     ) -> None:
        variables = [v for v, _ in pairs]
        for graph, indices in _by_graph(variables).values():
            chosen = [variables[i] for i in indices]
            # one value for several variables (a mirrored variable's copies) is fed once
            arrays: list[np.ndarray] = []
            where: dict[int, int] = {}
            sources = []
            for i in indices:
                value = pairs[i][1]
                if id(value) not in where:
                    where[id(value)] = len(arrays)
                    arrays.append(_as_dtype(value, variables[i]))
                sources.append(where[id(value)])
            key = (id(graph), tuple(id(v) for v in chosen), tuple(sources))
            writer = self._writers.get(key)
            if writer is None:
                writer = self._writers[key] = function(_writer(chosen, sources))
            with _scope(graph, strategy):
                await writer(arrays)


def _reader(variables: list[Any], counter: Any) -> Any:
    def read_values() -> list[Any]:
        if counter is not None:   # program order (auto_deps): its read below sees the new value
            counter.assign_add(1, read_value=False)
        return [v.value() for v in variables]
    return read_values


def _writer(variables: list[Any], sources: list[int]) -> Any:
    def assign_values(arrays: list[Any]) -> None:
        for v, source in zip(variables, sources):
            v.assign(arrays[source], read_value=False)
    return assign_values


def _as_dtype(value: Any, variable: Any) -> np.ndarray:
    want = np.dtype(variable.dtype.as_numpy_dtype)
    array = np.asarray(value)
    return array if want.kind == "O" else array.astype(want, copy=False)
