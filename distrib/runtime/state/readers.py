"""TF1's readers on a task, and the ops of the input queues and readers.

A reader (``FixedLengthRecordReader``; ``TFRecordReader`` and
``WholeFileReader`` in record_readers.py) is a resource of the task its read op
runs on, by shared name, as a queue is: it holds the file it is reading and
its place in it, and reads files of that task's file system. When it has no
file, or has read the last whole record of one, it dequeues the next file
name from its queue (waiting like a dequeue; ``OutOfRangeError`` once that
queue is closed and empty, which is how the epochs end). ``ReaderReadUpToV2``
reads up to n records in one op (whole runs of them in one ``read`` of the
file) and, as TF's ``ReadUpTo``, returns early at the end of a file. Reads
of one reader are served one at a time, in order, as TF's reader mutex does.

:func:`run_input_op` runs the ``is_resource`` ops of the input queues and
readers (``docs/ops.md``, "Input queues and readers") for
:func:`distrib.runtime.state.resources.run_resource_op`, with its ``wait``:
a waiting op is a future that fails at once when its step is aborted or its
session closed, and by ``operation_timeout_s``.
"""
from __future__ import annotations

import asyncio
import io
from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.runtime.state import record_readers
from distrib.runtime.state.input_queues import InputQueue
from distrib.runtime.state.record_readers import next_file_name

__all__ = ["FixedLengthRecordReader", "INPUT_OPS", "run_input_op", "make_reader"]

INPUT_OPS = frozenset({
    "FIFOQueueV2", "RandomShuffleQueueV2", "QueueEnqueueV2", "QueueEnqueueManyV2",
    "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueSizeV2",
    "QueueCloseV2", "ReaderReadV2", "ReaderReadUpToV2"})


class FixedLengthRecordReader:
    """Records of ``record_bytes`` after a file's ``header_bytes`` and before its
    ``footer_bytes``, each ``hop_bytes`` after the last (0: right after it)."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.record_bytes = int(spec["record_bytes"])
        self.header_bytes = int(spec.get("header_bytes") or 0)
        self.footer_bytes = int(spec.get("footer_bytes") or 0)
        self.hop_bytes = int(spec.get("hop_bytes") or 0)
        if self.record_bytes <= 0:
            raise InvalidArgumentError(f"reader {name}: record_bytes must be positive, got "
                                       f"{self.record_bytes}")
        self.records_produced = 0
        self._file: io.BufferedReader | None = None
        self._filename = ""
        self._index = 0
        self._end = 0   # the offset after which no whole record is left
        self._lock = asyncio.Lock()

    async def read(self, next_file: Callable[[], asyncio.Future]) -> tuple[Any, Any]:
        async with self._lock:
            while True:
                if self._file is None:
                    (name,) = await next_file()
                    self._open(name.item() if isinstance(name, np.ndarray) else name)
                record = self._next_record()
                if record is not None:
                    self.records_produced += 1
                    return record
                self._close()

    async def read_up_to(self, num_records: int, next_file: Callable[[], asyncio.Future]
                         ) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``num_records`` records, as TF's ``ReaderBase::ReadUpTo``: a read
        that reaches the end of a file returns the records it has, so it never
        waits for the next file while it holds records (``OutOfRangeError``
        when the file queue is closed and empty). Whole runs of records come
        from one ``read`` of the file."""
        keys: list[bytes] = []
        values: list[bytes] = []
        async with self._lock:
            while len(keys) < num_records:
                if self._file is None:
                    self._open(await next_file_name(next_file))
                if not self._next_records(num_records - len(keys), keys, values):
                    self._close()
                    if keys:
                        break
        self.records_produced += len(keys)
        return np.array(keys, dtype=object), np.array(values, dtype=object)

    def _next_records(self, count: int, keys: list[bytes], values: list[bytes]) -> int:
        """Up to ``count`` records of the open file appended; how many."""
        assert self._file is not None
        step = self.hop_bytes or self.record_bytes
        offset = self.header_bytes + self._index * step
        left = (self._end - offset - self.record_bytes) // step + 1 \
            if offset + self.record_bytes <= self._end else 0
        count = min(count, left)
        if count <= 0:
            return 0
        self._file.seek(offset)
        data = self._file.read((count - 1) * step + self.record_bytes)
        size, prefix = self.record_bytes, f"{self._filename}:"
        for i in range(count):
            values.append(data[i * step:i * step + size])
            keys.append(f"{prefix}{self._index + i}".encode())
        self._index += count
        return count

    def _open(self, name: Any) -> None:
        self._filename = name.decode() if isinstance(name, bytes) else str(name)
        try:
            self._file = open(self._filename, "rb")   # noqa: SIM115 (kept open between reads)
        except OSError as e:
            raise NotFoundError(f"reader {self.name} cannot open {self._filename}: "
                                f"{e.strerror}") from None
        size = self._file.seek(0, io.SEEK_END)
        self._end = size - self.footer_bytes
        self._file.seek(self.header_bytes)
        self._index = 0

    def _next_record(self) -> tuple[Any, Any] | None:
        assert self._file is not None
        step = self.hop_bytes or self.record_bytes
        offset = self.header_bytes + self._index * step
        if offset + self.record_bytes > self._end:
            return None
        if self.hop_bytes:
            self._file.seek(offset)
        value = self._file.read(self.record_bytes)
        key = f"{self._filename}:{self._index}"
        self._index += 1
        return np.array(key.encode(), dtype=object), np.array(value, dtype=object)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None


def run_input_op(node: dict[str, Any], args: list[Any], store: Any, wait: Callable[..., Any]
                 ) -> list[Any] | asyncio.Future:
    """Run an input queue or reader op against ``store`` (a ResourceStore);
    ``wait(fut, what, describe, give_back, quiet)`` bounds a wait (see the module
    header; ``quiet``: an expected wait, logged rarely)."""
    op, attrs = node["op"], node["attrs"]
    queue = _queue(store, attrs["queue"], attrs["spec"])
    if op in ("FIFOQueueV2", "RandomShuffleQueueV2"):
        return [np.array(queue.name.encode(), dtype=object)]
    if op == "QueueSizeV2":
        return [np.array(queue.size(), dtype=np.int32)]
    if op == "QueueCloseV2":
        queue.close(bool(attrs.get("cancel_pending_enqueues", False)))
        return []
    if op in ("QueueEnqueueV2", "QueueEnqueueManyV2"):
        fut = queue.enqueue(args, many=op == "QueueEnqueueManyV2")
        if fut is None:
            return []
        return _outputs(wait(fut, f"room in queue {queue.name}",
                             lambda: f"room in queue {queue.name} ({queue.size()} elements, "
                                     f"capacity {queue.capacity}: is anything dequeuing?)",
                             quiet=True), 0)
    if op == "ReaderReadV2":
        reader = _reader(store, attrs)
        read = asyncio.ensure_future(reader.read(lambda: queue.dequeue(None)))
        return _outputs(wait(read, f"a record of reader {reader.name}",
                             lambda: f"a file name in queue {queue.name} for reader "
                                     f"{reader.name}"), 2)
    if op == "ReaderReadUpToV2":
        reader = _reader(store, attrs)
        count = np.asarray(args[0])
        if count.ndim != 0 or count.dtype.kind not in "iu" or int(count) <= 0:
            raise InvalidArgumentError(f"ReaderReadUpToV2 of {reader.name}: num_records must "
                                       f"be a positive integer scalar, got {count.tolist()!r}")
        count = int(count)
        read = asyncio.ensure_future(reader.read_up_to(count, lambda: queue.dequeue(None)))
        return _outputs(wait(read, f"records of reader {reader.name}",
                             lambda: f"a file name in queue {queue.name} for reader "
                                     f"{reader.name}"), 2)
    n = None if op == "QueueDequeueV2" else int(np.asarray(args[0]))
    fut = queue.dequeue(n, up_to=op == "QueueDequeueUpToV2")
    what = f"{'an element' if n is None else f'{n} elements'} of queue {queue.name}"
    return _outputs(wait(fut, what, lambda: f"{what} ({queue.size()} there)", queue), None)


def make_reader(name: str, spec: dict[str, Any]) -> Any:
    """The reader of ``spec["kind"]``: fixed_length, tf_record or whole_file."""
    kind = spec.get("kind")
    if kind == "tf_record":
        return record_readers.TFRecordReader(name, spec)
    if kind == "whole_file":
        return record_readers.WholeFileReader(name, spec)
    if kind == "fixed_length":
        return FixedLengthRecordReader(name, spec)
    raise InvalidArgumentError(f"reader {name}: unknown kind {kind!r}")


def _reader(store: Any, attrs: dict[str, Any]) -> Any:
    reader = store.readers.get(attrs["reader"])
    if reader is None:
        reader = store.readers[attrs["reader"]] = make_reader(attrs["reader"],
                                                              attrs["reader_spec"])
    return reader


def _queue(store: Any, name: str, spec: dict[str, Any]) -> InputQueue:
    queue = store.input_queues.get(name)
    if queue is None:
        queue = store.input_queues[name] = InputQueue(name, spec)
    elif queue.spec["dtypes"] != spec["dtypes"]:
        raise InvalidArgumentError(f"queue {name} holds {queue.spec['dtypes']}, not "
                                   f"{spec['dtypes']}")
    return queue


def _outputs(waiting: Any, count: int | None) -> asyncio.Future:
    """The op's outputs once ``waiting`` (a wait's ``[result]``) is done: the
    result's tuple, or nothing (``count`` 0)."""
    async def unpack() -> list[Any]:
        (result,) = await waiting
        return [] if count == 0 else list(result)
    return asyncio.ensure_future(unpack())
