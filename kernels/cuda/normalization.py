"""GPU kernels for ``LRN``, ``LRNGrad``, ``FusedBatchNormV3`` and
``FusedBatchNormGradV3`` (training and inference), with the CPU kernels'
formulas (:mod:`kernels.cpu.normalization`, TF's) and order of operations.

- LRN: one thread per element; the window's sum of squares in the CPU
  loop's order (the centre, then +1 and -1, +2 and -2, ...) and the power by
  the same special cases (beta 1, 0.5, 0.75: divisions and square roots).
  ``LRNGrad`` in two passes: each element's ``norm`` and ``g * y / norm``
  into scratch, then each element's window sum of the latter.
- Batch norm on a (rows, channels) view of NHWC: the per-channel sums in
  float64 (as the CPU kernel), each block summing a chunk of rows for 32
  channels (coalesced along the channels), the chunks' partials added in a
  fixed order by a second kernel (deterministic, no atomics); the mean
  first, then the squared deviations from it (two passes, as the CPU);
  a per-channel kernel derives the statistics and the output vectors in
  the scale's float type, and an elementwise kernel applies them.

float32 and float64 on the device (batch norm: x of the scale's type);
float16 (whose statistics are float32), 5-D batch norm and empty tensors
run the CPU kernel on a host copy, as does anything the CPU kernel refuses.
NCHW batch norm is transposed on the device.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, float64

from kernels.cpu.pooling import attr_str
from kernels.cuda.launch import (
    FLOAT_DTYPES,
    SIM,
    as_device,
    device_empty,
    device_filled,
    flat,
    gpu_kernel,
    host_fallback,
    launch,
    run_1d,
    typed_kernel,
)
from kernels.cuda.layout import from_nhwc, to_nhwc

__all__ = ["pow_kind", "lrn_kernel", "lrn_grad_pass1", "lrn_grad_pass2", "column_partials",
           "sum_chunks", "bn_stats", "bn_grad_stats", "bn_apply", "bn_grad_apply"]

POW_ANY, POW_1, POW_HALF, POW_3_4 = 0, 1, 2, 3
BN_TX = 32      # channels a column-sum block covers
BN_TY = 8       # rows it walks at once
MAX_CHUNKS = 2 if SIM else 512


def pow_kind(beta: float) -> int:
    return {1.0: POW_1, 0.5: POW_HALF, 0.75: POW_3_4}.get(float(beta), POW_ANY)


# --- LRN --------------------------------------------------------------------------------

@cuda.jit(device=True)
def _window_sum_sq(x, row, c, depth, radius):
    v = x[row + c]
    s = v * v
    for off in range(1, min(radius, depth - 1) + 1):
        if c + off < depth:
            v = x[row + c + off]
            s += v * v
        if c - off >= 0:
            v = x[row + c - off]
            s += v * v
    return s


@cuda.jit(device=True)
def _neg_pow(m, beta, kind, one):
    if kind == POW_1:
        return one / m
    if kind == POW_HALF:
        return one / math.sqrt(m)
    if kind == POW_3_4:
        r = one / math.sqrt(m)
        return r * math.sqrt(r)
    return m ** -beta


@cuda.jit(cache=True)
def lrn_kernel(x, out, depth, radius, bias, alpha, beta, kind, one):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < out.size:
        c = i % depth
        norm = bias + alpha * _window_sum_sq(x, i - c, c, depth, radius)
        out[i] = x[i] * _neg_pow(norm, beta, kind, one)
        i += step


@cuda.jit(cache=True)
def lrn_grad_pass1(g, x, y, norm, t, depth, radius, bias, alpha):
    """norm = bias + alpha * window sum of x^2; t = g * y / norm."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < norm.size:
        c = i % depth
        nv = bias + alpha * _window_sum_sq(x, i - c, c, depth, radius)
        norm[i] = nv
        t[i] = g[i] * y[i] / nv
        i += step


@cuda.jit(cache=True)
def lrn_grad_pass2(g, x, norm, t, dx, depth, radius, coef, beta, kind, one):
    """dx = g * norm^-beta - 2 alpha beta x * (window sum of t)."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < dx.size:
        c = i % depth
        row = i - c
        ts = t[i]
        for off in range(1, min(radius, depth - 1) + 1):
            if c + off < depth:
                ts += t[row + c + off]
            if c - off >= 0:
                ts += t[row + c - off]
        dx[i] = g[i] * _neg_pow(norm[i], beta, kind, one) - coef * x[i] * ts
        i += step


def _lrn_attrs(attrs: dict) -> tuple[int, float, float, float] | None:
    radius = attrs.get("depth_radius", 5)
    if isinstance(radius, bool) or int(radius) != radius or not 0 <= int(radius) < 1 << 31:
        return None
    return (int(radius), float(attrs.get("bias", 1.0)), float(attrs.get("alpha", 1.0)),
            float(attrs.get("beta", 0.5)))


def _covered(*arrays: Any, ndim: int = 4) -> bool:
    dt = np.dtype(arrays[0].dtype)
    return (dt in FLOAT_DTYPES and all(x.ndim == ndim and x.size > 0 for x in arrays)
            and all(np.dtype(x.dtype) == dt and tuple(x.shape) == tuple(arrays[0].shape)
                    for x in arrays))


@gpu_kernel("LRN")
def lrn(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    params = _lrn_attrs(attrs)
    if params is None or not _covered(x):
        return host_fallback("LRN", inputs, attrs)
    radius, bias, alpha, beta = params
    t = np.dtype(x.dtype).type
    out = device_empty(x.shape, x.dtype)
    run_1d(lrn_kernel, x.size, flat(x), flat(out), tuple(x.shape)[-1], radius, t(bias), t(alpha),
         t(beta), pow_kind(beta), t(1))
    return [out]


@gpu_kernel("LRNGrad")
def lrn_grad(inputs: list, attrs: dict) -> list:
    g, x, y = (as_device(v) for v in inputs[:3])
    params = _lrn_attrs(attrs)
    if params is None or not _covered(g, x, y):
        return host_fallback("LRNGrad", inputs, attrs)
    radius, bias, alpha, beta = params
    t = np.dtype(x.dtype).type
    depth = tuple(x.shape)[-1]
    norm, tmp, dx = (device_empty(x.shape, x.dtype) for _ in range(3))
    run_1d(lrn_grad_pass1, x.size, flat(g), flat(x), flat(y), flat(norm), flat(tmp), depth,
         radius, t(bias), t(alpha))
    coef = t(alpha) * t(beta)
    coef += coef
    run_1d(lrn_grad_pass2, x.size, flat(g), flat(x), flat(norm), flat(tmp), flat(dx), depth,
         radius, coef, t(beta), pow_kind(beta), t(1))
    return [dx]


# --- batch norm: per-channel sums ------------------------------------------------------------

SUM_X, SUM_SQ_DEV, SUM_GRAD = 0, 1, 2


@cuda.jit(cache=True)
def column_partials(a, b, mean, kind, cols, chunk, p1, p2):
    """Over rows [chunk * blockIdx.y, + chunk) of (rows, cols) matrices ``a``
    (and ``b``), per column c: kind SUM_X: p1 = sum a; SUM_SQ_DEV: p1 = sum
    (a - mean)^2; SUM_GRAD (a = x, b = dy): p1 = sum b, p2 = sum b * (a - mean);
    float64; into row blockIdx.y of p1 / p2. Block (BN_TX, BN_TY)."""
    s1 = cuda.shared.array((BN_TY, BN_TX), float64)
    s2 = cuda.shared.array((BN_TY, BN_TX), float64)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    c = cuda.blockIdx.x * BN_TX + tx
    rows = a.size // cols
    r = cuda.blockIdx.y * chunk + ty
    r_end = min(cuda.blockIdx.y * chunk + chunk, rows)
    t1 = 0.0
    t2 = 0.0
    if c < cols:
        m = float64(mean[c])
        while r < r_end:
            v = float64(a[r * cols + c])
            if kind == SUM_X:
                t1 += v
            elif kind == SUM_SQ_DEV:
                d = v - m
                t1 += d * d
            else:
                gv = float64(b[r * cols + c])
                t1 += gv
                t2 += gv * (v - m)
            r += BN_TY
    s1[ty, tx] = t1
    s2[ty, tx] = t2
    cuda.syncthreads()
    if ty == 0 and c < cols:
        t1 = 0.0
        t2 = 0.0
        for j in range(BN_TY):
            t1 += s1[j, tx]
            t2 += s2[j, tx]
        p1[cuda.blockIdx.y * cols + c] = t1
        p2[cuda.blockIdx.y * cols + c] = t2


@cuda.jit(cache=True)
def sum_chunks(p, chunks, divisor, out):
    """out[c] = (sum over chunks z, in order, of p[z * cols + c]) / divisor."""
    c = cuda.grid(1)
    step = cuda.gridsize(1)
    cols = out.size
    while c < cols:
        s = 0.0
        for z in range(chunks):
            s += p[z * cols + c]
        out[c] = s / divisor
        c += step


def _column_sums(kind: int, a2: Any, b2: Any, mean: Any, rows: int, cols: int,
                 divisor: float, two: bool = False) -> tuple[Any, Any]:
    """Per-column float64 sums (divided by ``divisor``) of ``kind`` over the rows."""
    chunks = max(1, min(math.ceil(rows / (BN_TY * 32)), MAX_CHUNKS))
    chunk = math.ceil(rows / chunks)
    chunks = math.ceil(rows / chunk)
    p1 = device_empty((chunks * cols,), np.float64)
    p2 = device_empty((chunks * cols,), np.float64)
    launch(column_partials, (math.ceil(cols / BN_TX), chunks), (BN_TX, BN_TY), a2, b2, mean,
           kind, cols, chunk, p1, p2)
    outs = []
    for p in ((p1, p2) if two else (p1,)):
        out = device_empty((cols,), np.float64)
        run_1d(sum_chunks, cols, p, chunks, np.float64(divisor), out)
        outs.append(out)
    return outs[0], (outs[1] if two else None)


# --- batch norm: per-channel vectors and the elementwise passes -------------------------

def bn_stats(t: Any) -> Any:
    """Per channel, in the scale's type ``t``: the normalizing mean and
    variance (the batch's, rounded to ``t``, in training; the inputs' in
    inference), ``mul = (1 / sqrt(var + eps)) * scale``, and the op's
    statistics outputs (TF's running averages when ``blend``)."""
    @cuda.jit(cache=True)
    def kernel(mean64, var64, scale, mean_in, var_in, eps, factor, adjust, training, blend,
               mul, batch_mean, batch_var, rs1, rs2):
        c = cuda.grid(1)
        step = cuda.gridsize(1)
        while c < mul.size:
            if training:
                m = t(mean64[c])
                v = t(var64[c])
            else:
                m = mean_in[c]
                v = var_in[c]
            mul[c] = (t(1) / math.sqrt(v + eps)) * scale[c]
            rs1[c] = m
            rs2[c] = v
            if not training:
                batch_mean[c] = m
                batch_var[c] = v
            elif not blend:
                batch_mean[c] = m
                batch_var[c] = v * adjust
            else:
                keep = t(1) - factor
                batch_mean[c] = keep * mean_in[c] + factor * m
                batch_var[c] = keep * var_in[c] + (factor * adjust) * v
            c += step
    return kernel


def bn_grad_stats(t: Any) -> Any:
    """Per channel, in ``t``: scale_backprop, offset_backprop and the
    coefficients a, b, k of ``dx = a * (dy - b - (x - mean) * k)`` (b = k =
    0 in inference), from the float64 sums."""
    @cuda.jit(cache=True)
    def kernel(sum_dy, sum_dy_xc, scale, var, eps, rows, training, scale_bp, offset_bp,
               a, b, k):
        c = cuda.grid(1)
        step = cuda.gridsize(1)
        while c < a.size:
            coef0 = t(1) / math.sqrt(var[c] + eps)
            scale_bp[c] = t(sum_dy_xc[c]) * coef0
            offset_bp[c] = t(sum_dy[c])
            a[c] = scale[c] * coef0
            if training:
                b[c] = t(sum_dy[c] / rows)
                k[c] = coef0 * coef0 * t(sum_dy_xc[c] / rows)
            else:
                b[c] = 0
                k[c] = 0
            c += step
    return kernel


@cuda.jit(cache=True)
def bn_apply(x, mean, mul, offset, y, cols):
    """y = (x - mean[c]) * mul[c] + offset[c]."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < y.size:
        c = i % cols
        y[i] = (x[i] - mean[c]) * mul[c] + offset[c]
        i += step


@cuda.jit(cache=True)
def bn_grad_apply(dy, x, mean, a, b, k, dx, cols):
    """dx = a[c] * (dy - b[c] - (x - mean[c]) * k[c])."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < dx.size:
        c = i % cols
        dx[i] = a[c] * (dy[i] - b[c] - (x[i] - mean[c]) * k[c])
        i += step


def _layout(attrs: dict, op: str, x: Any) -> bool | None:
    """True for NCHW, False for NHWC, None for what the device code leaves to
    the CPU kernel (5-D, another format, an x of the wrong rank)."""
    fmt = attr_str(attrs.get("data_format", "NHWC"), "data_format", op)
    if fmt not in ("NHWC", "NCHW") or x.ndim != 4:
        return None
    return fmt == "NCHW"


def _vector(v: Any, u: np.dtype, depth: int | None) -> Any:
    """``v`` as a device vector of type ``u`` (and ``depth`` long), or None."""
    v = as_device(v)
    if v.ndim != 1 or np.dtype(v.dtype) != u or (depth is not None and v.shape[0] != depth):
        return None
    return v


@gpu_kernel("FusedBatchNormV3")
def fused_batch_norm(inputs: list, attrs: dict) -> list:
    op = "FusedBatchNormV3"
    x = as_device(inputs[0])
    nchw = _layout(attrs, op, x)
    if nchw is None or not _covered(x):
        return host_fallback(op, inputs, attrs)
    u = np.dtype(x.dtype)
    depth = tuple(x.shape)[1 if nchw else 3]
    training = bool(attrs.get("is_training", True))
    factor = float(attrs.get("exponential_avg_factor", 1.0))
    blend = training and factor != 1.0
    need = None if training and not blend else depth
    vecs = [_vector(inputs[1], u, depth), _vector(inputs[2], u, depth),
            _vector(inputs[3], u, need), _vector(inputs[4], u, need)]
    if any(v is None for v in vecs):
        return host_fallback(op, inputs, attrs)
    scale, offset, mean_in, var_in = vecs
    xs = to_nhwc(x, nchw)
    rows = x.size // depth
    t = u.type
    if training:
        mean64, _ = _column_sums(SUM_X, flat(xs), flat(xs), scale, rows, depth, rows)
        var64, _ = _column_sums(SUM_SQ_DEV, flat(xs), flat(xs), mean64, rows, depth, rows)
    else:
        mean64 = var64 = mean_in
    if not blend and training:
        mean_in = var_in = scale   # (unread)
    mul, batch_mean, batch_var, rs1, rs2 = (device_empty((depth,), u) for _ in range(5))
    adjust = t(rows) / t(rows - 1 if rows > 1 else 1)
    run_1d(typed_kernel(bn_stats, u), depth, mean64, var64, scale, mean_in, var_in,
         t(float(attrs.get("epsilon", 1e-4))), t(factor), adjust, training, blend,
         mul, batch_mean, batch_var, rs1, rs2)
    y = device_empty(tuple(xs.shape), u)
    run_1d(bn_apply, y.size, flat(xs), rs1, mul, offset, flat(y), depth)
    return [from_nhwc(y, nchw), batch_mean, batch_var, rs1, rs2, device_filled((), u, 0)]


@gpu_kernel("FusedBatchNormGradV3")
def fused_batch_norm_grad(inputs: list, attrs: dict) -> list:
    op = "FusedBatchNormGradV3"
    dy, x = as_device(inputs[0]), as_device(inputs[1])
    nchw = _layout(attrs, op, x)
    if nchw is None or not _covered(dy, x):
        return host_fallback(op, inputs, attrs)
    u = np.dtype(x.dtype)
    depth = tuple(x.shape)[1 if nchw else 3]
    vecs = [_vector(v, u, depth) for v in inputs[2:5]]
    if any(v is None for v in vecs):
        return host_fallback(op, inputs, attrs)
    scale, mean, var = vecs
    t = u.type
    xs, dys = to_nhwc(x, nchw), to_nhwc(dy, nchw)
    rows = x.size // depth
    sum_dy, sum_dy_xc = _column_sums(SUM_GRAD, flat(xs), flat(dys), mean, rows, depth, 1.0,
                                     two=True)
    scale_bp, offset_bp, a, b, k = (device_empty((depth,), u) for _ in range(5))
    run_1d(typed_kernel(bn_grad_stats, u), depth, sum_dy, sum_dy_xc, scale, var,
         t(float(attrs.get("epsilon", 1e-4))), np.float64(rows), bool(attrs.get("is_training", True)),
         scale_bp, offset_bp, a, b, k)
    dx = device_empty(tuple(xs.shape), u)
    run_1d(bn_grad_apply, dx.size, flat(dys), flat(xs), mean, a, b, k, flat(dx), depth)
    return [from_nhwc(dx, nchw), scale_bp, offset_bp, device_empty((0,), u),
            device_empty((0,), u)]
