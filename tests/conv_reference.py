"""Plain numpy references for the convolution and normalization tests: direct
loops over output positions and filter taps, written to be obviously right
rather than fast (tests/test_conv_ops.py, tests/test_norm_ops.py check them
against TF's own op tests' hard-coded numbers first), and the session and
finite-difference helpers those tests share."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import distrib as dt

RNG = np.random.default_rng(38)
EPS = 1e-6


# -- references (NHWC) ---------------------------------------------------------------------------
def same_pads(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TF's SAME padding of one dimension: (before, after), the smaller half before."""
    eff = (k - 1) * dilation + 1
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + eff - size)
    return total // 2, total - total // 2


def conv2d(x: np.ndarray, w: np.ndarray, strides=(1, 1), pads=((0, 0), (0, 0)),
           dilations=(1, 1)) -> np.ndarray:
    """out[n, i, j, o] = sum over taps (a, b) and channels c of
    x_padded[n, i*sh + a*dh, j*sw + b*dw, c] * w[a, b, c, o]."""
    xp = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)))
    (sh, sw), (dh, dw) = strides, dilations
    kh, kw, _, co = w.shape
    oh = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((x.shape[0], oh, ow, co), np.float64)
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    out[:, i, j, :] += xp[:, i * sh + a * dh, j * sw + b * dw, :] @ w[a, b]
    return out


def depthwise(x: np.ndarray, w: np.ndarray, strides=(1, 1), pads=((0, 0), (0, 0)),
              dilations=(1, 1)) -> np.ndarray:
    """out[n, i, j, c * m + q] = sum over taps of x_padded[..., c] * w[a, b, c, q]."""
    c, m = w.shape[2], w.shape[3]
    per_channel = [conv2d(x[..., k:k + 1], w[:, :, k:k + 1, :], strides, pads, dilations)
                   for k in range(c)]
    return np.concatenate(per_channel, axis=3).reshape(*per_channel[0].shape[:3], c * m)


def pool(x: np.ndarray, k: tuple[int, int], strides: tuple[int, int],
         pads: tuple, kind: str) -> np.ndarray:
    """Max or mean of each window's elements inside the input (pads never count)."""
    n, h, w, c = x.shape
    oh = (h + sum(pads[0]) - k[0]) // strides[0] + 1
    ow = (w + sum(pads[1]) - k[1]) // strides[1] + 1
    out = np.zeros((n, oh, ow, c), np.float64)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * strides[0] - pads[0][0], j * strides[1] - pads[1][0]
            win = x[:, max(r0, 0):min(r0 + k[0], h), max(c0, 0):min(c0 + k[1], w), :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


def lrn(x: np.ndarray, radius: int, bias: float, alpha: float, beta: float) -> np.ndarray:
    out = np.zeros(x.shape, np.float64)
    depth = x.shape[-1]
    for d in range(depth):
        lo, hi = max(0, d - radius), min(depth, d + radius + 1)
        sqr = (x[..., lo:hi].astype(np.float64) ** 2).sum(axis=-1)
        out[..., d] = x[..., d] / (bias + alpha * sqr) ** beta
    return out


def batch_norm_train(x: np.ndarray, scale, offset, eps: float):
    """y by the batch's mean and biased variance; the variance returned unbiased."""
    mean = x.mean(axis=(0, 1, 2))
    var = x.var(axis=(0, 1, 2))
    n = x.size // x.shape[-1]
    y = (x - mean) / np.sqrt(var + eps) * scale + offset
    return y, mean, var * n / max(n - 1, 1)


def nchw(x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0, 3, 1, 2))


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.transpose(x, (0, 2, 3, 1))


def counting(shape: list[int], dtype: Any = np.float64) -> np.ndarray:
    """1, 2, 3 ... in ``shape`` (TF's op tests' ``_CreateNumpyTensor``)."""
    return np.arange(1, int(np.prod(shape)) + 1, dtype=dtype).reshape(shape)


# -- running graphs ----------------------------------------------------------------------------
def run(server: Any, graph: dt.Graph, fetches: Any, feed: dict | None = None) -> Any:
    """``fetches`` of ``graph`` through a dt.Session on ``server``."""
    sess = dt.SyncSession(server.target, graph=graph)
    try:
        return sess.run(fetches, feed or {})
    finally:
        sess.close()


def check_gradient(server: Any, build: Callable[..., Any], values: list[np.ndarray],
                   rtol: float = 1e-5, atol: float = 1e-6, check: tuple[int, ...] | None = None
                   ) -> None:
    """``dt.gradients`` of ``sum(build(*xs) * W)`` (W random, per output) against
    central differences in float64, for each input (or those in ``check``)."""
    g = dt.Graph()
    with g.as_default():
        xs = [dt.placeholder(dt.float64, list(v.shape)) for v in values]
        outs = build(*xs)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        terms = [dt.reduce_sum(o * RNG.standard_normal(o.shape.as_list())) for o in outs]
        loss = dt.add_n(terms)
        grads = dt.gradients(loss, xs)
    sess = dt.SyncSession(server.target, graph=g)
    try:
        feed = dict(zip(xs, values))
        wanted = range(len(values)) if check is None else check
        analytic = sess.run([grads[i] for i in wanted], feed)
        for i, got in zip(wanted, analytic):
            numeric = np.zeros(values[i].shape)
            for j in np.ndindex(values[i].shape):
                plus, minus = values[i].copy(), values[i].copy()
                plus[j] += EPS
                minus[j] -= EPS
                numeric[j] = (sess.run(loss, {**feed, xs[i]: plus})
                              - sess.run(loss, {**feed, xs[i]: minus})) / (2 * EPS)
            np.testing.assert_allclose(got, numeric, rtol=rtol, atol=atol,
                                       err_msg=f"input {i} of {outs[0].op.type}")
    finally:
        sess.close()
