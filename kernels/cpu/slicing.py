"""CPU kernels that cut, pad, reverse, choose and shuffle (TF's
``StridedSlice``, ``Slice``, ``Pad``, ``ReverseV2``, ``SelectV2``,
``RandomShuffle``) and the gradient of a strided slice (``StridedSliceGrad``).

A strided slice is a numpy basic index built from TF's spec (begin, end,
strides and the five bit masks: bit ``i`` of a mask is about entry ``i`` of
the spec, not about dimension ``i``, which an ellipsis or a new axis
shifts), so its clamping of out-of-range bounds is numpy's, which is TF's.
Results are views of their input where numpy gives one (as TF forwards
buffers); kernels never mutate their inputs (:mod:`kernels.cpu.math`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu.math import rng
from kernels.cpu.slice_spec import strided_index
from kernels.registry import CPU, KernelError, KernelTable

__all__: list[str] = []

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


@KERNELS("StridedSlice", CPU)
def strided_slice(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    try:
        return [np.asarray(x[strided_index(attrs)])]
    except IndexError as e:
        raise KernelError(f"StridedSlice of shape {list(x.shape)}: {e}; a shrunk index must "
                          "lie inside its dimension") from None


@KERNELS("StridedSliceGrad", CPU)
def strided_slice_grad(inputs: list, attrs: dict) -> list:
    """``dy`` scattered into zeros of the sliced input's shape (input 1: that input)."""
    dy, shape = np.asarray(inputs[0]), np.shape(inputs[1])
    out = np.zeros(shape, dtype=dy.dtype)
    out[strided_index(attrs)] = dy
    return [out]


def _slice_bounds(x: np.ndarray, begin: Any, size: Any) -> tuple[slice, ...]:
    begin = [int(b) for b in np.asarray(begin).reshape(-1)]
    size = [int(s) for s in np.asarray(size).reshape(-1)]
    if len(begin) != x.ndim or len(size) != x.ndim:
        raise KernelError(f"Slice: begin {begin} and size {size} need one entry per dimension "
                          f"of shape {list(x.shape)}")
    index = []
    for b, s, d in zip(begin, size, x.shape):
        s = d - b if s == -1 else s
        if b < 0 or s < 0 or b + s > d:
            raise KernelError(f"Slice: begin {begin} and size {size} reach outside shape "
                              f"{list(x.shape)}")
        index.append(slice(b, b + s))
    return tuple(index)


@KERNELS("Slice", CPU)
def slice_(inputs: list, attrs: dict) -> list:
    """TF's ``Slice``: ``size`` elements from ``begin`` (input 1 when given, else the attr)."""
    x = np.asarray(inputs[0])
    begin = inputs[1] if len(inputs) > 1 else attrs["begin"]
    return [x[_slice_bounds(x, begin, attrs["size"])]]


@KERNELS("Pad", CPU)
def pad(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    paddings = np.asarray(inputs[1] if len(inputs) > 1 else attrs["paddings"]).reshape(-1, 2)
    if paddings.shape[0] != x.ndim or (paddings < 0).any():
        raise KernelError(f"Pad: paddings {paddings.tolist()} need one non-negative "
                          f"[before, after] pair per dimension of shape {list(x.shape)}")
    value = attrs.get("constant_values", 0)
    return [np.pad(x, [(int(a), int(b)) for a, b in paddings], constant_values=value)]


@KERNELS("ReverseV2", CPU)
def reverse_v2(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis = [int(a) for a in np.asarray(attrs.get("axis") or []).reshape(-1)]
    if any(not -x.ndim <= a < x.ndim for a in axis) or len(set(a % max(x.ndim, 1)
                                                              for a in axis)) != len(axis):
        raise KernelError(f"ReverseV2: axis {axis} must be distinct dimensions of a "
                          f"rank-{x.ndim} tensor")
    return [np.flip(x, axis=tuple(axis)) if axis else x]


@KERNELS("SelectV2", CPU)
def select_v2(inputs: list, attrs: dict) -> list:
    cond, t, e = (np.asarray(v) for v in inputs)
    if cond.dtype != np.bool_:
        raise KernelError(f"SelectV2: the condition must be bool, got {cond.dtype}")
    try:
        return [np.where(cond, t, e).astype(np.result_type(t, e), copy=False)]
    except ValueError:
        raise KernelError(f"SelectV2: shapes {list(cond.shape)}, {list(t.shape)} and "
                          f"{list(e.shape)} do not broadcast") from None


@KERNELS("RandomShuffle", CPU)
def random_shuffle(inputs: list, attrs: dict) -> list:
    """The input's rows (first dimension) in a random order (a random op: its
    generator is the executor's, see ``kernels.cpu.math.rng_attrs``)."""
    x = np.asarray(inputs[0])
    if x.ndim == 0:
        return [x]
    gen = rng(attrs)
    return [x[gen.permutation(x.shape[0])]]
