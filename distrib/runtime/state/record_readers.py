"""TF1's ``TFRecordReader`` and ``WholeFileReader`` on a task, beside
``readers.FixedLengthRecordReader``: resources of the task their read op runs
on, reading that task's files, one read at a time in order.

A ``TFRecordReader`` gives each record of each file its queue names, keyed
``"<file>:<offset>"`` (the record's offset in the uncompressed stream, TF's
key), checksums checked (a damaged record is a ``DataLossError`` naming the
file and offset); ``WholeFileReader`` gives each file whole, keyed by its
name. When a reader has finished a file it dequeues the next name, waiting
as a dequeue does (``OutOfRangeError`` once that queue is closed and empty:
the end of the epochs). ``readers.make_reader`` builds the reader a
``ReaderReadV2`` op's ``reader_spec`` names.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterator

import numpy as np

from distrib.errors import NotFoundError
from distrib.io import tf_record

__all__ = ["TFRecordReader", "WholeFileReader", "next_file_name"]


class _FileReader:
    """A reader that walks the records of one file at a time (a subclass says how)."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.records_produced = 0
        self._records: Iterator[tuple[str, bytes]] | None = None
        self._lock = asyncio.Lock()

    def _open(self, path: str) -> Iterator[tuple[str, bytes]]:
        raise NotImplementedError

    async def read(self, next_file: Callable[[], asyncio.Future]) -> tuple[Any, Any]:
        async with self._lock:
            while True:
                if self._records is None:
                    (name,) = await next_file()
                    name = name.item() if isinstance(name, np.ndarray) else name
                    self._records = self._open(name.decode() if isinstance(name, bytes)
                                               else str(name))
                record = next(self._records, None)
                if record is not None:
                    self.records_produced += 1
                    key, value = record
                    return np.array(key.encode(), dtype=object), np.array(value, dtype=object)
                self._records = None

    async def read_up_to(self, num_records: int, next_file: Callable[[], asyncio.Future]
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``num_records`` records, as TF's ``ReaderBase::ReadUpTo``: a read
        that reaches the end of a file returns the records it has (the next
        read dequeues the next file), so a read never waits for a file while
        it holds records (nothing is lost when that wait is cancelled, and a
        file queue not yet closed cannot keep a read's records back);
        ``OutOfRangeError`` when the queue is closed and empty."""
        keys: list[bytes] = []
        values: list[bytes] = []
        async with self._lock:
            while len(keys) < num_records:
                if self._records is None:
                    self._records = self._open(await next_file_name(next_file))
                record = next(self._records, None)
                if record is None:
                    self._records = None
                    if keys:
                        break
                    continue
                keys.append(record[0].encode())
                values.append(record[1])
        self.records_produced += len(keys)
        return np.array(keys, dtype=object), np.array(values, dtype=object)


async def next_file_name(next_file: Callable[[], asyncio.Future]) -> str:
    """The next file name of a reader's queue (``OutOfRangeError`` once it is
    closed and empty)."""
    (name,) = await next_file()
    name = name.item() if isinstance(name, np.ndarray) else name
    return name.decode() if isinstance(name, bytes) else str(name)


class TFRecordReader(_FileReader):
    """The records of TFRecord files (``compression_type`` from the spec)."""

    def _open(self, path: str) -> Iterator[tuple[str, bytes]]:
        kind = self.spec.get("compression_type") or ""
        offset = 0
        for data in tf_record.read_records(path, kind):
            yield f"{path}:{offset}", data
            offset += 16 + len(data)


class WholeFileReader(_FileReader):
    """Each file whole: ``(file name, contents)``."""

    def _open(self, path: str) -> Iterator[tuple[str, bytes]]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise NotFoundError(f"reader {self.name} cannot open {path}: {e.strerror}") from None
        yield path, data
