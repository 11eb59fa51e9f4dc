"""Datasets that read files: ``dt.data.TFRecordDataset``,
``FixedLengthRecordDataset``, ``TextLineDataset`` (TF's ``readers.py``) and
the file list of ``Dataset.list_files``.

Each reader is a :class:`RecordFiles` node over a node of file names (a
list given, or any dataset of strings), so a strategy's FILE sharding
(``distribute_input``) shards that node of names and leaves the records
alone. Every element is a string scalar: a 0-d object array holding the
record's ``bytes`` (numpy's own bytes scalar would drop trailing zero
bytes, which binary records have).

``num_parallel_reads=N`` reads N files at once and takes one record from
each in turn, in the order of TF's interleave with ``cycle_length`` N and
``block_length`` 1 (a file that ends leaves its slot to the next file when
the turn comes back to it: ``interleave.Interleave``'s ring). The files are
read in the iterating thread; put ``prefetch`` after the reader to overlap
reading with the consumer.
"""
from __future__ import annotations

import glob
import itertools
import os
from typing import Any, Callable, Iterator

import numpy as np

from distrib.data.pipeline import UNKNOWN, Node, TensorSlices
from distrib.data.structure import TensorSpec
from distrib.errors import DataLossError, InvalidArgumentError
from distrib.framework import dtypes
from distrib.io import tf_record

__all__ = ["RecordFiles", "tf_records", "fixed_length_records", "text_lines", "file_names",
           "list_files", "name_of"]

RecordFn = Callable[[str], Iterator[bytes]]
CountFn = Callable[[str], int]                      # a file's records, without reading them
SeekFn = Callable[[str, int], Iterator[bytes]]      # a file's records from the k-th on


def _name(value: Any) -> str:
    v = value.item() if isinstance(value, (np.ndarray, np.generic)) else value
    v = os.fspath(v) if isinstance(v, os.PathLike) else v
    if isinstance(v, bytes):
        return v.decode()
    if not isinstance(v, str):
        raise InvalidArgumentError(f"a file name must be a string, got {value!r}")
    return v


name_of = _name


def file_names(filenames: Any) -> Node:
    """A node of file names from a string, a list of them, or a dataset of strings."""
    node = getattr(filenames, "node", None)
    if isinstance(node, Node):
        return node
    if isinstance(filenames, (str, bytes, os.PathLike)):
        filenames = [filenames]
    names = [_name(f) for f in np.asarray(filenames, dtype=object).reshape(-1)]
    if not names:
        raise InvalidArgumentError("a reader needs at least one file name")
    return TensorSlices(np.array([n.encode() for n in names], dtype=object))


class RecordFiles(Node):
    """The records of each file its input names, in order (or interleaved)."""

    def __init__(self, names: Node, read: RecordFn, what: str, parallel: int = 1,
                 deterministic: bool = True, count: CountFn | None = None,
                 seek: SeekFn | None = None) -> None:
        self.inputs = (names,)
        self.read = read
        self.count = count   # what a restored iterator skips whole files with
        self.seek = seek
        self.what = what
        self.parallel = max(1, parallel)
        self.deterministic = deterministic

    def iterate(self) -> Iterator[Any]:
        if self.parallel > 1:
            yield from self._interleaved()
            return
        for name in self.inputs[0].iterate():
            for record in self.read(_name(name)):
                yield np.array(record, dtype=object)

    def _interleaved(self) -> Iterator[Any]:
        from distrib.data.interleave import Interleave

        class FileRing(Interleave):   # TF's ring of slots, each slot a file's records
            def _open(ring, name: Any) -> Iterator[Any]:  # noqa: N805 - the ring, not self
                return (np.array(r, dtype=object) for r in self.read(_name(name)))
        return FileRing(self.inputs[0], None, self.parallel, 1, False, True).iterate()

    def cardinality(self) -> int:
        return UNKNOWN

    def _compute_spec(self) -> Any:
        return TensorSpec([], dtypes.string)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 0:
        raise InvalidArgumentError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def _parallel(num_parallel_reads: Any) -> int:
    if num_parallel_reads is None:
        return 1
    n = int(num_parallel_reads)
    return 4 if n == -1 else max(1, n)   # AUTOTUNE: a few files at once


def tf_records(filenames: Any, compression_type: Any = None, buffer_size: Any = None,
               num_parallel_reads: Any = None) -> RecordFiles:
    """The node of ``TFRecordDataset``."""
    kind = tf_record.compression_of(compression_type)
    size = None if buffer_size is None else _positive("buffer_size", buffer_size) or None

    def read(name: str) -> Iterator[bytes]:
        return tf_record.read_records(name, kind, buffer_size=size)

    def seek(name: str, k: int) -> Iterator[bytes]:
        offsets = tf_record.record_offsets(name)
        start = next(itertools.islice(offsets, k - 1, None), None) if k > 0 else 0
        return tf_record.read_records(name, kind, buffer_size=size, offset=start or 0)

    def count(name: str) -> int:
        return sum(1 for _ in tf_record.record_offsets(name))
    uncompressed = kind == ""
    return RecordFiles(file_names(filenames), read, "TFRecord", _parallel(num_parallel_reads),
                       count=count if uncompressed else None, seek=seek if uncompressed else None)


def fixed_length_records(filenames: Any, record_bytes: Any, header_bytes: Any = None,
                         footer_bytes: Any = None, buffer_size: Any = None,
                         compression_type: Any = None, num_parallel_reads: Any = None
                         ) -> RecordFiles:
    """The node of ``FixedLengthRecordDataset``: records of ``record_bytes`` after
    ``header_bytes`` and before ``footer_bytes`` of each file, TF's rules: a body
    that is not whole records is an ``InvalidArgumentError`` when the file is
    opened (a compressed file's, found at its end, a ``DataLossError``). An
    uncompressed file is read a few hundred KiB at a time, not whole."""
    size = _positive("record_bytes", record_bytes)
    if size == 0:
        raise InvalidArgumentError("record_bytes must be positive")
    header = _positive("header_bytes", header_bytes or 0)
    footer = _positive("footer_bytes", footer_bytes or 0)
    kind = tf_record.compression_of(compression_type)
    per_read = max(1, (256 * 1024) // size) * size   # whole records per read

    def not_whole(name: str, body: int) -> str:
        return (f"Excluding the header ({header} bytes) and footer ({footer} bytes), input file "
                f'"{name}" has body length {body} bytes, which is not an exact multiple of '
                f"the record length ({size} bytes).")

    def read(name: str, skip: int = 0) -> Iterator[bytes]:
        with tf_record.open_read(name, kind) as f:
            if kind:
                data = f.read()
                body = max(len(data) - header - footer, 0)
                if body % size:
                    raise DataLossError(not_whole(name, body))
                view = memoryview(data)[header:header + body]
                for start in range(skip * size, body, size):
                    yield bytes(view[start:start + size])
                return
            total = os.fstat(f.fileno()).st_size
            if total < header + footer:
                raise InvalidArgumentError(f'input file "{name}" has {total} bytes, fewer than '
                                           f"its header ({header}) and footer ({footer})")
            left = total - header - footer
            if left % size:
                raise InvalidArgumentError(not_whole(name, left))
            left = max(left - skip * size, 0)   # a restored iterator's records skipped
            f.seek(header + skip * size)
            while left:
                chunk = f.read(min(per_read, left))
                if len(chunk) < min(per_read, left):
                    raise DataLossError(f'input file "{name}" ended early: it shrank while '
                                        "being read")
                left -= len(chunk)
                view = memoryview(chunk)
                for start in range(0, len(chunk), size):
                    yield bytes(view[start:start + size])

    def count(name: str) -> int:
        return max(os.stat(name).st_size - header - footer, 0) // size

    def seek(name: str, k: int) -> Iterator[bytes]:
        return read(name, k)
    uncompressed = kind == ""
    return RecordFiles(file_names(filenames), read, "FixedLength", _parallel(num_parallel_reads),
                       count=count if uncompressed else None, seek=seek)


def text_lines(filenames: Any, compression_type: Any = None, buffer_size: Any = None,
               num_parallel_reads: Any = None) -> RecordFiles:
    """The node of ``TextLineDataset``: each line, without its ``\\n`` or ``\\r\\n``."""
    kind = tf_record.compression_of(compression_type)

    def read(name: str) -> Iterator[bytes]:
        with tf_record.open_read(name, kind) as f:
            for line in f:
                if line.endswith(b"\n"):
                    line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
                yield line
    return RecordFiles(file_names(filenames), read, "TextLine", _parallel(num_parallel_reads))


def list_files(file_pattern: Any) -> list[bytes]:
    """The sorted names matching ``file_pattern`` (a glob, or a list of them);
    ``InvalidArgumentError`` naming the pattern when nothing matches (TF's)."""
    patterns = [file_pattern] if isinstance(file_pattern, (str, bytes, os.PathLike)) \
        else list(np.asarray(file_pattern, dtype=object).reshape(-1))
    names: set[str] = set()
    for pattern in patterns:
        names.update(glob.glob(_name(pattern)))
    if not names:
        raise InvalidArgumentError(f"No files matched pattern: "
                                   f"{', '.join(_name(p) for p in patterns)}")
    return [n.encode() for n in sorted(names)]
