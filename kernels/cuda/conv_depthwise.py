"""GPU kernels of TF's depthwise 2-D convolution: ``DepthwiseConv2dNative``,
``DepthwiseConv2dNativeBackpropInput`` and
``DepthwiseConv2dNativeBackpropFilter``, NHWC (NCHW transposed on the
device, in and out, :mod:`kernels.cuda.layout`).

A depthwise filter ``(KH, KW, C, M)`` convolves input channel ``c`` with its
own ``M`` filters into output channels ``c * M + j``: no reduction over
channels, so no GEMM (the CPU kernel, :mod:`kernels.cpu.conv_depthwise`,
walks the taps the same way). The attrs, their checks and the output-size
rules are the CPU kernels' (:mod:`kernels.cpu.conv_geometry`, TF's):
``strides``, ``padding`` SAME/VALID/EXPLICIT with ``explicit_paddings``,
``dilations``, ``data_format``.

- forward: one thread per output element ``(n, oh, ow, c*M + j)``, the taps
  walked row-major (the CPU kernel's order); consecutive threads read
  consecutive filter columns;
- input gradient: one thread per input element ``(n, ih, iw, c)``, a gather
  over the taps whose window holds it (``oh = (ih + pad_top - a*dh) / sh``
  exact and in range) and the ``M`` filters of channel ``c``: no atomics;
- filter gradient: each filter element ``(a, b, c, j)`` the sum over the
  batch and the output positions of ``x * dy``. A block is 32 consecutive
  filter elements (the filter's own memory order: coalesced ``dy`` reads)
  by 8 rows of threads walking the positions, the rows' partial sums
  added by a tree reduction in a constant-size shared array. When there
  are few filter elements, the positions are also split over the grid's y
  (each split writes its partial filter, and
  :func:`kernels.cuda.conv_gemm.sum_splits` adds them in order):
  deterministic, no atomics.

float32 and float64 run on the device; what the device code does not cover
runs the CPU kernel on a host copy (``host_fallback``): float16, empty
tensors, and any operand the CPU kernel would refuse, whose ``KernelError``
then says what is wrong. ``input_sizes`` and ``filter_sizes`` are read on
the host, as TF's GPU kernels read them from host memory.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from kernels.cpu.conv_geometry import ConvGeometry, conv_attrs, geometry, nhwc_shape, sizes_vector
from kernels.cuda.conv_gemm import sum_splits
from kernels.cuda.devices import to_host
from kernels.cuda.launch import (
    SIM,
    as_device,
    covered,
    device_empty,
    flat,
    gpu_kernel,
    host_fallback,
    launch,
    run_1d,
    typed_kernel,
)
from kernels.cuda.layout import from_nhwc, to_nhwc

__all__ = ["DW_X", "DW_Y", "depthwise_forward", "depthwise_input_grad", "depthwise_filter_grad",
           "filter_grad", "plan_filter_splits", "depthwise_conv2d", "depthwise_conv2d_backprop_input",
           "depthwise_conv2d_backprop_filter"]

# the filter gradient's block: DW_X filter elements x DW_Y rows of positions; the
# shared array's shape (the real compiler needs constants, DW_Y a power of two)
DW_X = 32
DW_Y = 8
# split the positions over the grid until about this many blocks (two waves on a
# 132-SM GPU), each split at least MIN_POSITIONS positions (the simulator: tiny, so
# its small cases split too)
TARGET_BLOCKS = 4 if SIM else 264
MIN_POSITIONS = 16 if SIM else 2048


# --- device code: geo = (N, H, W, C, M, KH, KW, OH, OW, sh, sw, dh, dw, pad_top, pad_left)

def depthwise_forward(t: Any) -> Any:
    """The forward kernel for storage type ``t`` (sums in ``t``, as the CPU's)."""
    @cuda.jit(cache=True)
    def kernel(x, w, out, geo):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        _, hgt, wid, chans, mult, kh, kw, oh_n, ow_n, sh, sw, dh, dw, pt, pl = geo
        cm_n = chans * mult
        while i < out.size:
            cm = i % cm_n
            r = i // cm_n
            ow = r % ow_n
            r //= ow_n
            oh = r % oh_n
            n = r // oh_n
            c = cm // mult
            h0 = oh * sh - pt
            w0 = ow * sw - pl
            acc = t(0)
            for a in range(kh):
                h = h0 + a * dh
                if h >= 0 and h < hgt:
                    row = (n * hgt + h) * wid
                    for b in range(kw):
                        ww = w0 + b * dw
                        if ww >= 0 and ww < wid:
                            acc += x[(row + ww) * chans + c] * w[(a * kw + b) * cm_n + cm]
            out[i] = acc
            i += step
    return kernel


def depthwise_input_grad(t: Any) -> Any:
    """The input-gradient kernel for storage type ``t``: each input element
    gathers, tap by tap, the sum over its channel's ``M`` filters."""
    @cuda.jit(cache=True)
    def kernel(dy, w, dx, geo):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        _, hgt, wid, chans, mult, kh, kw, oh_n, ow_n, sh, sw, dh, dw, pt, pl = geo
        cm_n = chans * mult
        while i < dx.size:
            c = i % chans
            r = i // chans
            iw = r % wid
            r //= wid
            ih = r % hgt
            n = r // hgt
            acc = t(0)
            for a in range(kh):
                hh = ih + pt - a * dh
                if hh >= 0:
                    oh = hh // sh
                    if oh * sh == hh and oh < oh_n:
                        for b in range(kw):
                            ww = iw + pl - b * dw
                            if ww >= 0:
                                ow = ww // sw
                                if ow * sw == ww and ow < ow_n:
                                    src = ((n * oh_n + oh) * ow_n + ow) * cm_n + c * mult
                                    tap = (a * kw + b) * cm_n + c * mult
                                    part = t(0)
                                    for j in range(mult):
                                        part += dy[src + j] * w[tap + j]
                                    acc += part
            dx[i] = acc
            i += step
    return kernel


def depthwise_filter_grad(t: Any) -> Any:
    """The filter-gradient kernel for storage type ``t``.

    ``kernel(x, dy, out, geo, chunk)``: block (DW_X, DW_Y), grid
    (ceil(F / DW_X), splits), F = KH * KW * C * M; split ``z`` sums the
    positions ``[z * chunk, (z + 1) * chunk)`` of the N * OH * OW and writes
    ``out[z * F:]``."""
    @cuda.jit(cache=True)
    def kernel(x, dy, out, geo, chunk):
        red = cuda.shared.array((DW_Y, DW_X), t)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        n_img, hgt, wid, chans, mult, kh, kw, oh_n, ow_n, sh, sw, dh, dw, pt, pl = geo
        cm_n = chans * mult
        f_total = kh * kw * cm_n
        positions = n_img * oh_n * ow_n
        f = cuda.blockIdx.x * DW_X + tx
        p0 = cuda.blockIdx.y * chunk
        p1 = min(p0 + chunk, positions)
        acc = t(0)
        if f < f_total:
            tap = f // cm_n
            cm = f - tap * cm_n
            c = cm // mult
            a = tap // kw
            hoff = a * dh - pt
            woff = (tap - a * kw) * dw - pl
            p = p0 + ty
            # (n, oh, ow) of p, decoded once and stepped by DW_Y: no division in the loop
            n = p // (oh_n * ow_n)
            rem = p - n * (oh_n * ow_n)
            oh = rem // ow_n
            ow = rem - oh * ow_n
            while p < p1:
                h = oh * sh + hoff
                ww = ow * sw + woff
                if h >= 0 and h < hgt and ww >= 0 and ww < wid:
                    acc += x[((n * hgt + h) * wid + ww) * chans + c] * dy[p * cm_n + cm]
                p += DW_Y
                ow += DW_Y
                while ow >= ow_n:
                    ow -= ow_n
                    oh += 1
                    if oh == oh_n:
                        oh = 0
                        n += 1
        red[ty, tx] = acc
        cuda.syncthreads()
        half = DW_Y // 2
        while half > 0:   # the rows' sums added pairwise, in a fixed order
            if ty < half:
                red[ty, tx] += red[ty + half, tx]
            cuda.syncthreads()
            half //= 2
        if ty == 0 and f < f_total:
            out[cuda.blockIdx.y * f_total + f] = red[0, tx]
    return kernel


# --- host side ------------------------------------------------------------------------

def _geo(g: ConvGeometry, mult: int) -> tuple:
    # Python ints, always: the launch fast path keys a tuple argument by its type alone
    return tuple(int(v) for v in (g.batch, g.in_h, g.in_w, g.in_c, mult, g.k_h, g.k_w, g.out_h,
                                  g.out_w, g.stride[0], g.stride[1], g.dilation[0],
                                  g.dilation[1], g.pads[0], g.pads[2]))


def plan_filter_splits(filters: int, positions: int, splits: int | None = None) -> tuple[int, int]:
    """(splits, chunk) of the filter gradient's positions: split when the
    filter has too few elements to fill the GPU (or ``splits`` as asked)."""
    blocks = math.ceil(filters / DW_X)
    if splits is None:
        splits = 1
        if blocks < TARGET_BLOCKS and positions >= 2 * MIN_POSITIONS:
            splits = min(math.ceil(TARGET_BLOCKS / blocks), positions // MIN_POSITIONS)
    splits = max(1, min(int(splits), positions))
    chunk = math.ceil(positions / splits)
    return math.ceil(positions / chunk), chunk


def _sizes(op: str, name: str, x: Any) -> list[int]:
    return sizes_vector(op, name, np.asarray(to_host(x)), (4,))


def filter_grad(x: Any, dy: Any, g: ConvGeometry, fs: tuple[int, int, int, int],
                splits: int | None = None) -> Any:
    """The filter gradient of contiguous NHWC device arrays ``x`` and ``dy``,
    a new device array of ``fs``."""
    dtype = np.dtype(x.dtype)
    out = device_empty(fs, dtype)
    f_total, positions = out.size, g.batch * g.out_h * g.out_w
    n_splits, chunk = plan_filter_splits(f_total, positions, splits)
    kern = typed_kernel(depthwise_filter_grad, dtype)
    grid = (math.ceil(f_total / DW_X), n_splits)
    geo = _geo(g, fs[3])
    if n_splits == 1:
        launch(kern, grid, (DW_X, DW_Y), flat(x), flat(dy), flat(out), geo, chunk)
        return out
    partial = device_empty((n_splits * f_total,), dtype)
    launch(kern, grid, (DW_X, DW_Y), flat(x), flat(dy), partial, geo, chunk)
    run_1d(sum_splits, f_total, partial, flat(out), n_splits)
    return out


@gpu_kernel("DepthwiseConv2dNative")
def depthwise_conv2d(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNative"
    x, w = as_device(inputs[0]), as_device(inputs[1])
    if not covered(x, w):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    in_shape = nhwc_shape(tuple(x.shape), a.nchw)
    ws = tuple(w.shape)
    if ws[2] != in_shape[3]:   # a depth mismatch: the CPU kernel names it
        return host_fallback(op, inputs, attrs)
    g = geometry(op, a, in_shape, ws[0], ws[1])
    if g.out_h * g.out_w == 0:
        return host_fallback(op, inputs, attrs)
    xs = to_nhwc(x, a.nchw)
    out = device_empty((g.batch, g.out_h, g.out_w, ws[2] * ws[3]), x.dtype)
    run_1d(typed_kernel(depthwise_forward, x.dtype), out.size, flat(xs), flat(w), flat(out),
         _geo(g, ws[3]))
    return [from_nhwc(out, a.nchw)]


@gpu_kernel("DepthwiseConv2dNativeBackpropInput")
def depthwise_conv2d_backprop_input(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNativeBackpropInput"
    w, dy = as_device(inputs[1]), as_device(inputs[2])
    if not covered(w, dy):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    sizes = _sizes(op, "input_sizes", inputs[0])
    host_sizes = [np.asarray(sizes, np.int32)] + list(inputs[1:])
    in_shape = nhwc_shape(sizes, a.nchw)
    ws = tuple(w.shape)
    if in_shape[3] != ws[2] or 0 in in_shape:
        return host_fallback(op, host_sizes, attrs)
    g = geometry(op, a, in_shape, ws[0], ws[1])
    if nhwc_shape(tuple(dy.shape), a.nchw) != (g.batch, g.out_h, g.out_w, ws[2] * ws[3]):
        return host_fallback(op, host_sizes, attrs)   # the CPU kernel says what is wrong
    dys = to_nhwc(dy, a.nchw)
    dx = device_empty(in_shape, dy.dtype)
    run_1d(typed_kernel(depthwise_input_grad, dy.dtype), dx.size, flat(dys), flat(w), flat(dx),
         _geo(g, ws[3]))
    return [from_nhwc(dx, a.nchw)]


@gpu_kernel("DepthwiseConv2dNativeBackpropFilter")
def depthwise_conv2d_backprop_filter(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNativeBackpropFilter"
    x, dy = as_device(inputs[0]), as_device(inputs[2])
    if not covered(x, dy):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    fs = tuple(_sizes(op, "filter_sizes", inputs[1]))
    host_sizes = [inputs[0], np.asarray(fs, np.int32), inputs[2]]
    in_shape = nhwc_shape(tuple(x.shape), a.nchw)
    if fs[2] != in_shape[3] or 0 in fs:
        return host_fallback(op, host_sizes, attrs)
    g = geometry(op, a, in_shape, fs[0], fs[1])
    if nhwc_shape(tuple(dy.shape), a.nchw) != (g.batch, g.out_h, g.out_w, fs[2] * fs[3]):
        return host_fallback(op, host_sizes, attrs)
    xs, dys = to_nhwc(x, a.nchw), to_nhwc(dy, a.nchw)
    return [filter_grad(xs, dys, g, fs)]
