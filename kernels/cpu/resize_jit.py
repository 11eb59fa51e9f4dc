"""A numba loop behind the bilinear resize (:mod:`kernels.cpu.image_resize`):
one ``[h, w, c]`` image to ``[out_h, out_w, c]`` float32, from the rows,
columns and weights TF's rules give (``_bilinear_axis``).

numpy's way gathers four whole-size copies of the image (the top and bottom
rows at the left and right columns) and combines them in three passes of
temporaries: 6.4 ms for a 224x224x3 output of ResNet's ImageNet crop, two
thirds of the image's preprocessing; this loop reads each source pixel where
it lies and writes once. The arithmetic is TF's, in float32 and in its order
(top and bottom along x, then y; no fast-math), so both ways give the same
bits. Imported only by :mod:`kernels.cpu.jit_loader`'s thread.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy", "boundscheck": False}


@njit(**_OPTS)
def bilinear(x, y_lo, y_hi, y_lerp, x_lo, x_hi, x_lerp, out):  # noqa: ANN001, ANN201 - numba
    """``out`` = the bilinear resize of ``x`` (one image, [h, w, c]) by the axes given."""
    out_h, out_w, channels = out.shape
    for i in range(out_h):
        r0, r1, yl = y_lo[i], y_hi[i], y_lerp[i]
        for j in range(out_w):
            c0, c1, xl = x_lo[j], x_hi[j], x_lerp[j]
            for k in range(channels):
                tl = np.float32(x[r0, c0, k])
                tr = np.float32(x[r0, c1, k])
                bl = np.float32(x[r1, c0, k])
                br = np.float32(x[r1, c1, k])
                top = tl + (tr - tl) * xl
                bottom = bl + (br - bl) * xl
                out[i, j, k] = top + (bottom - top) * yl


def warm(dtype: np.dtype) -> None:
    """Compile (or load from the disk cache) the loop for uint8 and ``dtype`` images."""
    idx, lerp = np.zeros(2, np.int64), np.zeros(2, np.float32)
    out = np.empty((2, 2, 1), np.float32)
    for source in (np.uint8, dtype):
        bilinear(np.ones((2, 2, 1), source), idx, idx, lerp, idx, idx, lerp, out)
