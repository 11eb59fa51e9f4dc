"""Shape functions of the op catalogue for gathering, scattering and
segmenting: ``GatherV2``/``ResourceGather``, the ``Scatter*`` updates,
``UnsortedSegmentSum``/``SegmentSum``/``SegmentMean``, ``DynamicPartition``,
``DynamicStitch``, ``Unique``, ``SparseToDense`` and the ``SparseApply*``
updates (see :mod:`distrib.framework.op_shapes` for the rules every shape
function keeps: unknown dims pass, two known facts that disagree are an
``InvalidArgumentError`` naming the op).

These are the ops of embeddings (TF's ``array_ops.gather``,
``math_ops.unsorted_segment_sum``, ``data_flow_ops.dynamic_partition``);
a dimension that depends on the values (how many rows a partition gets, how
many unique ids a batch holds) is unknown until run time, as in TF.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape

__all__ = ["gathered_elements", "gather", "resource_gather", "scatter", "scatter_nd", "unsorted_segment",
           "segment", "dynamic_partition", "dynamic_stitch", "unique", "sparse_to_dense", "hash_bucket", "table_find", "dense_bincount",
           "sparse_apply"]


def _fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


def _int_indices(op_type: str, name: str, t: Any, what: str = "indices") -> None:
    if not t.dtype.is_integer:
        raise _fail(op_type, name, f"{what} {t.name} has dtype {t.dtype.name}; {op_type} "
                    "needs int32 or int64 (cast it with dt.cast)")


def gather_dims(params: TensorShape, indices: TensorShape, axis: int, batch_dims: int,
                op_type: str = "GatherV2", name: str = "") -> TensorShape:
    """``params[:axis] + indices[batch_dims:] + params[axis + 1:]`` (TF's GatherV2)."""
    if params.rank is None or indices.rank is None:
        return TensorShape(None)
    p, i = params.as_list(), indices.as_list()
    if not 0 <= batch_dims <= len(i) or batch_dims > axis or axis >= len(p):
        raise _fail(op_type, name, f"axis {axis} and batch_dims {batch_dims} do not fit params "
                    f"of shape {p} and indices of shape {i} (need batch_dims <= axis < "
                    "rank(params) and batch_dims <= rank(indices))")
    for k in range(batch_dims):
        if p[k] is not None and i[k] is not None and p[k] != i[k]:
            raise _fail(op_type, name, f"batch dimension {k} differs: params {p} vs indices {i}")
    return TensorShape(p[:axis] + i[batch_dims:] + p[axis + 1:])


def gathered_elements(args: list, attrs: dict) -> int | None:
    """A gather's cost for the kernel pool: the elements it copies (ids x row), whatever
    the size of the table it reads."""
    if len(args) < 2:
        return None
    params, ids = args[0], args[1]
    shape = getattr(params, "shape", None)
    if shape is None or not len(shape):
        return None
    row = 1
    for d in shape[1:]:
        row *= int(d)
    return int(getattr(ids, "size", 1)) * row


def normalize_axis(axis: int, rank: int | None, op_type: str, name: str) -> int:
    if axis >= 0 or rank is None:
        if axis < 0:
            raise _fail(op_type, name, f"a negative axis {axis} needs params of known rank")
        return axis
    if axis < -rank:
        raise _fail(op_type, name, f"axis {axis} is out of range for rank {rank}")
    return axis + rank


def gather(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    params, indices = inputs[0], inputs[1]
    _int_indices(op_type, name, indices)
    axis = normalize_axis(int(attrs.get("axis", 0)), params.shape.rank, op_type, name)
    batch_dims = int(attrs.get("batch_dims", 0))
    if batch_dims < 0 and indices.shape.rank is not None:
        batch_dims += indices.shape.rank
    return [(params.dtype, gather_dims(params.shape, indices.shape, axis, batch_dims,
                                       op_type, name))]


def resource_gather(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return gather(op_type, name, inputs, {"axis": int(attrs.get("batch_dims", 0)),
                                          "batch_dims": attrs.get("batch_dims", 0)})


def scatter(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """``Scatter*`` (indices, updates): updates must be ``indices.shape + var.shape[1:]``."""
    indices, updates = inputs[0], inputs[1]
    _int_indices(op_type, name, indices)
    var_shape = TensorShape(attrs.get("shape"))
    if var_shape.rank is not None and indices.shape.rank is not None and \
            updates.shape.rank is not None:
        want = TensorShape(indices.shape.as_list() + var_shape.as_list()[1:])
        if not want.is_compatible_with(updates.shape) and updates.shape.rank != 0:
            raise _fail(op_type, name, f"updates of shape {updates.shape} do not fit indices "
                        f"{indices.shape} into a variable of shape {var_shape} (want {want})")
    return [(dtypes.as_dtype(attrs["dtype"]), var_shape)]


def scatter_nd(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _int_indices(op_type, name, inputs[0])
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape(attrs.get("shape")))]


def const_value(t: Any) -> Any:
    """The value of ``t`` when a ``Const`` makes it, else None."""
    return t.op.get_attr("value") if t.op.type == "Const" else None


def _const_int(t: Any) -> int | None:
    value = const_value(t)
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def unsorted_segment(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """(data, segment_ids, num_segments) -> [num_segments] + data.shape[rank(ids):]."""
    data, ids, num = inputs
    _int_indices(op_type, name, ids, "segment_ids")
    _int_indices(op_type, name, num, "num_segments")
    n = _const_int(num)
    if data.shape.rank is None or ids.shape.rank is None:
        return [(data.dtype, TensorShape(None))]
    d, i = data.shape.as_list(), ids.shape.as_list()
    if not TensorShape(d[:len(i)]).is_compatible_with(TensorShape(i)):
        raise _fail(op_type, name, f"segment_ids of shape {i} must be a prefix of the data's "
                    f"shape {d}")
    return [(data.dtype, TensorShape([n] + d[len(i):]))]


def segment(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """(data, segment_ids: a vector) -> [unknown] + data.shape[1:]."""
    data, ids = inputs
    _int_indices(op_type, name, ids, "segment_ids")
    if ids.shape.rank not in (None, 1):
        raise _fail(op_type, name, f"segment_ids must be a vector, got shape {ids.shape}")
    if data.shape.rank is None:
        return [(data.dtype, TensorShape(None))]
    return [(data.dtype, TensorShape([None] + data.shape.as_list()[1:]))]


def dynamic_partition(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    data, parts = inputs
    _int_indices(op_type, name, parts, "partitions")
    n = int(attrs["num_partitions"])
    if n < 1:
        raise _fail(op_type, name, f"num_partitions must be at least 1, got {n}")
    if data.shape.rank is None or parts.shape.rank is None:
        return [(data.dtype, TensorShape(None))] * n
    d, p = data.shape.as_list(), parts.shape.as_list()
    if not TensorShape(d[:len(p)]).is_compatible_with(TensorShape(p)):
        raise _fail(op_type, name, f"partitions of shape {p} must be a prefix of the data's "
                    f"shape {d}")
    return [(data.dtype, TensorShape([None] + d[len(p):]))] * n


def dynamic_stitch(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    n = int(attrs["N"])
    if len(inputs) != 2 * n:
        raise _fail(op_type, name, f"needs N={n} indices and N data tensors, got {len(inputs)}")
    indices, data = inputs[:n], inputs[n:]
    for t in indices:
        _int_indices(op_type, name, t)
    dtype = data[0].dtype
    tail: TensorShape = TensorShape(None)
    for i, d in zip(indices, data):
        if d.dtype != dtype:
            raise _fail(op_type, name, f"data tensors differ in dtype: {dtype.name} and "
                        f"{d.dtype.name}")
        if i.shape.rank is not None and d.shape.rank is not None:
            rest = TensorShape(d.shape.as_list()[i.shape.rank:])
            if not rest.is_compatible_with(tail):
                raise _fail(op_type, name, f"data {d.name} of shape {d.shape} does not fit the "
                            f"others' row shape {tail}")
            tail = rest if tail.rank is None else tail.merge_with(rest)
    return [(dtype, TensorShape(None) if tail.rank is None else
             TensorShape([None] + tail.as_list()))]


def unique(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    if x.shape.rank not in (None, 1):
        raise _fail(op_type, name, f"x must be a vector, got shape {x.shape}")
    out_idx = dtypes.as_dtype(attrs.get("out_idx", "int32"))
    return [(x.dtype, TensorShape([None])), (out_idx, x.shape if x.shape.rank else
                                              TensorShape([None]))]


def sparse_to_dense(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    indices, output_shape, values, default = inputs
    _int_indices(op_type, name, indices, "sparse_indices")
    if values.dtype != default.dtype:
        raise _fail(op_type, name, f"sparse_values ({values.dtype.name}) and default_value "
                    f"({default.dtype.name}) differ in dtype")
    dims = const_value(output_shape)
    if dims is not None:
        return [(values.dtype, TensorShape([int(d) for d in dims.reshape(-1)]))]
    if output_shape.shape.is_fully_defined():
        return [(values.dtype, TensorShape([None] * output_shape.shape.as_list()[0]))]
    return [(values.dtype, TensorShape(None))]


def sparse_apply(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """The ``SparseApply*`` updates: (hyper-parameters ..., grad, indices) -> the variable."""
    grad, indices = inputs[-2], inputs[-1]
    _int_indices(op_type, name, indices)
    if indices.shape.rank not in (None, 1):
        raise _fail(op_type, name, f"indices must be a vector, got shape {indices.shape}")
    if grad.shape.rank is not None and indices.shape.rank is not None:
        if not TensorShape(grad.shape.as_list()[:1]).is_compatible_with(indices.shape):
            raise _fail(op_type, name, f"grad of shape {grad.shape} needs one row per index "
                        f"({indices.shape})")
    return [(dtypes.as_dtype(attrs["dtype"]), TensorShape(attrs.get("shape")))]


# -- the lookup layers' ops (kernels/cpu/hashing.py) --------------------------------------
def hash_bucket(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    if inputs[0].dtype != dtypes.string:
        raise _fail(op_type, name, f"input must be strings, got {inputs[0].dtype.name} (convert "
                    "numbers with dt.strings.as_string first)")
    return [(dtypes.int64, inputs[0].shape)]


def table_find(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.as_dtype(attrs["value_dtype"]), inputs[0].shape)]


def dense_bincount(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, size = inputs[0], _const_int(inputs[1])
    dtype = inputs[2].dtype if len(inputs) > 2 else dtypes.float32
    if x.shape.rank is None:
        return [(dtype, TensorShape(None))]
    if x.shape.rank <= 1:
        return [(dtype, TensorShape([size]))]
    return [(dtype, TensorShape([x.shape.as_list()[0], size]))]
