"""GPU kernels of TF's 2-D convolution ops: ``Conv2D``,
``Conv2DBackpropInput`` and ``Conv2DBackpropFilter`` as implicit GEMMs
(:mod:`kernels.cuda.conv_gemm`); the depthwise ops are
:mod:`kernels.cuda.conv_depthwise`.

Same inputs, attrs and checks as the CPU kernels (:mod:`kernels.cpu.conv`,
whose attr decoding and output-size rules, :mod:`kernels.cpu.conv_geometry`,
are TF's and are shared here): ``strides``, ``padding`` SAME/VALID/EXPLICIT
with ``explicit_paddings``, ``dilations``, ``data_format`` NHWC (computed in
place) or NCHW (transposed on the device, in and out). float32 and float64
run on the device; what the device code does not cover runs the CPU kernel
on a host copy (``host_fallback``, logged once per op): float16 and the
forward's int32, grouped filters (an input depth a multiple of the
filter's), empty tensors, and any operand the CPU kernel would refuse, whose
``KernelError`` then says what is wrong.

The shape inputs (``input_sizes``, ``filter_sizes``) are read on the host,
as TF's GPU kernels read them from host memory: a device array there is
copied out (a synchronisation).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu.conv_geometry import ConvGeometry, conv_attrs, geometry, nhwc_shape, sizes_vector
from kernels.cuda.conv_gemm import BACKPROP_FILTER, BACKPROP_INPUT, FORWARD, implicit_gemm
from kernels.cuda.devices import to_host
from kernels.cuda.launch import as_device, covered, gpu_kernel, host_fallback
from kernels.cuda.layout import from_nhwc, to_nhwc

__all__ = ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"]


def _out_matches(g: ConvGeometry, dy_nhwc: tuple[int, ...], out_c: int) -> bool:
    return tuple(dy_nhwc) == (g.batch, g.out_h, g.out_w, out_c)


def _sizes(x: Any) -> np.ndarray:
    return np.asarray(to_host(x))


@gpu_kernel("Conv2D")
def conv2d(inputs: list, attrs: dict) -> list:
    op = "Conv2D"
    x, w = as_device(inputs[0]), as_device(inputs[1])
    if not covered(x, w):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    in_shape = nhwc_shape(tuple(x.shape), a.nchw)
    if tuple(w.shape)[2] != in_shape[3]:   # grouped, or a depth mismatch the CPU kernel names
        return host_fallback(op, inputs, attrs)
    g = geometry(op, a, in_shape, w.shape[0], w.shape[1])
    oc = tuple(w.shape)[3]
    if g.out_h * g.out_w == 0:
        return host_fallback(op, inputs, attrs)
    xs = to_nhwc(x, a.nchw)
    out = implicit_gemm(FORWARD, xs, w, g, oc, (g.batch, g.out_h, g.out_w, oc))
    return [from_nhwc(out, a.nchw)]


@gpu_kernel("Conv2DBackpropInput")
def conv2d_backprop_input(inputs: list, attrs: dict) -> list:
    op = "Conv2DBackpropInput"
    w, dy = as_device(inputs[1]), as_device(inputs[2])
    if not covered(w, dy):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    sizes = sizes_vector(op, "input_sizes", _sizes(inputs[0]), (4, 2))
    dy_shape = nhwc_shape(tuple(dy.shape), a.nchw)
    if len(sizes) == 2:   # spatial only: batch from out_backprop, depth from the filter
        in_shape = (dy_shape[0], sizes[0], sizes[1], tuple(w.shape)[2])
    else:
        in_shape = nhwc_shape(sizes, a.nchw)
    if in_shape[3] != tuple(w.shape)[2] or 0 in in_shape:
        return host_fallback(op, [np.asarray(sizes, np.int32)] + list(inputs[1:]), attrs)
    g = geometry(op, a, in_shape, w.shape[0], w.shape[1])
    if not _out_matches(g, dy_shape, tuple(w.shape)[3]):
        return host_fallback(op, [np.asarray(sizes, np.int32)] + list(inputs[1:]), attrs)
    dys = to_nhwc(dy, a.nchw)
    dx = implicit_gemm(BACKPROP_INPUT, dys, w, g, tuple(w.shape)[3], in_shape)
    return [from_nhwc(dx, a.nchw)]


@gpu_kernel("Conv2DBackpropFilter")
def conv2d_backprop_filter(inputs: list, attrs: dict) -> list:
    op = "Conv2DBackpropFilter"
    x, dy = as_device(inputs[0]), as_device(inputs[2])
    if not covered(x, dy):
        return host_fallback(op, inputs, attrs)
    a = conv_attrs(op, attrs)
    fs = tuple(sizes_vector(op, "filter_sizes", _sizes(inputs[1]), (4,)))
    in_shape = nhwc_shape(tuple(x.shape), a.nchw)
    sizes_host = np.asarray(fs, np.int32)
    if fs[2] != in_shape[3] or 0 in fs:
        return host_fallback(op, [inputs[0], sizes_host, inputs[2]], attrs)
    g = geometry(op, a, in_shape, fs[0], fs[1])
    if not _out_matches(g, nhwc_shape(tuple(dy.shape), a.nchw), fs[3]):
        return host_fallback(op, [inputs[0], sizes_host, inputs[2]], attrs)
    xs, dys = to_nhwc(x, a.nchw), to_nhwc(dy, a.nchw)
    return [implicit_gemm(BACKPROP_FILTER, xs, dys, g, fs[3], fs)]

