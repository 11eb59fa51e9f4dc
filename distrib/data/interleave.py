"""``flat_map`` and ``interleave``: a dataset per element, their elements mixed.

``FlatMap`` yields every element of ``fn(x)``'s dataset for each input
element in turn. ``Interleave`` (TF's rules) keeps ``cycle_length``
datasets open (AUTOTUNE: the cores) and takes ``block_length`` elements from
each in turn, opening the next input element's dataset when one ends; its
order is fixed unless ``deterministic`` is False. With
``num_parallel_calls`` the open datasets are read ahead by threads (each
keeps up to ``2 * block_length`` elements ready), which overlaps the files'
reading and the maps inside them; the order stays the same when
deterministic, and an element's dataset that has nothing ready is passed
over when not. The functions run as dataset functions
(:mod:`distrib.ops.value_mode`).
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator

from distrib.data.pipeline import UNKNOWN, Failed, Node, probing
from distrib.errors import InvalidArgumentError
from distrib.ops import value_mode

__all__ = ["FlatMap", "Interleave", "dataset_node"]

_END, _ERROR = object(), object()
_POLL_S = 0.05


def _dataset_node(fn: Callable[..., Any], element: Any, what: str) -> Node:
    with value_mode.dataset_function():
        out = fn(*element) if type(element) is tuple else fn(element)
    node = getattr(out, "node", None)
    if not isinstance(node, Node):
        raise InvalidArgumentError(f"{what}: the function must return a dt.data.Dataset, got "
                                   f"{type(out).__name__}")
    return node


dataset_node = _dataset_node   # the node of fn(element)'s dataset, run as a dataset function


class FlatMap(Node):
    def __init__(self, node: Node, fn: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.fn = fn

    def iterate(self) -> Iterator[Any]:
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            try:
                node = _dataset_node(self.fn, element, "flat_map")
            except Exception as e:   # this element's error; the next one goes on (TF's)
                yield Failed(e)
                continue
            yield from node.iterate()

    def cardinality(self) -> int:
        return UNKNOWN

    def _compute_spec(self) -> Any:
        return self.probe_spec()


class _Reader:
    """A thread reading one inner dataset ahead into a small queue."""

    def __init__(self, node: Node, depth: int) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(node,), daemon=True,
                                       name="dt.data.interleave")
        self.thread.start()

    def _run(self, node: Node) -> None:
        cursor = node.iterate()
        try:
            for element in cursor:
                if not self._put(element):
                    return
            self._put(_END)
        except Exception as exc:   # handed to the consumer
            self._put((_ERROR, exc))
        finally:
            cursor.close()  # type: ignore[attr-defined]

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, wait: bool) -> Any:
        """The next element, _END, or None when not waiting and nothing is ready."""
        while True:
            try:
                item = self.q.get(timeout=_POLL_S) if wait else self.q.get_nowait()
            except queue.Empty:
                if not wait:
                    return None
                continue
            if isinstance(item, tuple) and len(item) == 2 and item[0] is _ERROR:
                raise item[1]
            return item

    def close(self) -> None:
        self.stop.set()


class Interleave(Node):
    def __init__(self, node: Node, fn: Callable[..., Any], cycle_length: int,
                 block_length: int, parallel: bool, deterministic: bool | None) -> None:
        self.inputs = (node,)
        self.fn = fn
        self.cycle_length = cycle_length
        self.block_length = block_length
        self.parallel = parallel
        self.deterministic = deterministic
        self.default_deterministic = True

    def _open(self, element: Any) -> Any:
        node = _dataset_node(self.fn, element, "interleave")
        if self.parallel and not probing():
            return _Reader(node, 2 * self.block_length)
        return node.iterate()

    def _next(self, source: Any, wait: bool) -> Any:
        if isinstance(source, _Reader):
            return source.get(wait)
        return next(source, _END)

    def iterate(self) -> Iterator[Any]:
        # TF's InterleaveDatasetOp loop: a fixed ring of cycle_length slots; an empty
        # slot opens the next input element's dataset when the cycle reaches it
        ordered = self.deterministic if self.deterministic is not None \
            else self.default_deterministic
        wait_always = ordered or not self.parallel
        outer = self.inputs[0].iterate()
        slots: list[Any] = [None] * self.cycle_length
        index = block = misses = num_open = 0
        end_of_input = False
        try:
            while not end_of_input or num_open:
                source = slots[index]
                if source is not None:
                    item = self._next(source, wait=wait_always or misses >= num_open)
                    if item is None:   # not ready (non-deterministic): try the next slot
                        misses += 1
                        index, block = (index + 1) % self.cycle_length, 0
                        continue
                    misses = 0
                    if item is not _END:
                        yield item
                        block += 1
                        if block == self.block_length:
                            index, block = (index + 1) % self.cycle_length, 0
                        continue
                    self._close(source)
                    slots[index] = None
                    num_open -= 1
                    index, block = (index + 1) % self.cycle_length, 0
                elif not end_of_input:
                    element = next(outer, _END)
                    if element is _END:
                        end_of_input = True
                    elif type(element) is Failed:
                        yield element
                    else:
                        try:
                            slots[index] = self._open(element)
                        except Exception as e:   # this element's error; the rest go on (TF's)
                            yield Failed(e)
                            continue
                        num_open += 1
                else:
                    index, block = (index + 1) % self.cycle_length, 0
        finally:
            for source in slots:
                if source is not None:
                    self._close(source)
            outer.close()  # type: ignore[attr-defined]

    @staticmethod
    def _close(source: Any) -> None:
        close = getattr(source, "close", None)
        if close is not None:
            close()

    def cardinality(self) -> int:
        return UNKNOWN

    def _compute_spec(self) -> Any:
        return self.probe_spec()
