"""Splitting a dataset between workers and replicas, as ``experimental_distribute_dataset``.

The strategies (``dt.distribute``) call :func:`rebatch_and_shard` once per
worker. It does what TF's ``input_lib`` and its AutoShard rewrite do, traced
from TF's sources (``input_lib._create_cloned_datasets_from_dataset``,
``data/experimental/ops/distribute.py``, ``grappler/optimizers/data/auto_shard.cc``
and ``kernels/data/experimental/rebatch_dataset_op.cc``):

- The dataset's batch size B is the *global* batch: one step of all
  ``N = num_workers * R`` replicas (R per worker) consumes B elements.
- FILE policy (and AUTO when the pipeline reads files, TF's rule): every
  reader of the pipeline (``TFRecordDataset`` ..., or a ``flat_map`` /
  ``interleave`` whose function makes one, as ``list_files(...).interleave(
  TFRecordDataset)``) reads only the files of ``shard(num_workers,
  worker_index)`` of its file names, a shuffle of the names moved after the
  shard (TF's: each worker shuffles its own files), and each global
  batch it makes is rebatched into N sub-batches, all of which the worker
  keeps (its steps walk through them): the workers read disjoint files.
  Unbatched elements go to the worker's replicas as they are.
  Fewer files than workers is an error for FILE (TF's "not enough for the
  required shards"); AUTO then shards by data.
- DATA policy (and AUTO for a pipeline that reads no files): every worker runs
  the whole pipeline, then a *legacy rebatch* splits each global batch of b
  rows into N sub-batches of ``m = ceil(b / N)`` rows (sub-batch k holds rows
  ``[k*m, min((k+1)*m, b))``; the last ones may be short or empty), and a
  ``shard(num_workers, worker_index)`` keeps every ``num_workers``-th
  sub-batch. So worker w's local replica r gets sub-batch ``k = w + r*W`` of
  every global batch: the workers' parts are disjoint, their union is the
  global batch, and each step of every worker reads the same global batch.
  Note that a worker's part is *interleaved* with the others' (worker 0 of 2
  with 2 replicas each gets rows [0, m) and [2m, 3m)), not one contiguous
  block: that is TF's order, kept so that a ported job sees the same rows.
- When B is not divisible by N the first sub-batches have ceil(B/N) rows and
  the last ones fewer (possibly none): replica sizes differ by up to ceil(B/N).
  A short final batch (``drop_remainder=False``) is split the same way.
- Every worker must see the same global batches: with DATA sharding, seed the
  shuffles (``shuffle(n, seed=...)`` or ``dt.set_random_seed``). A warning is
  logged when an unseeded shuffle is found, as the rows could then overlap.
  Each call works on its own clone of the pipeline (as TF clones the dataset
  per worker), so a shuffle's epochs start at 0 for every worker even when
  one process builds the datasets of several workers.
- OFF: no sharding; each worker splits the global batch by TF's rotated
  ``batch_sizes_for_worker`` (RebatchDatasetV2) and reads the whole dataset.
- FILE on a pipeline that reads no files: an error for more than one worker
  (TF's "Did not find a shardable source").

An element of the returned dataset is a tuple of R per-replica batches, one
step of this worker (TF's MultiDeviceIterator hands consecutive sub-batches
to the local replicas in order). If a dataset ends in the middle of a step
the missing replicas get empty batches (zero rows), as TF's partial-batch
handling does.

:func:`replica_steps` is ``distribute_datasets_from_function``'s part: the
worker's own dataset (its ``dataset_fn``'s) is neither rebatched nor
sharded; its elements, batched or not, go whole to the local replicas in
turn (``range(10)`` on two replicas: ``(0, 1), (2, 3), ...``), as TF's
MultiDeviceIterator does. A partial step of unbatched elements (scalars have
no empty batch) ends the iteration, as TF's iterator ends without
partial-batch handling.
"""
from __future__ import annotations

import copy
import itertools
import logging
from typing import Any, Iterator

import numpy as np

from distrib.data import structure
from distrib.data.dataset_ops import Dataset
from distrib.data.interleave import FlatMap, Interleave, dataset_node
from distrib.data.iterator_state import input_from
from distrib.data.iterators import Prefetch
from distrib.data.options import AutoShardPolicy
from distrib.data.pipeline import END, INFINITE, Failed, Node
from distrib.data.readers import RecordFiles
from distrib.data.transforms import Batch, Filter, Repeat, Shard, Shuffle, Skip, Take
from distrib.errors import InvalidArgumentError, NotFoundError, UnimplementedError

__all__ = ["rebatch_and_shard", "replica_steps", "auto_shard", "batch_sizes_for_worker",
           "compute_batch_size", "LegacyRebatch", "Rebatch", "ReplicaSteps"]

logger = logging.getLogger(__name__)


def batch_sizes_for_worker(global_batch_size: int, num_workers: int,
                           num_replicas_per_worker: int, worker_index: int) -> list[int]:
    """TF's split of a global batch for one worker when not sharding by data.

    ``num_workers * R`` sizes summing to the global batch, each floor or ceil
    of ``B / N``; worker 0 lists the ceil sizes first and worker w rotates the
    list by ``w * R``, so every global step consumes exactly B elements.
    """
    n = num_workers * num_replicas_per_worker
    floor, num_ceil = divmod(global_batch_size, n)
    worker_0 = [floor + 1] * num_ceil + [floor] * (n - num_ceil)
    offset = worker_index * num_replicas_per_worker
    return worker_0[offset:] + worker_0[:offset]


_BATCH_SIZE_PASS_THROUGH = (Prefetch, Repeat, Shuffle, Take, Skip, Shard, Filter)


def compute_batch_size(dataset: Dataset) -> int:
    """The static batch size of ``dataset``'s elements, or -1 when it is not known.

    Walks back through stages that keep the batch size to the last ``batch``;
    known when that drops the remainder or its input has no end (then no short
    batch can occur) or divides evenly, as TF's ComputeBatchSize decides.
    """
    node = dataset.node
    while isinstance(node, _BATCH_SIZE_PASS_THROUGH):
        node = node.inputs[0]
    if not isinstance(node, Batch):
        return -1
    n = node.inputs[0].cardinality()
    if node.drop_remainder or n == INFINITE or (n >= 0 and n % node.batch_size == 0):
        return node.batch_size
    return -1


def _rows(element: Any) -> tuple[list[Any], int]:
    leaves = structure.flatten(element)
    for i, leaf in enumerate(leaves):
        if np.ndim(leaf) == 0:
            raise InvalidArgumentError(
                "Cannot rebatch dataset: All components must have at least one dimension. "
                f"Perhaps your input dataset is not batched? Component {i} is scalar. Batch it "
                "with the global batch size (ds.batch(global_batch_size)) before distributing")
    return leaves, np.shape(leaves[0])[0]


def _any_batch_size(spec: Any) -> Any:
    return structure.map_structure_unchecked(
        lambda s: structure.with_batch_dim(structure.without_batch_dim(s), None), spec)


class LegacyRebatch(Node):
    """Each input batch split into ``num_replicas`` sub-batches of ceil(b/N) rows."""

    def __init__(self, node: Node, num_replicas: int) -> None:
        self.inputs = (node,)
        self.num_replicas = num_replicas

    def iterate(self) -> Iterator[Any]:
        n = self.num_replicas
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            leaves, _ = _rows(element)
            steps = [-(-np.shape(leaf)[0] // n) for leaf in leaves]   # per component
            for k in range(n):
                parts = [leaf[min(k * m, len(leaf)):min((k + 1) * m, len(leaf))]
                         for leaf, m in zip(leaves, steps)]
                yield structure.pack_as(element, parts)

    def cardinality(self) -> int:
        c = self.inputs[0].cardinality()
        return c if c < 0 else c * self.num_replicas

    def _compute_spec(self) -> Any:
        return _any_batch_size(self.inputs[0].element_spec())


class Rebatch(Node):
    """TF's RebatchDatasetV2: batches of the given sizes in turn, across input batches."""

    def __init__(self, node: Node, batch_sizes: list[int]) -> None:
        self.inputs = (node,)
        self.batch_sizes = batch_sizes

    def iterate(self) -> Iterator[Any]:
        cursor = self.inputs[0].iterate()
        failed: list[Failed] = []   # met while filling a batch: they come out before it

        def rows_of() -> Iterator[tuple[Any, list[Any]]]:
            for element in cursor:
                if type(element) is Failed:
                    failed.append(element)
                else:
                    yield element, _rows(element)[0]
        batches = rows_of()
        template, rows, offset = None, None, 0
        try:
            for turn in itertools.count():
                want = self.batch_sizes[turn % len(self.batch_sizes)]
                pieces, have = [], 0
                while have < want:
                    if rows is None or offset == len(rows[0]):
                        template, rows = next(batches, (template, None))
                        offset = 0
                        if rows is None:
                            break
                        continue
                    take = min(want - have, len(rows[0]) - offset)
                    pieces.append([leaf[offset:offset + take] for leaf in rows])
                    have, offset = have + take, offset + take
                if have == 0 and want > 0:
                    yield from failed
                    return
                if template is None:   # a size of 0 before any input: look at one batch
                    template, rows = next(batches, (None, None))
                    if rows is None:
                        return
                columns = ([np.concatenate(parts) for parts in zip(*pieces)] if pieces
                           else [leaf[:0] for leaf in structure.flatten(template)])
                while failed:
                    yield failed.pop(0)
                yield structure.pack_as(template, columns)
        finally:
            cursor.close()  # type: ignore[attr-defined]

    def _compute_spec(self) -> Any:
        return _any_batch_size(self.inputs[0].element_spec())


def _empty_like(element: Any) -> Any:
    return structure.map_structure_unchecked(lambda leaf: leaf[:0], element)


class ReplicaSteps(Node):
    """Tuples of R consecutive elements: one step's batches for this worker's replicas."""

    def __init__(self, node: Node, num_replicas_in_worker: int) -> None:
        self.inputs = (node,)
        self.replicas = num_replicas_in_worker

    def iterate(self) -> Iterator[Any]:
        step: list[Any] = []
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            step.append(element)
            if len(step) == self.replicas:
                yield tuple(step)
                step = []
        # a partial step: the replicas past the end get empty batches; unbatched
        # elements (a scalar has no empty batch) end the iteration there, as TF's
        if step and all(np.ndim(leaf) > 0 for leaf in structure.flatten(step[-1])):
            yield tuple(step + [_empty_like(step[-1])] * (self.replicas - len(step)))

    def start_at(self, k: int) -> Iterator[Any]:
        """Steps from step ``k`` on: its input from element ``k * replicas``
        (``iterator_state.iterate_from``'s hook)."""
        return input_from(self, k * self.replicas).iterate()

    def cardinality(self) -> int:
        c = self.inputs[0].cardinality()
        if c < 0:
            return c
        scalars = any(getattr(spec, "shape", None) is not None and spec.shape.rank == 0
                      for spec in structure.flatten(self.inputs[0].element_spec()))
        return c // self.replicas if scalars else -(-c // self.replicas)

    def _compute_spec(self) -> Any:
        return (self.inputs[0].element_spec(),) * self.replicas


def _check(num_workers: int, worker_index: int, num_replicas_in_worker: int) -> None:
    if num_workers < 1 or num_replicas_in_worker < 1:
        raise InvalidArgumentError(
            f"need at least one worker and one replica per worker, got num_workers="
            f"{num_workers}, num_replicas_in_worker={num_replicas_in_worker}")
    if not 0 <= worker_index < num_workers:
        raise InvalidArgumentError(f"worker_index must be in [0, {num_workers}), got "
                                   f"{worker_index}; pass this worker's task index")


def _warn_unseeded(dataset: Dataset, num_workers: int) -> None:
    if num_workers > 1 and any(isinstance(n, Shuffle) and not n.seeded
                               for n in dataset.node.walk()):
        logger.warning(
            "sharding by data across %d workers, but the dataset shuffles without a seed: each "
            "worker may see different global batches, so rows can repeat or be missed. Pass "
            "shuffle(n, seed=...) or call dt.set_random_seed first", num_workers)


def auto_shard(dataset: Dataset, num_workers: int, worker_index: int,
               num_replicas_in_worker: int, policy: AutoShardPolicy | None = None) -> Dataset:
    """TF's per-worker dataset: rebatched to per-replica batches, sharded by ``policy``.

    Elements are single per-replica batches; consecutive runs of
    ``num_replicas_in_worker`` belong to the local replicas in order. ``policy``
    defaults to the dataset's ``options().experimental_distribute.auto_shard_policy``.
    """
    _check(num_workers, worker_index, num_replicas_in_worker)
    if policy is None:
        policy = dataset.options().experimental_distribute.auto_shard_policy
    policy = AutoShardPolicy(policy)
    n = num_workers * num_replicas_in_worker
    node, options = dataset.node.clone(), dataset.options()   # this worker's own copy
    if policy == AutoShardPolicy.HINT:
        raise UnimplementedError("AutoShardPolicy.HINT is not supported by dt.data; use DATA "
                                 "(or AUTO) to shard by data, or OFF")
    if policy in (AutoShardPolicy.FILE, AutoShardPolicy.AUTO) and num_workers > 1:
        sharded = _shard_files(node, num_workers, worker_index, policy)
        if sharded:   # the workers read disjoint files: rebatch only (batched elements)
            batched = all(spec.shape.rank != 0 for spec in structure.flatten(
                dataset.element_spec))
            return Dataset(LegacyRebatch(node, n) if n > 1 and batched else node, options)
        if policy == AutoShardPolicy.FILE:
            raise NotFoundError(
                "Did not find a shardable source: the dataset reads no files (TFRecordDataset, "
                "FixedLengthRecordDataset, TextLineDataset), so FILE sharding cannot apply. Set "
                "options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA (or "
                "AUTO) and apply it with dataset.with_options(options)")
    if policy in (AutoShardPolicy.AUTO, AutoShardPolicy.DATA):
        _warn_unseeded(dataset, num_workers)
        if n > 1:
            node = LegacyRebatch(node, n)
        if num_workers > 1:
            node = Shard(node, num_workers, worker_index, require_non_empty=True)
    elif n > 1:   # OFF, or FILE on one worker: rebatch only
        global_batch = compute_batch_size(dataset)
        node = (Rebatch(node, batch_sizes_for_worker(global_batch, num_workers,
                                                     num_replicas_in_worker, worker_index))
                if global_batch > 0 else LegacyRebatch(node, n))
    return Dataset(node, options)


def _shard_files(node: Node, num_workers: int, worker_index: int,
                 policy: AutoShardPolicy) -> bool:
    """Shard the file names of every reader in ``node`` (a private clone), and of
    every flat_map / interleave whose function makes readers (TF's FILE rule);
    False when there is none, or (AUTO) too few files to give each worker one."""
    found: list[Node] = [n for n in node.walk() if isinstance(n, RecordFiles)]
    found += [n for n in node.walk() if isinstance(n, (FlatMap, Interleave))
              and not any(isinstance(m, RecordFiles) for m in n.inputs[0].walk())
              and opens_readers(n)]
    if not found:
        return False
    for reader in found:
        count = reader.inputs[0].cardinality()
        if 0 <= count < num_workers:
            if policy == AutoShardPolicy.AUTO:
                return False
            raise InvalidArgumentError(
                f"Could not apply FILE based sharding: the dataset only has {count} file(s), "
                f"which is not enough for the required {num_workers} shards/workers. Set the "
                "auto sharding policy to DATA or OFF (options.experimental_distribute."
                "auto_shard_policy)")
    for reader in found:
        reader.inputs = (_sharded_names(reader.inputs[0], num_workers, worker_index),)
    return True


def opens_readers(stage: Node) -> bool:
    """Whether a flat_map / interleave makes datasets that read files (TF's
    ``ReaderOpInFunction``), told by making the dataset of its input's first
    element (made only: nothing is read); FILE sharding then shards its input."""
    try:
        first = stage.inputs[0].probe_first()
        if first is END:
            return False
        made = dataset_node(stage.fn, first, "interleave")   # type: ignore[attr-defined]
    except Exception:   # a function that cannot be probed: not a shardable source
        return False
    return any(isinstance(n, RecordFiles) for n in made.walk())


def _sharded_names(names: Node, num_workers: int, worker_index: int) -> Node:
    """``shard(num_workers, worker_index)`` of a node of file names, with a shuffle
    of the names above it moved after the shard (TF's ProcessDatasetSourceNode):
    the workers split the files in one order, then each shuffles its own (an
    unseeded shuffle before the shard would give the workers overlapping files)."""
    parent, at = None, names
    while not isinstance(at, Shuffle) and len(at.inputs) == 1:
        parent, at = at, at.inputs[0]
    if not isinstance(at, Shuffle):
        return Shard(names, num_workers, worker_index)
    shuffle, below = at, at.inputs[0]
    if parent is None:
        names = below
    else:
        parent.inputs = (below,)
    moved = copy.copy(shuffle)
    moved.inputs = (Shard(names, num_workers, worker_index),)
    return moved


def rebatch_and_shard(dataset: Dataset, num_workers: int, worker_index: int,
                      num_replicas_in_worker: int = 1,
                      policy: AutoShardPolicy | None = None) -> Dataset:
    """What ``experimental_distribute_dataset`` gives one worker: a dataset whose
    elements are tuples of ``num_replicas_in_worker`` per-replica batches, one per step.

    See the module header for how rows are assigned and for batch sizes that do
    not divide by the number of replicas.
    """
    per_replica = auto_shard(dataset, num_workers, worker_index, num_replicas_in_worker, policy)
    return Dataset(ReplicaSteps(per_replica.node, num_replicas_in_worker), dataset.options())


def replica_steps(dataset: Dataset, num_replicas_in_worker: int = 1) -> Dataset:
    """What ``distribute_datasets_from_function`` gives one worker: tuples of
    ``num_replicas_in_worker`` consecutive elements of ``dataset`` (the worker's
    own, neither rebatched nor sharded), one per step. See the module header."""
    _check(1, 0, num_replicas_in_worker)
    return Dataset(ReplicaSteps(dataset.node.clone(), num_replicas_in_worker),
                   dataset.options())
