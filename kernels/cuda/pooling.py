"""GPU kernels for 2-D pooling: ``MaxPool``, ``AvgPool``, ``MaxPoolGrad``
and ``AvgPoolGrad``, NHWC (NCHW transposed on the device, in and out).

The window rules are the CPU kernels' (:func:`kernels.cpu.pooling.window`,
TF's: SAME pads the smaller half before, an average divides by the count of
the window's cells inside the input), and so are the numbers, bit for bit
where the CPU's numba loops run: the same cells visited in the same order
with the same arithmetic.

- forward: one thread per output cell, its window walked row-major; a NaN
  in a max window wins (as numpy's ``maximum``);
- ``MaxPoolGrad``: each window's arg-max recomputed from ``orig_input``
  with TF's CPU rule (the first cell, replaced only by a strictly greater
  one, so ties and all-NaN windows go to the first cell) into a scratch
  index array, then each *input* cell gathers the gradients of the windows
  whose arg-max it is, in output order: deterministic, no atomics (TF's GPU
  kernel scatters with atomic adds);
- ``AvgPoolGrad``: each input cell gathers ``grad * (1 / count)`` of the
  windows holding it, in output order.

float32 and float64 on the device; float16, a depth window (``MaxPool``
across channels) and empty tensors run the CPU kernel on a host copy, as
does anything the CPU kernel refuses (its ``KernelError`` says why).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from kernels.cpu.pooling import Window, attr_str, window
from kernels.cuda.devices import to_host
from kernels.cuda.launch import (
    as_device,
    covered,
    device_empty,
    flat,
    gpu_kernel,
    host_fallback,
    run_1d,
    typed_kernel,
)
from kernels.cuda.layout import from_nhwc, to_nhwc

__all__ = ["max_pool_fwd", "avg_pool_fwd", "max_pool_arg", "max_pool_grad_gather",
           "avg_pool_grad_gather"]


# --- device code: geo = (H, W, C, OH, OW, KH, KW, SH, SW, PT, PL) ----------------------

@cuda.jit(device=True)
def _decode(i, geo):
    """Output cell i (flat NHWC) -> (n, oh, ow, c)."""
    c = i % geo[2]
    r = i // geo[2]
    ow = r % geo[4]
    r //= geo[4]
    oh = r % geo[3]
    return r // geo[3], oh, ow, c


@cuda.jit(device=True)
def _span(o, stride, pad, k, size):
    """[start, end) of window o's cells inside an input of ``size``."""
    start = o * stride - pad
    return max(start, 0), min(start + k, size)


@cuda.jit(cache=True)
def max_pool_fwd(x, out, geo):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    hgt, wid, depth = geo[0], geo[1], geo[2]
    while i < out.size:
        n, oh, ow, c = _decode(i, geo)
        hs, he = _span(oh, geo[7], geo[9], geo[5], hgt)
        ws, we = _span(ow, geo[8], geo[10], geo[6], wid)
        best = x[((n * hgt + hs) * wid + ws) * depth + c]
        for h in range(hs, he):
            for w in range(ws, we):
                v = x[((n * hgt + h) * wid + w) * depth + c]
                if v > best or v != v:
                    best = v
        out[i] = best
        i += step


def avg_pool_fwd(t: Any) -> Any:
    """The average pool kernel for storage type ``t`` (the sum and the
    division in ``t``, as the CPU loop)."""
    @cuda.jit(cache=True)
    def kernel(x, out, geo):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        hgt, wid, depth = geo[0], geo[1], geo[2]
        while i < out.size:
            n, oh, ow, c = _decode(i, geo)
            hs, he = _span(oh, geo[7], geo[9], geo[5], hgt)
            ws, we = _span(ow, geo[8], geo[10], geo[6], wid)
            acc = t(0)
            for h in range(hs, he):
                for w in range(ws, we):
                    acc += x[((n * hgt + h) * wid + w) * depth + c]
            out[i] = acc / t((he - hs) * (we - ws))
            i += step
    return kernel


@cuda.jit(cache=True)
def max_pool_arg(x, arg, geo):
    """arg[i]: the input cell (h * W + w) of window i's maximum, TF's CPU rule."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    hgt, wid, depth = geo[0], geo[1], geo[2]
    while i < arg.size:
        n, oh, ow, c = _decode(i, geo)
        hs, he = _span(oh, geo[7], geo[9], geo[5], hgt)
        ws, we = _span(ow, geo[8], geo[10], geo[6], wid)
        best = x[((n * hgt + hs) * wid + ws) * depth + c]
        cell = hs * wid + ws
        for h in range(hs, he):
            for w in range(ws, we):
                v = x[((n * hgt + h) * wid + w) * depth + c]
                if v > best:
                    best = v
                    cell = h * wid + w
        arg[i] = cell
        i += step


@cuda.jit(device=True)
def _windows(p, stride, pad, k, out_size):
    """[first, last) of the windows (along one axis) holding input position p."""
    hi = (p + pad) // stride + 1          # windows starting at or before p
    lo = p + pad - k + 1                  # the first window must start after p - k
    lo = 0 if lo <= 0 else (lo + stride - 1) // stride
    return lo, min(hi, out_size)


def max_pool_grad_gather(t: Any) -> Any:
    """dx[n, h, w, c] = the sum, in output order, of g over the windows whose
    arg-max is (h, w); storage type ``t``."""
    @cuda.jit(cache=True)
    def kernel(g, arg, dx, geo):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        hgt, wid, depth, oh_n, ow_n = geo[0], geo[1], geo[2], geo[3], geo[4]
        while i < dx.size:
            c = i % depth
            r = i // depth
            w = r % wid
            r //= wid
            h = r % hgt
            n = r // hgt
            h0, h1 = _windows(h, geo[7], geo[9], geo[5], oh_n)
            w0, w1 = _windows(w, geo[8], geo[10], geo[6], ow_n)
            me = h * wid + w
            acc = t(0)
            for oh in range(h0, h1):
                for ow in range(w0, w1):
                    o = ((n * oh_n + oh) * ow_n + ow) * depth + c
                    if arg[o] == me:
                        acc += g[o]
            dx[i] = acc
            i += step
    return kernel


def avg_pool_grad_gather(t: Any) -> Any:
    """dx[n, h, w, c] = the sum, in output order, of g * (1 / count) over the
    windows holding (h, w), in storage type ``t`` (as the CPU loop)."""
    @cuda.jit(cache=True)
    def kernel(g, dx, geo):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        hgt, wid, depth, oh_n, ow_n = geo[0], geo[1], geo[2], geo[3], geo[4]
        while i < dx.size:
            c = i % depth
            r = i // depth
            w = r % wid
            r //= wid
            h = r % hgt
            n = r // hgt
            h0, h1 = _windows(h, geo[7], geo[9], geo[5], oh_n)
            w0, w1 = _windows(w, geo[8], geo[10], geo[6], ow_n)
            acc = t(0)
            for oh in range(h0, h1):
                hs, he = _span(oh, geo[7], geo[9], geo[5], hgt)
                for ow in range(w0, w1):
                    ws, we = _span(ow, geo[8], geo[10], geo[6], wid)
                    coef = t(1) / t((he - hs) * (we - ws))
                    acc += g[((n * oh_n + oh) * ow_n + ow) * depth + c] * coef
            dx[i] = acc
            i += step
    return kernel


# --- host side ------------------------------------------------------------------------

def _format(attrs: dict, op: str) -> str | None:
    fmt = attr_str(attrs.get("data_format", "NHWC"), "data_format", op)
    return fmt if fmt in ("NHWC", "NCHW") else None


def _geo(shape_nhwc: tuple, win: Window) -> tuple:
    _, h, w, c = shape_nhwc   # Python ints (a tuple argument is keyed by its type alone)
    return tuple(int(v) for v in (h, w, c, win.oh, win.ow, win.kh, win.kw, win.sh, win.sw,
                                  win.pt, win.pl))


def _forward(op: str, kern: Any, inputs: list, attrs: dict, explicit: bool) -> list:
    x = as_device(inputs[0])
    fmt = _format(attrs, op)
    if fmt is None or not covered(x):
        return host_fallback(op, inputs, attrs)
    nchw = fmt == "NCHW"
    shape = tuple(x.shape)
    shape_nhwc = (shape[0], shape[2], shape[3], shape[1]) if nchw else shape
    win = window(op, shape_nhwc, attrs, explicit=explicit, depth_ok=explicit)
    if isinstance(win, int) or win.oh * win.ow == 0:   # a depth window: the CPU kernel
        return host_fallback(op, inputs, attrs)
    xs = to_nhwc(x, nchw)
    out = device_empty((shape_nhwc[0], win.oh, win.ow, shape_nhwc[3]), x.dtype)
    if kern is avg_pool_fwd:
        kern = typed_kernel(avg_pool_fwd, x.dtype)
    run_1d(kern, out.size, flat(xs), flat(out), _geo(shape_nhwc, win))
    return [from_nhwc(out, nchw)]


@gpu_kernel("MaxPool")
def max_pool(inputs: list, attrs: dict) -> list:
    return _forward("MaxPool", max_pool_fwd, inputs, attrs, explicit=True)


@gpu_kernel("AvgPool")
def avg_pool(inputs: list, attrs: dict) -> list:
    return _forward("AvgPool", avg_pool_fwd, inputs, attrs, explicit=False)


@gpu_kernel("MaxPoolGrad")
def max_pool_grad(inputs: list, attrs: dict) -> list:
    op = "MaxPoolGrad"
    x, y, g = (as_device(v) for v in inputs[:3])
    fmt = _format(attrs, op)
    if fmt is None or not covered(x, y, g):
        return host_fallback(op, inputs, attrs)
    nchw = fmt == "NCHW"
    s = tuple(x.shape)
    shape_nhwc = (s[0], s[2], s[3], s[1]) if nchw else s
    win = window(op, shape_nhwc, attrs, explicit=True)
    want = (shape_nhwc[0], win.oh, win.ow, shape_nhwc[3])
    gs, ys = tuple(g.shape), tuple(y.shape)
    if nchw:
        gs, ys = (gs[0], gs[2], gs[3], gs[1]), (ys[0], ys[2], ys[3], ys[1])
    if gs != want or ys != want:
        return host_fallback(op, inputs, attrs)   # the CPU kernel says what is wrong
    xs, gn = to_nhwc(x, nchw), to_nhwc(g, nchw)
    geo = _geo(shape_nhwc, win)
    arg = device_empty(want, np.int64)
    run_1d(max_pool_arg, arg.size, flat(xs), flat(arg), geo)
    dx = device_empty(shape_nhwc, x.dtype)
    run_1d(typed_kernel(max_pool_grad_gather, x.dtype), dx.size, flat(gn), flat(arg), flat(dx), geo)
    return [from_nhwc(dx, nchw)]


@gpu_kernel("AvgPoolGrad")
def avg_pool_grad(inputs: list, attrs: dict) -> list:
    op = "AvgPoolGrad"
    g = as_device(inputs[1])
    fmt = _format(attrs, op)
    shape = np.asarray(to_host(inputs[0]))
    if (fmt is None or not covered(g) or shape.shape != (4,) or shape.dtype.kind not in "iu"
            or (shape <= 0).any()):
        return host_fallback(op, [shape, inputs[1]], attrs)
    nchw = fmt == "NCHW"
    dims = [int(d) for d in shape]
    shape_nhwc = (dims[0], dims[2], dims[3], dims[1]) if nchw else tuple(dims)
    win = window(op, shape_nhwc, attrs)
    want = (shape_nhwc[0], win.oh, win.ow, shape_nhwc[3])
    gs = tuple(g.shape)
    if ((gs[0], gs[2], gs[3], gs[1]) if nchw else gs) != want:
        return host_fallback(op, [shape, inputs[1]], attrs)
    gn = to_nhwc(g, nchw)
    dx = device_empty(shape_nhwc, g.dtype)
    run_1d(typed_kernel(avg_pool_grad_gather, g.dtype), dx.size, flat(gn), flat(dx), _geo(shape_nhwc, win))
    return [from_nhwc(dx, nchw)]
