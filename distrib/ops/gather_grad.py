"""The gradients of gathering, segmenting, partitioning and stitching (TF's
``array_grad.py`` and ``math_grad.py`` for these ops), and the ops gradients
stop at here: the scatter and sparse updates, ``Unique``, ``SparseToDense``.

The gradient of a gather along axis 0 with respect to its params is an
:class:`~distrib.ops.indexed_slices.IndexedSlices` of the incoming gradient's
rows at the gathered indices (TF's ``_GatherV2Grad``): nothing the size of
the table is built. Its ``dense_shape`` is a constant when the params' shape
is known (the table's), else a ``Shape`` of the params colocated with them.
Along another axis, or with ``batch_dims``, the gradient is dense, as TF's:
an ``UnsortedSegmentSum`` of the rows into the params' shape.

A gradient family, as :mod:`distrib.ops.math_grad` describes; installed into
the op catalogue by :mod:`distrib.ops.gradients`, importing this writes nothing.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


def _dense_shape(params: Tensor) -> Tensor:
    dims = params.shape.as_list()
    if dims is not None and None not in dims:
        return ops.constant(np.asarray(dims, np.int64), name="params_shape")
    with params.graph.colocate_with(params.op):
        return ops.shape(params, out_type=dtypes.int64, name="params_shape")


def _rows_grad(params: Tensor, indices: Tensor, grad: Tensor) -> IndexedSlices:
    """Axis 0, no batch dims: the gradient's rows, one per index (flattened)."""
    rest = params.shape.as_list()
    rest = None if rest is None else rest[1:]
    if rest is None or None in rest:
        raise InvalidArgumentError(f"the gradient of a gather from {params.name} needs its "
                                   "row shape known when the graph is built")
    values = ops.reshape(grad, [-1] + rest)
    flat = indices if indices.shape.rank == 1 else ops.reshape(indices, [-1])
    return IndexedSlices(values, flat, _dense_shape(params))


def _gather_v2_grad(op: Operation, grad: Tensor) -> list:
    params, indices = op.inputs
    axis, batch_dims = int(op.get_attr("axis")), int(op.get_attr("batch_dims"))
    rank = params.shape.rank
    if axis < 0 and rank is not None:
        axis += rank
    if batch_dims < 0 and indices.shape.rank is not None:
        batch_dims += indices.shape.rank
    if axis == 0 and batch_dims == 0:
        return [_rows_grad(params, indices, grad), None]
    return [_dense_gather_grad(params, indices, ops.convert_to_tensor(grad), axis,
                               batch_dims), None]


def _dense_gather_grad(params: Tensor, indices: Tensor, grad: Tensor, axis: int,
                       batch_dims: int) -> Tensor:
    """Along ``axis`` (after ``batch_dims`` batch dimensions): the batch and
    outer dims folded into the segment id, the rows summed, shape restored."""
    p, i = params.shape.as_list(), indices.shape.as_list()
    if p is None or i is None or None in p or None in i:
        raise InvalidArgumentError(f"the gradient of a gather along axis {axis} from "
                                   f"{params.name} needs the params' and indices' shapes known")
    batch, outer, n, inner = p[:batch_dims], p[batch_dims:axis], p[axis], p[axis + 1:]
    b, o = int(np.prod(batch)), int(np.prod(outer))
    k = int(np.prod(i[batch_dims:]))
    g = ops.reshape(grad, [b, o, k, int(np.prod(inner))])       # batch, outer, ids, inner
    g = ops.transpose(g, [0, 2, 1, 3])                           # batch, ids, outer, inner
    ids = ops.reshape(ops.cast(indices, dtypes.int64), [b, k])
    offsets = ops.constant((np.arange(b, dtype=np.int64) * n).reshape(b, 1), name="offsets")
    seg = ops.reshape(ops.add(ids, offsets), [-1])
    summed = array_gather.unsorted_segment_sum(ops.reshape(g, [b * k, o * int(np.prod(inner))]),
                                               seg, b * n)       # batch * n, outer * inner
    out = ops.reshape(summed, [b, n, o, int(np.prod(inner))])
    out = ops.transpose(out, [0, 2, 1, 3])
    return ops.reshape(out, p)


def _resource_gather_grad(op: Operation, grad: Tensor) -> list:
    if int(op.get_attr("batch_dims") or 0):
        raise InvalidArgumentError("the gradient of a ResourceGather with batch_dims is not "
                                   "supported; gather from the variable's value instead")
    return [_rows_grad(op.inputs[0], op.inputs[1], grad), None]


def _drop_negatives_gather(grad: Tensor, ids: Tensor) -> Tensor:
    """``grad[ids]``, zero where an id is negative (TF's ``_GatherDropNegatives``)."""
    clipped = ops.maximum(ids, ops.constant(0, dtype=ids.dtype))
    rows = array_gather.gather(grad, clipped)
    rest = grad.shape.as_list()
    rank = ids.shape.rank
    if rest is None or rank is None:
        return rows
    keep = ops.cast(ops.greater_equal(ids, ops.constant(0, dtype=ids.dtype)), grad.dtype)
    keep = ops.reshape(keep, (ids.shape.as_list() if ids.shape.is_fully_defined() else
                              [-1] + ids.shape.as_list()[1:]) + [1] * (len(rest) - 1))
    return ops.multiply(rows, keep)


def _unsorted_segment_sum_grad(op: Operation, grad: Tensor) -> list:
    return [_drop_negatives_gather(ops.convert_to_tensor(grad), op.inputs[1]), None, None]


def _segment_sum_grad(op: Operation, grad: Tensor) -> list:
    return [array_gather.gather(grad, op.inputs[1]), None]


def _segment_mean_grad(op: Operation, grad: Tensor) -> list:
    data, ids = op.inputs
    ones = ops.ones_like(ids, dtype=grad.dtype)
    counts = array_gather.segment_sum(ones, ids)
    rank = data.shape.rank
    if rank is None:
        raise InvalidArgumentError(f"the gradient of {op.name} needs the data's rank known")
    counts = ops.reshape(counts, [-1] + [1] * (rank - 1))
    return [array_gather.gather(ops.divide(grad, counts), ids), None]


def _dynamic_partition_grads(op: Operation, *grads: Tensor) -> list:
    """Each partition's gradient stitched back to the rows it came from."""
    data, partitions = op.inputs
    n = int(op.get_attr("num_partitions"))
    positions = array_gather.positions(partitions)
    parts = array_gather.dynamic_partition(positions, partitions, n)
    filled = [g if g is not None else ops.zeros_like(out) for g, out in zip(grads, op.outputs)]
    stitched = array_gather.dynamic_stitch(parts, [ops.convert_to_tensor(g) for g in filled])
    dims = data.shape.as_list()
    back = ops.reshape(stitched, dims if dims is not None and dims.count(None) <= 1 and
                       None not in dims[1:] else ops.shape(data))
    return [back, None]


def _dynamic_stitch_grads(op: Operation, grad: Tensor) -> list:
    n = int(op.get_attr("N"))
    g = ops.convert_to_tensor(grad)
    return [None] * n + [array_gather.gather(g, i) for i in op.inputs[:n]]


# -- the family's table -----------------------------------------------------------------
GRADIENTS: dict[str, Callable[..., list]] = {
    "GatherV2": _gather_v2_grad, "ResourceGather": _resource_gather_grad,
    "UnsortedSegmentSum": _unsorted_segment_sum_grad, "SegmentSum": _segment_sum_grad,
    "SegmentMean": _segment_mean_grad, "DynamicPartition": _dynamic_partition_grads,
    "DynamicStitch": _dynamic_stitch_grads,
}

NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "Unique", "SparseToDense", "ScatterAdd", "ScatterSub", "ScatterUpdate",
    "ScatterNdUpdate", "SparseApplyMomentum", "SparseApplyAdagrad", "SparseApplyRMSProp",
    "SparseApplyCenteredRMSProp", "SparseApplyFtrl", "SparseApplyFtrlV2",
)
