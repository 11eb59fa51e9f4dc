"""numba loops behind ``dt.image``'s per-image adjustments on values
(:mod:`distrib.ops.image_values`, a ``dt.data`` map's): per-image
standardization and contrast of one ``[h, w, c]`` image as a C-contiguous
``(pixels, channels)`` matrix, each one pass to sum and one to write.

On CIFAR's 24x24x3 images numpy's way (a reduction, a subtraction, a dot, a
division; per channel means, a multiply-add) costs 15-25 us an image in
calls and temporaries, more than the arithmetic: a map of small images is
mostly such calls (measured: these two took a third of the CIFAR map's
time). Imported only by :mod:`kernels.cpu.jit_loader`'s thread.

Arithmetic follows TF's: the mean (and the variance, of the centred values)
summed in float64 and rounded to the image's dtype, then
``(x - mean) / max(stddev, 1/sqrt(N))`` and ``(x - mean) * factor + mean``
in that dtype (no fast-math), as TF's kernels compute them in float; the
sums are a little more exact than TF's float32 reductions.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def standardize(x, out):  # noqa: ANN001, ANN201 - numba-typed
    """``out`` = per_image_standardization of ``x`` (one image, flat)."""
    n = x.size
    total = 0.0
    for i in range(n):
        total += x[i]
    mean = x.dtype.type(total / n)
    squares = 0.0
    for i in range(n):
        d = x[i] - mean
        squares += d * d
    stddev = x.dtype.type(math.sqrt(x.dtype.type(squares / n)))
    floor = x.dtype.type(1.0 / math.sqrt(n))
    adjusted = stddev if stddev > floor else floor
    for i in range(n):
        out[i] = (x[i] - mean) / adjusted


@njit(**_OPTS)
def contrast(x, factor, out):  # noqa: ANN001, ANN201 - numba-typed
    """``out`` = adjust_contrast of ``x`` (pixels, channels) by ``factor``."""
    pixels, channels = x.shape
    for c in range(channels):
        total = 0.0
        for p in range(pixels):
            total += x[p, c]
        mean = x.dtype.type(total / pixels)
        for p in range(pixels):
            out[p, c] = (x[p, c] - mean) * factor + mean


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) every function for ``dtype``."""
    x = np.ones((2, 3), dtype)
    out = np.empty_like(x)
    standardize(x.reshape(-1), out.reshape(-1))
    contrast(x, dtype.type(1), out)
