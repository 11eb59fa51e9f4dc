"""CPU kernels of TF's 2-D convolution ops: ``Conv2D``,
``Conv2DBackpropInput``, ``Conv2DBackpropFilter``, ``DepthwiseConv2dNative``
and its ``BackpropInput`` / ``BackpropFilter``, with TF's inputs, attrs
(``strides``, ``padding`` SAME/VALID/EXPLICIT with ``explicit_paddings``,
``data_format`` NHWC/NCHW, ``dilations``) and errors.

This module checks the operands and decodes the attrs
(:mod:`kernels.cpu.conv_geometry`); the arithmetic is in
:mod:`kernels.cpu.conv_gemm` (im2col tiles through BLAS) and
:mod:`kernels.cpu.conv_depthwise`, both NHWC: an NCHW operand is transposed
in and the result back. float16 runs in float32 and is rounded once at the
end, as TF's CPU kernels accumulate half in float. Beyond TF's CPU kernels,
every op here takes NCHW, dilations and (``Conv2D`` and its gradients)
grouped filters, as TF's GPU kernels do.
"""
from __future__ import annotations

import numpy as np

from kernels.cpu.conv_depthwise import depthwise_backprop_filter, depthwise_backprop_input, depthwise_forward
from kernels.cpu.conv_gemm import conv_backprop_filter, conv_backprop_input, conv_forward
from kernels.cpu.conv_geometry import (
    ConvGeometry,
    check_dtypes,
    check_rank4,
    conv_attrs,
    from_nhwc,
    geometry,
    nhwc_shape,
    sizes_vector,
    to_nhwc,
)
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "depthwise_conv2d",
           "depthwise_conv2d_backprop_input", "depthwise_conv2d_backprop_filter"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

FORWARD_DTYPES = ("float16", "float32", "float64", "int32")
GRAD_DTYPES = ("float16", "float32", "float64")


def _compute(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _operands(op: str, names: tuple[str, ...], arrays: list, allowed: tuple[str, ...]) -> np.dtype:
    for name, x in zip(names, arrays):
        check_rank4(op, name, x)
    return check_dtypes(op, allowed, *arrays)


def _groups(op: str, in_c: int, filter_shape: tuple[int, ...] | list[int]) -> None:
    cg, o = filter_shape[2], filter_shape[3]
    if cg == 0 or in_c % cg:
        raise KernelError(f"{op}: input depth must be evenly divisible by filter depth: {in_c} "
                          f"vs {cg} (filter {list(filter_shape)} is [rows, cols, in_depth, "
                          "out_depth])")
    if o % (in_c // cg):
        raise KernelError(f"{op}: output depth {o} must be a multiple of the number of groups "
                          f"{in_c // cg} (input depth {in_c} / filter depth {cg})")


def _check_out(op: str, g: ConvGeometry, dy_nhwc: tuple[int, ...], out_c: int) -> None:
    computed = (g.batch, g.out_h, g.out_w, out_c)
    if tuple(dy_nhwc) != computed:
        raise KernelError(f"{op}: size of out_backprop doesn't match computed: actual = "
                          f"{list(dy_nhwc)}, computed = {list(computed)} (NHWC; from the input, "
                          "filter, strides, dilations and padding)")


@KERNELS("Conv2D", CPU)
def conv2d(inputs: list, attrs: dict) -> list:
    op = "Conv2D"
    x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
    dt = _operands(op, ("input", "filter"), [x, w], FORWARD_DTYPES)
    if w.size == 0:
        raise KernelError(f"{op}: filter must not have zero elements (i.e. all dimensions must "
                          f"be non-zero), got filter shape {list(w.shape)}")
    a = conv_attrs(op, attrs)
    xs = to_nhwc(_compute(x), a.nchw)
    _groups(op, xs.shape[3], w.shape)
    g = geometry(op, a, xs.shape, w.shape[0], w.shape[1])
    out = conv_forward(xs, _compute(w), g)
    return [from_nhwc(out.astype(dt, copy=False), a.nchw)]


@KERNELS("Conv2DBackpropInput", CPU)
def conv2d_backprop_input(inputs: list, attrs: dict) -> list:
    op = "Conv2DBackpropInput"
    w, dy = np.asarray(inputs[1]), np.asarray(inputs[2])
    dt = _operands(op, ("filter", "out_backprop"), [w, dy], GRAD_DTYPES)
    a = conv_attrs(op, attrs)
    sizes = sizes_vector(op, "input_sizes", inputs[0], (4, 2))
    dys = to_nhwc(_compute(dy), a.nchw)
    if len(sizes) == 2:   # spatial only: batch from out_backprop, depth from the filter
        in_shape = (dys.shape[0], sizes[0], sizes[1], w.shape[2])
    else:
        in_shape = nhwc_shape(sizes, a.nchw)
    _groups(op, in_shape[3], w.shape)
    g = geometry(op, a, in_shape, w.shape[0], w.shape[1])
    _check_out(op, g, dys.shape, w.shape[3])
    dx = conv_backprop_input(dys, _compute(w), g)
    return [from_nhwc(dx.astype(dt, copy=False), a.nchw)]


@KERNELS("Conv2DBackpropFilter", CPU)
def conv2d_backprop_filter(inputs: list, attrs: dict) -> list:
    op = "Conv2DBackpropFilter"
    x, dy = np.asarray(inputs[0]), np.asarray(inputs[2])
    dt = _operands(op, ("input", "out_backprop"), [x, dy], GRAD_DTYPES)
    a = conv_attrs(op, attrs)
    fs = tuple(sizes_vector(op, "filter_sizes", inputs[1], (4,)))
    xs = to_nhwc(_compute(x), a.nchw)
    dys = to_nhwc(_compute(dy), a.nchw)
    _groups(op, xs.shape[3], fs)
    g = geometry(op, a, xs.shape, fs[0], fs[1])
    _check_out(op, g, dys.shape, fs[3])
    dw = conv_backprop_filter(xs, dys, g, fs)
    return [dw.astype(dt, copy=False)]


def _depthwise_filter(op: str, in_c: int, filter_shape: tuple[int, ...] | list[int]) -> None:
    if filter_shape[2] != in_c:
        raise KernelError(f"{op}: input and filter must have the same depth: {in_c} vs "
                          f"{filter_shape[2]} (filter {list(filter_shape)} is [rows, cols, "
                          "in_depth, depth_multiplier])")


@KERNELS("DepthwiseConv2dNative", CPU)
def depthwise_conv2d(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNative"
    x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
    dt = _operands(op, ("input", "filter"), [x, w], GRAD_DTYPES)
    a = conv_attrs(op, attrs)
    xs = to_nhwc(_compute(x), a.nchw)
    _depthwise_filter(op, xs.shape[3], w.shape)
    g = geometry(op, a, xs.shape, w.shape[0], w.shape[1])
    out = depthwise_forward(xs, _compute(w), g)
    return [from_nhwc(out.astype(dt, copy=False), a.nchw)]


@KERNELS("DepthwiseConv2dNativeBackpropInput", CPU)
def depthwise_conv2d_backprop_input(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNativeBackpropInput"
    w, dy = np.asarray(inputs[1]), np.asarray(inputs[2])
    dt = _operands(op, ("filter", "out_backprop"), [w, dy], GRAD_DTYPES)
    a = conv_attrs(op, attrs)
    in_shape = nhwc_shape(sizes_vector(op, "input_sizes", inputs[0], (4,)), a.nchw)
    dys = to_nhwc(_compute(dy), a.nchw)
    _depthwise_filter(op, in_shape[3], w.shape)
    g = geometry(op, a, in_shape, w.shape[0], w.shape[1])
    _check_out(op, g, dys.shape, w.shape[2] * w.shape[3])
    dx = depthwise_backprop_input(dys, _compute(w), g)
    return [from_nhwc(dx.astype(dt, copy=False), a.nchw)]


@KERNELS("DepthwiseConv2dNativeBackpropFilter", CPU)
def depthwise_conv2d_backprop_filter(inputs: list, attrs: dict) -> list:
    op = "DepthwiseConv2dNativeBackpropFilter"
    x, dy = np.asarray(inputs[0]), np.asarray(inputs[2])
    dt = _operands(op, ("input", "out_backprop"), [x, dy], GRAD_DTYPES)
    a = conv_attrs(op, attrs)
    fs = tuple(sizes_vector(op, "filter_sizes", inputs[1], (4,)))
    xs = to_nhwc(_compute(x), a.nchw)
    dys = to_nhwc(_compute(dy), a.nchw)
    _depthwise_filter(op, xs.shape[3], fs)
    g = geometry(op, a, xs.shape, fs[0], fs[1])
    _check_out(op, g, dys.shape, fs[2] * fs[3])
    dw = depthwise_backprop_filter(xs, dys, g, fs)
    return [dw.astype(dt, copy=False)]
