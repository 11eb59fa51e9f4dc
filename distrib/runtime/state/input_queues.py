"""TF1's input queues on a task: ``FIFOQueue`` and ``RandomShuffleQueue`` of
tuples of tensors, bounded by a capacity (the queues of
``string_input_producer``, ``batch`` and ``shuffle_batch``).

A queue is a resource of its task, kept in the task's
:class:`~distrib.runtime.state.resources.ResourceStore` by shared name and
created on first use from the ``spec`` attr every one of its ops carries
(kind, component dtypes and shapes, capacity, ``min_after_dequeue``, seed).
Everything runs on the task's event loop, so each method is atomic with
respect to the others; an operation that must wait (an enqueue into a full
queue, a dequeue of more elements than are there) gets a future, and waiters
are served first come, first served. A waiter whose future was cancelled
(its step was aborted or its session closed) is skipped: it takes nothing
and adds nothing.

TF's rules: an enqueue into a closed queue is a ``CancelledError``; once
closed, a ``RandomShuffleQueue`` no longer keeps ``min_after_dequeue``
elements back, and a dequeue that can no longer be served (fewer elements
left than it asks for; none for ``dequeue_up_to``) is an
``OutOfRangeError``; closing with ``cancel_pending_enqueues`` fails the
enqueues still waiting with ``CancelledError``.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import numpy as np

from distrib.errors import CancelledError, InvalidArgumentError, OutOfRangeError

__all__ = ["InputQueue", "queue_spec"]

Element = tuple[np.ndarray, ...]


def queue_spec(kind: str, dtypes: list[str], shapes: list | None, capacity: int,
               min_after_dequeue: int = 0, seed: int | None = None) -> dict[str, Any]:
    """The ``spec`` attr of a queue's ops (msgpack-able)."""
    return {"kind": kind, "dtypes": list(dtypes),
            "shapes": None if shapes is None else [None if s is None else list(s)
                                                  for s in shapes],
            "capacity": int(capacity), "min_after_dequeue": int(min_after_dequeue),
            "seed": None if seed is None else int(seed)}


class Dequeued(tuple):
    """A dequeue's outputs, and how many elements they hold (``count``; -1:
    one element, not stacked), so that giving them back needs no guess."""

    def __new__(cls, outputs: Any, count: int) -> Dequeued:
        self = super().__new__(cls, outputs)
        self.count = count
        return self


class InputQueue:
    """A bounded queue of elements (tuples of arrays), FIFO or randomly shuffled."""

    def __init__(self, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.shuffle = spec["kind"] == "random_shuffle"
        self.dtypes = [np.dtype(object if d == "string" else d) for d in spec["dtypes"]]
        self.shapes = spec.get("shapes")
        cap = int(spec.get("capacity", -1))
        self.capacity = cap if cap > 0 else None   # None: unbounded (TF's capacity -1)
        self.min_after_dequeue = int(spec.get("min_after_dequeue", 0))
        self.closed = False
        self._items: list[Element] | deque[Element] = [] if self.shuffle else deque()
        self._rng = np.random.default_rng(spec.get("seed"))
        # (elements still to add, future) and (n, up_to, future), in arrival order
        self._enqueuers: deque[tuple[deque[Element], asyncio.Future]] = deque()
        self._dequeuers: deque[tuple[int, bool, asyncio.Future]] = deque()

    # -- what the ops call ---------------------------------------------------------------
    def size(self) -> int:
        return len(self._items)

    def enqueue(self, components: list[Any], many: bool) -> asyncio.Future | None:
        """Add one element, or the elements along the first dimension of each
        component (``many``); a future when it must wait for room, else None."""
        if self.closed:
            raise CancelledError(f"queue {self.name} is closed: enqueue was cancelled "
                                 "(TF: the queue runner stops on this)")
        elements = deque(self._elements(components, many))
        if not self._enqueuers and self._room() >= len(elements):
            self._items.extend(elements)
            self._serve()
            return None
        fut = asyncio.get_running_loop().create_future()
        self._enqueuers.append((elements, fut))
        self._serve()
        return None if fut.done() and fut.exception() is None else fut

    def dequeue(self, n: int | None, up_to: bool = False) -> asyncio.Future:
        """A future of the outputs: one element (``n`` None) or ``n`` stacked."""
        if n is not None and n < 0:
            raise InvalidArgumentError(f"queue {self.name}: cannot dequeue {n} elements")
        fut = asyncio.get_running_loop().create_future()
        self._dequeuers.append((-1 if n is None else int(n), up_to, fut))
        self._serve()
        return fut

    def give_back(self, outputs: Any) -> None:
        """Put dequeued outputs back (their step ended before using them), in the
        order they left: a FIFO queue serves them first again."""
        outs = list(outputs)
        count = getattr(outputs, "count", None)   # a Dequeued says what it holds
        if count is None:
            count = len(outs[0]) if outs and self._batched(outs) else -1
        batched = count >= 0
        elements = [tuple(np.asarray(o[i] if batched else o) for o in outs)
                    for i in range(count if batched else 1)]
        if self.shuffle:
            self._items.extend(elements)
        else:
            self._items.extendleft(reversed(elements))   # type: ignore[union-attr]
        self._serve()

    def close(self, cancel_pending_enqueues: bool = False) -> None:
        self.closed = True
        if cancel_pending_enqueues:
            while self._enqueuers:
                _, fut = self._enqueuers.popleft()
                if not fut.done():
                    fut.set_exception(CancelledError(
                        f"queue {self.name} was closed: a pending enqueue was cancelled"))
        self._serve()

    # -- the queue's rules -----------------------------------------------------------------
    def _batched(self, outs: list[Any]) -> bool:
        shape = None if self.shapes is None else self.shapes[0]
        return shape is not None and np.ndim(outs[0]) == len(shape) + 1

    def _elements(self, components: list[Any], many: bool) -> list[Element]:
        if len(components) != len(self.dtypes):
            raise InvalidArgumentError(f"queue {self.name} holds {len(self.dtypes)} components, "
                                       f"got {len(components)}")
        arrays = [np.asarray(c, dtype=d) for c, d in zip(components, self.dtypes)]
        for k, a in enumerate(arrays):
            want = None if self.shapes is None else self.shapes[k]
            got = a.shape[1:] if many else a.shape
            if want is not None and list(got) != list(want):
                raise InvalidArgumentError(
                    f"queue {self.name}: component {k} of an element must have shape {want}, "
                    f"got {list(got)}")
        if not many:
            return [tuple(np.array(a) for a in arrays)]
        counts = {a.shape[0] if a.ndim else -1 for a in arrays}
        if len(counts) != 1 or -1 in counts:
            raise InvalidArgumentError(f"enqueue_many into queue {self.name}: every component "
                                       "needs the same first dimension (the elements)")
        return [tuple(np.array(a[i]) for a in arrays) for i in range(counts.pop())]

    def _room(self) -> int:
        return 1 << 62 if self.capacity is None else self.capacity - len(self._items)

    def _available(self) -> int:
        keep = 0 if (self.closed or not self.shuffle) else self.min_after_dequeue
        return max(0, len(self._items) - keep)

    def _serve(self) -> None:
        progress = True
        while progress:
            progress = self._admit() | self._hand_out()

    def _admit(self) -> bool:
        moved = False
        while self._enqueuers:
            elements, fut = self._enqueuers[0]
            if fut.done():   # cancelled: its step is gone
                self._enqueuers.popleft()
                continue
            while elements and self._room() > 0:
                self._items.append(elements.popleft())
                moved = True
            if elements:
                return moved
            self._enqueuers.popleft()
            fut.set_result(None)
        return moved

    def _hand_out(self) -> bool:
        served = False
        while self._dequeuers:
            n, up_to, fut = self._dequeuers[0]
            if fut.done():
                self._dequeuers.popleft()
                continue
            if n == 0:   # TF: an empty batch at once, nothing taken
                self._dequeuers.popleft()
                fut.set_result(Dequeued(self._empty_batch(), 0))
                served = True
                continue
            want = max(n, 1)
            available = self._available()
            if available < want:
                if not self.closed:
                    return served
                if not (up_to and available > 0):
                    self._dequeuers.popleft()
                    fut.set_exception(OutOfRangeError(
                        f"queue {self.name} is closed and has {len(self._items)} element(s), "
                        f"fewer than the {want} asked for (TF: the input is exhausted)"))
                    continue
                want = available
            self._dequeuers.popleft()
            taken = [self._take() for _ in range(want)]
            if n == -1:
                fut.set_result(Dequeued(taken[0], -1))
            else:
                fut.set_result(Dequeued([np.stack([e[k] for e in taken]) for k in
                                         range(len(self.dtypes))] if taken
                                        else self._empty_batch(), len(taken)))
            served = True
        return served

    def _empty_batch(self) -> list[np.ndarray]:
        shapes = self.shapes or [None] * len(self.dtypes)
        return [np.empty((0, *(s or ())), d) for s, d in zip(shapes, self.dtypes)]

    def _take(self) -> Element:
        if not self.shuffle:
            return self._items.popleft()   # type: ignore[union-attr]
        items = self._items
        i = int(self._rng.integers(len(items)))
        items[i], items[-1] = items[-1], items[i]   # type: ignore[index]
        return items.pop()   # type: ignore[union-attr]
