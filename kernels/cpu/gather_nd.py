"""CPU kernels of TF's n-dimensional index ops: ``GatherNd``, ``ScatterNd``
and ``TensorScatterUpdate``/``Add``/``Sub``.

An index row of ``indices`` (its last dimension, K long) names an element
(K = rank) or a slice (K < rank) of the indexed tensor; the ops gather or
scatter those slices. TF's rules: a row outside the shape is an error naming
it (``indices[1] = [5] does not index into shape [4]``, as the CPU kernels
say; TF's GPU kernels write zeros instead, which is not copied here);
``ScatterNd`` and ``TensorScatterAdd`` sum repeated rows; the update writes
rows in order, so the last of a repeated row wins. Nothing is written into
an input: the tensor ops copy theirs first.
"""
from __future__ import annotations

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["KERNELS", "flat_rows"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def flat_rows(indices: np.ndarray, shape: tuple[int, ...], op: str, what: str) -> np.ndarray:
    """The index rows of ``indices`` as flat positions into the first K
    dimensions of ``shape`` (a ``KernelError`` naming a row outside them)."""
    if indices.dtype.kind not in "iu":
        raise KernelError(f"{op}: indices must be int32 or int64, got {indices.dtype}")
    if indices.ndim < 1:
        raise KernelError(f"{op}: indices must be at least a vector, got a scalar")
    k = indices.shape[-1]
    if k > len(shape):
        raise KernelError(f"{op}: the index depth {k} (indices' last dimension) exceeds the "
                          f"rank {len(shape)} of {what} shape {list(shape)}")
    rows = indices.reshape(-1, k).astype(np.int64)
    lead = np.asarray(shape[:k], dtype=np.int64)
    bad = np.nonzero(((rows < 0) | (rows >= lead)).any(axis=1))[0]
    if bad.size:
        i = int(bad[0])
        where = np.unravel_index(i, indices.shape[:-1]) if indices.ndim > 1 else ()
        label = "indices" + (f"[{','.join(str(int(w)) for w in where)}]" if where else "")
        raise KernelError(f"{op}: {label} = [{', '.join(str(int(v)) for v in rows[i])}] does "
                          f"not index into {what + ' ' if what else ''}shape {list(shape)}")
    if k == 0:
        return np.zeros(rows.shape[0], dtype=np.int64)
    return np.ravel_multi_index(tuple(rows.T), tuple(shape[:k]))


def _slices(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` viewed as [positions of its first k dimensions, rest]."""
    return x.reshape((int(np.prod(x.shape[:k], dtype=np.int64)),) + x.shape[k:])


@KERNELS("GatherNd", CPU)
def gather_nd(inputs: list, attrs: dict) -> list:
    params, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
    flat = flat_rows(indices, params.shape, "GatherNd", "param")
    k = indices.shape[-1]
    out = _slices(params, k)[flat]
    return [out.reshape(indices.shape[:-1] + params.shape[k:])]


def _check_updates(indices: np.ndarray, updates: np.ndarray, shape: tuple, op: str) -> None:
    want = indices.shape[:-1] + tuple(shape[indices.shape[-1]:])
    if updates.shape != want:
        raise KernelError(f"{op}: updates must have shape indices.shape[:-1] + "
                          f"shape[indices.shape[-1]:] = {list(want)}, got "
                          f"{list(updates.shape)}")


def _scatter(target: np.ndarray, indices: np.ndarray, updates: np.ndarray, mode: str,
             op: str) -> np.ndarray:
    flat = flat_rows(indices, target.shape, op, "")
    _check_updates(indices, updates, target.shape, op)
    k = indices.shape[-1]
    rows = _slices(target, k)
    vals = updates.reshape((flat.shape[0],) + target.shape[k:]).astype(target.dtype, copy=False)
    if mode == "update":
        rows[flat] = vals
    elif mode == "add":
        np.add.at(rows, flat, vals)
    else:
        np.subtract.at(rows, flat, vals)
    return target


@KERNELS("ScatterNd", CPU)
def scatter_nd(inputs: list, attrs: dict) -> list:
    indices, updates, shape = (np.asarray(v) for v in inputs)
    if shape.ndim != 1 or shape.dtype.kind not in "iu" or (shape < 0).any():
        raise KernelError(f"ScatterNd: shape must be a vector of non-negative integers, got "
                          f"{shape.tolist()}")
    target = np.zeros(tuple(int(d) for d in shape), dtype=updates.dtype)
    return [_scatter(target, indices, updates, "add", "ScatterNd")]


def _tensor_scatter(inputs: list, mode: str, op: str) -> list:
    tensor, indices, updates = (np.asarray(v) for v in inputs)
    return [_scatter(tensor.copy(), indices, updates, mode, op)]


@KERNELS("TensorScatterUpdate", CPU)
def tensor_scatter_update(inputs: list, attrs: dict) -> list:
    return _tensor_scatter(inputs, "update", "TensorScatterUpdate")


@KERNELS("TensorScatterAdd", CPU)
def tensor_scatter_add(inputs: list, attrs: dict) -> list:
    return _tensor_scatter(inputs, "add", "TensorScatterAdd")


@KERNELS("TensorScatterSub", CPU)
def tensor_scatter_sub(inputs: list, attrs: dict) -> list:
    return _tensor_scatter(inputs, "sub", "TensorScatterSub")
