"""An iterator's position in a ``dt.train.Checkpoint`` (TF's iterator
checkpointing: ``Checkpoint(iterator=it)``), and the cursor that starts there.

What is saved: how many elements the iterator has handed out, and the epoch
counters of the pipeline's stages (a shuffle's, a map's seed epochs) as they
were when the iterator started; a string scalar in the checkpoint, as TF
saves an iterator's state. What a restore does: a new cursor that starts
after that many elements, without reading the skipped part where the
pipeline allows it (:func:`iterate_from`): a slice or range starts at the
index, a TFRecord or fixed-length file skips records by their lengths or
the file's size (no record is read or checked), a map, batch, take, skip,
shard, enumerate, zip, repeat of a known cardinality or prefetch passes the
count on (a map's element positions, hence its random draws, continue), and
only the stages whose output depends on what they read (shuffle, filter,
interleave, unbatch, padded batch, cache) replay their input to that point.
Where TF saves a shuffle's buffer, this replays it: the same elements come
out when the shuffle is seeded.
"""
from __future__ import annotations

import copy
import itertools
from typing import Any, Iterator

import msgpack
import numpy as np

from distrib.data import iterators, parallel_map, pipeline, readers, transforms
from distrib.errors import InvalidArgumentError

__all__ = ["iterate_from", "input_from", "epoch_counters", "set_epoch_counters", "encode_state",
           "decode_state"]


class _Started(pipeline.Node):
    """``node``'s elements from position ``k`` on, as a node (a twin's input)."""

    def __init__(self, node: pipeline.Node, k: int) -> None:
        self.inputs = (node,)
        self.k = k

    def iterate(self) -> Iterator[Any]:
        return iterate_from(self.inputs[0], self.k)


def input_from(node: pipeline.Node, k: int) -> pipeline.Node:
    """A copy of ``node`` whose input starts at its element ``k`` (a node's
    ``start_at(k)`` hook builds on it)."""
    return _twin(node, k)


def _twin(node: pipeline.Node, k: int, **attrs: Any) -> pipeline.Node:
    twin = copy.copy(node)
    twin.inputs = (_Started(node.inputs[0], k),)
    for name, value in attrs.items():
        setattr(twin, name, value)
    return twin


def _replay(node: pipeline.Node, k: int) -> Iterator[Any]:
    cursor = node.iterate()
    for _ in range(k):
        if next(cursor, _END) is _END:
            return iter(())
    return cursor


_END = object()


def iterate_from(node: pipeline.Node, k: int) -> Iterator[Any]:
    """A cursor over ``node``'s elements after the first ``k`` (see the header)."""
    if k <= 0:
        return node.iterate()
    if isinstance(node, pipeline.TensorSlices):
        value, leaves = node._value, node._leaves  # noqa: SLF001 - the slices' own rows
        return (pipeline.structure.pack_as(value, [leaf[i] for leaf in leaves])
                for i in range(k, node.cardinality()))
    if isinstance(node, pipeline.Range):
        twin = copy.copy(node)
        twin._range = node._range[k:]  # noqa: SLF001 - a range is its Python range
        return twin.iterate()
    if isinstance(node, (transforms.Map, parallel_map.ParallelMap)):
        return _twin(node, k, index_offset=node.index_offset + k).iterate()
    if isinstance(node, parallel_map.ParallelMapBatch):
        mapped, rows = node.inputs[0], k * node.batch_size
        twin_map = _twin(mapped, rows, index_offset=mapped.index_offset + rows)
        twin = copy.copy(node)
        twin.inputs = (twin_map,)
        return twin.iterate()
    if isinstance(node, transforms.Batch):
        return _twin(node, k * node.batch_size).iterate()
    if isinstance(node, iterators.Prefetch):
        return _twin(node, k).iterate()
    if isinstance(node, transforms.Take):
        left = -1 if node.count < 0 else max(node.count - k, 0)
        return _twin(node, k, count=left).iterate()
    if isinstance(node, transforms.Skip) and node.count >= 0:
        return iterate_from(node.inputs[0], node.count + k)
    if isinstance(node, transforms.Enumerate):
        return _twin(node, k, start=node.start + k).iterate()
    if isinstance(node, transforms.Shard) and not node.require_non_empty:
        return _shard_from(node, k)
    if isinstance(node, transforms.Repeat):
        return _repeat_from(node, k)
    start_at = getattr(node, "start_at", None)   # a node that knows its input's position
    if start_at is not None:
        return start_at(k)
    if isinstance(node, pipeline.Zip):
        twin = copy.copy(node)
        twin.inputs = tuple(_Started(n, k) for n in node.inputs)
        return twin.iterate()
    if isinstance(node, readers.RecordFiles) and node.parallel == 1:
        return _records_from(node, k)
    return _replay(node, k)


def _shard_from(node: transforms.Shard, k: int) -> Iterator[Any]:
    # shard element k is input element index + k * num_shards
    start = node.index + k * node.num_shards
    for offset, element in enumerate(iterate_from(node.inputs[0], start)):
        if offset % node.num_shards == 0:
            yield element


def _repeat_from(node: transforms.Repeat, k: int) -> Iterator[Any]:
    size = node.inputs[0].cardinality()
    if size <= 0:
        yield from _replay(node, k)
        return
    skipped, k = divmod(k, size)
    if 0 <= node.count <= skipped:
        return
    for sub in node.inputs[0].walk():   # the skipped epochs' counters, as if they ran
        counter = getattr(sub, "_epochs", None)
        if counter is not None:
            start = next(counter) + skipped
            sub._epochs = itertools.count(start)  # noqa: SLF001 - the stage's epoch counter
    yield from iterate_from(node.inputs[0], k)
    epochs = itertools.count() if node.count < 0 else range(node.count - skipped - 1)
    for _ in epochs:
        yield from node.inputs[0].iterate()


def _records_from(node: readers.RecordFiles, k: int) -> Iterator[Any]:
    """A reader's records after the first ``k``: whole files skipped by their
    record counts where the format tells them without reading the records."""
    names = [readers.name_of(n) for n in node.inputs[0].iterate()]
    for i, name in enumerate(names):
        if k == 0:
            for record in node.read(name):
                yield np.array(record, dtype=object)
            continue
        count = node.count(name) if node.count is not None else None
        if count is None:   # a format that must be read to be counted: replay from here
            rest = readers.RecordFiles(readers.file_names(names[i:]), node.read, node.what)
            yield from _replay(rest, k)
            return
        if k >= count:
            k -= count
            continue
        for record in node.seek(name, k):
            yield np.array(record, dtype=object)
        k = 0


def epoch_counters(node: pipeline.Node) -> list[int]:
    """The next epoch of every stage with an epoch counter, in walk order."""
    out = []
    for sub in node.walk():
        counter = getattr(sub, "_epochs", None)
        if counter is not None:
            value = next(counter)
            sub._epochs = itertools.count(value)  # noqa: SLF001 - put back what was read
            out.append(value)
    return out


def set_epoch_counters(node: pipeline.Node, values: list[int]) -> None:
    stages = [sub for sub in node.walk() if getattr(sub, "_epochs", None) is not None]
    if len(stages) != len(values):
        raise InvalidArgumentError(f"the saved iterator had {len(values)} stages with epochs, "
                                   f"this pipeline has {len(stages)}: restore into an iterator "
                                   "of the same dataset")
    for sub, value in zip(stages, values):
        sub._epochs = itertools.count(int(value))  # noqa: SLF001 - the stage's epoch counter


def encode_state(produced: int, epochs: list[int]) -> np.ndarray:
    return np.array(msgpack.packb({"version": 1, "produced": int(produced),
                                   "epochs": [int(e) for e in epochs]}), dtype=object)


def decode_state(value: Any) -> tuple[int, list[int]]:
    raw = np.asarray(value, dtype=object).item()
    try:
        state = msgpack.unpackb(raw if isinstance(raw, bytes) else bytes(raw))
        return int(state["produced"]), [int(e) for e in state["epochs"]]
    except Exception as e:
        raise InvalidArgumentError(f"the checkpoint's iterator state cannot be read ({e}); it "
                                   "was not written for a dt.data iterator") from None


class CheckpointableIterator(iterators.DatasetIterator):
    """``iter(ds)``: a DatasetIterator that a ``dt.train.Checkpoint`` saves and
    restores (a value of the checkpoint: a string scalar of its position)."""

    def __init__(self, node: pipeline.Node) -> None:
        self._node = node
        self._start_epochs = epoch_counters(node)   # before the cursor reads any
        self._produced = 0
        super().__init__(node.iterate(), node.element_spec)

    def __next__(self) -> Any:
        item = next(self._cursor)
        self._produced += 1   # a failed element too: it held its position
        return iterators.element_value(item)   # a failed one raises (the iterators' rule)

    def get_next(self) -> Any:
        try:
            return self.__next__()   # counts a failed element as ``next`` does
        except StopIteration:   # an ended cursor ends again: the OutOfRangeError
            return super().get_next()

    # -- the checkpoint's value protocol (distrib/train/checkpoints/trackable.py) -----------
    @property
    def dtype(self) -> Any:
        from distrib.framework import dtypes
        return dtypes.string

    @property
    def shape(self) -> Any:
        from distrib.framework.tensor_shape import TensorShape
        return TensorShape([])

    def checkpoint_parts(self) -> list[Any]:
        return []   # no variable: the state is this process's

    def checkpoint_join(self, parts: Any) -> np.ndarray:
        return encode_state(self._produced, self._start_epochs)

    def checkpoint_split(self, value: Any) -> list[Any]:
        """Restore: a new cursor after the saved position (nothing to assign)."""
        produced, epochs = decode_state(value)
        set_epoch_counters(self._node, epochs)
        close = getattr(self._cursor, "close", None)
        if close is not None:
            close()
        self._start_epochs = epochs
        self._cursor = iterate_from(self._node, produced)
        self._produced = produced
        return []

    def skip_to(self, position: int) -> None:
        """Go on from element ``position`` of a fresh iterator: a cursor that
        starts there (:func:`iterate_from`: the stages before a map or batch
        skip their input without running the map), not one read up to it."""
        if position == self._produced:
            return
        close = getattr(self._cursor, "close", None)
        if close is not None:
            close()
        self._cursor = iterate_from(self._node, position)
        self._produced = position
