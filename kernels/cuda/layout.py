"""Device-side layout changes for the convolutional GPU kernels: NCHW <-> NHWC
of a 4-D device array (one launch, a grid-stride loop over the output).

The convolution, pooling and batch-norm kernels compute in NHWC (TF's
default); an NCHW operand goes through :func:`to_nhwc` on the way in and the
result through :func:`from_nhwc` on the way out, as TF's CPU kernels do for
the formats they do not run natively. Numba-imported on the first GPU lookup
only (by the kernel modules that use it).
"""
from __future__ import annotations

from typing import Any

from numba import cuda

from kernels.cuda.launch import device_empty, flat, launch, launch_1d

__all__ = ["permute4", "to_nhwc", "from_nhwc"]


@cuda.jit(cache=True)
def permute4(x, out, d1, d2, d3, t0, t1, t2, t3):
    """``out`` (flat, of 4-D shape (., d1, d2, d3)) element (o0, o1, o2, o3)
    = ``x`` (flat) element ``o0*t0 + o1*t1 + o2*t2 + o3*t3``: ``t`` is the
    source's stride (in elements) of each output axis."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        r = i
        o3 = r % d3
        r //= d3
        o2 = r % d2
        r //= d2
        o1 = r % d1
        o0 = r // d1
        out[i] = x[o0 * t0 + o1 * t1 + o2 * t2 + o3 * t3]
        i += stride


def _permute(x: Any, perm: tuple[int, int, int, int]) -> Any:
    shape = tuple(x.shape)
    strides = (shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1)
    out_shape = tuple(shape[p] for p in perm)
    out = device_empty(out_shape, x.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(permute4, blocks, threads, flat(x), flat(out), out_shape[1], out_shape[2],
               out_shape[3], *(strides[p] for p in perm))
    return out


def to_nhwc(x: Any, nchw: bool) -> Any:
    """A contiguous 4-D device array ``x`` in NHWC (a new array when ``nchw``)."""
    return _permute(x, (0, 2, 3, 1)) if nchw else x


def from_nhwc(x: Any, nchw: bool) -> Any:
    """An NHWC device array back in the caller's layout."""
    return _permute(x, (0, 3, 1, 2)) if nchw else x

