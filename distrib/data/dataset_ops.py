"""``dt.data.Dataset``: an immutable description of an input pipeline, as ``tf.data``.

A Dataset wraps one pipeline :class:`~distrib.data.pipeline.Node` and the
:class:`~distrib.data.options.Options` it carries; every transformation
returns a new Dataset and never changes this one. Iterating starts a fresh
cursor (``for x in ds``, ``async for x in ds``), so each loop is an epoch.

Elements are numpy values (arrays, numpy scalars, or tuples/dicts of them;
a string is a 0-d object array holding its bytes): this pipeline runs in
the client, in Python, and functions given to ``map`` and ``filter`` are
plain Python called on numpy values, not traced into a graph; the ``dt.io``
and ``dt.image`` functions they call compute on those values at once
(``distrib.ops.value_mode``). Feed the batches to a session or a
``dt.function``.

Arguments are checked when the transformation is made, as TF checks them
when it builds the dataset op: a bad one raises ``dt.errors.InvalidArgumentError``
saying what to pass instead.
"""
from __future__ import annotations

import itertools
import secrets
import weakref
from typing import Any, AsyncIterator, Callable

import numpy as np

from distrib.data import readers, structure
from distrib.data.cache import Cache, PaddedBatch
from distrib.data.interleave import FlatMap, Interleave
from distrib.data.iterator_state import CheckpointableIterator
from distrib.data.iterators import AUTOTUNE, AsyncDatasetIterator, DatasetIterator, Prefetch
from distrib.data.options import Options
from distrib.data.parallel_map import MapFn, ParallelMap, ParallelMapBatch, autotune_calls
from distrib.data.pipeline import (
    INFINITE,
    UNKNOWN,
    Concatenate,
    Generator,
    Node,
    Range,
    Tensors,
    TensorSlices,
    Zip,
)
from distrib.data.transforms import (
    Batch,
    Enumerate,
    Filter,
    IgnoreErrors,
    Map,
    Repeat,
    Shard,
    Shuffle,
    Skip,
    Take,
    Unbatch,
)
from distrib.errors import InvalidArgumentError
from distrib.framework.graph import get_default_graph

__all__ = ["Dataset", "Cardinality", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN


class Cardinality(int):
    """An int with TF's ``.numpy()``, so ``ds.cardinality().numpy()`` ports unchanged."""

    def numpy(self) -> np.int64:
        return np.int64(self)


def _int(name: str, value: Any, least: int | None = None, hint: str = "") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
            value = value.item()
        else:
            raise InvalidArgumentError(f"{name} must be an int, got {value!r}{hint}")
    value = int(value)
    if least is not None and value < least:
        raise InvalidArgumentError(f"{name} must be at least {least}, got {value}{hint}")
    return value


# seeds derived from dt.set_random_seed, per graph, in creation order (TF's op seeds)
_derived_seeds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _resolve_seed(seed: Any, counters: weakref.WeakKeyDictionary | None = None) -> int:
    if seed is not None:
        return _int("seed", seed, least=0)
    graph = get_default_graph()
    if graph.seed is None:
        return secrets.randbits(63)
    counter = (_derived_seeds if counters is None else counters).setdefault(
        graph, itertools.count())
    return (int(graph.seed) * 1_000_003 + next(counter)) % (2**63)


# the maps' seeds (their functions' random draws) count apart from the shuffles', so a
# map added before a shuffle leaves the shuffle's order as it was
_map_seeds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class Dataset:
    """A pipeline of numpy elements; see the module header."""

    def __init__(self, node: Node, options: Options | None = None) -> None:
        self._node = node
        self._options = options if options is not None else Options()

    # -- sources -----------------------------------------------------------------

    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """One element per row of ``tensors`` (each component sliced along axis 0)."""
        return Dataset(TensorSlices(tensors))

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """A dataset of exactly one element: ``tensors``."""
        return Dataset(Tensors(tensors))

    @staticmethod
    def range(*args: Any, output_type: Any = np.int64, name: str | None = None) -> Dataset:
        """``range(stop)``, ``range(start, stop[, step])``: int64 scalars by default."""
        if not 1 <= len(args) <= 3:
            raise InvalidArgumentError(f"range takes 1 to 3 arguments (stop | start, stop[, "
                                       f"step]), got {len(args)}")
        ints = [_int("range argument", a) for a in args]
        start, stop, step = (0, ints[0], 1) if len(ints) == 1 else (*ints, 1)[:3]
        np_type = getattr(output_type, "as_numpy_dtype", output_type)
        return Dataset(Range(start, stop, step, np_type))

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None,
                       output_shapes: Any = None, args: Any = None,
                       output_signature: Any = None, name: str | None = None) -> Dataset:
        """Elements from ``generator(*args)``, called anew for each iteration."""
        if not callable(generator):
            raise InvalidArgumentError("from_generator needs a callable that returns an "
                                       f"iterator, got {generator!r}")
        return Dataset(Generator(generator, tuple(args or ()), output_signature))

    @staticmethod
    def zip(*args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """A dataset of nests from a nest of datasets (``zip((a, b))`` or ``zip(a, b)``)."""
        nest = datasets if datasets is not None else (args[0] if len(args) == 1 else args)
        leaves = structure.flatten(nest)
        if not leaves or not all(isinstance(d, Dataset) for d in leaves):
            raise InvalidArgumentError("zip takes datasets, or a tuple/dict of datasets; got "
                                       f"{nest!r}")
        # a Dataset reading other Datasets' node and options (same class), as concatenate
        options = leaves[0]._options  # noqa: SLF001 - same class
        for d in leaves[1:]:
            options = options.merge(d._options)  # noqa: SLF001 - same class
        return Dataset(Zip(nest, [d._node for d in leaves]), options)  # noqa: SLF001 - same class

    @staticmethod
    def list_files(file_pattern: Any, shuffle: bool | None = None, seed: int | None = None,
                   name: str | None = None) -> Dataset:
        """The file names matching ``file_pattern`` (a glob or a list of them), in a
        new random order each epoch unless ``shuffle=False`` (then sorted), as TF's;
        no match is an InvalidArgumentError naming the pattern."""
        names = np.array(readers.list_files(file_pattern), dtype=object)
        ds = Dataset(TensorSlices(names))
        if shuffle is False:
            return ds
        return ds.shuffle(len(names), seed=seed)

    # -- transformations ---------------------------------------------------------

    def _then(self, node: Node) -> Dataset:
        return Dataset(node, self._options)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: int | None = None, deterministic: bool | None = None,
              name: str | None = None) -> Dataset:
        """Stack ``batch_size`` consecutive elements; keep the short last batch unless
        ``drop_remainder``."""
        size = _int("batch_size", batch_size, least=1, hint=" (Batch size must be greater than "
                    "zero.)")
        node = self._node
        if isinstance(node, ParallelMap) and node.deterministic is not False:
            return self._then(ParallelMapBatch(node, size, bool(drop_remainder)))   # fused
        return self._then(Batch(node, size, bool(drop_remainder)))

    def unbatch(self, name: str | None = None) -> Dataset:
        """Split each element into its rows (the inverse of batch)."""
        return self._then(Unbatch(self._node))

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool | None = None, name: str | None = None) -> Dataset:
        """Shuffle through a buffer of ``buffer_size`` elements (see transforms' header)."""
        size = _int("buffer_size", buffer_size, least=1,
                    hint=" (use the dataset's size for a full shuffle)")
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        seeded = seed is not None or get_default_graph().seed is not None
        return self._then(Shuffle(self._node, size, _resolve_seed(seed), reshuffle, seeded))

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeat ``count`` times; None or -1 repeats forever."""
        n = -1 if count is None else _int("count", count)
        return self._then(Repeat(self._node, n))

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Every ``num_shards``-th element, starting at ``index``."""
        return self._then(Shard(self._node, _int("num_shards", num_shards),
                                _int("index", index)))

    def map(self, map_func: Callable[..., Any], num_parallel_calls: int | None = None,
            deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """``map_func`` on each element (a tuple's components as separate arguments)."""
        if not callable(map_func):
            raise InvalidArgumentError(f"map takes a function, got {map_func!r}")
        fn = MapFn(map_func, _resolve_seed(None, _map_seeds) ^ 0x5EED)
        calls = 1 if num_parallel_calls is None else _check_parallelism(num_parallel_calls)
        if calls == 1:
            return self._then(Map(self._node, fn))
        return self._then(ParallelMap(self._node, fn, calls, deterministic,
                                      autotune=num_parallel_calls == AUTOTUNE))

    def flat_map(self, map_func: Callable[..., Any], name: str | None = None) -> Dataset:
        """Each element's dataset (``map_func(x)`` returns one), their elements in turn."""
        if not callable(map_func):
            raise InvalidArgumentError(f"flat_map takes a function, got {map_func!r}")
        return self._then(FlatMap(self._node, map_func))

    def interleave(self, map_func: Callable[..., Any], cycle_length: int | None = None,
                   block_length: int | None = None, num_parallel_calls: int | None = None,
                   deterministic: bool | None = None, name: str | None = None) -> Dataset:
        """``cycle_length`` of the elements' datasets open at once, ``block_length``
        elements from each in turn (TF's order); ``num_parallel_calls`` reads them
        ahead in threads (see data/interleave.py)."""
        if not callable(map_func):
            raise InvalidArgumentError(f"interleave takes a function, got {map_func!r}")
        cycle = autotune_calls() if cycle_length in (None, AUTOTUNE) else \
            _int("cycle_length", cycle_length, least=1)
        block = 1 if block_length is None else _int("block_length", block_length, least=1)
        parallel = num_parallel_calls is not None and _check_parallelism(num_parallel_calls) > 1
        return self._then(Interleave(self._node, map_func, cycle, block, parallel, deterministic))

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Keep the elements of the first whole iteration (in memory, or in
        ``filename``) and read them from there afterwards."""
        path = filename.decode() if isinstance(filename, bytes) else str(filename)
        return self._then(Cache(self._node, path))

    def padded_batch(self, batch_size: int, padded_shapes: Any = None,
                     padding_values: Any = None, drop_remainder: bool = False,
                     name: str | None = None) -> Dataset:
        """Batch elements of different shapes, each padded to ``padded_shapes``
        (None or -1: the batch's longest) with ``padding_values`` (0 / b"")."""
        size = _int("batch_size", batch_size, least=1)
        return self._then(PaddedBatch(self._node, size, padded_shapes, padding_values,
                                      bool(drop_remainder)))

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Keep the elements for which ``predicate`` returns True (a scalar bool)."""
        if not callable(predicate):
            raise InvalidArgumentError(f"filter takes a function, got {predicate!r}")
        return self._then(Filter(self._node, predicate))

    def prefetch(self, buffer_size: int, name: str | None = None) -> Dataset:
        """Produce up to ``buffer_size`` elements ahead on a background thread
        (``dt.data.AUTOTUNE`` picks the size; 0 prefetches nothing)."""
        size = _int("buffer_size", buffer_size, least=AUTOTUNE,
                    hint=" (use dt.data.AUTOTUNE or a count of elements)")
        return self._then(Prefetch(self._node, size))

    def ignore_errors(self, log_warning: bool = False, name: str | None = None) -> Dataset:
        """The elements whose map or filter function failed dropped, instead of
        raised where they come out (TF's ``ignore_errors``)."""
        return self._then(IgnoreErrors(self._node, bool(log_warning)))

    def take(self, count: int, name: str | None = None) -> Dataset:
        """The first ``count`` elements (-1: all of them)."""
        return self._then(Take(self._node, _int("count", count)))

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """All but the first ``count`` elements (-1: skip everything)."""
        return self._then(Skip(self._node, _int("count", count)))

    def enumerate(self, start: int = 0, name: str | None = None) -> Dataset:
        """``(index, element)`` pairs, the index an int64 counting from ``start``."""
        return self._then(Enumerate(self._node, _int("start", start)))

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements followed by ``dataset``'s (same structure and dtypes)."""
        if not isinstance(dataset, Dataset):
            raise InvalidArgumentError(f"concatenate takes a Dataset, got {dataset!r}")
        return Dataset(Concatenate(self._node, dataset._node),
                       self._options.merge(dataset._options))

    def apply(self, transformation_func: Callable[[Dataset], Dataset]) -> Dataset:
        """``transformation_func(self)``: for chaining custom transformations."""
        result = transformation_func(self)
        if not isinstance(result, Dataset):
            raise InvalidArgumentError("apply: the transformation must return a Dataset, got "
                                       f"{type(result).__name__}")
        return result

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """This dataset carrying ``options`` (merged over those it had; later ones win)."""
        if not isinstance(options, Options):
            raise InvalidArgumentError(f"with_options takes a dt.data.Options, got {options!r}")
        return Dataset(self._node, self._options.merge(options))

    # -- reading -----------------------------------------------------------------

    def options(self) -> Options:
        """The options this dataset carries (a copy: change it, then use with_options)."""
        return Options().merge(self._options)

    @property
    def element_spec(self) -> Any:
        """The nest of TensorSpec (shape, dtype) that describes each element."""
        return self._node.element_spec()

    @property
    def node(self) -> Node:
        """The pipeline node (for the data package's distribution helpers)."""
        return self._node

    def cardinality(self) -> Cardinality:
        """The number of elements, or INFINITE_CARDINALITY / UNKNOWN_CARDINALITY."""
        return Cardinality(self._node.cardinality())

    def __len__(self) -> int:
        n = self._node.cardinality()
        if n == INFINITE:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self) -> bool:
        return True   # as TF: __len__ must not decide truth (it raises for infinite ones)

    def _hand_options(self) -> None:
        """Hand the options to the stages that read them (``deterministic`` to the
        parallel stages, as TF's options reach its kernels) before a cursor starts."""
        deterministic = self._options.deterministic
        if deterministic is None:
            deterministic = self._options.experimental_deterministic
        for node in self._node.walk():
            if hasattr(node, "default_deterministic"):
                node.default_deterministic = deterministic is not False

    def __iter__(self) -> DatasetIterator:
        self._hand_options()
        return CheckpointableIterator(self._node)

    def __aiter__(self) -> AsyncIterator[Any]:
        self._hand_options()
        return AsyncDatasetIterator(self._node.iterate())

    def as_numpy_iterator(self) -> DatasetIterator:
        """An iterator of numpy elements (every element already is numpy here)."""
        return iter(self)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Fold the dataset: ``state = reduce_func(state, element)`` over every element."""
        state = structure.normalize(initial_state)
        for element in self:
            state = structure.normalize(reduce_func(state, element))
        return state

    def __repr__(self) -> str:
        return f"<Dataset element_spec={self.element_spec!r}>"


def _check_parallelism(value: Any) -> int:
    """The number of calls at once: ``value``, or the cores for AUTOTUNE."""
    n = _int("num_parallel_calls", value)
    if n != AUTOTUNE and n < 1:
        raise InvalidArgumentError(f"num_parallel_calls must be positive or dt.data.AUTOTUNE, "
                                   f"got {n}")
    return autotune_calls() if n == AUTOTUNE else n
