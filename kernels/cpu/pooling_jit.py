"""numba loops behind :mod:`kernels.cpu.pooling` (NHWC, C-contiguous).

Imported only by :mod:`kernels.cpu.jit_loader`'s thread (numba is slow to
import); ``import kernels`` never imports this module. Each function runs
the batch slice ``[n0, n1)`` so a batch can be split over threads, and
releases the GIL. The channel loop is innermost: a window's cells are
visited in row-major order, as TensorFlow's CPU kernels visit them, and each
cell updates all channels with contiguous loads and stores.

A window is the output cell's rows ``[i*sh - pt, i*sh - pt + kh)`` clipped
to the input (and its columns likewise); callers guarantee it is never empty.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def max_pool(x, kh, kw, sh, sw, pt, pl, out, n0, n1):   # noqa: ANN001, ANN201
    """out[n, i, j, c]: the window's maximum; a NaN in the window wins."""
    _, h_in, w_in, depth = x.shape
    _, oh, ow, _ = out.shape
    for n in range(n0, n1):
        for i in range(oh):
            hs = max(i * sh - pt, 0)
            he = min(i * sh - pt + kh, h_in)
            for j in range(ow):
                ws = max(j * sw - pl, 0)
                we = min(j * sw - pl + kw, w_in)
                o = out[n, i, j]
                o[:] = x[n, hs, ws]
                for h in range(hs, he):
                    for w in range(ws, we):
                        # numba's np.maximum propagates NaN as numpy's, and its
                        # loop vectorizes (a scalar compare-and-select here
                        # measured 2.6x slower)
                        np.maximum(o, x[n, h, w], o)


@njit(**_OPTS)
def avg_pool(x, kh, kw, sh, sw, pt, pl, out, n0, n1):   # noqa: ANN001, ANN201
    """out[n, i, j, c]: the mean over the window's cells inside the input."""
    _, h_in, w_in, depth = x.shape
    _, oh, ow, _ = out.shape
    for n in range(n0, n1):
        for i in range(oh):
            hs = max(i * sh - pt, 0)
            he = min(i * sh - pt + kh, h_in)
            for j in range(ow):
                ws = max(j * sw - pl, 0)
                we = min(j * sw - pl + kw, w_in)
                o = out[n, i, j]
                for c in range(depth):
                    o[c] = 0
                for h in range(hs, he):
                    for w in range(ws, we):
                        v = x[n, h, w]
                        for c in range(depth):
                            o[c] += v[c]
                count = o.dtype.type((he - hs) * (we - ws))
                for c in range(depth):
                    o[c] /= count


@njit(**_OPTS)
def max_pool_grad(x, g, kh, kw, sh, sw, pt, pl, dx, n0, n1):   # noqa: ANN001, ANN201
    """dx (zeroed by the caller) += each output's gradient at its window's
    first cell, in row-major order, holding the window's maximum: the first
    cell, replaced only by a strictly greater one (so an all-NaN window
    sends its gradient to the first cell), as TensorFlow's CPU kernel."""
    _, h_in, w_in, depth = x.shape
    _, oh, ow, _ = g.shape
    best = np.empty(depth, x.dtype)
    arg = np.empty(depth, np.int64)
    for n in range(n0, n1):
        dxn = dx[n].reshape((h_in * w_in, depth))
        for i in range(oh):
            hs = max(i * sh - pt, 0)
            he = min(i * sh - pt + kh, h_in)
            for j in range(ow):
                ws = max(j * sw - pl, 0)
                we = min(j * sw - pl + kw, w_in)
                first = x[n, hs, ws]
                for c in range(depth):
                    best[c] = first[c]
                    arg[c] = hs * w_in + ws
                for h in range(hs, he):
                    for w in range(ws, we):
                        v = x[n, h, w]
                        cell = h * w_in + w
                        for c in range(depth):   # selects: the loop vectorizes
                            a = v[c]
                            b = best[c]
                            take = a > b
                            best[c] = a if take else b
                            arg[c] = cell if take else arg[c]
                gij = g[n, i, j]
                for c in range(depth):
                    dxn[arg[c], c] += gij[c]


@njit(**_OPTS)
def avg_pool_grad(g, kh, kw, sh, sw, pt, pl, dx, n0, n1):   # noqa: ANN001, ANN201
    """dx (zeroed by the caller) += each output's gradient times 1/count
    over its window's cells inside the input."""
    _, h_in, w_in, depth = dx.shape
    _, oh, ow, _ = g.shape
    one = dx.dtype.type(1)
    for n in range(n0, n1):
        for i in range(oh):
            hs = max(i * sh - pt, 0)
            he = min(i * sh - pt + kh, h_in)
            for j in range(ow):
                ws = max(j * sw - pl, 0)
                we = min(j * sw - pl + kw, w_in)
                coef = one / dx.dtype.type((he - hs) * (we - ws))
                gij = g[n, i, j]
                for h in range(hs, he):
                    for w in range(ws, we):
                        d = dx[n, h, w]
                        for c in range(depth):
                            d[c] += gij[c] * coef


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) every function for ``dtype``."""
    x = np.ones((1, 2, 2, 1), dtype)
    out = np.empty((1, 1, 1, 1), dtype)
    max_pool(x, 2, 2, 1, 1, 0, 0, out, 0, 1)
    avg_pool(x, 2, 2, 1, 1, 0, 0, out, 0, 1)
    dx = np.zeros_like(x)
    max_pool_grad(x, out, 2, 2, 1, 1, 0, 0, dx, 0, 1)
    avg_pool_grad(out, 2, 2, 1, 1, 0, 0, dx, 0, 1)
