"""numba loop behind :mod:`kernels.cpu.conv_gemm`'s input gradient: col2im,
the scatter-add of a tile of ``dy @ w^T`` rows into the padded input
gradient.

numpy does the same add one tap at a time, as a strided add whose innermost
run is one pixel's channels: 3 floats for an RGB input, where the per-run
overhead dominates (the CIFAR-10 model's first layer: 45 ms for numpy's 25
adds, 6 ms here, on this project's 2-core VM). Imported only by
:mod:`kernels.cpu.jit_loader`'s thread; ``import kernels`` never imports it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def col2im(cols, dxp, n0, h0, sh, sw, dh, dw, c0):   # noqa: ANN001, ANN201
    """``dxp[n0 + n, (h0 + i)*sh + a*dh, j*sw + b*dw, c0 + q] += cols[n, i, j, a, b, q]``:
    ``cols`` ``(images, rows, out_w, k_h, k_w, channels)``, ``dxp`` NHWC, both
    C-contiguous. Without column dilation or groups a tap row's ``k_w *
    channels`` values land on consecutive elements: one contiguous run."""
    nb, rows, ow, kh, kw, cg = cols.shape
    _, _, wp, depth = dxp.shape
    if dw == 1 and cg == depth:
        run = kw * cg
        hp = dxp.shape[1]
        df = dxp.reshape(dxp.size)
        cf = cols.reshape(cols.size)
        for n in range(nb):
            for i in range(rows):
                for a in range(kh):
                    d0 = ((n0 + n) * hp + (h0 + i) * sh + a * dh) * wp * depth
                    s0 = ((n * rows + i) * ow * kh + a) * run
                    for j in range(ow):
                        d = d0 + j * sw * depth
                        s = s0 + j * kh * run
                        for t in range(run):
                            df[d + t] += cf[s + t]
        return
    for n in range(nb):
        for i in range(rows):
            for a in range(kh):
                r = (h0 + i) * sh + a * dh
                for j in range(ow):
                    for b in range(kw):
                        dst = dxp[n0 + n, r, j * sw + b * dw]
                        src = cols[n, i, j, a, b]
                        for q in range(cg):
                            dst[c0 + q] += src[q]


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) the loop for ``dtype``."""
    col2im(np.zeros((1, 1, 1, 1, 1, 1), dtype), np.zeros((1, 1, 1, 1), dtype), 0, 0, 1, 1, 1,
           1, 0)
