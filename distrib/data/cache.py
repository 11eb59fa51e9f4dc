"""``cache(filename="")`` and ``padded_batch``.

``Cache`` (TF's rules): the first iteration that runs to the end stores
every element, in memory (no filename) or in a file; later iterations read
the stored elements and never run the pipeline above the cache again. An
iteration abandoned before the end stores nothing (TF's), so a ``take``
after a cache never leaves a partial cache behind. A file cache is a
TFRecord file of msgpack records (the elements' nest first, then each
element's leaves as dtype, shape and bytes; strings as lists of bytes: no
pickle), written to
``<filename>.dtcache.tmp`` and renamed to ``<filename>.dtcache`` when it is
whole, so another process, or a later run, reads it only once complete
(cursors filling at once each write a file of their own; the last renamed
stays).

``PaddedBatch`` stacks ``batch_size`` elements after padding each component
to ``padded_shapes`` (a ``None`` or ``-1`` dimension: the longest in the
batch) with ``padding_values`` (0, or ``b""`` for strings), as TF's.
"""
from __future__ import annotations

import itertools
import os
import threading
from typing import Any, Iterator

import msgpack
import numpy as np

from distrib.data import structure
from distrib.data.pipeline import Failed, Node, batches, probing
from distrib.errors import InvalidArgumentError
from distrib.io import tf_record

__all__ = ["Cache", "PaddedBatch", "nest_layout", "nest_of_layout", "leaf_out", "leaf_in"]


def leaf_out(arr: np.ndarray) -> list:
    """One array as msgpack-able ``[dtype, shape, payload]`` (strings: a list of
    bytes); shared with the map's worker processes (``process_map``)."""
    if arr.dtype.kind == "O":
        return ["O", list(arr.shape), [b if isinstance(b, bytes) else str(b).encode()
                                       for b in arr.reshape(-1)]]
    return [arr.dtype.str, list(arr.shape), np.ascontiguousarray(arr).tobytes()]


def leaf_in(dtype: str, shape: list, payload: Any, copy: bool = False) -> np.ndarray:
    """The array of :func:`leaf_out` (a read-only view of the payload unless ``copy``)."""
    if dtype == "O":
        arr = np.empty(len(payload), dtype=object)
        arr[:] = payload
        return arr.reshape(shape)
    arr = np.frombuffer(payload, dtype=np.dtype(dtype)).reshape(shape)
    return arr.copy() if copy else arr


def _encode(element: Any) -> bytes:
    return msgpack.packb([leaf_out(np.asarray(leaf)) for leaf in structure.flatten(element)],
                         use_bin_type=True)


def nest_layout(element: Any) -> Any:
    """The nest of an element as msgpack-able markers (the file's first record)."""
    if isinstance(element, dict):
        return {"d": [[k, nest_layout(element[k])] for k in element]}
    if isinstance(element, tuple):
        return {"t": [nest_layout(v) for v in element]}
    return None


def nest_of_layout(layout: Any) -> Any:
    if layout is None:
        return 0
    if "d" in layout:
        return {k: nest_of_layout(v) for k, v in layout["d"]}
    return tuple(nest_of_layout(v) for v in layout["t"])


def _decode(data: bytes, spec: Any) -> Any:
    leaves = []
    for dtype, shape, payload in msgpack.unpackb(data, raw=False):
        arr = leaf_in(dtype, shape, payload, copy=True)
        leaves.append(arr if arr.ndim else arr[()] if arr.dtype.kind != "O" else arr)
    return structure.pack_as(spec, leaves)


_FILLS = itertools.count()   # the cursors filling a file cache, numbered apart


class Cache(Node):
    def __init__(self, node: Node, filename: str) -> None:
        self.inputs = (node,)
        self.filename = filename
        self._memory: list[Any] | None = None
        self._lock = threading.Lock()

    def reset(self) -> None:
        self._memory = None

    @property
    def _path(self) -> str:
        return f"{self.filename}.dtcache"

    def iterate(self) -> Iterator[Any]:
        if self.filename:
            if os.path.exists(self._path):
                records = tf_record.read_records(self._path)
                first = next(records, None)
                spec = nest_of_layout(msgpack.unpackb(first, raw=False)) if first else None
                for data in records:
                    yield _decode(data, spec)
                return
            yield from self._fill_file()
            return
        if self._memory is not None:
            yield from self._memory
            return
        stored = []
        for element in self.inputs[0].iterate():
            if type(element) is not Failed:   # (a failed one is not cached: TF's)
                stored.append(element)
            yield element
        if not probing():
            with self._lock:
                self._memory = stored

    def _fill_file(self) -> Iterator[Any]:
        if probing():
            yield from self.inputs[0].iterate()
            return
        # a name of this cursor's own: two cursors of one thread may fill at once
        tmp = f"{self._path}.tmp.{os.getpid()}.{next(_FILLS)}"
        done = False
        try:
            with tf_record.TFRecordWriter(tmp) as writer:
                first = True
                for element in self.inputs[0].iterate():
                    if type(element) is Failed:   # not cached (TF's)
                        yield element
                        continue
                    if first:   # the elements' nest, so a reader needs no spec
                        writer.write(msgpack.packb(nest_layout(element), use_bin_type=True))
                        first = False
                    writer.write(_encode(element))
                    yield element
            os.replace(tmp, self._path)
            done = True
        finally:
            if not done and os.path.exists(tmp):
                os.remove(tmp)

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()


def _pad_to(value: np.ndarray, shape: list[int], fill: Any, component: int) -> np.ndarray:
    if len(shape) != value.ndim:
        raise InvalidArgumentError(f"padded_batch: component {component} has rank {value.ndim} "
                                   f"but padded shape {shape} has rank {len(shape)}")
    if any(have > want for have, want in zip(value.shape, shape)):
        raise InvalidArgumentError(f"padded_batch: component {component}'s shape "
                                   f"{list(value.shape)} is larger than its padded shape {shape}")
    out = np.full(shape, fill, dtype=value.dtype)
    out[tuple(slice(0, d) for d in value.shape)] = value
    return out


def _up_to(element: Any, value: Any, what: str) -> list[Any]:
    """``value`` (padded shapes or values) flattened only as deep as the element
    nests (TF's ``map_structure_up_to``): a component's shape may be a tuple."""
    if isinstance(element, dict):
        if not isinstance(value, dict) or set(value) != set(element):
            raise InvalidArgumentError(f"padded_batch: {what} {value!r} must have the elements' "
                                       f"keys {sorted(element)}")
        return [leaf for k in structure.flatten({k: k for k in element})
                for leaf in _up_to(element[k], value[k], what)]
    if isinstance(element, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(element):
            raise InvalidArgumentError(f"padded_batch: {what} {value!r} must have one entry per "
                                       f"component of the elements ({len(element)})")
        return [leaf for e, v in zip(element, value) for leaf in _up_to(e, v, what)]
    return [value]


class PaddedBatch(Node):
    def __init__(self, node: Node, batch_size: int, padded_shapes: Any, padding_values: Any,
                 drop_remainder: bool) -> None:
        self.inputs = (node,)
        self.batch_size = batch_size
        self.padded_shapes = padded_shapes
        self.padding_values = padding_values
        self.drop_remainder = drop_remainder

    def _shapes(self, first: Any, n: int) -> list[Any]:
        if self.padded_shapes is None:
            return [None] * n
        return _up_to(first, self.padded_shapes, "padded_shapes")

    def _values(self, first: Any, n: int) -> list[Any]:
        if self.padding_values is None:
            return [None] * n
        if not isinstance(self.padding_values, (tuple, list, dict)):
            return [self.padding_values] * n   # one value for every component
        return _up_to(first, self.padding_values, "padding_values")

    def iterate(self) -> Iterator[Any]:
        return batches(self.inputs[0].iterate(), self.batch_size, self.drop_remainder,
                       self._batch)

    def _batch(self, chunk: list[Any]) -> Any:
        flat = [[np.asarray(x) for x in structure.flatten(e)] for e in chunk]
        n = len(flat[0])
        shapes, fills = self._shapes(chunk[0], n), self._values(chunk[0], n)
        columns = []
        for c in range(n):
            column = [row[c] for row in flat]
            longest = [max(v.shape[d] for v in column) for d in range(column[0].ndim)]
            want = shapes[c]
            target = longest if want is None else [
                longest[d] if (w is None or int(w) < 0) else int(w)
                for d, w in enumerate(list(np.asarray(want, dtype=object).reshape(-1)))]
            fill = fills[c]
            if fill is None:
                fill = b"" if column[0].dtype.kind == "O" else 0
            columns.append(np.stack([_pad_to(v, target, fill, c) for v in column]))
        return structure.pack_as(chunk[0], columns)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _compute_spec(self) -> Any:
        return self.probe_spec()
