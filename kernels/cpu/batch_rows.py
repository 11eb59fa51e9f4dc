"""CPU kernels of the per-row ops a vectorized queue runner makes
(``distrib.train.input.vectorize``): ``BatchSlice``, a ``Slice`` with its
own begin for each row of a batch (a per-example random crop), and
``BatchSelect``, a ``SelectV2`` with one condition per row (a per-example
random flip). TF's pfor converts the first with a gather and the second
with TF1's row-wise ``Select``.

Row ``i`` of ``BatchSlice`` is ``input[i][begin[i, 0]:begin[i, 0] + size[0],
...]``; ``size`` (an attr, as the per-example ``Slice`` has it) is the same
for every row, so the rows stack: one fancy index into a sliding-window view
of the input copies them all (90 us for 128 CIFAR crops, a loop over the
rows 310 us). ``BatchSelect`` copies whole rows: 350 us for 128 flips, where
``SelectV2``'s elementwise choice through a broadcast condition takes 1 ms.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kernels.registry import CPU, KernelError, KernelTable

__all__: list[str] = []

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


@KERNELS("BatchSlice", CPU)
def batch_slice(inputs: list, attrs: dict) -> list:
    """``input`` [n, d1..dk], ``begin`` [n, k] int, attr ``size`` [k] -> [n, s1..sk]."""
    x, begin = np.asarray(inputs[0]), np.asarray(inputs[1])
    rank = x.ndim - 1
    size = [int(s) for s in attrs["size"]]
    if begin.ndim != 2 or begin.shape[0] != x.shape[0] or begin.shape[1] != rank \
            or len(size) != rank or begin.dtype.kind not in "iu":
        raise KernelError(f"BatchSlice: begin must be integers of shape [{x.shape[0]}, "
                          f"{rank}] and size {rank} long for an input of shape "
                          f"{list(x.shape)}; got begin {begin.dtype} {list(begin.shape)}, "
                          f"size {size}")
    dims = x.shape[1:]
    if any(s < 0 for s in size):
        raise KernelError(f"BatchSlice: size {size} must be known (no -1): rows cut from "
                          "different begins to the end would not stack")
    if any(s > d for s, d in zip(size, dims)) or (len(begin) and (
            (begin < 0).any() or (begin + np.asarray(size) > np.asarray(dims)).any())):
        raise KernelError(f"BatchSlice: a begin of {begin.tolist()} with size {size} reaches "
                          f"outside rows of shape {list(dims)}")
    if rank == 0:
        return [x.copy()]
    windows = sliding_window_view(x, size, axis=tuple(range(1, rank + 1)))
    return [windows[(np.arange(len(begin)), *begin.T)]]


@KERNELS("BatchSelect", CPU)
def batch_select(inputs: list, attrs: dict) -> list:
    """``condition`` [n] bool, ``t`` and ``e`` [n, ...] of one shape -> row ``i``
    of ``t`` where ``condition[i]``, else of ``e``."""
    cond, t, e = (np.asarray(v) for v in inputs)
    if cond.dtype != np.bool_ or cond.ndim != 1 or t.shape != e.shape or t.ndim < 1 \
            or t.shape[0] != cond.shape[0]:
        raise KernelError(f"BatchSelect: a bool condition per row and two values of one "
                          f"shape, got {cond.dtype} {list(cond.shape)}, {list(t.shape)} and "
                          f"{list(e.shape)}")
    out = np.array(e, dtype=np.result_type(t, e))
    out[cond] = t[cond]
    return [out]
