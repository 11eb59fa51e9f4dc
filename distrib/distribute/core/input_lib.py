"""Distributed datasets: what ``strategy.experimental_distribute_dataset`` and
``distribute_datasets_from_function`` return (TF's ``input_lib``).

Iterating one gives, per step, the element's structure with a ``PerReplica``
at every leaf (``(PerReplica(x0, x1), PerReplica(y0, y1))``): this worker's
replicas' parts of one global batch, split as TF's DATA auto-shard splits it
(``distrib.data.rebatch_and_shard``: each worker a distinct part of every
global batch). A ``dt.function`` fed such an element feeds each replica its
own part; ``iter()`` of one is a :class:`DistributedIterator`, which a
``dt.function`` takes as an input (each call reads its next element). ``distribute_datasets_from_function`` calls the function once per
worker with an ``InputContext`` (the workers, this one, every replica) and,
as TF does, neither rebatches nor shards what it returns: this worker's
replicas take its elements in turn, whole, batched or not (``range(10)`` on
two replicas: ``(0, 1), (2, 3), ...``; a batch of the per-replica size is
one replica's batch).
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Callable

from distrib.data import Dataset, rebatch_and_shard
from distrib.data.distribute_input import replica_steps
from distrib.distribute.core.values import PerReplica
from distrib.errors import OutOfRangeError

__all__ = ["DistributedDataset", "DistributedDatasetsFromFunction", "DistributedIterator",
           "InputContext", "regroup_replicas"]


class InputContext:
    """What ``distribute_datasets_from_function``'s ``dataset_fn`` is told (TF's)."""

    def __init__(self, num_input_pipelines: int = 1, input_pipeline_id: int = 0,
                 num_replicas_in_sync: int = 1) -> None:
        self.num_input_pipelines = num_input_pipelines
        self.input_pipeline_id = input_pipeline_id
        self.num_replicas_in_sync = num_replicas_in_sync

    def get_per_replica_batch_size(self, global_batch_size: int) -> int:
        if global_batch_size % self.num_replicas_in_sync:
            raise ValueError(f"The `global_batch_size` {global_batch_size} is not divisible by "
                             f"`num_replicas_in_sync` {self.num_replicas_in_sync}")
        return global_batch_size // self.num_replicas_in_sync


def worker_replica_steps(strategy: Any, dataset_fn: Callable[[InputContext], Any]) -> Dataset:
    """``dataset_fn`` called with this worker's ``InputContext`` (as the strategy's
    group stands now), its elements dealt to the local replicas in turn."""
    context = InputContext(strategy.num_workers, strategy.worker_index,
                           strategy.num_replicas_in_sync)
    dataset = dataset_fn(context)
    if not isinstance(dataset, Dataset):
        raise ValueError("dataset_fn must return a dt.data.Dataset, got "
                         f"{type(dataset).__name__}")
    return replica_steps(dataset, len(strategy.replica_devices))


def regroup_replicas(step: tuple[Any, ...]) -> Any:
    """A tuple of per-replica elements as one element with PerReplica leaves."""
    first = step[0]
    if isinstance(first, tuple) and not hasattr(first, "_fields"):
        return tuple(regroup_replicas(tuple(s[i] for s in step)) for i in range(len(first)))
    if isinstance(first, list):
        return [regroup_replicas(tuple(s[i] for s in step)) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: regroup_replicas(tuple(s[k] for s in step)) for k in first}
    return PerReplica(list(step))


class DistributedIterator:
    """``iter(distributed_dataset)`` (TF's): ``next(it)`` is this worker's part of
    the next global batch, a ``PerReplica`` at every leaf; StopIteration at the
    end, and ``get_next()`` raises ``OutOfRangeError`` there. Passed to a
    ``dt.function``, it is an input: each call reads the next element
    (``distrib.distribute.functions.inputs``)."""

    def __init__(self, steps: Dataset) -> None:
        self._steps = steps
        self._it = iter(steps)

    def __iter__(self) -> DistributedIterator:
        return self

    def __next__(self) -> Any:
        return regroup_replicas(tuple(next(self._it)))

    def get_next(self) -> Any:
        """The next element; OutOfRangeError at the end of the data (TF's)."""
        try:
            return self.__next__()
        except StopIteration:
            raise OutOfRangeError("End of sequence: the distributed dataset has no more "
                                  "elements; start a new iterator (iter(dataset))") from None

    @property
    def element_spec(self) -> Any:
        """One element spec per local replica (a tuple)."""
        return self._steps.element_spec


class _Distributed:
    """Iteration over a dataset of steps (tuples of per-replica elements)."""

    _steps: Dataset

    def __iter__(self) -> DistributedIterator:
        return DistributedIterator(self._steps)

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for step in self._steps:
            yield regroup_replicas(tuple(step))

    @property
    def element_spec(self) -> Any:
        return self._steps.element_spec


class DistributedDataset(_Distributed):
    """A dataset whose batches are global batches, split over the replicas."""

    def __init__(self, strategy: Any, dataset: Dataset) -> None:
        if not isinstance(dataset, Dataset):
            raise ValueError(f"experimental_distribute_dataset needs a dt.data.Dataset, got "
                             f"{type(dataset).__name__}")
        self._strategy = strategy
        self._steps = rebatch_and_shard(dataset, strategy.num_workers, strategy.worker_index,
                                        len(strategy.replica_devices))


class DistributedDatasetsFromFunction(_Distributed):
    """``dataset_fn(input_context)`` once for this worker; its elements go to the
    local replicas in turn (not rebatched, not sharded: TF's)."""

    def __init__(self, strategy: Any, dataset_fn: Callable[[Any], Dataset]) -> None:
        self._strategy = strategy
        self._steps = worker_replica_steps(strategy, dataset_fn)
