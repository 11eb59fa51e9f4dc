"""Elastic ``experimental_distribute_dataset``: every worker reads the same
global batches and takes its slice for the group it is in *now*.

Under an elastic launch the number of workers changes while training runs
(``distrib.distribute.elastic``), so a dataset cannot be sharded once for a
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
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from distrib.data import Dataset
from distrib.distribute.values import PerReplica

__all__ = ["ElasticDistributedDataset", "ElasticIterator", "ElasticPerReplica", "worker_rows"]


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
