"""Elastic ``experimental_distribute_dataset``: every worker reads the same
global batches and takes its slice for the group it is in *now*.

Under an elastic launch the number of workers changes while training runs
(``distrib.distribute.elastic.controller``), so a dataset cannot be sharded once for a
fixed count as ``rebatch_and_shard`` does. Instead, as TF keeps the global
batch when a job's size is fixed:

- ``dataset`` is batched with the GLOBAL batch size B; every worker iterates
  the same global batches (build it with the same seed everywhere).
- For global batch number k, worker i of n takes rows ``np.array_split``
  gives it: ``[i*B/n, (i+1)*B/n)`` when n divides B, else the first ``B % n``
  workers take one row more (the global batch is kept whole: no row is
  dropped or read twice). Its rows are split the same way over its local
  replicas.
- An element is a structure of :class:`ElasticPerReplica` leaves that knows
  its global batch number (``ElasticIterator.global_index``): when the group
  changes before the element is fed (a newcomer skipping to the group's
  position, a step run again on a smaller group after a worker died) its
  leaves are cut again for the new group in place.
- The iterator's *position* (global batches the group consumed) is what a
  regroup's broadcast carries: a newcomer skips to it, so no batch is used
  twice or skipped. One elastic iterator is in use at a time (the newest).

``distribute_datasets_from_function`` keeps the PER-WORKER batch instead (the
user's choice, as TF's): :class:`PerWorkerIterator` calls ``dataset_fn`` with
an ``InputContext`` for the group of the moment (``num_input_pipelines`` n,
``input_pipeline_id`` i, every replica in sync) and hands this worker's
replicas its elements in turn, as the non-elastic form does. Its position
is the steps the group ran (the same counter, broadcast the same way). When
the group's (n, i) or the local replica count changed at a regroup (found
when the pending element is cut again, at a newcomer's seek, or at the next
element), ``dataset_fn`` is called again for the new (n, i) and the new
pipeline is read from its start and skipped to the group's position, as TF
rebuilds input pipelines from their start after a restart (no checkpointed
iterator state): skipping costs reading that many of its batches. The
global batch becomes the per-worker batch times the new n.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from distrib.data import Dataset
from distrib.data.iterator_state import epoch_counters, set_epoch_counters
from distrib.data.structure import map_structure_unchecked, with_batch_dim, without_batch_dim
from distrib.distribute.core.input_lib import InputContext, regroup_replicas, worker_replica_steps
from distrib.distribute.core.values import PerReplica

__all__ = ["ElasticDatasetsFromFunction", "ElasticDistributedDataset", "ElasticIterator",
           "ElasticPerReplica", "PerWorkerIterator", "worker_rows"]


def worker_rows(batch: int, num_workers: int, index: int) -> tuple[int, int]:
    """Rows ``[start, end)`` of a global batch of ``batch`` rows that worker
    ``index`` of ``num_workers`` takes (``np.array_split``'s cut: the first
    ``batch % num_workers`` workers take one row more)."""
    if not 0 <= index < num_workers:
        raise ValueError(f"worker index {index} is not in 0..{num_workers - 1}")
    base, extra = divmod(int(batch), int(num_workers))
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


class ElasticPerReplica(PerReplica):
    """A ``PerReplica`` leaf of an elastic element, cut again in place when
    the group changes before it is fed."""

    def refill(self, values: list[Any]) -> None:
        self._values = tuple(values)


def _cut(value: Any, fn: Callable[[np.ndarray], Any]) -> Any:
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_cut(v, fn) for v in value)
    if isinstance(value, tuple):
        return type(value)(*[_cut(v, fn) for v in value])
    if isinstance(value, list):
        return [_cut(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v, fn) for k, v in value.items()}
    return fn(np.asarray(value))


def _leaves(value: Any, out: list[Any]) -> list[Any]:
    if isinstance(value, ElasticPerReplica):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _leaves(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _leaves(v, out)
    return out


class ElasticIterator:
    """An iterator over the elements of the current group (see the module header)."""

    def __init__(self, strategy: Any, dataset: Dataset) -> None:
        self._strategy = strategy
        self._it = iter(dataset)
        self.pulled = 0           # global batches read from the dataset
        self.pending = False      # the last element is not fed yet (its step runs)
        self._batch: Any = None   # the last global batch (numpy structure)
        self._element: Any = None

    @property
    def global_index(self) -> int:
        """The global batch number of the last element (-1: none yet)."""
        return self.pulled - 1

    @property
    def position(self) -> int:
        """The global batch the group is at: the element in its step, else the next."""
        return self.pulled - 1 if self.pending else self.pulled

    def __iter__(self) -> ElasticIterator:
        return self

    @property
    def element_spec(self) -> Any:
        """One element spec per local replica of the group of now (a tuple, as a
        distributed iterator's): the global batch's, its batch dimension unknown."""
        replica = map_structure_unchecked(lambda s: with_batch_dim(without_batch_dim(s), None),
                                          self._it.element_spec)
        return (replica,) * len(self._strategy.replica_devices)

    def next_for_step(self) -> Any:
        """A ``dt.function``'s read: the pending element while its step has not
        run (a step run again after a regroup: cut for the group of now), else
        the next one."""
        if self.pending and self._element is not None:
            return self._element
        return next(self)

    def __next__(self) -> Any:
        self._batch = next(self._it)
        self.pulled += 1
        self._element = _cut(self._batch, self._parts)
        self.pending = True
        return self._element

    def _parts(self, rows: np.ndarray) -> ElasticPerReplica:
        s = self._strategy
        start, end = worker_rows(len(rows), s.num_workers, s.worker_index)
        return ElasticPerReplica(np.array_split(rows[start:end], len(s.replica_devices)))

    def reslice(self) -> None:
        """Cut the pending element again for the group the strategy is in now."""
        if self._element is None or not self.pending:
            return
        fresh = _leaves(_cut(self._batch, self._parts), [])
        for old, new in zip(_leaves(self._element, []), fresh):
            old.refill(list(new.values))

    def seek(self, position: int) -> None:
        """Move to the group's ``position`` (a newcomer: forward only); the
        pending element becomes that global batch, cut for the current group."""
        target = position + 1 if self.pending else position
        if target < self.pulled:
            raise ValueError(f"the group is at global batch {position}, before this "
                             f"iterator's {self.pulled - 1}: an iterator only moves forward")
        while self.pulled < target:
            self._batch = next(self._it)
            self.pulled += 1
        self.reslice()

    def step_done(self) -> None:
        self.pending = False


class ElasticDistributedDataset:
    """``experimental_distribute_dataset`` under an elastic launch."""

    def __init__(self, strategy: Any, dataset: Dataset, on_iter: Callable[[ElasticIterator], None]
                 ) -> None:
        if not isinstance(dataset, Dataset):
            raise ValueError(f"experimental_distribute_dataset needs a dt.data.Dataset, got "
                             f"{type(dataset).__name__}")
        self._strategy = strategy
        self._dataset = dataset
        self._on_iter = on_iter

    def __iter__(self) -> Iterator[Any]:
        it = ElasticIterator(self._strategy, self._dataset)
        self._on_iter(it)
        return it

    @property
    def element_spec(self) -> Any:
        return self._dataset.element_spec


def _as_elastic(value: Any) -> Any:
    """``regroup_replicas``' element with :class:`ElasticPerReplica` leaves."""
    if isinstance(value, PerReplica):
        return ElasticPerReplica(list(value.values))
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_as_elastic(v) for v in value)
    if isinstance(value, list):
        return [_as_elastic(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_elastic(v) for k, v in value.items()}
    return value


class PerWorkerIterator(ElasticIterator):
    """The elements of this worker's own pipeline for the group of the moment
    (``distribute_datasets_from_function``: see the module header). ``pulled``
    counts the group's steps; the pipeline is made again for a new (n, i)."""

    def __init__(self, strategy: Any, dataset_fn: Callable[[InputContext], Any]) -> None:
        self._strategy = strategy
        self._dataset_fn = dataset_fn
        self.pulled = 0
        self.pending = False
        self._batch = None
        self._element = None
        self._built: tuple[int, int, int] | None = None
        self._epochs: list[int] = []   # the pipeline's epoch counters when it was made
        self._read = 0   # steps read from the current pipeline
        self.exhausted = False   # a skip ran past the pipeline's end: the next __next__ stops
        self._open()

    def _group(self) -> tuple[int, int, int]:
        s = self._strategy
        return s.num_workers, s.worker_index, len(s.replica_devices)

    @property
    def element_spec(self) -> Any:
        """One element spec per local replica (the current pipeline's steps)."""
        if self._built != self._group():
            self._open()
        return self._it.element_spec

    def _open(self, start: int = 0) -> None:
        """A cursor over the group's pipeline from step ``start`` (``dataset_fn``
        called again only for a new group)."""
        if self._built != self._group():
            self._dataset = worker_replica_steps(self._strategy, self._dataset_fn)
            self._built = self._group()
            self._epochs = epoch_counters(self._dataset.node)
        else:   # the same pipeline again: its first pass's shuffle order and map draws
            set_epoch_counters(self._dataset.node, self._epochs)
        self._it = iter(self._dataset)
        self._read = 0
        if start:   # a cursor started at that step (iterator_state.iterate_from), not read to it
            self._it.skip_to(start)
            self._read = start

    def _step(self, k: int) -> Any:
        """The current group's pipeline's step ``k`` (made again for a new
        group, started at ``k``: the stages before a map or batch skip their
        input without running the map); StopIteration when it ends first (a
        finite sharded pipeline of a larger group)."""
        if self._built != self._group() or self._read != k:
            self._open(k)
        step = next(self._it)
        self._read += 1
        return step

    def _skip(self, k: int) -> Any:
        """``_step`` for a regroup (a seek, a pending element cut again): the
        pipeline's end marks the iterator exhausted (its next ``__next__``
        stops) instead of raising StopIteration into the caller's coroutine."""
        try:
            return self._step(k)
        except StopIteration:
            self.exhausted = True
            return None

    def __next__(self) -> Any:
        if self.exhausted:
            raise StopIteration
        self._batch = self._step(self.pulled)
        self.pulled += 1
        self._element = _as_elastic(regroup_replicas(tuple(self._batch)))
        self.pending = True
        return self._element

    def _refill(self) -> None:
        """The pending element becomes step ``pulled - 1`` of the current
        pipeline (unchanged when it ended first: the iterator is exhausted)."""
        batch = self._skip(self.pulled - 1)
        if self.exhausted:
            return
        self._batch = batch
        fresh = _leaves(_as_elastic(regroup_replicas(tuple(self._batch))), [])
        for old, new in zip(_leaves(self._element, []), fresh):
            old.refill(list(new.values))

    def reslice(self) -> None:
        """The pending element again, from the pipeline of the group the
        strategy is in now (unchanged when its (n, i) is)."""
        if self._element is None or not self.pending or self._built == self._group() \
                or self.exhausted:
            return
        self._refill()

    def seek(self, position: int) -> None:
        """Move to the group's ``position`` (forward only): the pending
        element becomes that step of the current group's pipeline."""
        target = position + 1 if self.pending else position
        if target < self.pulled:
            raise ValueError(f"the group is at step {position}, before this iterator's "
                             f"{self.pulled - 1}: an iterator only moves forward")
        moved, self.pulled = target != self.pulled, target
        if self.pending and not self.exhausted and (moved or self._built != self._group()):
            self._refill()


class ElasticDatasetsFromFunction:
    """``distribute_datasets_from_function`` under an elastic launch: each
    iterator calls ``dataset_fn`` for the group of the moment."""

    def __init__(self, strategy: Any, dataset_fn: Callable[[InputContext], Any],
                 on_iter: Callable[[ElasticIterator], None]) -> None:
        if not callable(dataset_fn):
            raise ValueError(f"dataset_fn must be callable, got {type(dataset_fn).__name__}")
        self._strategy = strategy
        self._dataset_fn = dataset_fn
        self._on_iter = on_iter
        self._spec: tuple[Any, Any] | None = None   # (the group, its pipeline's element_spec)

    def __iter__(self) -> Iterator[Any]:
        it = PerWorkerIterator(self._strategy, self._dataset_fn)
        self._on_iter(it)
        return it

    @property
    def element_spec(self) -> Any:
        """The pipeline's element_spec, ``dataset_fn`` called once per group (cached)."""
        s = self._strategy
        group = (s.num_workers, s.worker_index, len(s.replica_devices))
        if self._spec is None or self._spec[0] != group:
            self._spec = (group, worker_replica_steps(s, self._dataset_fn).element_spec)
        return self._spec[1]
