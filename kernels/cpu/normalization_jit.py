"""numba loops behind :mod:`kernels.cpu.normalization`: LRN over the last
axis of a (pixels, depth) matrix, and batch norm's per-channel sums and
elementwise passes over a (rows, channels) matrix, both C-contiguous.

Imported only by :mod:`kernels.cpu.jit_loader`'s thread (numba is slow to
import); ``import kernels`` never imports this module. The elementwise
loops take a row range ``[r0, r1)`` so a kernel can split them over threads,
and every function releases the GIL.

Arithmetic is IEEE in the array's dtype (no fast-math), as TensorFlow's
float kernels; batch norm's per-channel sums accumulate in float64, a
little more exact than TF's float32 reductions.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


# beta's kinds: TF special-cases 1 and 0.5; 0.75 is cifar10.py's (and AlexNet's)
POW_ANY, POW_1, POW_HALF, POW_3_4 = 0, 1, 2, 3


def pow_kind(beta: float) -> int:
    """The :func:`neg_pow` kind of an LRN ``beta``."""
    return {1.0: POW_1, 0.5: POW_HALF, 0.75: POW_3_4}.get(float(beta), POW_ANY)


@njit(**_OPTS)
def neg_pow(m, beta, kind, out):   # noqa: ANN001, ANN201
    """out[c] = m[c] ** -beta, by division and square roots (which vectorize)
    for the kinds that allow it; within 2 ulp of the exact power."""
    one = m.dtype.type(1)
    if kind == POW_1:
        for c in range(m.shape[0]):
            out[c] = one / m[c]
    elif kind == POW_HALF:
        for c in range(m.shape[0]):
            out[c] = one / np.sqrt(m[c])
    elif kind == POW_3_4:
        for c in range(m.shape[0]):
            r = one / np.sqrt(m[c])
            out[c] = r * np.sqrt(r)
    else:
        for c in range(m.shape[0]):
            out[c] = m[c] ** -beta


@njit(**_OPTS)
def window_sum(v, radius, s):   # noqa: ANN001, ANN201
    """s[c] = sum(v[c - radius .. c + radius]) (clipped), one shifted add per
    offset so each loop vectorizes."""
    depth = v.shape[0]
    for c in range(depth):
        s[c] = v[c]
    for off in range(1, min(radius, depth - 1) + 1):
        for c in range(depth - off):
            s[c] += v[c + off]
        for c in range(off, depth):
            s[c] += v[c - off]


@njit(**_OPTS)
def lrn(x, radius, bias, alpha, beta, kind, out, r0, r1):   # noqa: ANN001, ANN201
    """out[p, c] = x[p, c] / (bias + alpha * sum(x[p, c-r..c+r]^2)) ** beta."""
    depth = x.shape[1]
    sq = np.empty(depth, x.dtype)
    norm = np.empty(depth, x.dtype)
    f = np.empty(depth, x.dtype)
    for p in range(r0, r1):
        row = x[p]
        for c in range(depth):
            sq[c] = row[c] * row[c]
        window_sum(sq, radius, norm)
        for c in range(depth):
            norm[c] = bias + alpha * norm[c]
        neg_pow(norm, beta, kind, f)
        o = out[p]
        for c in range(depth):
            o[c] = row[c] * f[c]


@njit(**_OPTS)
def lrn_grad(g, x, y, radius, bias, alpha, beta, kind, dx, r0, r1):   # noqa: ANN001, ANN201
    """TensorFlow's LRN gradient: for each j and k in j's window,
    dx[k] += g[j] * ([k == j] norm_j^-beta - 2 alpha beta x[k] y[j] / norm_j),
    with norm_j = bias + alpha * sum over j's window of x^2."""
    depth = x.shape[1]
    sq = np.empty(depth, x.dtype)
    norm = np.empty(depth, x.dtype)
    t = np.empty(depth, x.dtype)
    ts = np.empty(depth, x.dtype)
    f = np.empty(depth, x.dtype)
    coef = alpha * beta
    coef += coef
    for p in range(r0, r1):
        xr = x[p]
        gr = g[p]
        yr = y[p]
        for c in range(depth):
            sq[c] = xr[c] * xr[c]
        window_sum(sq, radius, norm)
        for c in range(depth):
            norm[c] = bias + alpha * norm[c]
            t[c] = gr[c] * yr[c] / norm[c]
        window_sum(t, radius, ts)
        neg_pow(norm, beta, kind, f)
        d = dx[p]
        for c in range(depth):
            d[c] = gr[c] * f[c] - coef * xr[c] * ts[c]


@njit(**_OPTS)
def channel_moments(x, mean, var):   # noqa: ANN001, ANN201
    """mean[c], var[c] (float64): the mean and the biased variance of column c."""
    rows, depth = x.shape
    for c in range(depth):
        mean[c] = 0.0
        var[c] = 0.0
    for r in range(rows):
        row = x[r]
        for c in range(depth):
            mean[c] += row[c]
    for c in range(depth):
        mean[c] /= rows
    for r in range(rows):
        row = x[r]
        for c in range(depth):
            d = row[c] - mean[c]
            var[c] += d * d
    for c in range(depth):
        var[c] /= rows


@njit(**_OPTS)
def normalize(x, mean, mul, offset, out, r0, r1):   # noqa: ANN001, ANN201
    """out[r, c] = (x[r, c] - mean[c]) * mul[c] + offset[c] (all in out's dtype)."""
    depth = x.shape[1]
    for r in range(r0, r1):
        row = x[r]
        o = out[r]
        for c in range(depth):
            o[c] = (row[c] - mean[c]) * mul[c] + offset[c]


@njit(**_OPTS)
def grad_sums(dy, x, mean, sum_dy, sum_dy_xc):   # noqa: ANN001, ANN201
    """sum_dy[c] = sum(dy[:, c]); sum_dy_xc[c] = sum(dy[:, c] * (x[:, c] - mean[c])),
    in float64."""
    rows, depth = x.shape
    for c in range(depth):
        sum_dy[c] = 0.0
        sum_dy_xc[c] = 0.0
    for r in range(rows):
        gr = dy[r]
        xr = x[r]
        for c in range(depth):
            sum_dy[c] += gr[c]
            sum_dy_xc[c] += gr[c] * (xr[c] - mean[c])


@njit(**_OPTS)
def grad_apply(dy, x, mean, a, b, k, dx, r0, r1):   # noqa: ANN001, ANN201
    """dx[r, c] = a[c] * (dy[r, c] - b[c] - (x[r, c] - mean[c]) * k[c])."""
    depth = x.shape[1]
    for r in range(r0, r1):
        gr = dy[r]
        xr = x[r]
        d = dx[r]
        for c in range(depth):
            d[c] = a[c] * (gr[c] - b[c] - (xr[c] - mean[c]) * k[c])


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) every function for ``dtype``."""
    x = np.ones((2, 3), dtype)
    out = np.empty_like(x)
    one = dtype.type(1)
    lrn(x, 1, one, one, one, POW_ANY, out, 0, 2)
    lrn_grad(x, x, x, 1, one, one, one, POW_ANY, out, 0, 2)
    m64 = np.zeros(3)
    v64 = np.zeros(3)
    channel_moments(x, m64, v64)
    v = np.ones(3, dtype)
    normalize(x, v, v, v, out, 0, 2)
    grad_sums(x, x, v, m64, v64)
    grad_apply(x, x, v, v, v, v, out, 0, 2)
