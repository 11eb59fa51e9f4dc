"""The nodes of an input pipeline, and its sources.

A ``dt.data.Dataset`` is a thin, immutable facade over a :class:`Node`; each
transformation makes a new node whose ``inputs`` are the nodes it reads. This
is tf.data's split between a dataset (a description) and an iterator (a
cursor over it): ``node.iterate()`` starts a fresh cursor every time, so
``for x in ds`` twice runs the pipeline twice, reshuffling each time.

A cursor is a Python generator. Generators give the two properties the
pipeline needs for free: an abandoned cursor is closed when its last
reference goes (``GeneratorExit`` reaches every stage's ``finally``, which is
how a prefetch thread learns to stop), and a stage that needs no state
between elements is a plain loop.

This module holds the base class, the cardinality constants and the sources
(``from_tensor_slices``, ``from_tensors``, ``range``, ``from_generator``),
plus the two nodes with several inputs (``zip``, ``concatenate``).
"""
from __future__ import annotations

import contextvars
import copy
from typing import Any, Callable, Iterator

import numpy as np

from distrib.data import structure
from distrib.errors import InvalidArgumentError

__all__ = ["INFINITE", "UNKNOWN", "END", "Node", "probing", "TensorSlices", "Tensors", "Range",
           "Generator", "Zip", "Concatenate", "Failed", "batches", "take_chunk"]

INFINITE = -1   # tf.data.INFINITE_CARDINALITY
UNKNOWN = -2    # tf.data.UNKNOWN_CARDINALITY

# True while a node's spec is being probed (map's output spec is learned by running fn
# on one element): a shuffle then takes no epoch from its counter and a prefetch starts
# no thread, so looking at element_spec never changes what iteration yields.
_PROBING: contextvars.ContextVar[bool] = contextvars.ContextVar("dt_data_probing", default=False)


def probing() -> bool:
    """Whether the current cursor only probes the pipeline for its element spec."""
    return _PROBING.get()


class Node:
    """One stage of a pipeline: knows its inputs, cardinality and element spec,
    and starts cursors over its elements."""

    inputs: tuple[Node, ...] = ()
    _spec: Any = None

    def iterate(self) -> Iterator[Any]:
        """A fresh cursor over this stage's elements."""
        raise NotImplementedError

    def cardinality(self) -> int:
        """The number of elements, or INFINITE / UNKNOWN (TF's constants)."""
        return UNKNOWN

    def element_spec(self) -> Any:
        """The TensorSpec nest of the elements (computed once, then cached)."""
        if self._spec is None:
            self._spec = self._compute_spec()
        return self._spec

    def _compute_spec(self) -> Any:
        return self.inputs[0].element_spec() if self.inputs else structure.unknown_spec()

    def probe_spec(self) -> Any:
        """The spec of the first element, learned by running the pipeline once."""
        first = self.probe_first()
        return structure.unknown_spec() if first is _END else structure.spec_of(first)

    def probe_first(self) -> Any:
        """The first element, or :data:`END` for an empty pipeline, read while
        probing (no epoch taken, no thread started); failed elements are read
        past (up to ``_PROBE_FAILED`` of them), as TF's spec is the function's."""
        token = _PROBING.set(True)
        cursor = self.iterate()
        try:
            first = failed = next(cursor, _END)
            for _ in range(_PROBE_FAILED):   # TF's spec never depends on a failing element
                if type(first) is not Failed:
                    break
                first = next(cursor, _END)
            if type(first) is Failed or (first is _END and type(failed) is Failed):
                raise failed.error   # only failed ones: the first one's error
            return first
        finally:
            close = getattr(cursor, "close", None)
            if close is not None:
                close()
            _PROBING.reset(token)

    def clone(self) -> Node:
        """A copy of this pipeline whose per-iteration state starts afresh (a shuffle's
        epoch counter): what each worker of a strategy reads, as TF clones a dataset."""
        twin = copy.copy(self)
        twin.inputs = tuple(node.clone() for node in self.inputs)
        twin.reset()
        return twin

    def reset(self) -> None:
        """Forget per-iteration state (nothing, for most nodes)."""

    def walk(self) -> Iterator[Node]:
        """This node and every node upstream of it (depth first)."""
        yield self
        for node in self.inputs:
            yield from node.walk()


_END = object()
# failed elements (pipeline.Failed) a probe reads past for the first good one
_PROBE_FAILED = 64
END = _END   # what probe_first returns for an empty pipeline


class Failed:
    """An element whose making failed (a ``map``/``filter`` function's error):
    it travels down the pipeline in the element's place (a batch holding one
    fails whole, as TF's), take, skip and shard do not count it (enumerate
    does: TF's is a zip with a range), and it is raised where it comes out, after which the iterator goes on
    with the next element, as TF's ``get_next`` does (``ignore_errors`` drops
    them instead)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def batches(cursor: Iterator[Any], size: int, drop_remainder: bool,
            make: Callable[[list[Any]], Any]) -> Iterator[Any]:
    """A batch stage's loop: ``make(chunk)`` for each ``size`` elements of
    ``cursor`` (the last short one unless ``drop_remainder``); a failed
    element met comes out alone, in its batch's place (TF's batch)."""
    try:
        while True:
            chunk, failed = take_chunk(cursor, size)
            if failed is not None:
                yield failed
                continue
            if not chunk or (drop_remainder and len(chunk) < size):
                return
            yield make(chunk)
    finally:
        cursor.close()  # type: ignore[attr-defined]


def take_chunk(cursor: Iterator[Any], n: int) -> tuple[list[Any], Failed | None]:
    """Up to ``n`` elements from ``cursor``; a failed one met on the way comes
    back alone (the elements read before it are dropped, as TF's batch drops
    them) with ``[]``."""
    chunk: list[Any] = []
    for element in cursor:
        if type(element) is Failed:
            return [], element
        chunk.append(element)
        if len(chunk) == n:
            break
    return chunk, None


class TensorSlices(Node):
    """``from_tensor_slices``: the i-th element is every component's i-th row."""

    def __init__(self, tensors: Any) -> None:
        self._value = structure.freeze(tensors)
        leaves = structure.flatten(self._value)
        for i, leaf in enumerate(leaves):
            if np.ndim(leaf) == 0:
                raise InvalidArgumentError(
                    f"from_tensor_slices: component {i} is a scalar ({leaf!r}); slicing needs "
                    "rank >= 1 (use from_tensors for a dataset of one element)")
        sizes = [np.shape(leaf)[0] for leaf in leaves]
        if len(set(sizes)) > 1:
            first = sizes[0]
            bad = next(i for i, n in enumerate(sizes) if n != first)
            raise InvalidArgumentError(
                f"from_tensor_slices: all components must have the same size in their first "
                f"dimension, but component 0 has {first} and component {bad} has "
                f"{sizes[bad]} (Dimensions {first} and {sizes[bad]} are not compatible)")
        self._leaves = leaves
        self._n = sizes[0] if sizes else 0

    def iterate(self) -> Iterator[Any]:
        value, leaves = self._value, self._leaves
        for i in range(self._n):
            yield structure.pack_as(value, [leaf[i] for leaf in leaves])

    def cardinality(self) -> int:
        return self._n

    def _compute_spec(self) -> Any:
        return structure.map_structure_unchecked(structure.without_batch_dim,
                                                 structure.spec_of(self._value))


class Tensors(Node):
    """``from_tensors``: one element, the value itself."""

    def __init__(self, tensors: Any) -> None:
        self._value = structure.freeze(tensors)

    def iterate(self) -> Iterator[Any]:
        yield self._value

    def cardinality(self) -> int:
        return 1

    def _compute_spec(self) -> Any:
        return structure.spec_of(self._value)


class Range(Node):
    """``range(start, stop, step)``: int64 scalars (or ``output_type``), as Python's range."""

    def __init__(self, start: int, stop: int, step: int, dtype: Any) -> None:
        if step == 0:
            raise InvalidArgumentError("range: step cannot be 0; use a positive step to count "
                                       "up or a negative one to count down")
        self._range = range(start, stop, step)
        self._np_type = np.dtype(dtype).type

    def iterate(self) -> Iterator[Any]:
        make = self._np_type
        for i in self._range:
            yield make(i)

    def cardinality(self) -> int:
        return len(self._range)

    def _compute_spec(self) -> Any:
        return structure.spec_of(self._np_type(0))


class Generator(Node):
    """``from_generator``: calls ``generator(*args)`` afresh for every cursor."""

    def __init__(self, generator: Callable[..., Any], args: tuple, spec: Any) -> None:
        self._generator = generator
        self._args = args
        self._given_spec = spec

    def iterate(self) -> Iterator[Any]:
        for element in self._generator(*self._args):
            yield structure.normalize(element)

    def _compute_spec(self) -> Any:
        return self._given_spec if self._given_spec is not None else self.probe_spec()


class Zip(Node):
    """``zip``: a nest of datasets becomes a dataset of nests; stops at the shortest."""

    def __init__(self, structure_of_nodes: Any, nodes: list[Node]) -> None:
        self._structure = structure_of_nodes
        self.inputs = tuple(nodes)

    def iterate(self) -> Iterator[Any]:
        cursors = [node.iterate() for node in self.inputs]
        try:
            while True:
                items = []
                for cursor in cursors:
                    item = next(cursor, _END)
                    if item is _END:
                        return
                    items.append(item)
                bad = next((item for item in items if type(item) is Failed), None)
                yield bad if bad is not None else structure.pack_as(self._structure, items)
        finally:
            for cursor in cursors:
                cursor.close()

    def cardinality(self) -> int:
        cards = [node.cardinality() for node in self.inputs]
        if UNKNOWN in cards:
            return UNKNOWN
        finite = [c for c in cards if c >= 0]
        return min(finite) if finite else INFINITE

    def _compute_spec(self) -> Any:
        return structure.pack_as(self._structure, [n.element_spec() for n in self.inputs])


class Concatenate(Node):
    """``concatenate``: this dataset's elements, then the other's (same structure)."""

    def __init__(self, first: Node, second: Node) -> None:
        a, b = first.element_spec(), second.element_spec()
        if not structure.same_structure(a, b):
            raise InvalidArgumentError(f"concatenate: the datasets' elements differ in structure: "
                                       f"{a} and {b}")
        for x, y in zip(structure.flatten(a), structure.flatten(b)):
            if x.dtype is not None and y.dtype is not None and x.dtype != y.dtype:
                raise InvalidArgumentError(
                    f"concatenate: the datasets' elements differ in dtype: {x} and {y}; "
                    "cast one of them with map first")
        self.inputs = (first, second)

    def iterate(self) -> Iterator[Any]:
        for node in self.inputs:
            yield from node.iterate()

    def cardinality(self) -> int:
        a, b = (node.cardinality() for node in self.inputs)
        if INFINITE in (a, b):
            return INFINITE
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b

    def _compute_spec(self) -> Any:
        return structure.map_structure(structure.relax, self.inputs[0].element_spec(),
                                       self.inputs[1].element_spec())
