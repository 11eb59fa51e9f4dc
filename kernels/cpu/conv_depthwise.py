"""Depthwise 2-D convolution and its two gradients, NHWC, for
:mod:`kernels.cpu.conv`.

A depthwise filter ``(k_h, k_w, in_c, multiplier)`` convolves each input
channel with its own ``multiplier`` filters; output channel ``c *
multiplier + m`` is channel ``c`` through filter ``m`` (TF's
``DepthwiseConv2dNative``). There is no reduction over channels, so no GEMM:
each of the ``k_h * k_w`` taps is one broadcast multiply-add over a tile of
output positions (the strided view of :func:`kernels.cpu.conv_gemm.patches`),
tiles bounded as the GEMM path's are, so the accumulator stays in cache.
"""
from __future__ import annotations

import numpy as np

from kernels.cpu.conv_gemm import padded, patches, tiles
from kernels.cpu.conv_geometry import ConvGeometry

__all__ = ["depthwise_forward", "depthwise_backprop_input", "depthwise_backprop_filter"]


def depthwise_forward(x: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """NHWC ``x`` (contiguous) through the depthwise filter ``w``."""
    kh, kw, c, m = w.shape
    out = np.empty((g.batch, g.out_h, g.out_w, c, m), x.dtype)
    if out.size:
        view = patches(padded(x, g), g)
        for n0, n1, h0, h1 in tiles(g, 2 * c * m, x.itemsize):
            acc = out[n0:n1, h0:h1]
            tmp = np.empty_like(acc)
            for a in range(kh):
                for b in range(kw):
                    xs = view[n0:n1, h0:h1, :, a, b, :, None]
                    if a == 0 and b == 0:
                        np.multiply(xs, w[a, b], out=acc)
                    else:
                        np.multiply(xs, w[a, b], out=tmp)
                        acc += tmp
    return out.reshape(g.batch, g.out_h, g.out_w, c * m)


def depthwise_backprop_input(dy: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """The gradient of the NHWC input from ``dy`` ``(n, out_h, out_w, c * m)``."""
    kh, kw, c, m = w.shape
    sh, sw = g.stride
    dh, dw = g.dilation
    pt, _, pl, _ = g.pads
    dxp = np.zeros((g.batch, g.padded_h, g.padded_w, c), dy.dtype)
    if dy.size and dxp.size:
        dy5 = dy.reshape(g.batch, g.out_h, g.out_w, c, m)
        wspan = (g.out_w - 1) * sw + 1
        for n0, n1, h0, h1 in tiles(g, 2 * c * m, dy.itemsize):
            part = dy5[n0:n1, h0:h1]
            hspan = (h1 - h0 - 1) * sh + 1
            for a in range(kh):
                r = h0 * sh + a * dh
                for b in range(kw):
                    tap = (part * w[a, b]).sum(axis=-1) if m > 1 else part[..., 0] * w[a, b, :, 0]
                    dxp[n0:n1, r:r + hspan:sh, b * dw:b * dw + wspan:sw] += tap
    if dxp.shape[1:3] == (g.in_h, g.in_w):
        return dxp
    return np.ascontiguousarray(dxp[:, pt:pt + g.in_h, pl:pl + g.in_w])


def depthwise_backprop_filter(x: np.ndarray, dy: np.ndarray, g: ConvGeometry,
                              filter_shape: tuple[int, int, int, int]) -> np.ndarray:
    """The gradient of the depthwise filter, ``filter_shape``."""
    kh, kw, c, m = filter_shape
    dw = np.zeros(filter_shape, x.dtype)
    if dw.size and dy.size:
        view = patches(padded(x, g), g)
        dy5 = dy.reshape(g.batch, g.out_h, g.out_w, c, m)
        for n0, n1, h0, h1 in tiles(g, 2 * c * m, x.itemsize):
            part = dy5[n0:n1, h0:h1]
            for a in range(kh):
                for b in range(kw):
                    dw[a, b] += np.einsum("nhwc,nhwcm->cm", view[n0:n1, h0:h1, :, a, b, :], part)
    return dw
