"""A ``dt.function``'s inputs: how its arguments key a trace, become the trace's
placeholders, and are fed at each call; iterators among them.

* **Arguments.** An array (``np.ndarray``, a numpy scalar) becomes a
  placeholder of its dtype and shape, and its dtype and shape are the key; a
  ``dt.TensorSpec`` (an ``input_signature``'s, an iterator's element spec)
  becomes a placeholder of its partial shape; a Python number, string or
  None is part of the key by value and baked into the trace, as TF does; a
  ``PerReplica`` (what a distributed dataset yields) is one placeholder per
  replica; tuples, lists and dicts are walked (a dict's keys sorted, so two
  dicts of the same items in another order feed the same placeholders). One
  walk of each kind serves arguments and iterator elements alike:
  :func:`signature` (the key), :func:`placeholders` (the trace's feeds) and
  :func:`leaves` (a call's values for them, in the same order).

TF passes an iterator to a ``tf.function`` as an input (its resource
handle): the trace records an ``IteratorGetNext`` and every call reads the
next element. Here a traced function is a set of feeds and fetches of a
graph, so the same happens in two halves:

* **At the trace**, an iterator argument (``iter(dataset)``, the iterator of
  a distributed dataset, an elastic one) is replaced by a
  :class:`IteratorInput`. Each ``next(it)`` (or ``it.get_next()``) in the
  body makes placeholders shaped by the iterator's element spec, with a
  ``PerReplica`` where the element has one value per replica, and records
  the read.
* **At each call**, before the step runs, the real iterator gives one element
  per recorded read, in the order the body read them, and those elements
  are fed. At the end of the data the call raises ``OutOfRangeError`` before
  anything runs, as TF's function does (``next(it)`` and ``get_next()``
  alike: a coroutine cannot raise ``StopIteration``); the elements read by
  the body's earlier ``next`` calls of that call are consumed, as in TF.

**Keys.** A trace is reused for every call whose arguments have the same
signature. An iterator's is its kind and its element spec, as TF's type spec
is: a new iterator each epoch reuses the trace, and one of another spec
traces again. Every other Python object (a dataset, a model, a callable) is
keyed by a number given to the object the first time a function sees it,
never reused, instead of ``id()``: an id is reused once its object is freed,
so whether a new object met an old trace depended on when the garbage
collector ran, and two workers of one program could trace different
functions (different collective instance keys: a hang). A dataset is keyed
so (by the object, not by its spec) because the body iterates it at trace
time: its elements are in the trace, so a trace serves that dataset only.
An object that cannot be weakly referenced is keyed by its value, as TF's
``Literal`` trace type is (it must then be hashable): the key holds the
object, for as long as the function keeps that trace, so its id is never
another's; none is held by this module (a number per such object, kept for
the life of the process, was a leak).
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from distrib.data.iterators import DatasetIterator
from distrib.data.structure import TensorSpec
from distrib.distribute.core.input_lib import DistributedIterator, regroup_replicas
from distrib.distribute.core.values import DistributedValues, PerReplica
from distrib.distribute.elastic.datasets import ElasticIterator
from distrib.errors import InvalidArgumentError, OutOfRangeError
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops

__all__ = ["is_iterator", "signature", "check_signature", "placeholders", "leaves",
           "IteratorReads", "IteratorInput", "object_key"]


def is_iterator(value: Any) -> bool:
    """Whether ``value`` is an iterator a traced function takes as an input."""
    return isinstance(value, (DatasetIterator, DistributedIterator, ElasticIterator))


def _template(iterator: Any) -> Any:
    """The iterator's element as a structure of TensorSpec, with a PerReplica
    where the element has one value per replica (a distributed iterator's
    element_spec is one spec per local replica)."""
    spec = iterator.element_spec
    if isinstance(iterator, DatasetIterator):
        return spec
    return regroup_replicas(tuple(spec))


def _keys(value: dict) -> list:
    """A dict's keys in the order every walk of this module takes them."""
    try:
        return sorted(value)
    except TypeError:   # keys of mixed types: the dict's own order
        return list(value)


def _per_replica(value: Any) -> bool:
    # a variable's components are DistributedValues too, but one tensor each
    return isinstance(value, DistributedValues) and not hasattr(value, "_component")


def signature(value: Any) -> Any:
    """The trace key of an argument (a nest of them): see the module header."""
    custom = getattr(value, "_function_signature", None)
    if custom is not None:   # an argument that feeds itself (a per-worker iterator)
        return custom()
    if is_iterator(value):   # an input: keyed by its element spec, TF's type spec
        return ("iterator", type(value).__name__, signature(_template(value)))
    if _per_replica(value):
        return ("per", tuple(signature(v) for v in value.values))
    if isinstance(value, TensorSpec):
        dims = value.shape.dims
        return ("spec", value.dtype.name, None if dims is None else tuple(dims))
    if isinstance(value, (np.ndarray, np.generic)):
        return ("array", value.dtype.str, value.shape)
    if isinstance(value, (bool, int, float, str, bytes)) or value is None:
        return ("py", type(value).__name__, value)
    if isinstance(value, tuple):
        return ("tuple", type(value).__name__, tuple(signature(v) for v in value))
    if isinstance(value, list):
        return ("list", tuple(signature(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, signature(value[k])) for k in _keys(value)))
    return object_key(value)   # never id(): see the module header


def check_signature(specs: Any, args: tuple, kwargs: dict) -> None:
    """TF's rule: with an input_signature every call passes arrays that fit it."""
    if kwargs or len(args) != len(specs):
        raise ValueError(f"the function takes {len(specs)} positional arguments of its "
                         f"input_signature; got {len(args)} and keywords {sorted(kwargs)}")
    for i, (spec, value) in enumerate(zip(specs, args)):
        array = np.asarray(value)
        if np.dtype(spec.dtype.name) != array.dtype or \
                not spec.shape.is_compatible_with(TensorShape(list(array.shape))):
            raise ValueError(f"Python inputs incompatible with input_signature: argument {i} "
                             f"is {array.dtype}{list(array.shape)}, the signature says {spec}")


def placeholders(value: Any, out: list[Any], reads: IteratorReads | None = None,
                 name: str = "input") -> Any:
    """``value`` with a placeholder for each array and TensorSpec (appended to
    ``out`` in :func:`leaves`' order) and an :class:`IteratorInput` for each
    iterator (its reads recorded in ``reads``); Python values as they are."""
    custom = getattr(value, "_function_placeholders", None)
    if custom is not None:
        return custom(out)
    if is_iterator(value):
        if reads is None:
            raise InvalidArgumentError(f"an iterator ({type(value).__name__}) inside an "
                                       "iterator's element cannot be an input")
        return reads.traced(value, out)
    if _per_replica(value):
        return PerReplica([placeholders(v, out, reads, name) for v in value.values])
    if isinstance(value, TensorSpec):
        dims = value.shape.dims
        ph = ops.placeholder(value.dtype, shape=None if dims is None else list(dims),
                             name=value.name or name)
        out.append(ph)
        return ph
    if isinstance(value, (np.ndarray, np.generic)):
        ph = ops.placeholder(value.dtype, shape=list(value.shape), name=name)
        out.append(ph)
        return ph
    if isinstance(value, tuple):
        items = [placeholders(v, out, reads, name) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [placeholders(v, out, reads, name) for v in value]
    if isinstance(value, dict):
        built = {k: placeholders(value[k], out, reads, name) for k in _keys(value)}
        return {k: built[k] for k in value}
    return value


def leaves(value: Any, out: list[Any], iterators: list[Any] | None = None) -> None:
    """The arrays of ``value``, in :func:`placeholders`' order, onto ``out``; its
    iterators onto ``iterators``, in the same order. Without ``iterators``,
    ``value`` is an iterator's element: every leaf is a tensor's value."""
    custom = getattr(value, "_function_leaves", None)
    if custom is not None:
        custom(out)
    elif iterators is not None and is_iterator(value):
        iterators.append(value)
    elif _per_replica(value):
        for v in value.values:
            leaves(v, out, iterators)
    elif isinstance(value, (np.ndarray, np.generic)):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            leaves(v, out, iterators)
    elif isinstance(value, dict):
        for k in _keys(value):
            leaves(value[k], out, iterators)
    elif iterators is None:
        out.append(np.asarray(value))


class IteratorReads:
    """A trace's iterator arguments (numbered in argument order) and the reads
    its body made of them, in order; per call, the elements to feed."""

    def __init__(self) -> None:
        self.count = 0                 # iterator arguments met while making placeholders
        self.order: list[int] = []     # the argument each read was of, in read order
        self._sizes: list[int] = []    # the placeholders each read made

    def traced(self, iterator: Any, out: list[Any]) -> IteratorInput:
        """What the body is given in place of ``iterator``."""
        self.count += 1
        return IteratorInput(self, self.count - 1, _template(iterator),
                             iterator.element_spec, out)

    def record(self, ordinal: int, placeholders: int) -> None:
        self.order.append(ordinal)
        self._sizes.append(placeholders)

    def feed(self, iterators: list[Any], out: list[Any]) -> None:
        """One element of the argument iterators per recorded read, flattened onto ``out``."""
        for ordinal, size in zip(self.order, self._sizes):
            iterator = iterators[ordinal]
            element = _next(iterator, ordinal)
            start = len(out)
            leaves(element, out)
            if len(out) - start != size:
                raise InvalidArgumentError(
                    f"iterator argument {ordinal} gave an element of {len(out) - start} "
                    f"arrays where its element_spec has {size}: {iterator.element_spec}")


def _next(iterator: Any, ordinal: int) -> Any:
    try:
        if isinstance(iterator, ElasticIterator):   # a step run again re-reads its element
            return iterator.next_for_step()
        return next(iterator)
    except StopIteration:
        raise OutOfRangeError(
            f"End of sequence: iterator argument {ordinal} of the function has no more "
            "elements; catch dt.errors.OutOfRangeError to end the loop, or start a new "
            "iterator (iter(dataset))") from None


class IteratorInput:
    """An iterator argument inside the trace: each ``next`` is a read of the
    real iterator at every call (see the module header)."""

    def __init__(self, reads: IteratorReads, ordinal: int, template: Any, spec: Any,
                 out: list[Any]) -> None:
        self._reads = reads
        self._ordinal = ordinal
        self._template = template
        self._out = out
        self.element_spec = spec

    def __iter__(self) -> IteratorInput:
        return self

    def __next__(self) -> Any:
        start = len(self._out)
        element = placeholders(self._template, self._out, name="next")
        self._reads.record(self._ordinal, len(self._out) - start)
        return element

    def get_next(self) -> Any:
        """The next element (OutOfRangeError from the call at the end of the data)."""
        return self.__next__()


# -- other Python objects: a number per object, never reused ---------------------------------
_numbers = itertools.count(1)
_known: dict[int, tuple[weakref.ref, int]] = {}   # id -> (a weak reference to it, number)


def object_key(value: Any) -> Any:
    """The trace key of a Python object with no signature of its own: its type
    and a number given on first sight and never reused; for an object that
    cannot be weakly referenced, its value (see the module header)."""
    entry = _known.get(id(value))
    if entry is not None and entry[0]() is value:
        return ("object", type(value).__qualname__, entry[1])
    key = id(value)
    try:
        held = weakref.ref(value, lambda ref, k=key: _forget(k, ref))
    except TypeError:   # no weak references to it: keyed by its value, which the key holds
        return _value_key(value)
    number = next(_numbers)
    _known[key] = (held, number)
    return ("object", type(value).__qualname__, number)


def _value_key(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"a dt.function argument of type {type(value).__qualname__} can be neither weakly "
            "referenced nor hashed, so no trace can be keyed by it (TF refuses one too): pass "
            "it as a tuple, list or dict of arrays and Python values, make it hashable, or "
            "reach it from the function's closure") from None
    return ("value", type(value).__qualname__, value)


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _known.get(key)
    if entry is not None and entry[0] is ref:
        del _known[key]
