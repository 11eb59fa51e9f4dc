"""2-D convolution and its two gradients as matrix products through numpy's
BLAS, NHWC, for :mod:`kernels.cpu.conv`.

A convolution is a GEMM once each output position's receptive field is laid
out as a row (im2col): ``(positions, k_h * k_w * in_c) @ (k_h * k_w * in_c,
out_c)``. The rows are copied from a strided *view* of the (padded) input, one
tile of output positions at a time into a per-thread scratch buffer of at
most ``SCRATCH_BYTES``, so the rows are still in cache when BLAS reads them
and memory stays bounded whatever the batch (the whole im2col matrix of the
CIFAR-10 model's second layer is 118 MB; a tile is 4 MiB: 4 images there, 24
in the first layer). Tiles of 2-16 MiB measured the same at one BLAS thread.

- **Filter gradient**: the same tiles, ``rows^T @ dy`` accumulated per tile.
- **Input gradient**, stride 1 and at least ``TRANSPOSED_MIN_CHANNELS``
  input channels a group: a forward convolution of ``dy``, padded so every
  input position sees every tap, with the filter flipped and its channels
  swapped (the transposed convolution): the forward pass's speed. Otherwise
  (strides, or an RGB input, where that GEMM would be 3 columns wide):
  ``dy @ w^T`` per tile, scatter-added into the padded input gradient
  (col2im) by the numba loop of :mod:`kernels.cpu.conv_jit` once
  :data:`JIT` has it compiled, by numpy one tap at a time meanwhile.
- **Groups**: an input depth that is a multiple of the filter's
  (``in_c = groups * filter_in_c``, TF's grouped convolution) runs one GEMM
  per group on that group's channels.

Threads: the GEMMs use BLAS's own threads (OPENBLAS_NUM_THREADS, which the
launcher sets per task); with ``jit_loader.set_intra_op_threads(n)`` the
tiles are also split over ``n`` threads (the copies and numba release the
GIL), whole images or all bands of one image to a thread, so no two threads
add into the same input-gradient rows; the filter gradient's per-thread sums
are added in batch order. float16 is computed in float32 by the caller.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kernels.cpu.conv_geometry import ConvGeometry
from kernels.cpu.jit_loader import BackgroundJit, split_batch

__all__ = ["SCRATCH_BYTES", "conv_forward", "conv_backprop_filter", "conv_backprop_input",
           "padded", "patches", "tiles", "scratch"]

# the im2col tile: a few MiB sits in L2/L3 with BLAS's packed panels
SCRATCH_BYTES = 4 << 20
# the stride-1 input gradient runs as a transposed convolution when each
# group has at least this many input channels (its GEMM's output width):
# below, the GEMM is too narrow and col2im is faster (bench/kernels.py)
TRANSPOSED_MIN_CHANNELS = 16

JIT = BackgroundJit("kernels.cpu.conv_jit")

_local = threading.local()


def scratch(n: int, dtype: np.dtype) -> np.ndarray:
    """A 1-d buffer of ``n`` elements, reused by the calling thread (kernels
    run on the executor's threads; each keeps at most one buffer a dtype, of
    at most ``SCRATCH_BYTES``: a larger one, for a row too wide for a tile,
    is the call's own and goes with it)."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        bufs = _local.bufs = {}
    keep = SCRATCH_BYTES // dtype.itemsize
    if n > keep:
        return np.empty(n, dtype)
    buf = bufs.get(dtype)
    if buf is None:
        buf = bufs[dtype] = np.empty(keep, dtype)
    return buf[:n]


def padded(x: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """``x`` (NHWC, contiguous) with its zero padding, or ``x`` itself."""
    pt, pb, pl, pr = g.pads
    if not (pt or pb or pl or pr):
        return x
    xp = np.zeros((x.shape[0], g.padded_h, g.padded_w, x.shape[3]), x.dtype)
    xp[:, pt:pt + g.in_h, pl:pl + g.in_w] = x
    return xp


def patches(xp: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """A read-only view ``(n, out_h, out_w, k_h, k_w, c)`` of the padded input:
    element ``[n, i, j, a, b, c]`` is ``xp[n, i*sh + a*dh, j*sw + b*dw, c]``."""
    s0, s1, s2, s3 = xp.strides
    sh, sw = g.stride
    dh, dw = g.dilation
    return as_strided(xp, (xp.shape[0], g.out_h, g.out_w, g.k_h, g.k_w, xp.shape[3]),
                      (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3), writeable=False)


def tiles(g: ConvGeometry, row_elems: int, itemsize: int) -> Iterator[tuple[int, int, int, int]]:
    """Tiles ``(n0, n1, h0, h1)`` of the output positions whose rows of
    ``row_elems`` elements fit in ``SCRATCH_BYTES``: whole images when one
    fits, else bands of output rows of one image (so a tile is always a
    contiguous run of the NHWC output)."""
    per_row = max(1, g.out_w * row_elems * itemsize)
    image = per_row * g.out_h
    if image <= SCRATCH_BYTES:
        step = max(1, SCRATCH_BYTES // max(image, 1))
        for n0 in range(0, g.batch, step):
            yield n0, min(g.batch, n0 + step), 0, g.out_h
        return
    band = max(1, SCRATCH_BYTES // per_row)
    for n in range(g.batch):
        for h0 in range(0, g.out_h, band):
            yield n, n + 1, h0, min(g.out_h, h0 + band)


def _units(g: ConvGeometry, row_elems: int, itemsize: int) -> list[list[tuple[int, int, int, int]]]:
    """:func:`tiles` grouped so that the bands of one image stay together: the
    units that threads split (two bands of an image add into the same input
    gradient rows, whole images never do)."""
    units: list[list[tuple[int, int, int, int]]] = []
    for t in tiles(g, row_elems, itemsize):
        if units and t[2] > 0:   # a further band of the image before
            units[-1].append(t)
        else:
            units.append([t])
    return units


def _split(units: list, fn: Callable[[list], None], elements: int) -> None:
    """``fn(tiles)`` over the units, in slices on the intra-op threads."""
    def run(a: int, b: int) -> None:
        fn([t for unit in units[a:b] for t in unit])
    split_batch(run, len(units), elements)


def _group_filters(w: np.ndarray, groups: int) -> list[np.ndarray]:
    """The filter as ``groups`` matrices ``(k_h * k_w * in_c/groups, out_c/groups)``."""
    kh, kw, cg, o = w.shape
    if groups == 1:
        return [w.reshape(kh * kw * cg, o)]
    og = o // groups
    return [np.ascontiguousarray(w[..., i * og:(i + 1) * og]).reshape(kh * kw * cg, og)
            for i in range(groups)]


def conv_forward(x: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """NHWC ``x`` (contiguous) convolved with ``w`` ``(k_h, k_w, in_c/groups,
    out_c)``; same dtype as ``x``."""
    kh, kw, cg, o = w.shape
    groups = g.in_c // cg
    og = o // groups
    out = np.empty((g.batch, g.out_h, g.out_w, o), x.dtype)
    if not out.size:
        return out
    if not cg:   # an empty filter depth: nothing to add up
        out[...] = 0
        return out
    view = patches(padded(x, g), g)
    mats = _group_filters(w, groups)
    k = kh * kw * cg
    out2 = out.reshape(-1, o)

    def run(part: list) -> None:
        for n0, n1, h0, h1 in part:
            rows = (n1 - n0) * (h1 - h0) * g.out_w
            r0 = (n0 * g.out_h + h0) * g.out_w
            buf = scratch(rows * k, x.dtype)
            cols = buf.reshape(n1 - n0, h1 - h0, g.out_w, kh, kw, cg)
            for i in range(groups):
                np.copyto(cols, view[n0:n1, h0:h1, :, :, :, i * cg:(i + 1) * cg])
                np.matmul(buf.reshape(rows, k), mats[i],
                          out=out2[r0:r0 + rows, i * og:(i + 1) * og])
    _split(_units(g, k, x.itemsize), run, out.size * k)
    return out


def conv_backprop_filter(x: np.ndarray, dy: np.ndarray, g: ConvGeometry,
                         filter_shape: tuple[int, int, int, int]) -> np.ndarray:
    """The gradient of the filter, ``filter_shape``, from NHWC ``x`` and ``dy``.
    Each thread sums its slice of the batch; the slices' sums are added in
    batch order, so a thread count gives the same bits every run."""
    kh, kw, cg, o = filter_shape
    groups = g.in_c // cg if cg else 1
    og = o // groups
    k = kh * kw * cg
    partials: dict[int, np.ndarray] = {}
    if groups * k * og and dy.size:
        view = patches(padded(x, g), g)
        dy2 = dy.reshape(-1, o)

        def run(part: list) -> None:
            acc = np.zeros((groups, k, og), x.dtype)
            for n0, n1, h0, h1 in part:
                rows = (n1 - n0) * (h1 - h0) * g.out_w
                r0 = (n0 * g.out_h + h0) * g.out_w
                buf = scratch(rows * k, x.dtype)
                cols = buf.reshape(n1 - n0, h1 - h0, g.out_w, kh, kw, cg)
                for i in range(groups):
                    np.copyto(cols, view[n0:n1, h0:h1, :, :, :, i * cg:(i + 1) * cg])
                    acc[i] += buf.reshape(rows, k).T @ dy2[r0:r0 + rows, i * og:(i + 1) * og]
            if part:
                partials[part[0][0] * g.out_h + part[0][2]] = acc
        _split(_units(g, k, x.itemsize), run, dy.size * k)
    acc = np.zeros((groups, k, og), x.dtype)
    for key in sorted(partials):
        acc += partials[key]
    if groups == 1:
        return acc.reshape(kh, kw, cg, o)
    return np.ascontiguousarray(
        acc.reshape(groups, kh, kw, cg, og).transpose(1, 2, 3, 0, 4)).reshape(kh, kw, cg, o)


def conv_backprop_input(dy: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    """The gradient of the NHWC input (``g``'s shape) from NHWC ``dy``
    (contiguous) and the filter."""
    kh, kw, cg, o = w.shape
    dx_shape = (g.batch, g.in_h, g.in_w, g.in_c)
    if not dy.size or not cg or not o:
        return np.zeros(dx_shape, dy.dtype)
    if g.stride == (1, 1) and cg >= TRANSPOSED_MIN_CHANNELS:
        t = _transposed(g, w)
        if t is not None:
            return conv_forward(dy, *t)
    return _col2im(dy, w, g)


def _transposed(g: ConvGeometry, w: np.ndarray) -> tuple[np.ndarray, ConvGeometry] | None:
    """The stride-1 input gradient as a forward convolution: the filter
    flipped in space with its in and out channels swapped (per group), and
    ``dy`` padded by ``k_eff - 1 - pad_before`` before and what makes the
    output the input's size after; None when a side would need negative
    padding (padding wider than the filter: the col2im path takes it)."""
    kh, kw, cg, o = w.shape
    groups = g.in_c // cg
    og = o // groups
    pads = []
    for size, out, k, d, before in ((g.in_h, g.out_h, kh, g.dilation[0], g.pads[0]),
                                    (g.in_w, g.out_w, kw, g.dilation[1], g.pads[2])):
        k_eff = (k - 1) * d + 1
        lo = k_eff - 1 - before
        hi = size + k_eff - 1 - lo - out
        if lo < 0 or hi < 0:
            return None
        pads += [lo, hi]
    wt = w.reshape(kh, kw, cg, groups, og)[::-1, ::-1].transpose(0, 1, 4, 3, 2)
    wt = np.ascontiguousarray(wt).reshape(kh, kw, og, groups * cg)
    gt = ConvGeometry(g.batch, g.out_h, g.out_w, o, kh, kw, g.in_h, g.in_w, (1, 1), g.dilation,
                      (pads[0], pads[1], pads[2], pads[3]))
    return wt, gt


def _col2im(dy: np.ndarray, w: np.ndarray, g: ConvGeometry) -> np.ndarray:
    kh, kw, cg, o = w.shape
    groups = g.in_c // cg
    og = o // groups
    k = kh * kw * cg
    sh, sw = g.stride
    dh, dw = g.dilation
    pt, _, pl, _ = g.pads
    dxp = np.zeros((g.batch, g.padded_h, g.padded_w, g.in_c), dy.dtype)
    mats = _group_filters(w, groups)
    dy2 = dy.reshape(-1, o)
    wspan = (g.out_w - 1) * sw + 1
    jit = JIT.ready(dy.dtype)

    def run(part: list) -> None:
        for n0, n1, h0, h1 in part:
            rows = (n1 - n0) * (h1 - h0) * g.out_w
            r0 = (n0 * g.out_h + h0) * g.out_w
            hspan = (h1 - h0 - 1) * sh + 1
            buf = scratch(rows * k, dy.dtype)
            cols = buf.reshape(n1 - n0, h1 - h0, g.out_w, kh, kw, cg)
            for i in range(groups):
                np.matmul(dy2[r0:r0 + rows, i * og:(i + 1) * og], mats[i].T,
                          out=buf.reshape(rows, k))
                if jit is not None:
                    jit.col2im(cols, dxp, n0, h0, sh, sw, dh, dw, i * cg)
                    continue
                for a in range(kh):
                    r = h0 * sh + a * dh
                    for b in range(kw):
                        c = b * dw
                        dxp[n0:n1, r:r + hspan:sh, c:c + wspan:sw, i * cg:(i + 1) * cg] += \
                            cols[:, :, :, a, b, :]
    _split(_units(g, k, dy.itemsize), run, dy.size * k)
    if dxp.shape[1:3] == (g.in_h, g.in_w):
        return dxp
    return np.ascontiguousarray(dxp[:, pt:pt + g.in_h, pl:pl + g.in_w])
