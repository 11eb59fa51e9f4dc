"""Raw numba.cuda kernels: the device code behind :mod:`kernels.cuda.elementwise` and ``nn``.

Every kernel is ``@cuda.jit`` *without* a signature, so nothing compiles (and
no driver is touched) until the first launch: this module imports on a machine
without a GPU, and the same code runs under the CUDA simulator in the tests.
Kernels that differ only in the math they apply are built by small factories
that close over a device function or an accumulator dtype; numba treats those
closure variables as compile-time constants, so each variant compiles to
straight-line code with no dispatch inside the loop.

Every kernel is ``@cuda.jit(cache=True)``: a launch compiles once per
argument types and GPU, and numba keeps the compiled code on disk (beside
this file in ``__pycache__``, else ``NUMBA_CACHE_DIR``), so the next process
loads it instead of compiling again. The simulator runs the Python and
accepts code the real compiler refuses (a shared array whose shape is an
expression), so ``tests/test_kernels_compile.py`` compiles every kernel the
registry launches for real GPUs with NVIDIA's compiler, and fails on a
kernel without ``cache=True``.

Elementwise kernels take flat (1-D, contiguous) views and use grid-stride
loops, so one launch configuration fits every size. Reductions accumulate in
float64 (floats) or int64 (integers) whatever the storage dtype.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numba import cuda

__all__ = [
    "binary_same", "binary_bcast", "binary_rep", "unary", "fill", "cast_copy",
    "cast_bool", "reduce_all", "reduce_axis", "argmax_axis", "softmax_rows",
    "xent_rows", "sparse_xent_rows", "apply_gd", "apply_momentum",
    "apply_adagrad", "apply_adam", "apply_rms_prop", "apply_centered_rms_prop",
]

# a shared array's shape must be a compile-time constant (a module constant
# or literal, never an expression: the simulator accepts one, the real compiler not)
REDUCE_THREADS = 256


# --- elementwise factories ---------------------------------------------------------

def binary_same(fn: Callable) -> Any:
    """``out[i] = fn(a[i], b[i])`` for equal-size flat operands."""
    @cuda.jit(cache=True)
    def kernel(a, b, out):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < out.size:
            out[i] = fn(a[i], b[i])
            i += stride
    return kernel


def binary_bcast(fn: Callable) -> Any:
    """``out[i] = fn(a[i % na], b[i % nb])``: a scalar or a trailing block
    (a row over the last axes) repeats along the flat output."""
    @cuda.jit(cache=True)
    def kernel(a, b, out):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        na = a.size
        nb = b.size
        while i < out.size:
            out[i] = fn(a[i % na], b[i % nb])
            i += stride
    return kernel


def binary_rep(fn: Callable) -> Any:
    """``out[i] = fn(a[(i // da) % na], b[(i // db) % nb])``: each operand a
    block of the output's axes repeated before and after (a column against
    a matrix: ``da`` = the columns)."""
    @cuda.jit(cache=True)
    def kernel(a, da, b, db, out):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        na = a.size
        nb = b.size
        while i < out.size:
            out[i] = fn(a[(i // da) % na], b[(i // db) % nb])
            i += stride
    return kernel


def unary(fn: Callable) -> Any:
    """``out[i] = fn(a[i])``."""
    @cuda.jit(cache=True)
    def kernel(a, out):
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        while i < out.size:
            out[i] = fn(a[i])
            i += stride
    return kernel


@cuda.jit(cache=True)
def fill(out, value):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        out[i] = value
        i += stride


@cuda.jit(cache=True)
def cast_copy(a, out):
    # The store converts to out's dtype (float -> int truncates, like numpy).
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        out[i] = a[i]
        i += stride


@cuda.jit(cache=True)
def cast_bool(a, out):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        out[i] = a[i] != 0
        i += stride


# --- reductions --------------------------------------------------------------------

def reduce_all(acc_dtype: Any) -> Any:
    """Block-level sum: ``dst[block] = scale * sum(src[part of block])``.

    Launched twice: many blocks into partial sums, then one block over those.
    """
    @cuda.jit(cache=True)
    def kernel(src, dst, zero, scale):
        buf = cuda.shared.array(REDUCE_THREADS, acc_dtype)
        tid = cuda.threadIdx.x
        i = cuda.grid(1)
        stride = cuda.gridsize(1)
        acc = zero
        while i < src.size:
            acc += src[i]
            i += stride
        buf[tid] = acc
        cuda.syncthreads()
        width = REDUCE_THREADS // 2
        while width > 0:
            if tid < width:
                buf[tid] += buf[tid + width]
            cuda.syncthreads()
            width //= 2
        if tid == 0:
            dst[cuda.blockIdx.x] = buf[0] * scale
    return kernel


@cuda.jit(cache=True)
def reduce_axis(src, dst, n, inner, zero, scale):
    """src viewed as (outer, n, inner) summed over n into dst (outer*inner)."""
    o = cuda.grid(1)
    stride = cuda.gridsize(1)
    while o < dst.size:
        p = o // inner
        base = p * n * inner + (o - p * inner)
        acc = zero
        for j in range(n):
            acc += src[base + j * inner]
        dst[o] = acc * scale
        o += stride


@cuda.jit(cache=True)
def argmax_axis(src, dst, n, inner):
    """First index of the maximum along n of src viewed as (outer, n, inner)."""
    o = cuda.grid(1)
    stride = cuda.gridsize(1)
    while o < dst.size:
        p = o // inner
        base = p * n * inner + (o - p * inner)
        best = src[base]
        where = 0
        for j in range(1, n):
            v = src[base + j * inner]
            if v > best:
                best = v
                where = j
        dst[o] = where
        o += stride


# --- softmax and losses: one thread per row (rows are short: classes) --------------

@cuda.jit(device=True)
def _row_max_logsum(x, base, c):
    m = x[base]
    for j in range(1, c):
        m = max(m, x[base + j])
    s = 0.0
    for j in range(c):
        s += math.exp(x[base + j] - m)
    return m, math.log(s)


@cuda.jit(cache=True)
def softmax_rows(x, out, c, log):
    r = cuda.grid(1)
    stride = cuda.gridsize(1)
    while r < x.size // c:
        base = r * c
        m, logsum = _row_max_logsum(x, base, c)
        for j in range(c):
            z = x[base + j] - m - logsum
            out[base + j] = z if log else math.exp(z)
        r += stride


@cuda.jit(cache=True)
def xent_rows(x, labels, loss, backprop, c):
    r = cuda.grid(1)
    stride = cuda.gridsize(1)
    while r < loss.size:
        base = r * c
        m, logsum = _row_max_logsum(x, base, c)
        acc = 0.0
        for j in range(c):
            logp = x[base + j] - m - logsum
            acc -= labels[base + j] * logp
            backprop[base + j] = math.exp(logp) - labels[base + j]
        loss[r] = acc
        r += stride


@cuda.jit(cache=True)
def sparse_xent_rows(x, labels, loss, backprop, c):
    # A label outside [0, c) cannot raise on a GPU: its row becomes NaN (as in TF's GPU kernel).
    r = cuda.grid(1)
    stride = cuda.gridsize(1)
    while r < loss.size:
        base = r * c
        label = labels[r]
        if label < 0 or label >= c:
            loss[r] = math.nan
            for j in range(c):
                backprop[base + j] = math.nan
        else:
            m, logsum = _row_max_logsum(x, base, c)
            loss[r] = -(x[base + label] - m - logsum)
            for j in range(c):
                p = math.exp(x[base + j] - m - logsum)
                backprop[base + j] = p - 1.0 if j == label else p
        r += stride


# --- matmul: kernels.cuda.matmul ---------------------------------------------------


# --- fused optimizer updates (TF1 rules), in place on flat var and slots ----------

@cuda.jit(cache=True)
def apply_gd(var, lr, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        var[i] -= lr[0] * grad[i]
        i += stride


@cuda.jit(cache=True)
def apply_momentum(var, accum, lr, grad, momentum, nesterov):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        a = accum[i] * momentum[0] + g
        accum[i] = a
        if nesterov:
            var[i] -= lr[0] * g + lr[0] * momentum[0] * a
        else:
            var[i] -= lr[0] * a
        i += stride


@cuda.jit(cache=True)
def apply_adagrad(var, accum, lr, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        a = accum[i] + g * g
        accum[i] = a
        var[i] -= lr[0] * g / math.sqrt(a)
        i += stride


@cuda.jit(cache=True)
def apply_adam(var, m, v, b1p, b2p, lr, b1, b2, eps, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    lr_t = lr[0] * math.sqrt(1 - b2p[0]) / (1 - b1p[0])
    while i < var.size:
        g = grad[i]
        mi = b1[0] * m[i] + (1 - b1[0]) * g
        vi = b2[0] * v[i] + (1 - b2[0]) * g * g
        m[i] = mi
        v[i] = vi
        var[i] -= lr_t * mi / (math.sqrt(vi) + eps[0])
        i += stride


@cuda.jit(cache=True)
def apply_rms_prop(var, ms, mom, lr, rho, momentum, eps, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        msi = ms[i] + (g * g - ms[i]) * (1 - rho[0])
        ms[i] = msi
        mi = mom[i] * momentum[0] + g * lr[0] / math.sqrt(msi + eps[0])
        mom[i] = mi
        var[i] -= mi
        i += stride


@cuda.jit(cache=True)
def apply_centered_rms_prop(var, mg, ms, mom, lr, rho, momentum, eps, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        msi = ms[i] + (g * g - ms[i]) * (1 - rho[0])
        mgi = mg[i] + (g - mg[i]) * (1 - rho[0])
        ms[i] = msi
        mg[i] = mgi
        mi = mom[i] * momentum[0] + g * lr[0] / math.sqrt((msi - mgi * mgi) + eps[0])
        mom[i] = mi
        var[i] -= mi
        i += stride


def accumulator_dtype(dtype: np.dtype) -> Any:
    """float64 for floats, int64 for integers and bools."""
    return np.float64 if np.dtype(dtype).kind == "f" else np.int64
