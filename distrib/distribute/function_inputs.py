"""Iterators as inputs of a ``dt.function``, and how its other Python arguments are keyed.

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
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from distrib.data.iterators import DatasetIterator
from distrib.data.structure import TensorSpec
from distrib.distribute.elastic_input import ElasticIterator
from distrib.distribute.input_lib import DistributedIterator, regroup_replicas
from distrib.distribute.values import DistributedValues, PerReplica
from distrib.errors import InvalidArgumentError, OutOfRangeError
from distrib.ops import math_ops as ops

__all__ = ["is_iterator", "iterator_signature", "IteratorReads", "IteratorInput",
           "object_key"]


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
    try:
        return sorted(value)
    except TypeError:   # keys of mixed types: the dict's own order
        return list(value)


def _spec_key(template: Any) -> Any:
    if isinstance(template, DistributedValues):
        return ("per", tuple(_spec_key(v) for v in template.values))
    if isinstance(template, TensorSpec):
        dims = template.shape.dims
        return ("spec", template.dtype.name, None if dims is None else tuple(dims))
    if isinstance(template, tuple):
        return ("tuple", type(template).__name__, tuple(_spec_key(v) for v in template))
    if isinstance(template, list):
        return ("list", tuple(_spec_key(v) for v in template))
    if isinstance(template, dict):
        return ("dict", tuple((k, _spec_key(template[k])) for k in _keys(template)))
    return ("other", repr(template))


def iterator_signature(iterator: Any) -> Any:
    """The trace key of an iterator argument: its kind and element spec (TF's type spec)."""
    return ("iterator", type(iterator).__name__, _spec_key(_template(iterator)))


def _placeholders(template: Any, out: list[Any]) -> Any:
    if isinstance(template, DistributedValues):
        return PerReplica([_placeholders(v, out) for v in template.values])
    if isinstance(template, TensorSpec):
        dims = template.shape.dims
        ph = ops.placeholder(template.dtype, shape=None if dims is None else list(dims),
                             name="next")
        out.append(ph)
        return ph
    if isinstance(template, tuple):
        items = [_placeholders(v, out) for v in template]
        return type(template)(*items) if hasattr(template, "_fields") else tuple(items)
    if isinstance(template, list):
        return [_placeholders(v, out) for v in template]
    if isinstance(template, dict):
        built = {k: _placeholders(template[k], out) for k in _keys(template)}
        return {k: built[k] for k in template}
    raise InvalidArgumentError(f"an iterator's element spec holds {template!r}, which a "
                               "traced function cannot take as an input")


def _leaves(element: Any, out: list[Any]) -> None:
    """``element``'s arrays in ``_placeholders``' order."""
    if isinstance(element, DistributedValues):
        for v in element.values:
            _leaves(v, out)
    elif isinstance(element, (tuple, list)):
        for v in element:
            _leaves(v, out)
    elif isinstance(element, dict):
        for k in _keys(element):
            _leaves(element[k], out)
    else:
        out.append(np.asarray(element))


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
            _leaves(element, out)
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
        element = _placeholders(self._template, self._out)
        self._reads.record(self._ordinal, len(self._out) - start)
        return element

    def get_next(self) -> Any:
        """The next element (OutOfRangeError from the call at the end of the data)."""
        return self.__next__()


# -- other Python objects: a number per object, never reused ---------------------------------
_numbers = itertools.count(1)
_known: dict[int, tuple[Any, int]] = {}   # id -> (a weak reference, or the object, number)


def object_key(value: Any) -> Any:
    """The trace key of a Python object with no signature of its own: its type
    and a number given on first sight and never reused (see the module header)."""
    entry = _known.get(id(value))
    if entry is not None:
        held = entry[0]
        if (held() if isinstance(held, weakref.ref) else held) is value:
            return ("object", type(value).__qualname__, entry[1])
    number = next(_numbers)
    key = id(value)
    try:
        held = weakref.ref(value, lambda ref, k=key: _forget(k, ref))
    except TypeError:   # no weak references to it: held for good, so its id stays its own
        held = value
    _known[key] = (held, number)
    return ("object", type(value).__qualname__, number)


def _forget(key: int, ref: weakref.ref) -> None:
    entry = _known.get(key)
    if entry is not None and entry[0] is ref:
        del _known[key]
