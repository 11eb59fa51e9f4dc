"""The runtime's constants: host arrays that nothing changes while they live.

The CPU ``Const`` kernel marks its value (:func:`mark_constant`; so also what
the runtime folded), and a GPU keeps one copy of a marked array per device
instead of copying it in every step (``kernels.cuda.memory.cached_to_device``).
Shared by both wings: the CPU kernels mark, the CUDA wing reads the mark.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["mark_constant", "is_constant"]

# id -> an array the runtime marked as a constant (the entry goes when the array does)
_MARKED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def mark_constant(array: np.ndarray) -> np.ndarray:
    """Make ``array`` read-only and note it as a constant of the runtime's,
    which nothing will change while it lives (a ``Const``'s value: the
    runtime's own copy of the graph's). Returns ``array``."""
    array.flags.writeable = False
    _MARKED[id(array)] = array
    return array


def is_constant(host: Any) -> bool:
    """Whether ``host`` is an array :func:`mark_constant` marked (and still
    read-only). A read-only array of anyone else's is not one: its owner can
    make it writable again and change it."""
    return (type(host) is np.ndarray and not host.flags.writeable
            and _MARKED.get(id(host)) is host)
