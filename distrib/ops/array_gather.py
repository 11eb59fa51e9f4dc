"""Gathering, scattering and segmenting: ``dt.gather`` (``GatherV2``, or
``ResourceGather`` for a variable), ``dt.scatter_add``/``scatter_sub``/
``scatter_update``/``scatter_nd_update``, ``dt.math.unsorted_segment_sum``,
``segment_sum``, ``segment_mean``, ``dt.dynamic_partition``,
``dt.dynamic_stitch``, ``dt.unique``, ``dt.sparse_to_dense`` (TF's names,
arguments and defaults; docs/ops.md lists the ops).

One rule beyond TF1's ref variables, taken from TF2's resource variables:
``dt.gather(variable, ids)`` reads only the rows, where the variable lives
(``variable.sparse_read``: a ``ResourceGather`` colocated with it), so an
embedding table never leaves its parameter server; only the ids go there and
the rows come back. Its gradient is an ``IndexedSlices`` of those rows
(:mod:`distrib.ops.gather_grad`).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import auto_deps, dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops import slicing_ops

__all__ = ["gather", "sparse_read", "unsorted_segment_sum", "segment_sum", "segment_mean",
           "dynamic_partition", "dynamic_stitch", "unique", "sparse_to_dense", "scatter_add",
           "scatter_sub", "scatter_update", "scatter_nd_update"]


def _is_variable(x: Any) -> bool:
    return hasattr(x, "shared_name") and hasattr(x, "_ref")


def gather(params: Any, indices: Any, validate_indices: Any = None, name: str | None = None,
           axis: Any = None, batch_dims: int = 0) -> Tensor:
    """Rows (slices along ``axis``) of ``params`` at ``indices`` (``tf.gather``):
    shape ``params[:axis] + indices[batch_dims:] + params[axis + 1:]``."""
    axis = batch_dims if axis is None else int(axis)
    if _is_variable(params) and axis == batch_dims == 0 and \
            isinstance(params._ref(), Tensor):  # noqa: SLF001 - (an eager one's is a value)
        return sparse_read(params, indices, name=name or "Gather")
    with name_scope(name, "GatherV2", [params, indices]) as scope:
        p = ops.convert_operand(params)
        with p.graph.as_default():
            i = ops.convert_to_tensor(indices)
        return ops.op_output("GatherV2", [p, i], {"axis": axis, "batch_dims": int(batch_dims)},
                             scope[:-1] if scope else "GatherV2")


def sparse_read(variable: Any, indices: Any, name: str | None = None) -> Tensor:
    """The rows ``indices`` of ``variable``, read where it lives (TF2's
    ``ResourceVariable.sparse_read``: a ``ResourceGather``)."""
    graph = variable.graph
    with graph.as_default():
        i = ops.convert_to_tensor(indices)
        # in a traced function a fresh read keeps the program order (auto_deps)
        ref = variable.read_value() if auto_deps.tracing() else variable._ref()  # noqa: SLF001
        with graph.colocate_with(variable.op):
            return ops.op_output("ResourceGather", [ref, i],
                                 {"var": variable.shared_name, "batch_dims": 0,
                                  "dtype": variable.dtype}, name or "Gather")


def _int_scalar(x: Any, graph: Any) -> Tensor:
    with graph.as_default():
        return ops.convert_to_tensor(x, dtype=None if ops.is_tensor(x) else dtypes.int32)


def unsorted_segment_sum(data: Any, segment_ids: Any, num_segments: Any,
                         name: str | None = None) -> Tensor:
    """``out[i] = sum of data[j] where segment_ids[j] == i`` for i < num_segments;
    a negative id drops its row (``tf.math.unsorted_segment_sum``)."""
    d = ops.convert_operand(data)
    with d.graph.as_default():
        ids = ops.convert_to_tensor(segment_ids)
        return ops.op_output("UnsortedSegmentSum", [d, ids, _int_scalar(num_segments, d.graph)],
                             None, name or "UnsortedSegmentSum")


def segment_sum(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """Sums of the rows of each segment; ``segment_ids`` sorted (``tf.math.segment_sum``)."""
    d = ops.convert_operand(data)
    with d.graph.as_default():
        return ops.op_output("SegmentSum", [d, ops.convert_to_tensor(segment_ids)], None,
                             name or "SegmentSum")


def segment_mean(data: Any, segment_ids: Any, name: str | None = None) -> Tensor:
    """Means of the rows of each segment; ``segment_ids`` sorted (``tf.math.segment_mean``)."""
    d = ops.convert_operand(data)
    with d.graph.as_default():
        return ops.op_output("SegmentMean", [d, ops.convert_to_tensor(segment_ids)], None,
                             name or "SegmentMean")


def dynamic_partition(data: Any, partitions: Any, num_partitions: int,
                      name: str | None = None) -> list[Tensor]:
    """``num_partitions`` tensors: the rows of ``data`` whose partition is i, in order."""
    d = ops.convert_operand(data)
    with d.graph.as_default():
        p = ops.convert_to_tensor(partitions)
        op = ops.make_op("DynamicPartition", [d, p], {"num_partitions": int(num_partitions)},
                         name or "DynamicPartition")
    return list(op.outputs)


def dynamic_stitch(indices: Sequence[Any], data: Sequence[Any], name: str | None = None
                   ) -> Tensor:
    """``merged[indices[m][i]] = data[m][i]`` (``tf.dynamic_stitch``; later inputs win)."""
    indices, data = list(indices), list(data)
    if len(indices) != len(data) or not indices:
        raise InvalidArgumentError(f"dynamic_stitch needs as many indices as data tensors (and "
                                   f"one at least), got {len(indices)} and {len(data)}")
    first = ops.convert_operand(data[0])
    with first.graph.as_default():
        ins = [ops.convert_to_tensor(i) for i in indices] + \
              [first] + [ops.convert_to_tensor(d) for d in data[1:]]
        return ops.op_output("DynamicStitch", ins, {"N": len(indices)}, name or "DynamicStitch")


def unique(x: Any, out_idx: Any = dtypes.int32, name: str | None = None) -> tuple[Tensor, Tensor]:
    """``(y, idx)``: the distinct values of vector ``x`` in order of first
    appearance, and each element's position in ``y`` (``tf.unique``)."""
    t = ops.convert_operand(x)
    op = ops.make_op("Unique", [t], {"out_idx": dtypes.as_dtype(out_idx)}, name or "Unique")
    return op.outputs[0], op.outputs[1]


def sparse_to_dense(sparse_indices: Any, output_shape: Any, sparse_values: Any,
                    default_value: Any = 0, validate_indices: bool = True,
                    name: str | None = None) -> Tensor:
    """A dense tensor of ``output_shape``: ``sparse_values`` at ``sparse_indices``,
    ``default_value`` elsewhere (``tf.sparse_to_dense``)."""
    with name_scope(name, "SparseToDense", []) as scope:
        idx = ops.convert_to_tensor(sparse_indices)
        values = ops.convert_to_tensor(sparse_values)
        shape = ops.convert_to_tensor(output_shape, dtype=None if ops.is_tensor(output_shape)
                                      else idx.dtype)
        default = ops.convert_to_tensor(default_value, dtype=values.dtype)
        return ops.op_output("SparseToDense", [idx, shape, values, default],
                             {"validate_indices": bool(validate_indices)}, scope[:-1])


def positions(x: Any, name: str | None = None) -> Tensor:
    """Each element's flat position in ``x``, in ``x``'s shape (``reshape(range(size(x)),
    shape(x))``, the positions a partition stitches back): a constant when the shape is
    known, else an exclusive ``Cumsum`` of ones."""
    t = ops.convert_operand(x)
    with t.graph.as_default():
        if t.shape.is_fully_defined():
            dims = t.shape.as_list()
            return ops.constant(np.arange(int(np.prod(dims)), dtype=np.int32).reshape(dims),
                                name=name or "positions")
        flat = ops.reshape(ops.ones_like(t, dtype=dtypes.int32), [-1])
        pos = ops.op_output("Cumsum", [flat], {"axis": 0, "exclusive": True, "reverse": False},
                            name or "positions")
        return pos if t.shape.rank == 1 else ops.reshape(pos, ops.shape(t))


def size(x: Any, out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    """The number of elements of ``x``: a constant when its shape is known."""
    t = ops.convert_operand(x)
    with t.graph.as_default():
        if t.shape.is_fully_defined():
            return ops.constant(int(np.prod(t.shape.as_list())), dtype=out_type,
                                name=name or "Size")
        return ops.reduce_prod(ops.shape(t, out_type=out_type), name=name or "Size")


def slice_first(shape: Tensor) -> Tensor:
    """``shape[0]`` as a scalar (a constant when ``shape`` is one)."""
    if shape.op.type == "Const":
        with shape.graph.as_default():
            return ops.constant(int(np.asarray(shape.op.get_attr("value"))[0]),
                                dtype=shape.dtype, name="rows")
    return slicing_ops.strided_slice(shape, [0], [1], shrink_axis_mask=1)


# -- scatter updates of a variable (TF1's state_ops) -----------------------------------
def _scatter(op_type: str, ref: Any, indices: Any, updates: Any, name: str | None) -> Tensor:
    if not _is_variable(ref):
        raise InvalidArgumentError(f"{op_type} updates a dt.Variable in place; got {ref!r}")
    graph = ref.graph
    with graph.as_default():
        idx = ops.convert_to_tensor(indices)
        upd = ops.convert_to_tensor(updates, dtype=ref.dtype)
        with graph.colocate_with(ref.op):
            return ops.op_output(op_type, [idx, upd],
                                 {"var": ref.shared_name, "dtype": ref.dtype,
                                  "shape": ref.shape.as_list()}, name or op_type)


def scatter_add(ref: Any, indices: Any, updates: Any, use_locking: bool = False,
                name: str | None = None) -> Tensor:
    """``ref[indices] += updates`` (repeated indices add); returns the new value."""
    return _scatter("ScatterAdd", ref, indices, updates, name)


def scatter_sub(ref: Any, indices: Any, updates: Any, use_locking: bool = False,
                name: str | None = None) -> Tensor:
    """``ref[indices] -= updates`` (repeated indices add); returns the new value."""
    return _scatter("ScatterSub", ref, indices, updates, name)


def scatter_update(ref: Any, indices: Any, updates: Any, use_locking: bool = True,
                   name: str | None = None) -> Tensor:
    """``ref[indices] = updates``; returns the new value."""
    return _scatter("ScatterUpdate", ref, indices, updates, name)


def scatter_nd_update(ref: Any, indices: Any, updates: Any, use_locking: bool = True,
                      name: str | None = None) -> Tensor:
    """``ref[indices[..., :k]] = updates`` (k coordinates per index row)."""
    return _scatter("ScatterNdUpdate", ref, indices, updates, name)


# -- TF1's state ops as functions of a variable (tf.assign, tf.assign_add, tf.assign_sub) --------
def assign(ref: Any, value: Any, validate_shape: Any = None, use_locking: Any = None,
           name: str | None = None) -> Any:
    """TF1's ``tf.assign(ref, value)``: ``ref.assign(value)``; the new value."""
    return _variable(ref, "assign").assign(value, name=name)


def assign_add(ref: Any, value: Any, use_locking: Any = None, name: str | None = None) -> Any:
    """TF1's ``tf.assign_add(ref, value)``: ``ref.assign_add(value)``; the new value."""
    return _variable(ref, "assign_add").assign_add(value, name=name)


def assign_sub(ref: Any, value: Any, use_locking: Any = None, name: str | None = None) -> Any:
    """TF1's ``tf.assign_sub(ref, value)``: ``ref.assign_sub(value)``; the new value."""
    return _variable(ref, "assign_sub").assign_sub(value, name=name)


def _variable(ref: Any, what: str) -> Any:
    if not callable(getattr(ref, what, None)):
        raise InvalidArgumentError(f"{what} needs a variable to update, got "
                                   f"{type(ref).__name__}; a tensor cannot be assigned to: make "
                                   "it a dt.Variable")
    return ref
