"""The one-input stages of a pipeline, each as tf.data's kernel behaves.

Every class here is a :class:`~distrib.data.pipeline.Node` with one input and
a generator cursor. The rules worth knowing, all TF's:

- ``Batch`` stacks ``batch_size`` consecutive elements per component; the last
  short batch is kept unless ``drop_remainder``; elements whose shapes differ
  cannot be stacked (InvalidArgumentError naming the component).
- ``Shuffle`` keeps a buffer of ``buffer_size`` elements: it fills the buffer,
  then repeatedly yields a uniformly chosen slot and refills that slot with the
  next input element; when the input ends it drains the buffer in random
  order. Each cursor is an *epoch*: with ``reshuffle_each_iteration`` every
  epoch draws a new order (deterministic given a seed: epoch k uses the
  generator seeded by ``(seed, k)``); without it every epoch repeats epoch 0.
  ``shuffle().repeat()`` therefore reshuffles at each repetition and never
  mixes two epochs, while ``repeat().shuffle()`` lets the buffer span them.
- ``Repeat`` restarts its input ``count`` times (forever when negative); an
  epoch that yields nothing ends a forever-repeat instead of spinning.
- ``Shard`` keeps the elements whose position is ``index`` modulo ``num_shards``.
- ``Map`` calls ``fn(*element)`` when the element is a plain tuple, else
  ``fn(element)`` (TF unpacks exactly ``type(x) is tuple``); what fn returns
  is converted to numpy by TF's rules. It runs in the client, sequentially (a
  parallel map is ``parallel_map.ParallelMap``), as a dataset function:
  ``dt.io``/``dt.image`` calls in fn compute on the values at once
  (``distrib.ops.value_mode``), their random choices keyed by the map's
  seed, the epoch and the element's position. ``Filter``'s predicate runs
  as a dataset function too.
- A map's or filter's error is its element's (``pipeline.Failed``): raised
  where the element comes out, and the iterator goes on with the next one;
  a batch holding one fails whole; take, skip and shard do not count it
  (enumerate does: TF's is a zip with a range); ``IgnoreErrors`` drops them. Errors of the stages themselves
  (shapes a batch cannot stack) still end the iterator.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Callable, Iterator

import numpy as np

from distrib.data import structure
from distrib.data.parallel_map import MapFn
from distrib.data.pipeline import INFINITE, UNKNOWN, Failed, Node, batches, probing
from distrib.errors import InvalidArgumentError
from distrib.ops import value_mode

logger = logging.getLogger(__name__)

__all__ = ["Batch", "Unbatch", "Shuffle", "Repeat", "Shard", "Map", "Filter", "Take", "Skip",
           "Enumerate", "IgnoreErrors", "stack"]


def stack(elements: list[Any]) -> Any:
    """Stack a list of same-structured elements component-wise along a new first axis."""
    flat = [structure.flatten(e) for e in elements]
    columns = []
    for c, column in enumerate(zip(*flat)):
        first = np.shape(column[0])
        for k, value in enumerate(column[1:], start=1):
            if np.shape(value) != first:
                raise InvalidArgumentError(
                    f"Cannot batch tensors with different shapes in component {c}. First "
                    f"element had shape {list(first)} and element {k} had shape "
                    f"{list(np.shape(value))}; make the shapes equal with map first (padding or "
                    "cropping), or batch(1)")
        columns.append(np.stack(column))
    return structure.pack_as(elements[0], columns)


class Batch(Node):
    def __init__(self, node: Node, batch_size: int, drop_remainder: bool) -> None:
        self.inputs = (node,)
        self.batch_size = batch_size
        self.drop_remainder = drop_remainder

    def iterate(self) -> Iterator[Any]:
        return batches(self.inputs[0].iterate(), self.batch_size, self.drop_remainder, stack)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.batch_size if self.drop_remainder else -(-n // self.batch_size)

    def _compute_spec(self) -> Any:
        dim = self.batch_size if self.drop_remainder else None
        return structure.map_structure_unchecked(
            lambda s: structure.with_batch_dim(s, dim), self.inputs[0].element_spec())


class Unbatch(Node):
    def __init__(self, node: Node) -> None:
        self.inputs = (node,)

    def iterate(self) -> Iterator[Any]:
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            leaves = structure.flatten(element)
            if any(np.ndim(leaf) == 0 for leaf in leaves):
                raise InvalidArgumentError("unbatch: every component needs rank >= 1; a scalar "
                                           "component cannot be split into rows")
            sizes = {np.shape(leaf)[0] for leaf in leaves}
            if len(sizes) > 1:
                raise InvalidArgumentError(f"unbatch: the components' first dimensions differ "
                                           f"({sorted(sizes)}); they must be equal to split rows")
            for i in range(sizes.pop() if sizes else 0):
                yield structure.pack_as(element, [leaf[i] for leaf in leaves])

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        dims = [s.shape.dims for s in structure.flatten(self.inputs[0].element_spec())]
        known = {d[0] for d in dims if d} - {None}
        if n == INFINITE or n == 0:
            return n
        return n * known.pop() if n > 0 and len(known) == 1 else UNKNOWN

    def _compute_spec(self) -> Any:
        return structure.map_structure_unchecked(structure.without_batch_dim,
                                                 self.inputs[0].element_spec())


class Shuffle(Node):
    def __init__(self, node: Node, buffer_size: int, seed: int,
                 reshuffle_each_iteration: bool, seeded: bool = True) -> None:
        self.inputs = (node,)
        self.buffer_size = buffer_size
        self.seed = seed
        self.seeded = seeded   # False: the seed was drawn at random (workers would differ)
        self.reshuffle_each_iteration = reshuffle_each_iteration
        self._epochs = itertools.count()

    def reset(self) -> None:
        self._epochs = itertools.count()

    def _rng(self) -> np.random.Generator:
        epoch = 0 if probing() or not self.reshuffle_each_iteration else next(self._epochs)
        return np.random.Generator(np.random.PCG64([self.seed, epoch]))

    def iterate(self) -> Iterator[Any]:
        rng = self._rng()
        cursor = self.inputs[0].iterate()
        try:
            buffer: list[Any] = []
            for element in cursor:   # a failed element comes out at once (TF's)
                if type(element) is Failed:
                    yield element
                    continue
                buffer.append(element)
                if len(buffer) == self.buffer_size:
                    break
            while buffer:
                slot = int(rng.integers(len(buffer)))
                element = buffer[slot]
                refill = next(cursor, _END)
                while type(refill) is Failed:
                    yield refill
                    refill = next(cursor, _END)
                if refill is _END:
                    buffer[slot] = buffer[-1]
                    buffer.pop()
                else:
                    buffer[slot] = refill
                yield element
        finally:
            cursor.close()

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()


_END = object()


class Repeat(Node):
    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def iterate(self) -> Iterator[Any]:
        epochs = itertools.count() if self.count < 0 else range(self.count)
        for _ in epochs:
            produced = False
            for element in self.inputs[0].iterate():
                produced = True
                yield element
            if not produced:
                return

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if self.count < 0:
            return 0 if n == 0 else INFINITE
        if self.count == 0:
            return 0
        return n if n < 0 else n * self.count


class Shard(Node):
    def __init__(self, node: Node, num_shards: int, index: int,
                 require_non_empty: bool = False) -> None:
        if num_shards <= 0:
            raise InvalidArgumentError(f"Number of shards must be greater than zero (currently "
                                       f"num_shards = {num_shards}); pass the number of workers")
        if not 0 <= index < num_shards:
            raise InvalidArgumentError(f"Index must be between 0 and {num_shards - 1} (currently "
                                       f"index = {index}); pass this worker's index")
        self.inputs = (node,)
        self.num_shards = num_shards
        self.index = index
        self.require_non_empty = require_non_empty

    def iterate(self) -> Iterator[Any]:
        seen = 0
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            position, seen = seen, seen + 1
            if position % self.num_shards == self.index:
                yield element
        if self.require_non_empty and seen < self.num_shards:
            raise InvalidArgumentError(
                f"cannot shard by data: the dataset has only {seen} element(s), fewer than the "
                f"{self.num_shards} workers, so some worker would get nothing; use a larger "
                "dataset or fewer workers")

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.num_shards + (1 if n % self.num_shards > self.index else 0)


def call_unpacked(fn: Callable[..., Any], element: Any) -> Any:
    """``fn(*element)`` for a plain tuple (TF's rule), else ``fn(element)``."""
    return fn(*element) if type(element) is tuple else fn(element)


class Map(Node):
    index_offset = 0   # the position of the first element (a restored iterator's twin)

    def __init__(self, node: Node, fn: MapFn) -> None:
        self.inputs = (node,)
        self.fn = fn
        self._epochs = itertools.count()

    def reset(self) -> None:
        self._epochs = itertools.count()

    def iterate(self) -> Iterator[Any]:
        fn = self.fn
        epoch = 0 if probing() else next(self._epochs)
        for index, element in enumerate(self.inputs[0].iterate(), start=self.index_offset):
            if type(element) is Failed:
                yield element
                continue
            try:
                out = fn(element, epoch, index)
            except Exception as e:   # this element's error; the next one goes on (TF's)
                out = Failed(e)
            yield out

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def _compute_spec(self) -> Any:
        return self.probe_spec()


class Filter(Node):
    def __init__(self, node: Node, predicate: Callable[..., Any]) -> None:
        self.inputs = (node,)
        self.predicate = predicate

    def iterate(self) -> Iterator[Any]:
        predicate = self.predicate
        for element in self.inputs[0].iterate():
            if type(element) is Failed:
                yield element
                continue
            try:
                with value_mode.dataset_function():
                    keep = call_unpacked(predicate, element)
            except Exception as e:   # this element's error; the next one goes on (TF's)
                yield Failed(e)
                continue
            if np.ndim(keep) != 0 or np.asarray(keep).dtype != np.bool_:
                raise InvalidArgumentError(f"filter: the predicate must return a scalar bool, "
                                           f"got {keep!r}; compare with a value (x > 0)")
            if keep:
                yield element

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return n if n == 0 else UNKNOWN


class Take(Node):
    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def iterate(self) -> Iterator[Any]:
        cursor = self.inputs[0].iterate()
        try:
            if self.count < 0:
                yield from cursor
                return
            taken = 0   # a failed element is not counted (TF's)
            while taken < self.count:
                element = next(cursor, _END)
                if element is _END:
                    return
                taken += type(element) is not Failed
                yield element
        finally:
            cursor.close()

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if self.count < 0:
            return n
        if self.count == 0 or n == UNKNOWN:
            return 0 if self.count == 0 else UNKNOWN
        return self.count if n == INFINITE else min(n, self.count)


class Skip(Node):
    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def iterate(self) -> Iterator[Any]:
        cursor = self.inputs[0].iterate()
        try:
            if self.count < 0:
                for element in cursor:
                    if type(element) is Failed:
                        yield element
                return
            skipped = 0   # a failed element met while skipping comes out (TF's)
            while skipped < self.count:
                element = next(cursor, _END)
                if element is _END:
                    return
                if type(element) is Failed:
                    yield element
                else:
                    skipped += 1
            yield from cursor
        finally:
            cursor.close()

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return 0 if self.count < 0 else max(0, n - self.count)


class Enumerate(Node):
    def __init__(self, node: Node, start: int) -> None:
        self.inputs = (node,)
        self.start = start

    def iterate(self) -> Iterator[Any]:
        # TF's enumerate is zip(range, ds): a failed element takes its index too
        for i, element in enumerate(self.inputs[0].iterate(), start=self.start):
            yield element if type(element) is Failed else (np.int64(i), element)

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def _compute_spec(self) -> Any:
        return (structure.spec_of(np.int64(0)), self.inputs[0].element_spec())


class IgnoreErrors(Node):
    """``ignore_errors``: the elements whose making failed are dropped (logged
    with ``log_warning``), as TF's ``IgnoreErrorsDataset``."""

    def __init__(self, node: Node, log_warning: bool = False) -> None:
        self.inputs = (node,)
        self.log_warning = log_warning

    def iterate(self) -> Iterator[Any]:
        for element in self.inputs[0].iterate():
            if type(element) is not Failed:
                yield element
            elif self.log_warning:
                logger.warning("ignore_errors: an element was dropped: %s: %s",
                               type(element.error).__name__, element.error)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return n if n in (0, INFINITE) else UNKNOWN
