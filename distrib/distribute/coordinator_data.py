"""The ``ClusterCoordinator``'s per-worker inputs (``distrib.distribute.coordinator``):
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
"""
from __future__ import annotations

import inspect
import weakref
from typing import Any, Callable, Iterator, Sequence

from distrib.distribute.input_lib import InputContext
from distrib.errors import OutOfRangeError
from distrib.ops import math_ops as ops

__all__ = ["PerWorkerValues", "PerWorkerDataset", "PerWorkerIterator", "WorkerIterator",
           "TracedIterator", "for_worker"]


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
        takes = len(inspect.signature(fn).parameters) if callable(fn) else 0
        context = InputContext(max(len(self.devices), index + 1), index, 1)
        dataset = fn(context) if takes else fn()
        if isinstance(dataset, PerWorkerDataset):   # a per-worker dataset given back
            dataset = dataset.datasets[index]
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
        return ("per_worker_iterator", repr(self._spec))

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
        out.extend(_flatten(element))

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
        self._element = _placeholders_for(spec, out)
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


def _placeholders_for(spec: Any, out: list[Any]) -> Any:
    if isinstance(spec, tuple):
        return tuple(_placeholders_for(s, out) for s in spec)
    if isinstance(spec, list):
        return [_placeholders_for(s, out) for s in spec]
    if isinstance(spec, dict):
        return {k: _placeholders_for(spec[k], out) for k in sorted(spec)}
    dims = spec.shape.dims
    ph = ops.placeholder(spec.dtype, shape=None if dims is None else list(dims), name="next")
    out.append(ph)
    return ph


def _flatten(element: Any) -> list[Any]:
    if isinstance(element, (tuple, list)):
        return [x for e in element for x in _flatten(e)]
    if isinstance(element, dict):
        return [x for k in sorted(element) for x in _flatten(element[k])]
    return [element]


def for_worker(value: Any, index: int) -> Any:
    """A closure argument as worker ``index`` sees it: its value of a
    PerWorkerValues, its view of a per-worker iterator."""
    if isinstance(value, PerWorkerValues):
        return value.values[index]
    if isinstance(value, PerWorkerIterator):
        return value.on_worker(index)
    return value
