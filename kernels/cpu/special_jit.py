"""numba loops behind :mod:`kernels.cpu.math_extra`'s ``Erf``, ``Erfc`` and ``Lgamma``.

numpy has no ufunc for them and scipy is no dependency; Python's ``math``
functions per element (``np.frompyfunc``) cost about 100 ns an element, which
``gelu(approximate=False)`` pays on every activation of a training step. These
loops call the same C library functions (``erff``/``erf``, ``lgammaf``/``lgamma``,
through numba's ``math`` support) over a flat array, a few ns an element.

Imported only by :mod:`kernels.cpu.jit_loader`'s thread (numba is slow to
import); ``import kernels`` never imports this module. ``lgamma`` of zero and
the negative integers is ``inf``, as TF's (the C function's pole), where
Python's raises.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def erf(x, out):   # noqa: ANN001, ANN201
    """out[i] = erf(x[i]) over flat arrays."""
    for i in range(x.size):
        out[i] = math.erf(x[i])


@njit(**_OPTS)
def erfc(x, out):   # noqa: ANN001, ANN201
    """out[i] = erfc(x[i]) over flat arrays."""
    for i in range(x.size):
        out[i] = math.erfc(x[i])


@njit(**_OPTS)
def lgamma(x, out):   # noqa: ANN001, ANN201
    """out[i] = log|Gamma(x[i])| over flat arrays (inf at the poles)."""
    for i in range(x.size):
        out[i] = math.lgamma(x[i])


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) every function for ``dtype``."""
    x = np.ones(2, dtype)
    out = np.empty(2, dtype)
    erf(x, out)
    erfc(x, out)
    lgamma(x, out)
