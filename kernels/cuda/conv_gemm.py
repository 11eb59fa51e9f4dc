"""2-D convolution and its two gradients as implicit GEMMs on the GPU, NHWC.

The tiled matmul's blocking (:mod:`kernels.cuda.matmul`: a 16 x 16 block
of threads, each holding a 4 x 4 block of C in registers, k-major slabs of A
and B in shared memory, double-buffered with the next slab's loads in
flight in registers during the math: one ``syncthreads`` per slab), with
the A or B operand *gathered* from the image instead of read from a matrix,
so no im2col matrix is ever stored. The 64 x 64 tile (not the 128 x 128
one): the CIFAR-10 layers have 64 output channels, and their outputs are
hundreds of 64-tiles, a few waves of blocks.

The three products (``m`` rows, ``n`` columns, ``k`` the reduction):

=================  ====================  ===============  ===========================
mode               m                     n                k
=================  ====================  ===============  ===========================
``FORWARD``        N * OH * OW (y)       OC               KH * KW * IC (x gathered)
``BACKPROP_INPUT`` N * IH * IW (dx)      IC               KH * KW * OC (dy gathered)
``BACKPROP_FILTER`` KH * KW * IC (dw)    OC               N * OH * OW (x gathered)
=================  ====================  ===============  ===========================

- forward: ``A[(n, oh, ow), (r, s, ic)] = x[n, oh*sh - pt + r*dh, ow*sw -
  pl + s*dw, ic]`` (0 in the padding), ``B`` the filter as its (KH*KW*IC,
  OC) matrix, ``C`` the output as (N*OH*OW, OC): consecutive k are
  consecutive channels, so A's loads walk k and coalesce;
- input gradient (TF's and cuDNN's "dgrad" as a GEMM): ``A[(n, ih, iw),
  (r, s, oc)] = dy[n, (ih + pt - r*dh) / sh, (iw + pl - s*dw) / sw, oc]``
  where the divisions are exact and in range, else 0; ``B[(r, s, oc), ic]
  = w[r, s, ic, oc]`` (read along oc); any stride, at the cost of the taps
  a stride skips loading zeros;
- filter gradient: ``A[(r, s, ic), (n, oh, ow)]`` the forward's A
  transposed (its loads walk m = consecutive channels), ``B`` dy as its
  (N*OH*OW, OC) matrix. Its k is the whole batch and its output small (the
  CIFAR-10 second layer: 1600 x 64, 25 tiles), so k is split over the
  grid's z (``splits``): each split writes its partial tile, and a second
  kernel sums the splits in a fixed order (deterministic, no atomics).

Every shape is a launch argument (one tuple), so one compiled kernel per
(mode, dtype) serves every layer; the mode is a closure constant, so each
mode compiles to its own straight-line loads. float32 and float64.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda, int64

from kernels.cpu.conv_geometry import ConvGeometry
from kernels.cuda.launch import SIM, device_empty, flat, launch, launch_1d

__all__ = ["FORWARD", "BACKPROP_INPUT", "BACKPROP_FILTER", "CT", "CREG", "CBLOCK", "CBK",
           "CPAD", "conv_gemm", "sum_splits", "gemm_dims", "plan_splits", "implicit_gemm"]

FORWARD, BACKPROP_INPUT, BACKPROP_FILTER = 0, 1, 2

# shared and local arrays' shapes: module constants (the real compiler needs constants)
CT = 16          # threads per block side: 256 threads
CREG = 4         # each thread computes CREG x CREG outputs
CBLOCK = 64      # CT * CREG: the output tile's side
CBK = 16         # the k-depth of a slab
CPAD = 66        # a slab's row in shared memory: a store walking k hits 32 distinct banks
CLOADS = 4       # CBLOCK * CBK // 256: values of each operand a thread stages per slab
CBUFS = 2        # shared buffers per operand (double buffering)
ROWS_PER_LOAD = 16   # 256 // CBK: tile rows one staging step covers when walking k
K_PER_LOAD = 4       # 256 // CBLOCK: slab rows one staging step covers when walking m or n
_FAR = 1 << 40       # an out-of-range row's coordinate: every bounds check fails

# split-k: aim for this many blocks (two waves on a 132-SM GPU), splits of at least
# MIN_SPLIT_K (the simulator: tiny, so its small cases split too)
TARGET_BLOCKS = 2 if SIM else 264
MIN_SPLIT_K = 32 if SIM else 512


def conv_gemm(acc_dtype: Any, mode: int) -> Any:
    """The implicit-GEMM kernel of ``mode`` for ``acc_dtype``.

    ``kernel(a, b, c, geo, k_chunk)``: ``a`` the gathered operand (x, or dy
    for the input gradient), ``b`` the other (w, or dy for the filter
    gradient), ``c`` the output, all flat C-order; ``geo`` = (N, IH, IW, IC,
    KH, KW, OH, OW, OC, sh, sw, dh, dw, pad_top, pad_left); the grid
    (ceil(n/64), ceil(m/64), splits), split z covering k in
    ``[z*k_chunk, (z+1)*k_chunk)`` and writing ``c[z*m*n:]``. Block (16, 16).
    """
    walk_k_a = mode != BACKPROP_FILTER   # A's consecutive threads walk k (else m)
    walk_k_b = mode == BACKPROP_INPUT    # B's consecutive threads walk k (else n)

    @cuda.jit(cache=True)
    def kernel(a, b, c, geo, k_chunk):
        sa = cuda.shared.array((CBUFS, CBK, CPAD), acc_dtype)   # [buffer][k][m]
        sb = cuda.shared.array((CBUFS, CBK, CPAD), acc_dtype)   # [buffer][k][n]
        acc = cuda.local.array((CREG, CREG), acc_dtype)
        ra = cuda.local.array(CREG, acc_dtype)
        rb = cuda.local.array(CREG, acc_dtype)
        pa = cuda.local.array(CLOADS, acc_dtype)   # the next slab, staged in registers
        pb = cuda.local.array(CLOADS, acc_dtype)
        base = cuda.local.array(CLOADS, int64)     # this thread's A rows, decoded once
        hb = cuda.local.array(CLOADS, int64)
        wb = cuda.local.array(CLOADS, int64)
        st_img = cuda.local.array(CLOADS, int64)   # the filter gradient's k, per load
        st_y = cuda.local.array(CLOADS, int64)
        st_x = cuda.local.array(CLOADS, int64)
        n_img = geo[0]
        ih = geo[1]
        iw = geo[2]
        ic = geo[3]
        kw = geo[5]
        oh = geo[6]
        ow = geo[7]
        oc = geo[8]
        sh = geo[9]
        sw = geo[10]
        dh = geo[11]
        dw = geo[12]
        pt = geo[13]
        pl = geo[14]
        if mode == FORWARD:
            m_total = n_img * oh * ow
            n_total = oc
            k_total = geo[4] * kw * ic
        elif mode == BACKPROP_INPUT:
            m_total = n_img * ih * iw
            n_total = ic
            k_total = geo[4] * kw * oc
        else:
            m_total = geo[4] * kw * ic
            n_total = oc
            k_total = n_img * oh * ow
        tx = cuda.threadIdx.x & (CT - 1)
        ty = cuda.threadIdx.y & (CT - 1)
        tid = ty * CT + tx
        row0 = cuda.blockIdx.y * CBLOCK
        col0 = cuda.blockIdx.x * CBLOCK
        kb = cuda.blockIdx.z * k_chunk
        ke = min(kb + k_chunk, k_total)
        out0 = cuda.blockIdx.z * m_total * n_total
        # where this thread's staged value l sits in a slab (k, m) / (k, n)
        if walk_k_a:
            a_k = tid % CBK
            a_m = tid // CBK
            a_sk = 0
            a_sm = ROWS_PER_LOAD
        else:
            a_k = tid // CBLOCK
            a_m = tid % CBLOCK
            a_sk = K_PER_LOAD
            a_sm = 0
        if walk_k_b:
            b_k = tid % CBK
            b_n = tid // CBK
            b_sk = 0
            b_sn = ROWS_PER_LOAD
        else:
            b_k = tid // CBLOCK
            b_n = tid % CBLOCK
            b_sk = K_PER_LOAD
            b_sn = 0
        # decode this thread's A rows once
        for l in range(CLOADS):  # noqa: E741
            m = row0 + a_m + l * a_sm
            base[l] = 0
            hb[l] = -_FAR
            wb[l] = -_FAR
            if m < m_total:
                if mode == FORWARD:
                    img = m // (oh * ow)
                    rem = m - img * (oh * ow)
                    y = rem // ow
                    base[l] = img * ih * iw * ic
                    hb[l] = y * sh - pt
                    wb[l] = (rem - y * ow) * sw - pl
                elif mode == BACKPROP_INPUT:
                    img = m // (ih * iw)
                    rem = m - img * (ih * iw)
                    y = rem // iw
                    base[l] = img * oh * ow * oc
                    hb[l] = y + pt
                    wb[l] = rem - y * iw + pl
                else:
                    tap = m // ic
                    r = tap // kw
                    base[l] = m - tap * ic
                    hb[l] = r * dh - pt
                    wb[l] = (tap - r * kw) * dw - pl
        for i in range(CREG):
            for j in range(CREG):
                acc[i, j] = 0
        # the slabs' k, decoded once here and advanced by CBK a slab: no division in
        # the loop (a 64-bit division costs more than a slab's math for one thread)
        cdim = ic if mode == FORWARD else oc
        ka = kb + a_k                  # A walking k: k0 + a_k = ((r, q), ch)
        tap = ka // cdim
        ch_a = ka - tap * cdim
        r_a = tap // kw
        q_a = tap - r_a * kw
        kbk = kb + b_k                 # the input gradient's B: k0 + b_k = (tap, ch)
        tap_b = kbk // oc
        ch_b = kbk - tap_b * oc
        for l in range(CLOADS):  # noqa: E741   (the filter gradient's A: k = (img, y, x))
            kl = kb + a_k + l * K_PER_LOAD
            img = kl // (oh * ow)
            rem = kl - img * (oh * ow)
            y = rem // ow
            st_img[l] = img
            st_y[l] = y
            st_x[l] = rem - y * ow
        n_slabs = (ke - kb + CBK - 1) // CBK
        for s in range(n_slabs + 1):
            if s > 0:
                buf = (s - 1) & 1
                for l in range(CLOADS):  # noqa: E741
                    sa[buf, a_k + l * a_sk, a_m + l * a_sm] = pa[l]
                    sb[buf, b_k + l * b_sk, b_n + l * b_sn] = pb[l]
                # one barrier a slab: the buffer written was last read two slabs ago
                cuda.syncthreads()
            k0 = kb + s * CBK
            # --- A: gathered from the image ---
            if mode == FORWARD:
                k = k0 + a_k
                dr = r_a * dh
                dq = q_a * dw
                for l in range(CLOADS):  # noqa: E741
                    h = hb[l] + dr
                    w = wb[l] + dq
                    if k < ke and h >= 0 and h < ih and w >= 0 and w < iw:
                        pa[l] = a[base[l] + (h * iw + w) * ic + ch_a]
                    else:
                        pa[l] = 0
            elif mode == BACKPROP_INPUT:
                k = k0 + a_k
                dr = r_a * dh
                dq = q_a * dw
                for l in range(CLOADS):  # noqa: E741
                    hh = hb[l] - dr
                    ww = wb[l] - dq
                    pa[l] = 0
                    if k < ke and hh >= 0 and ww >= 0:
                        y = hh if sh == 1 else hh // sh
                        x = ww if sw == 1 else ww // sw
                        if y * sh == hh and x * sw == ww and y < oh and x < ow:
                            pa[l] = a[base[l] + (y * ow + x) * oc + ch_a]
            else:
                for l in range(CLOADS):  # noqa: E741
                    k = k0 + a_k + l * K_PER_LOAD
                    pa[l] = 0
                    if k < ke:
                        h = st_y[l] * sh + hb[0]
                        w = st_x[l] * sw + wb[0]
                        if h >= 0 and h < ih and w >= 0 and w < iw:
                            pa[l] = a[((st_img[l] * ih + h) * iw + w) * ic + base[0]]
                    x = st_x[l] + CBK
                    while x >= ow:
                        x -= ow
                        st_y[l] += 1
                        if st_y[l] == oh:
                            st_y[l] = 0
                            st_img[l] += 1
                    st_x[l] = x
            if walk_k_a:
                ch_a += CBK
                while ch_a >= cdim:
                    ch_a -= cdim
                    q_a += 1
                    if q_a == kw:
                        q_a = 0
                        r_a += 1
            # --- B: a matrix, read along its rows ---
            if mode == BACKPROP_INPUT:
                k = k0 + b_k
                off = tap_b * ic * oc + ch_b
                for l in range(CLOADS):  # noqa: E741
                    n = col0 + b_n + l * ROWS_PER_LOAD
                    if k < ke and n < n_total:
                        pb[l] = b[off + n * oc]
                    else:
                        pb[l] = 0
                ch_b += CBK
                while ch_b >= oc:
                    ch_b -= oc
                    tap_b += 1
            else:
                n = col0 + b_n
                for l in range(CLOADS):  # noqa: E741
                    k = k0 + b_k + l * K_PER_LOAD
                    if k < ke and n < n_total:
                        pb[l] = b[k * n_total + n]
                    else:
                        pb[l] = 0
            if s > 0:
                buf = (s - 1) & 1
                for kk in range(CBK):
                    for i in range(CREG):
                        ra[i] = sa[buf, kk, ty + i * CT]
                    for j in range(CREG):
                        rb[j] = sb[buf, kk, tx + j * CT]
                    for i in range(CREG):
                        for j in range(CREG):
                            acc[i, j] += ra[i] * rb[j]
        for i in range(CREG):
            r = row0 + ty + i * CT
            if r < m_total:
                for j in range(CREG):
                    col = col0 + tx + j * CT
                    if col < n_total:
                        c[out0 + r * n_total + col] = acc[i, j]
    return kernel


@cuda.jit(cache=True)
def sum_splits(partial, out, splits):
    """``out[i] = sum over z of partial[z * out.size + i]``, in float64, z in order."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = out.size
    while i < n:
        s = 0.0
        for z in range(splits):
            s += partial[z * n + i]
        out[i] = s
        i += stride


_kernels: dict[tuple[str, int], Any] = {}


def gemm_dims(mode: int, g: ConvGeometry, oc: int) -> tuple[int, int, int]:
    """(m, n, k) of ``mode``'s product."""
    if mode == FORWARD:
        return g.batch * g.out_h * g.out_w, oc, g.k_h * g.k_w * g.in_c
    if mode == BACKPROP_INPUT:
        return g.batch * g.in_h * g.in_w, g.in_c, g.k_h * g.k_w * oc
    return g.k_h * g.k_w * g.in_c, oc, g.batch * g.out_h * g.out_w


def plan_splits(m: int, n: int, k: int, splits: int | None = None) -> tuple[int, int]:
    """(splits, k_chunk): k cut into slab-aligned chunks when the output has
    too few tiles to fill the GPU (or ``splits`` as asked)."""
    tiles = math.ceil(m / CBLOCK) * math.ceil(n / CBLOCK)
    if splits is None:
        splits = 1
        if tiles < TARGET_BLOCKS and k >= 2 * MIN_SPLIT_K:
            splits = min(math.ceil(TARGET_BLOCKS / tiles), k // MIN_SPLIT_K)
    splits = max(1, min(int(splits), math.ceil(k / CBK)))
    chunk = math.ceil(math.ceil(k / splits) / CBK) * CBK
    return math.ceil(k / chunk), chunk


def implicit_gemm(mode: int, a: Any, b: Any, g: ConvGeometry, oc: int,
                  out_shape: tuple[int, ...], splits: int | None = None) -> Any:
    """Run ``mode``'s product on contiguous NHWC/HWIO device arrays of one
    float dtype; the result is a new device array of ``out_shape``."""
    dtype = np.dtype(a.dtype)
    m, n, k = gemm_dims(mode, g, oc)
    out = device_empty(out_shape, dtype)
    if out.size == 0:
        return out
    key = (dtype.name, mode)
    kern = _kernels.get(key)
    if kern is None:
        kern = _kernels[key] = conv_gemm(dtype.type, mode)
    # Python ints, always: numba types the tuple by its elements, and the launch
    # fast path (cuda.launch) keys a tuple argument by its type alone
    geo = tuple(int(v) for v in (g.batch, g.in_h, g.in_w, g.in_c, g.k_h, g.k_w, g.out_h,
                                 g.out_w, oc, g.stride[0], g.stride[1], g.dilation[0],
                                 g.dilation[1], g.pads[0], g.pads[2]))
    n_splits, chunk = plan_splits(m, n, max(k, 1), splits)
    grid = (math.ceil(n / CBLOCK), math.ceil(m / CBLOCK), n_splits)
    if n_splits == 1:
        launch(kern, grid, (CT, CT), flat(a), flat(b), flat(out), geo, chunk)
        return out
    partial = device_empty((n_splits * out.size,), dtype)
    launch(kern, grid, (CT, CT), flat(a), flat(b), partial, geo, chunk)
    blocks, threads = launch_1d(out.size)
    launch(sum_splits, blocks, threads, partial, flat(out), n_splits)
    return out
