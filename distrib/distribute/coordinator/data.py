"""The ``ClusterCoordinator``'s per-worker inputs (``cluster_coordinator.py``):
per-worker datasets and their iterators, and per-worker values.

A worker's *index* is its place in the coordinator's pool, in the order the
workers joined it (the workers the strategy starts with, then each one an
elastic launch adds); indices are never reused, so a worker that leaves
keeps its place (its dataset and value stay, unused) and a worker added
later gets the next index. Growing is two steps, so that a worker is added
whole or not at all: ``make(index)`` runs the user's function for the new
index and changes nothing (its error leaves every dataset and value as it
was), ``add_worker(index, made)`` then takes what it made.

* ``create_per_worker_dataset(dataset_fn)``: one dataset per worker, each
  from its own call of ``dataset_fn`` (given an ``InputContext`` whose
  ``input_pipeline_id`` is the worker's index and ``num_input_pipelines``
  the workers the pool has had so far, when it takes an argument); ``iter()``
  of it gives per-worker iterators, and a closure's ``next(iterator)`` reads
  the next element of the iterator of the worker that runs it. The elements
  are read by the coordinator's program and fed to the step (a deviation
  from TF, whose datasets run on the workers; see the README's differences).
* ``dataset_fn`` may be a ``@dt.function`` (as TF's tutorial writes it): its
  Python function is called here, for the dataset is built in this process
  (TF traces it to build the dataset on the worker). It may return a
  ``dt.data.Dataset``, a per-worker dataset, or what
  ``strategy.distribute_datasets_from_function`` or
  ``experimental_distribute_dataset`` returns: under ParameterServerStrategy
  (one replica per worker) that yields the dataset's own elements, with
  their structure (``(features, labels)``), not a one-replica tuple.

A per-worker iterator's trace key, placeholders and feeds walk its element
as every ``dt.function`` argument is walked (``functions/inputs.py``'s
``signature``, ``placeholders``, ``leaves``): one walk, one order.
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Iterator, Sequence

from distrib.distribute.core.input_lib import (
    DistributedDataset,
    DistributedDatasetsFromFunction,
    InputContext,
)
from distrib.distribute.core.values import DistributedValues
from distrib.distribute.functions import inputs
from distrib.distribute.functions.def_function import Function
from distrib.errors import OutOfRangeError

__all__ = ["PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator", "WorkerIterator",
           "TracedIterator", "OneReplicaElements", "for_worker"]


class PerWorkerValues:
    """One value per worker (TF's): a closure on worker ``i`` sees ``values[i]``
    (``i`` the worker's index in the coordinator's pool; see the module header)."""

    def __init__(self, values: list[Any], value_fn: Callable[[], Any] | None = None) -> None:
        self._values = values
        self._fn = value_fn

    @property
    def values(self) -> tuple[Any, ...]:
        return tuple(self._values)

    def make(self, index: int) -> list[Any]:
        """The values a worker joining with ``index`` adds, from ``value_fn`` (when
        given); nothing changes here until ``add_worker``."""
        if self._fn is None:
            return []
        return [self._fn() for _ in range(len(self._values), index + 1)]

    def add_worker(self, index: int, made: list[Any]) -> None:
        """A worker joined with ``index``: its value, from ``make(index)``."""
        self._values.extend(made[:max(0, index + 1 - len(self._values))])


class PerWorkerDataset:
    """``create_per_worker_dataset``'s result: ``datasets[i]`` is worker i's.
    ``devices`` is the coordinator's pool (every worker it has had, by index)."""

    def __init__(self, devices: Sequence[str], dataset_fn: Any) -> None:
        self.devices = devices
        self._fn = dataset_fn
        self.datasets = [self._make(i) for i in range(len(devices))]
        self._iterators: weakref.WeakSet[PerWorkerIterator] = weakref.WeakSet()

    def _make(self, index: int) -> Any:
        fn = self._fn
        if isinstance(fn, Function):   # a dt.function: its Python function builds the
            fn = fn.python_function    # dataset here (awaiting its call would run a graph)
        takes = len(inspect.signature(fn).parameters) if callable(fn) else 0
        context = InputContext(max(len(self.devices), index + 1), index, 1)
        dataset = fn(context) if takes else fn()
        if isinstance(dataset, PerWorkerDataset):   # a per-worker dataset given back
            dataset = dataset.datasets[index]
        if isinstance(dataset, (DistributedDataset, DistributedDatasetsFromFunction)):
            dataset = OneReplicaElements(dataset)
        if inspect.isawaitable(dataset):
            if inspect.iscoroutine(dataset):
                dataset.close()
            raise TypeError(f"dataset_fn {getattr(fn, '__name__', fn)!r} returned an awaitable, "
                            "not a dataset: give create_per_worker_dataset a plain function "
                            "(or a dt.function) that returns a dt.data.Dataset")
        if not hasattr(dataset, "element_spec"):
            raise TypeError("dataset_fn must return a dt.data.Dataset (or a distributed "
                            f"dataset of one), got {type(dataset).__name__}")
        return dataset

    def rebuild(self, index: int) -> None:
        """Worker ``index``'s dataset made again (a new process of it: its
        iterators start again from the beginning)."""
        self.datasets[index] = self._make(index)
        for it in list(self._iterators):
            it.restart(index)

    def make(self, index: int) -> list[Any]:
        """The datasets a worker joining with ``index`` adds (``dataset_fn`` runs
        here; nothing changes until ``add_worker``)."""
        return [self._make(i) for i in range(len(self.datasets), index + 1)]

    def add_worker(self, index: int, made: list[Any]) -> None:
        """A worker joined the pool with ``index`` (the next one): its dataset,
        from ``make(index)``, and its iterator in every iterator of this dataset."""
        self.datasets.extend(made[:max(0, index + 1 - len(self.datasets))])
        for it in list(self._iterators):
            it.restart(index)

    def __iter__(self) -> PerWorkerIterator:
        it = PerWorkerIterator(self)
        self._iterators.add(it)
        return it

    def __aiter__(self) -> Any:
        raise TypeError("iterate a per-worker dataset with iter(); pass the iterator to "
                        "coordinator.schedule")


class OneReplicaElements:
    """A distributed dataset made in a per-worker ``dataset_fn`` under
    ParameterServerStrategy, read as the dataset it wraps: each step of its
    one replica is the element itself (TF's per-worker iterator gives
    ``(features, labels)``, not a tuple of one replica's element)."""

    def __init__(self, distributed: Any) -> None:
        spec = distributed.element_spec   # a step: one element per local replica
        if not isinstance(spec, tuple) or len(spec) != 1:
            raise ValueError("a per-worker dataset_fn returned a distributed dataset of "
                             f"{len(spec) if isinstance(spec, tuple) else '?'} replicas per "
                             "worker; ParameterServerStrategy runs one replica per worker")
        self._distributed = distributed
        self.element_spec = spec[0]

    def __iter__(self) -> Iterator[Any]:
        for element in self._distributed:
            yield _one_replica(element)


def _one_replica(element: Any) -> Any:
    """An element with one-replica PerReplica leaves as the plain element."""
    if isinstance(element, DistributedValues):
        return element.values[0]
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        return tuple(_one_replica(e) for e in element)
    if isinstance(element, list):
        return [_one_replica(e) for e in element]
    if isinstance(element, dict):
        return {k: _one_replica(v) for k, v in element.items()}
    return element


class PerWorkerIterator:
    """A closure argument: the running worker's iterator (see the module header).
    A closure on worker ``i`` is given ``on_worker(i)``, a view bound to that
    worker (closures on two workers run at once: no shared "current worker")."""

    def __init__(self, dataset: PerWorkerDataset) -> None:
        self._dataset = dataset
        self._iters: list[Iterator[Any]] = [iter(d) for d in dataset.datasets]
        self._spec = dataset.datasets[0].element_spec

    def restart(self, index: int) -> None:
        """Read worker ``index``'s (rebuilt or new) dataset from its beginning."""
        while len(self._iters) <= index:
            self._iters.append(iter(self._dataset.datasets[len(self._iters)]))
        self._iters[index] = iter(self._dataset.datasets[index])

    def on_worker(self, index: int) -> WorkerIterator:
        return WorkerIterator(self, index)

    def signature(self) -> Any:
        # by what it yields: a step traced for one iterator serves every iterator of
        # the same element spec (a second fit), and a freed one's id is never reused
        return ("per_worker_iterator", inputs.signature(self._spec))

    def placeholders(self, out: list[Any]) -> TracedIterator:
        return TracedIterator(self._spec, out)

    def next_leaves(self, index: int, out: list[Any]) -> None:
        """Worker ``index``'s next element, flattened onto ``out`` (the feeds)."""
        try:
            element = next(self._iters[index])
        except StopIteration:
            device = self._dataset.devices[index]
            raise OutOfRangeError(f"the dataset of {device} is exhausted (End of sequence)"
                                  ) from None
        inputs.leaves(element, out)

    _function_signature = signature
    _function_placeholders = placeholders

    def _function_leaves(self, out: list[Any]) -> None:
        self.next_leaves(0, out)

    def __next__(self) -> Any:
        raise TypeError("call next() on a per-worker iterator inside the scheduled function")


class WorkerIterator:
    """One worker's view of a per-worker iterator: what a closure running on
    worker ``index`` is given (a function's argument protocol: its trace's
    placeholders, and per call that worker's next element)."""

    def __init__(self, iterator: PerWorkerIterator, index: int) -> None:
        self.iterator = iterator
        self.index = index

    def _function_signature(self) -> Any:
        return self.iterator.signature()

    def _function_placeholders(self, out: list[Any]) -> Any:
        return self.iterator.placeholders(out)

    def _function_leaves(self, out: list[Any]) -> None:
        self.iterator.next_leaves(self.index, out)


class TracedIterator:
    """What a traced function's ``next(iterator)`` returns: placeholders shaped by
    the dataset's element spec (fed, per run, the running worker's next element).
    They are made with the other arguments' placeholders, in argument order (the
    order the running worker's elements are fed in), not at ``next()``."""

    def __init__(self, spec: Any, out: list[Any]) -> None:
        self._element = inputs.placeholders(spec, out, name="next")
        self._used = False

    def __iter__(self) -> TracedIterator:
        return self

    def __next__(self) -> Any:
        if self._used:
            raise ValueError("a scheduled function may read its per-worker iterator once "
                             "per call")
        self._used = True
        return self._element

    get_next = __next__


def for_worker(value: Any, index: int) -> Any:
    """A closure argument as worker ``index`` sees it: its value of a
    PerWorkerValues, its view of a per-worker iterator."""
    if isinstance(value, PerWorkerValues):
        return value.values[index]
    if isinstance(value, PerWorkerIterator):
        return value.on_worker(index)
    return value
