"""CPU kernels for ``TopKV2`` (input, k) -> values, indices and ``InTopKV2``
(predictions, targets, k) -> precision, with TensorFlow's orders and rules.

TopKV2 (attrs ``sorted``, default True, and ``index_type``, default int32):
the k largest entries of each last-axis row, largest first; equal values
in index order (the lower index first); +NaN sorts above everything and
-NaN below everything (TF's CPU order since its NaN fix: +NaN, values
descending, -NaN), and -0.0 ties with 0.0. ``sorted=False`` gets the same,
sorted, result (TF leaves the order unspecified then).

InTopKV2: row b is True when ``targets[b]`` is a class whose prediction
fewer than k classes beat (strictly: ties are all inside the top k), and
False when the target is out of range or any prediction of the row is not
finite (TF's CPU kernel, which answers False there rather than failing).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["top_k_order"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_INDEX_TYPES = frozenset({"int16", "int32", "int64"})


def _scalar_k(op: str, k: Any) -> int:
    k = np.asarray(k)
    if k.ndim != 0 or k.dtype.kind not in "iu":
        raise KernelError(f"{op}: k must be an integer scalar, got {k.dtype} of shape "
                          f"{list(k.shape)}")
    return int(k)


def top_k_order(x: np.ndarray) -> np.ndarray:
    """Indices sorting each last-axis row of ``x``: +NaN first, then values
    descending, then -NaN; ties in index order (a stable sort)."""
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        if nan.any():
            group = np.where(nan, np.where(np.signbit(x), 2, 0), 1).astype(np.int8)
            key = np.where(nan, 0, -x)
            return np.lexsort((key, group), axis=-1)
        return np.argsort(-x, axis=-1, kind="stable")
    if x.dtype.kind in "iu":
        return np.argsort(~x, axis=-1, kind="stable")   # ~ reverses order, never overflows
    if x.dtype.kind == "b":
        return np.argsort(~x, axis=-1, kind="stable")
    raise KernelError(f"TopKV2: input of dtype {x.dtype} cannot be ranked; use a real "
                      "number type")


@KERNELS("TopKV2", CPU)
def top_k(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    k = _scalar_k("TopKV2", inputs[1])
    index_type = as_dtype(attrs.get("index_type", "int32"))
    if index_type.name not in _INDEX_TYPES:
        raise KernelError(f"TopKV2: index_type must be int16, int32 or int64, got {index_type}")
    if x.ndim < 1:
        raise KernelError(f"TopKV2: input must be >= 1-D, got shape {list(x.shape)}")
    if k < 0:
        raise KernelError(f"TopKV2: need k >= 0, got {k}")
    n = x.shape[-1]
    if n < k:
        raise KernelError(f"TopKV2: input must have at least k columns. Had {n}, needed {k}")
    if n > np.iinfo(index_type).max + 1:
        raise KernelError(f"TopKV2: {n} columns do not fit index_type {index_type}; use int64")
    if k == 0 or x.size == 0:
        shape = x.shape[:-1] + (k,)
        return [np.empty(shape, x.dtype), np.empty(shape, index_type)]
    order = top_k_order(x)[..., :k]
    return [np.take_along_axis(x, order, axis=-1), order.astype(index_type)]


@KERNELS("InTopKV2", CPU)
def in_top_k(inputs: list, attrs: dict) -> list:
    op = "InTopKV2"
    pred = np.asarray(inputs[0])
    targets = np.asarray(inputs[1])
    k = _scalar_k(op, inputs[2])
    if pred.ndim != 2:
        raise KernelError(f"{op}: predictions must be 2-dimensional (batch, classes), got "
                          f"shape {list(pred.shape)}")
    if pred.dtype.kind != "f":
        raise KernelError(f"{op}: predictions must be float, got {pred.dtype}")
    if targets.ndim != 1 or targets.dtype.kind not in "iu":
        raise KernelError(f"{op}: targets must be a 1-D vector of int32 or int64 class ids, "
                          f"got {targets.dtype} of shape {list(targets.shape)}")
    if targets.shape[0] != pred.shape[0]:
        raise KernelError(f"{op}: first dimension of predictions {pred.shape[0]} must match "
                          f"length of targets {targets.shape[0]}")
    batch, classes = pred.shape
    if batch == 0:
        return [np.zeros(0, bool)]
    valid = (targets >= 0) & (targets < classes)
    if classes == 0:
        return [np.zeros(batch, bool)]
    safe = np.where(valid, targets, 0).astype(np.intp)
    target_pred = pred[np.arange(batch), safe]
    finite = np.isfinite(pred).all(axis=1)
    beaten = np.count_nonzero(pred > target_pred[:, None], axis=1)
    return [valid & finite & (beaten < k)]
