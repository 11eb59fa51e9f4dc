"""Cursors a user holds: the blocking iterator, the async one, and prefetch.

``iter(ds)`` gives a :class:`DatasetIterator`; ``async for x in ds`` an
:class:`AsyncDatasetIterator`. The async one never runs the pipeline on the
event loop: each ``__anext__`` that finds nothing ready pulls from the
pipeline in a worker thread (``asyncio.to_thread``). To keep that hop cheap
for cheap elements it pulls a *run* of elements per hop: as many as arrive
within ``_RUN_BUDGET_S`` (2 ms), at most ``_RUN_MAX`` (64). So a loop of
scalars costs one thread hop per 64 elements, and a slow map still hands each
element over as soon as it is made.

``Prefetch`` (``ds.prefetch(n)``) runs its input on a daemon thread, ``n``
elements ahead, through a bounded queue. The thread holds only its input
cursor, the queue and a stop flag, never the consumer, so dropping or closing
the consumer's cursor (or reaching the end) sets the flag; the producer sees
it at its next put (it waits at most ``_PUT_POLL_S`` between looks) and
closes its input in its own thread. No thread outlives its cursor.
"""
from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from typing import Any, Iterator

from distrib.data.pipeline import Failed, Node, probing
from distrib.errors import InternalError, InvalidArgumentError, OutOfRangeError

__all__ = ["AUTOTUNE", "DatasetIterator", "AsyncDatasetIterator", "Prefetch"]

AUTOTUNE = -1            # tf.data.AUTOTUNE
_AUTOTUNE_BUFFER = 2     # what AUTOTUNE means for prefetch here (no tuner yet)
_PUT_POLL_S = 0.05
_RUN_BUDGET_S = 0.002
_RUN_MAX = 64
_JOIN_S = 1.0

_ITEM, _DONE, _ERROR = "item", "done", "error"


class DatasetIterator:
    """A blocking cursor over a dataset (``iter(ds)``), as TF's eager iterator.

    ``next(it)`` raises StopIteration at the end; ``it.get_next()`` raises
    ``dt.errors.OutOfRangeError`` there, as TF's ``get_next`` does.
    """

    def __init__(self, cursor: Iterator[Any], element_spec: Any = None) -> None:
        self._cursor = cursor
        self._element_spec = element_spec

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        return element_value(next(self._cursor))

    def get_next(self) -> Any:
        """The next element; OutOfRangeError at the end of the dataset."""
        try:
            item = next(self._cursor)
        except StopIteration:
            raise OutOfRangeError("End of sequence: the dataset has no more elements; "
                                  "start a new iterator (iter(ds)) to read it again") from None
        return element_value(item)

    @property
    def element_spec(self) -> Any:
        """The dataset's element spec (a nest of TensorSpec), worked out on first use."""
        if callable(self._element_spec):   # the pipeline's element_spec(), not called yet
            self._element_spec = self._element_spec()
        return self._element_spec

    def close(self) -> None:
        """Stop the pipeline now (prefetch threads end); later next() raises StopIteration."""
        self._cursor.close()  # type: ignore[attr-defined]


def _pull_run(cursor: Iterator[Any]) -> tuple[list[Any], bool, BaseException | None]:
    """Up to _RUN_MAX elements made within _RUN_BUDGET_S: (elements, ended, error)."""
    items: list[Any] = []
    deadline = time.monotonic() + _RUN_BUDGET_S
    try:
        while len(items) < _RUN_MAX:
            items.append(next(cursor))
            if time.monotonic() >= deadline:
                break
    except StopIteration:
        return items, True, None
    except Exception as exc:  # handed to the awaiting task, after the elements before it
        return items, True, exc
    return items, False, None


def element_value(item: Any) -> Any:
    """An element as it comes out: a failed one raises its error (the next
    ``next`` goes on with the element after it, as TF's ``get_next``)."""
    if type(item) is Failed:
        raise item.error
    return item


class AsyncDatasetIterator:
    """``async for x in ds``: the pipeline runs in worker threads, never on the loop."""

    def __init__(self, cursor: Iterator[Any]) -> None:
        self._cursor = cursor
        self._ready: collections.deque[Any] = collections.deque()
        self._ended = False
        self._error: BaseException | None = None

    def __aiter__(self) -> AsyncDatasetIterator:
        return self

    async def __anext__(self) -> Any:
        if not self._ready and not self._ended:
            items, self._ended, self._error = await asyncio.to_thread(_pull_run, self._cursor)
            self._ready.extend(items)
        if self._ready:
            return element_value(self._ready.popleft())
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        raise StopAsyncIteration

    async def get_next(self) -> Any:
        """The next element; OutOfRangeError at the end (TF's get_next, awaited)."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            raise OutOfRangeError("End of sequence: the dataset has no more elements") from None

    async def aclose(self) -> None:
        """Stop the pipeline now (prefetch threads end)."""
        self._ended = True
        self._ready.clear()
        self._cursor.close()  # type: ignore[attr-defined]


def _put(q: queue.Queue, item: tuple[str, Any], stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_PUT_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(node: Node, q: queue.Queue, stop: threading.Event) -> None:
    cursor = node.iterate()
    try:
        for element in cursor:
            if not _put(q, (_ITEM, element), stop):
                return
        _put(q, (_DONE, None), stop)
    except Exception as exc:  # the consumer re-raises it in its own thread
        _put(q, (_ERROR, exc), stop)
    finally:
        cursor.close()  # type: ignore[attr-defined]


def _drain(q: queue.Queue) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


class Prefetch(Node):
    """``prefetch(n)``: a daemon thread keeps up to ``n`` elements ready."""

    def __init__(self, node: Node, buffer_size: int) -> None:
        self.inputs = (node,)
        self.buffer_size = _AUTOTUNE_BUFFER if buffer_size == AUTOTUNE else buffer_size

    def iterate(self) -> Iterator[Any]:
        if probing() or self.buffer_size == 0:
            yield from self.inputs[0].iterate()
            return
        q: queue.Queue = queue.Queue(maxsize=self.buffer_size)
        stop = threading.Event()
        thread = threading.Thread(target=_produce, args=(self.inputs[0], q, stop),
                                  name="dt.data.prefetch", daemon=True)
        thread.start()
        try:
            while True:
                try:
                    kind, value = q.get(timeout=_PUT_POLL_S)
                except queue.Empty:
                    if thread.is_alive() or not q.empty():
                        continue
                    raise InternalError("the prefetch thread ended without a result (it was "
                                        "interrupted); start a new iterator") from None
                if kind == _ITEM:
                    yield value
                elif kind == _ERROR:
                    raise value
                else:
                    return
        finally:
            stop.set()
            _drain(q)
            thread.join(_JOIN_S)

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()


class DevicePrefetch(Prefetch):
    """``prefetch_to_device(device)``: the prefetch thread also copies each element's
    numeric arrays to the GPU (numba device arrays, ``kernels.cuda.devices``), so a
    step finds its batch on the device; strings stay on the host, as TF's."""

    def __init__(self, node: Node, gpu: int, buffer_size: int) -> None:
        super().__init__(_CopyToGpu(node, gpu), buffer_size)


class _CopyToGpu(Node):
    def __init__(self, node: Node, gpu: int) -> None:
        self.inputs = (node,)
        self.gpu = gpu

    def iterate(self) -> Iterator[Any]:
        from distrib.data import structure
        from kernels.cuda import devices
        if len(devices.gpu_devices()) <= self.gpu:
            raise InvalidArgumentError(f"prefetch_to_device: there is no GPU:{self.gpu} in this "
                                "process (CUDA_VISIBLE_DEVICES, or a machine without one); "
                                "prefetch on the host with ds.prefetch(n) instead")

        def copy(leaf: Any) -> Any:
            arr = leaf if hasattr(leaf, "dtype") else None
            if arr is None or getattr(arr.dtype, "kind", "O") == "O" or probing():
                return leaf
            return devices.to_device(arr, self.gpu)
        for element in self.inputs[0].iterate():
            yield element if type(element) is Failed else \
                structure.map_structure_unchecked(copy, element)

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()
