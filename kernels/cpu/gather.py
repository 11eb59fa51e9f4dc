"""CPU kernels that gather, segment, partition and stitch rows: the ops of
embeddings (TF's ``GatherV2``, ``ResourceGather``, ``UnsortedSegmentSum``,
``SegmentSum``, ``SegmentMean``, ``DynamicPartition``, ``DynamicStitch``,
``Unique``, ``SparseToDense``).

TF's CPU rules: an index outside ``[0, n)`` is an error naming it (TF's GPU
kernels write zeros instead; a wrong id must not pass silently on the CPU), a
negative segment id of an unsorted segment sum drops its row, and the segment
ops' ids must be sorted. A gather is ``np.take`` (one pass, a copy of the
rows only); a segment sum adds rows with ``np.add.at``, which numpy 2 runs
as a tight loop for a contiguous row of floats.

Kernels never mutate their inputs (:mod:`kernels.cpu.math`'s header).
"""
from __future__ import annotations

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["gather", "check_indices", "unsorted_segment_sum"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def check_indices(op: str, idx: np.ndarray, n: int, what: str = "indices") -> None:
    """An index outside ``[0, n)`` is a ``KernelError`` naming the first one (TF's message)."""
    if idx.size == 0:
        return
    if idx.dtype.kind not in "iu":
        raise KernelError(f"{op}: {what} must be integers, got {idx.dtype}")
    lo, hi = int(idx.min()), int(idx.max())
    if lo < 0 or hi >= n:
        flat = idx.reshape(-1)
        bad = int(np.flatnonzero((flat < 0) | (flat >= n))[0])
        raise KernelError(f"{op}: {what}[{bad}] = {int(flat[bad])} is not in [0, {n})")


def gather(op: str, params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int
           ) -> np.ndarray:
    """``params[:axis] + indices[batch_dims:] + params[axis + 1:]`` (TF's GatherV2)."""
    params, indices = np.asarray(params), np.asarray(indices)
    if axis < 0:
        axis += params.ndim
    if batch_dims < 0:
        batch_dims += indices.ndim
    if not 0 <= batch_dims <= axis < params.ndim or batch_dims > indices.ndim:
        raise KernelError(f"{op}: axis {axis} and batch_dims {batch_dims} do not fit params of "
                          f"shape {list(params.shape)} and indices of shape "
                          f"{list(indices.shape)}")
    check_indices(op, indices, params.shape[axis])
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    batch = params.shape[:batch_dims]
    if indices.shape[:batch_dims] != batch:
        raise KernelError(f"{op}: params {list(params.shape)} and indices "
                          f"{list(indices.shape)} differ in their first {batch_dims} dimensions")
    b = int(np.prod(batch))
    p = params.reshape((b,) + params.shape[batch_dims:])
    i = indices.reshape((b,) + indices.shape[batch_dims:])
    rows = [np.take(p[k], i[k], axis=axis - batch_dims) for k in range(b)]
    tail = params.shape[batch_dims:axis] + indices.shape[batch_dims:] + params.shape[axis + 1:]
    out = np.stack(rows) if rows else np.empty((0,) + tail, params.dtype)
    return out.reshape(batch + tail)


@KERNELS("GatherV2", CPU)
def gather_v2(inputs: list, attrs: dict) -> list:
    return [gather("GatherV2", inputs[0], inputs[1], int(attrs.get("axis", 0)),
                   int(attrs.get("batch_dims", 0)))]


@KERNELS("ResourceGather", CPU)
def resource_gather(inputs: list, attrs: dict) -> list:
    bd = int(attrs.get("batch_dims", 0))
    return [gather("ResourceGather", inputs[0], inputs[1], bd, bd)]


def unsorted_segment_sum(op: str, data: np.ndarray, ids: np.ndarray, num: int) -> np.ndarray:
    data, ids = np.asarray(data), np.asarray(ids)
    if data.shape[:ids.ndim] != ids.shape:
        raise KernelError(f"{op}: segment_ids of shape {list(ids.shape)} must be a prefix of "
                          f"the data's shape {list(data.shape)}")
    if num < 0:
        raise KernelError(f"{op}: num_segments must be >= 0, got {num}")
    rest = data.shape[ids.ndim:]
    out = np.zeros((num,) + rest, data.dtype)
    flat_ids = ids.reshape(-1)
    rows = data.reshape((flat_ids.size,) + rest)
    keep = flat_ids >= 0                     # TF drops the rows of a negative id
    if not keep.all():
        flat_ids, rows = flat_ids[keep], rows[keep]
    check_indices(op, flat_ids, num, "segment_ids")
    np.add.at(out, flat_ids, rows)
    return out


@KERNELS("UnsortedSegmentSum", CPU)
def unsorted_segment_sum_kernel(inputs: list, attrs: dict) -> list:
    num = np.asarray(inputs[2])
    if num.size != 1:
        raise KernelError(f"UnsortedSegmentSum: num_segments must be a scalar, got shape "
                          f"{list(num.shape)}")
    return [unsorted_segment_sum("UnsortedSegmentSum", inputs[0], inputs[1],
                                 int(num.reshape(())))]


def _sorted_segments(op: str, data: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, int]:
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != len(data):
        raise KernelError(f"{op}: segment_ids must be a vector of the data's first dimension "
                          f"({len(data)}), got shape {list(ids.shape)}")
    if ids.size and (ids.min() < 0 or np.any(np.diff(ids) < 0)):
        bad = int(np.flatnonzero(np.diff(ids) < 0)[0] + 1) if ids.min() >= 0 \
            else int(np.flatnonzero(ids < 0)[0])
        raise KernelError(f"{op}: segment ids are not increasing (or negative) at "
                          f"segment_ids[{bad}] = {int(ids[bad])}; sort them, or use "
                          "dt.math.unsorted_segment_sum")
    return ids, (int(ids[-1]) + 1 if ids.size else 0)


@KERNELS("SegmentSum", CPU)
def segment_sum(inputs: list, attrs: dict) -> list:
    data = np.asarray(inputs[0])
    ids, n = _sorted_segments("SegmentSum", data, inputs[1])
    return [unsorted_segment_sum("SegmentSum", data, ids, n)]


@KERNELS("SegmentMean", CPU)
def segment_mean(inputs: list, attrs: dict) -> list:
    data = np.asarray(inputs[0])
    ids, n = _sorted_segments("SegmentMean", data, inputs[1])
    total = unsorted_segment_sum("SegmentMean", data, ids, n)
    count = np.bincount(ids, minlength=n).reshape((n,) + (1,) * (data.ndim - 1))
    if data.dtype.kind in "iu":   # TF: integer division of the sum
        return [(total // np.maximum(count, 1)).astype(data.dtype)]
    return [(total / np.maximum(count, 1)).astype(data.dtype)]


@KERNELS("DynamicPartition", CPU)
def dynamic_partition(inputs: list, attrs: dict) -> list:
    data, parts = np.asarray(inputs[0]), np.asarray(inputs[1])
    n = int(attrs["num_partitions"])
    if data.shape[:parts.ndim] != parts.shape:
        raise KernelError(f"DynamicPartition: partitions of shape {list(parts.shape)} must be a "
                          f"prefix of the data's shape {list(data.shape)}")
    check_indices("DynamicPartition", parts, n, "partitions")
    flat = parts.reshape(-1)
    rows = data.reshape((flat.size,) + data.shape[parts.ndim:])
    return [rows[flat == i] for i in range(n)]


@KERNELS("DynamicStitch", CPU)
def dynamic_stitch(inputs: list, attrs: dict) -> list:
    n = int(attrs["N"])
    indices = [np.asarray(i) for i in inputs[:n]]
    data = [np.asarray(d) for d in inputs[n:]]
    rest = None
    for i, d in zip(indices, data):
        if d.shape[:i.ndim] != i.shape:
            raise KernelError(f"DynamicStitch: data of shape {list(d.shape)} does not start "
                              f"with its indices' shape {list(i.shape)}")
        tail = d.shape[i.ndim:]
        if rest is not None and tail != rest:
            raise KernelError(f"DynamicStitch: data rows of shape {list(tail)} and "
                              f"{list(rest)} differ")
        rest = tail
    size = max((int(i.max()) + 1 for i in indices if i.size), default=0)
    for i in indices:
        if i.size and i.min() < 0:
            raise KernelError(f"DynamicStitch: index {int(i.min())} is negative")
    out = np.zeros((size,) + (rest or ()), data[0].dtype if data else np.float32)
    for i, d in zip(indices, data):   # later inputs win, as TF's merge order
        out[i.reshape(-1)] = d.reshape((i.size,) + (rest or ()))
    return [out]


@KERNELS("Unique", CPU)
def unique(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    if x.ndim != 1:
        raise KernelError(f"Unique: x must be a vector, got shape {list(x.shape)}")
    out_idx = np.dtype(str(attrs.get("out_idx", "int32")))
    if x.size == 0:
        return [x.copy(), np.zeros(0, out_idx)]
    values, first, inverse = np.unique(x, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")         # TF: in order of first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return [values[order], rank[inverse.reshape(-1)].astype(out_idx)]


@KERNELS("SparseToDense", CPU)
def sparse_to_dense(inputs: list, attrs: dict) -> list:
    idx, shape = np.asarray(inputs[0]), np.asarray(inputs[1]).reshape(-1)
    values, default = np.asarray(inputs[2]), np.asarray(inputs[3])
    if default.size != 1:
        raise KernelError("SparseToDense: default_value must be a scalar")
    dims = tuple(int(d) for d in shape)
    coords = idx.reshape(-1, 1) if idx.ndim < 2 else idx
    if coords.shape[1] != len(dims):
        raise KernelError(f"SparseToDense: indices of shape {list(idx.shape)} do not address "
                          f"an output of rank {len(dims)}")
    n = coords.shape[0]
    if values.ndim and values.shape != (n,):
        raise KernelError(f"SparseToDense: sparse_values has shape {list(values.shape)}; "
                          f"want [{n}] or a scalar")
    out = np.full(dims, default.reshape(()), values.dtype)
    for k, d in enumerate(dims):
        check_indices("SparseToDense", coords[:, k], d, f"sparse_indices[:, {k}]")
    if attrs.get("validate_indices", True) and n > 1:
        flat = np.ravel_multi_index(tuple(coords.T), dims) if dims else np.zeros(n, np.int64)
        step = np.diff(flat)
        if np.any(step <= 0):
            bad = int(np.flatnonzero(step <= 0)[0] + 1)
            why = "repeated" if step[bad - 1] == 0 else "out of order"
            raise KernelError(f"SparseToDense: indices[{bad}] = {coords[bad].tolist()} is "
                              f"{why}; sort the indices (dt.sparse.reorder) or pass "
                              "validate_indices=False")
    if n:
        out[tuple(coords.T)] = values
    return [out]

