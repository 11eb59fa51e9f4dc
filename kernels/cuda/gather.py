"""GPU kernels for the embeddings' training path: ``GatherV2`` and
``ResourceGather`` along axis 0 (the lookup), ``UnsortedSegmentSum`` (the
gradient of a lookup, densified, and the bags' pooling) and ``ScatterAdd``/
``ScatterSub`` into a device variable (a sparse update).

- gather: one thread per output element, ``out[r, c] = params[ids[r], c]``;
- segment sum and scatter add: one thread per input element, added into its
  row with ``cuda.atomic.add`` (repeated ids add; the order of the adds, and
  so the last bits of a float sum, is the hardware's, as TF's GPU kernels).

The ids are checked on the host first (they are small: a batch's ids, not the
table), so a wrong id is the CPU kernel's error naming it, never a silent
zero row (TF's GPU gather writes zeros). float32 and float64 values with
int32 or int64 ids run on the device; any other case (another axis, batch
dims, other dtypes) runs the CPU kernel on a host copy.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from kernels.cpu import sparse_update
from kernels.cpu.gather import check_indices
from kernels.cuda.devices import copy_in, is_device_array, to_host
from kernels.cuda.launch import (
    as_device,
    device_empty,
    device_filled,
    flat,
    gpu_kernel,
    host_fallback,
    launch,
    launch_1d,
)
from kernels.registry import KernelError

__all__ = ["gather_rows", "segment_add_rows", "scatter_rows"]

_VALUES = (np.dtype(np.float32), np.dtype(np.float64))
_IDS = (np.dtype(np.int32), np.dtype(np.int64))


@cuda.jit(cache=True)
def gather_rows(params, ids, out, row):
    """out[i] = params[ids[i // row] * row + i % row]."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < out.size:
        r = i // row
        out[i] = params[ids[r] * row + i - r * row]
        i += step


@cuda.jit(cache=True)
def segment_add_rows(data, ids, out, row):
    """out[ids[i // row], i % row] += data[i]; a negative id drops its row."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < data.size:
        r = i // row
        seg = ids[r]
        if seg >= 0:
            cuda.atomic.add(out, seg * row + i - r * row, data[i])
        i += step


@cuda.jit(cache=True)
def scatter_rows(var, ids, updates, row, sign):
    """var[ids[i // row], i % row] += sign * updates[i]."""
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < updates.size:
        r = i // row
        cuda.atomic.add(var, ids[r] * row + i - r * row, sign * updates[i])
        i += step


def _host_ids(op: str, ids: Any, n: int) -> np.ndarray | None:
    """The ids on the host, checked against ``[0, n)``; None for dtypes the device skips."""
    host = np.asarray(to_host(ids))
    if host.dtype not in _IDS:
        return None
    check_indices(op, host, n)
    return host


def _run(kern: Any, size: int, *args: Any) -> None:
    if size:
        blocks, threads = launch_1d(size)
        launch(kern, blocks, threads, *args)


def _gather(op: str, inputs: list, attrs: dict, axis: int, batch_dims: int) -> list:
    params = as_device(inputs[0])
    if (axis, batch_dims) != (0, 0) or np.dtype(params.dtype) not in _VALUES or params.ndim < 1:
        return host_fallback(op, inputs, attrs)
    ids = _host_ids(op, inputs[1], params.shape[0])
    if ids is None:
        return host_fallback(op, inputs, attrs)
    row = int(np.prod(params.shape[1:]))
    out = device_empty(ids.shape + tuple(params.shape[1:]), params.dtype)
    _run(gather_rows, out.size, flat(params), as_device(ids.reshape(-1)), flat(out), row)
    return [out]


@gpu_kernel("GatherV2")
def gather_v2(inputs: list, attrs: dict) -> list:
    axis = int(attrs.get("axis", 0))
    return _gather("GatherV2", inputs, attrs, axis if axis >= 0 else axis + len(inputs[0].shape),
                   int(attrs.get("batch_dims", 0)))


@gpu_kernel("ResourceGather")
def resource_gather(inputs: list, attrs: dict) -> list:
    bd = int(attrs.get("batch_dims", 0))
    return _gather("ResourceGather", inputs, attrs, bd, bd)


@gpu_kernel("UnsortedSegmentSum")
def unsorted_segment_sum(inputs: list, attrs: dict) -> list:
    op = "UnsortedSegmentSum"
    data = as_device(inputs[0])
    num = int(np.asarray(to_host(inputs[2])).reshape(()))
    ids = np.asarray(to_host(inputs[1]))
    if (np.dtype(data.dtype) not in _VALUES or ids.dtype not in _IDS or num < 0
            or tuple(data.shape[:ids.ndim]) != ids.shape):
        return host_fallback(op, inputs, attrs)
    check_indices(op, ids[ids >= 0], num, "segment_ids")
    rest = tuple(data.shape[ids.ndim:])
    row = int(np.prod(rest))
    out = device_filled((num,) + rest, np.dtype(data.dtype), 0)
    _run(segment_add_rows, data.size, flat(data), as_device(ids.reshape(-1)), flat(out), row)
    return [out]


def _scatter(op: str, sign: float, inputs: list, attrs: dict) -> list:
    var = inputs[0]
    if not is_device_array(var):
        raise KernelError(f"{op}: the variable must be a device array to update it on the "
                          f"GPU, got {type(var).__name__}")
    dtype = np.dtype(var.dtype)
    ids = _host_ids(op, inputs[1], var.shape[0] if var.ndim else 0)
    upd = np.asarray(to_host(inputs[2])) if not is_device_array(inputs[2]) else inputs[2]
    want = (ids.shape if ids is not None else ()) + tuple(var.shape[1:])
    if ids is None or dtype not in _VALUES or tuple(upd.shape) != want \
            or np.dtype(upd.dtype) != dtype:
        host = to_host(var)   # a case the device code does not cover: the CPU kernel
        fn = sparse_update.scatter_add if sign > 0 else sparse_update.scatter_sub
        fn([host, to_host(inputs[1]), to_host(inputs[2])], attrs)
        copy_in(var, host)
        return [var]
    row = int(np.prod(var.shape[1:]))
    _run(scatter_rows, int(np.prod(want)), flat(var), as_device(ids.reshape(-1)),
         flat(as_device(upd)), row, dtype.type(sign))
    return [var]


@gpu_kernel("ScatterAdd")
def scatter_add(inputs: list, attrs: dict) -> list:
    return _scatter("ScatterAdd", 1.0, inputs, attrs)


@gpu_kernel("ScatterSub")
def scatter_sub(inputs: list, attrs: dict) -> list:
    return _scatter("ScatterSub", -1.0, inputs, attrs)
