"""Reducing ``IndexedSlices`` across replicas: the replicas' rows gathered,
never densified (TF's ``cross_device_utils.aggregate_indexed_slices_gradients``
and ``CollectiveAllReduce``'s all-gather of sparse gradients).

A sum of sparse gradients is their concatenation (repeated indices add when
the update applies them): the local replicas' values and indices are joined
on one device, and under ``MultiWorkerMirroredStrategy`` each worker's are
all-gathered (their lengths, then values and indices padded to the longest,
the padding dropped after: TF's ``all_gather_indexed_slices``), so a step
moves the rows every worker touched, not the table. ``MEAN`` divides the
values by the replicas in sync. Every destination gets the result.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import get_default_graph
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat
from distrib.ops.indexed_slices import IndexedSlices

__all__ = ["reduce_indexed_slices"]


def _joined(slices: Sequence[IndexedSlices]) -> tuple[Any, Any]:
    if len(slices) == 1:
        return slices[0].values, slices[0].indices
    dtype = slices[0].indices.dtype
    return (concat([s.values for s in slices], 0, name="values"),
            concat([s.indices if s.indices.dtype == dtype else ops.cast(s.indices, dtype)
                    for s in slices], 0, name="indices"))


def _gather_across_workers(cross_device: Any, workers: int, values: Any, indices: Any
                           ) -> tuple[Any, Any]:
    """Every worker's rows and indices, in rank order. Workers' slices differ in
    length (each its own ids), and an all-gather takes equal shapes: as TF's
    ``all_gather_indexed_slices``, the lengths are gathered first, each worker
    pads its rows to the longest, and the padding is dropped after the gather."""
    rest = values.shape.as_list()
    if rest is None:
        raise InvalidArgumentError(f"all-gathering the sparse gradient {values.name} across "
                                   "workers needs its rank known")
    rest = rest[1:]
    i32 = dtypes.int32
    mine = ops.reshape(array_gather.slice_first(ops.shape(values, out_type=i32)), [1])
    counts = cross_device.all_gather_across_workers(mine)            # [workers]
    most = ops.reduce_max(counts)
    zero = ops.constant([0], dtype=i32)
    after = ops.subtract(ops.reshape(most, [1]), mine)
    pairs = [zero, after] + [ops.constant([0, 0], dtype=i32)] * len(rest)
    padded = ops.op_output("Pad", [values, ops.reshape(concat(pairs, 0), [len(rest) + 1, 2])],
                           {"paddings": None}, "pad_rows")
    padded_ids = ops.op_output("Pad", [indices, ops.reshape(concat([zero, after], 0), [1, 2])],
                               {"paddings": None}, "pad_ids")
    rows = cross_device.all_gather_across_workers(padded)            # [workers * most, ...]
    ids = cross_device.all_gather_across_workers(padded_ids)
    at = array_gather.positions(ids)                                 # 0 .. workers * most - 1
    owner = ops.op_output("FloorDiv", [at, most], None, "owner")
    real = ops.cast(ops.less(ops.op_output("FloorMod", [at, most], None, "row"),
                             array_gather.gather(counts, owner)), i32)
    values = array_gather.dynamic_partition(rows, real, 2)[1]
    indices = array_gather.dynamic_partition(ids, real, 2)[1]
    return ops.reshape(values, [-1] + rest), indices


def reduce_indexed_slices(cross_device: Any, reduce_op: str, slices: Sequence[IndexedSlices],
                          destinations: Sequence[str], num_replicas_in_sync: int
                          ) -> list[IndexedSlices]:
    """The SUM (or MEAN) of one ``IndexedSlices`` per local replica, one per destination."""
    graph = get_default_graph()
    workers = int(getattr(cross_device, "num_workers", 1) or 1)
    home = cross_device.worker_devices[0] if workers > 1 else (
        getattr(cross_device, "reduce_to_device", None) or destinations[0])
    with graph.device(home):
        values, indices = _joined(list(slices))
        if workers > 1:   # every worker's rows, in rank order
            values, indices = _gather_across_workers(cross_device, workers, values, indices)
        if str(reduce_op).upper().endswith("MEAN") and num_replicas_in_sync > 1:
            values = ops.divide(values, ops.cast(float(num_replicas_in_sync), values.dtype))
    out = []
    for dest in destinations:
        with graph.device(dest):
            out.append(IndexedSlices(ops.identity(values), ops.identity(indices),
                                     slices[0].dense_shape))
    return out
