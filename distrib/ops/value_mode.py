"""When an op builder computes a value at once instead of adding an op.

``dt.data`` runs a ``map``/``filter`` function in the client on numpy
values, element by element (the pipeline is not a graph here: see
``distrib/data``'s header). TF traces that function into a graph; this
runtime calls it, and the functions an input pipeline calls there --
``dt.io.parse_single_example``, ``decode_raw``, ``decode_jpeg``, the
``dt.image`` functions -- then compute on the values directly, with the
same CPU kernels their ops run, and return numpy values. That is the one
rule of this module: inside a dataset function (:func:`dataset_function`)
a builder given no graph tensor computes now; anywhere else it adds its op
(which, with eager execution on, the eager runner runs at once and returns
as an ``EagerTensor``, as every other op). Every other op built in a
dataset function on values (``dt.cast``, ``dt.reshape``, arithmetic, ``dt.one_hot``,
``check_numerics``...) runs at once too, eager execution on or not
(``Graph.create_op`` hands it to an eager runner of the dataset functions'
own, ``graph.DATASET_FUNCTION``) and returns an ``EagerTensor``, which the
map's output takes as its array (its dtype kept).

Random choices in a dataset function come from :func:`rng`: the
generator the running ``map`` gave this element (keyed by the map's seed,
the epoch and the element's position, so a parallel map draws what a
sequential one does), else one per thread. An element's generator is a
SplitMix64 stream in Python (:class:`ElementRandom`): made in well under a
microsecond, where seeding a numpy generator costs 12-30 us, which a map
of small images (CIFAR's, 50 us each) would feel; draws of many numbers at
once go to a numpy generator seeded from the same stream.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Any, Iterator

import numpy as np

from distrib.framework import graph
from distrib.framework.graph import Tensor

__all__ = ["dataset_function", "values_now", "rng", "in_dataset_function"]

_ACTIVE: contextvars.ContextVar[bool] = graph.DATASET_FUNCTION   # (the graph's: its ops run now)
# the element's seed key, and its generator once made (a list: made on first use only,
# as most elements of most maps draw nothing and a generator costs microseconds)
_RNG: contextvars.ContextVar[list | None] = contextvars.ContextVar("dt_dataset_rng",
                                                                  default=None)
_local = threading.local()


@contextlib.contextmanager
def dataset_function(seed_key: tuple | None = None) -> Iterator[None]:
    """Run the body as a dataset function: builders compute at once (see header);
    random choices come from a generator seeded by ``seed_key`` (ints), if given."""
    if not graph.has_dataset_runner():   # installed once, on the first use
        _install_runner()
    token = _ACTIVE.set(True)
    rng_token = _RNG.set(None if seed_key is None else [seed_key, None])
    try:
        yield
    finally:
        _RNG.reset(rng_token)
        _ACTIVE.reset(token)


def in_dataset_function() -> bool:
    """Whether a dataset function is running in this context."""
    return _ACTIVE.get()


_PLAIN = (np.ndarray, np.generic, bytes, str, int, float, list, tuple)


def values_now(*inputs: Any) -> bool:
    """True when a builder given ``inputs`` should compute now (see the header)."""
    for x in inputs:   # on every call of every image function in a map: kept cheap
        if isinstance(x, _PLAIN):
            continue
        if isinstance(x, Tensor) or (hasattr(x, "_as_tensor") and not hasattr(x, "numpy")):
            return False
    return _ACTIVE.get()


def enter(seed_key: tuple | None) -> tuple:
    """:func:`dataset_function`'s entry without a generator frame (a map calls it
    per element); hand the result to :func:`leave`."""
    if not graph.has_dataset_runner():   # installed once, on the first use
        _install_runner()
    return _ACTIVE.set(True), _RNG.set(None if seed_key is None else [seed_key, None])


def _install_runner() -> None:
    """The eager runner of the ops a dataset function builds on values (every op
    but the input pipeline's own builders, which compute here): made once."""
    from distrib.eager.execute import EagerRunner
    with _install_lock:
        if not graph.has_dataset_runner():
            graph.set_dataset_runner(EagerRunner())


_install_lock = threading.Lock()


def leave(tokens: tuple) -> None:
    _RNG.reset(tokens[1])
    _ACTIVE.reset(tokens[0])


_M64 = (1 << 64) - 1


class ElementRandom:
    """numpy Generator's ``random``, ``uniform`` and ``integers`` on a SplitMix64
    stream (scalars; an array ``size`` draws from a numpy generator it seeds)."""

    __slots__ = ("_state", "_numpy")

    def __init__(self, key: tuple) -> None:
        state = 0x2545F4914F6CDD1D
        for part in key:
            state = ((state ^ (int(part) & _M64)) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & _M64
        self._state = state
        self._numpy: np.random.Generator | None = None

    def _next(self) -> int:
        self._state = z = (self._state + 0x9E3779B97F4A7C15) & _M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    def _array_rng(self) -> np.random.Generator:
        if self._numpy is None:
            self._numpy = np.random.Generator(np.random.PCG64(self._next()))
        return self._numpy

    def random(self, size: Any = None) -> Any:
        if size is not None:
            return self._array_rng().random(size)
        return (self._next() >> 11) * (1.0 / 9007199254740992.0)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        if size is not None:
            return self._array_rng().uniform(low, high, size)
        return low + (high - low) * self.random()

    def integers(self, low: int, high: int | None = None, size: Any = None) -> Any:
        if size is not None:
            return self._array_rng().integers(low, high, size)
        if high is None:
            low, high = 0, low
        return low + (self._next() % (high - low))


def rng() -> Any:
    """The generator random choices of a dataset function draw from (the
    methods ``random``, ``uniform``, ``integers`` of a numpy Generator)."""
    slot = _RNG.get()
    if slot is not None:
        if slot[1] is None:
            slot[1] = ElementRandom(slot[0])
        return slot[1]
    generator = getattr(_local, "rng", None)
    if generator is None:
        generator = _local.rng = np.random.default_rng()
    return generator


def as_value(x: Any) -> Any:
    """A numpy value of an input (an eager tensor's array; bytes as a 0-d object array)."""
    if isinstance(x, (bytes, str)):
        return np.array(x, dtype=object)
    if isinstance(x, np.ndarray) or isinstance(x, np.generic):
        return x
    return np.asarray(x)
