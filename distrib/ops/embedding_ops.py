"""``dt.nn.embedding_lookup``, ``embedding_lookup_sparse`` and
``safe_embedding_lookup_sparse`` (TF's ``embedding_ops.py``: arguments,
defaults, the ``mod``/``div`` partition strategies and the combiners).

A lookup reads each row where its shard lives: the ids are split by shard
(``DynamicPartition``), each shard's rows gathered beside it (a
``ResourceGather`` for a variable), and the rows put back in the ids' order
(``DynamicStitch``); so only the ids and the rows cross the wire, and the
gradient of each shard is an ``IndexedSlices`` of its rows. ``params`` may
be one tensor or variable, a list of shards, a ``PartitionedVariable`` or a
``ShardedVariable`` (ParameterServerStrategy's, looked up with ``div`` as
TF's ``embedding_lookup_v2``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import array_gather, clip_ops, slicing_ops
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat

__all__ = ["embedding_lookup", "embedding_lookup_v2", "embedding_lookup_sparse",
           "safe_embedding_lookup_sparse"]


def _shards(params: Any) -> tuple[list[Any], str | None]:
    """The shards of ``params``, and the strategy a ShardedVariable imposes."""
    sharded = getattr(params, "_shards", None)
    if sharded is not None:
        return list(sharded), "div"
    if isinstance(params, (list, tuple)):
        return list(params), None
    if hasattr(params, "_get_variable_list"):   # a PartitionedVariable
        return params._get_variable_list(), None  # noqa: SLF001 - TF's own accessor
    return [params], None


def _rows(shard: Any) -> int:
    dims = shard.shape.as_list()
    if dims is None or dims[0] is None:
        raise InvalidArgumentError(f"embedding_lookup over several shards needs each shard's "
                                   f"first dimension known; {getattr(shard, 'name', shard)} has "
                                   f"shape {shard.shape}")
    return int(dims[0])


def _clip(rows: Tensor, ids_rank: int | None, max_norm: Any) -> Tensor:
    """Each embedding scaled to an l2 norm of at most ``max_norm`` (TF's ``_clip``)."""
    if max_norm is None:
        return rows
    rank = rows.shape.rank
    if rank is None or ids_rank is None:
        raise InvalidArgumentError("embedding_lookup(max_norm=...) needs the ranks of the "
                                   "ids and the params known")
    return clip_ops.clip_by_norm(rows, max_norm, axes=list(range(ids_rank, rank)))


def _gather(shard: Any, ids: Tensor, max_norm: Any, name: str | None = None) -> Tensor:
    graph = ids.graph
    anchor = getattr(shard, "op", None)
    with graph.colocate_with(anchor) if anchor is not None else graph.as_default():
        rows = array_gather.gather(shard, ids, name=name)
        return _clip(rows, ids.shape.rank, max_norm)


def embedding_lookup(params: Any, ids: Any, partition_strategy: str = "mod",
                     name: str | None = None, validate_indices: bool = True,
                     max_norm: Any = None) -> Tensor:
    """The rows of ``params`` at ``ids``: shape ``ids.shape + params.shape[1:]``."""
    shards, forced = _shards(params)
    if not shards:
        raise InvalidArgumentError("embedding_lookup needs params: a tensor, a variable or a "
                                   "non-empty list of shards")
    strategy = forced or partition_strategy
    if strategy not in ("mod", "div"):
        raise InvalidArgumentError(f"Unrecognized partition strategy: {partition_strategy}")
    with name_scope(name, "embedding_lookup", []) as scope:
        graph = shards[0].graph
        with graph.as_default():
            ids_t = ops.convert_to_tensor(ids)
        if len(shards) == 1:
            with graph.as_default():
                return ops.identity(_gather(shards[0], ids_t, max_norm), name=scope[:-1])
        with graph.as_default():
            return _partitioned_lookup(shards, ids_t, strategy, max_norm, scope[:-1])


def _assignments(shards: list[Any], flat_ids: Tensor, strategy: str) -> tuple[Tensor, Tensor]:
    """(each id's shard, its row in the shard), TF's mod and div rules."""
    n = len(shards)
    k = lambda v: ops.constant(v, dtype=flat_ids.dtype)   # noqa: E731
    if strategy == "mod":
        return (ops.op_output("FloorMod", [flat_ids, k(n)], None, "shard"),
                ops.op_output("FloorDiv", [flat_ids, k(n)], None, "row"))
    total = sum(_rows(s) for s in shards)
    per, extras = total // n, total % n
    first = ops.op_output("FloorDiv", [flat_ids, k(per + 1)], None, "shard_first")
    shifted = ops.subtract(flat_ids, k(extras))
    rest = ops.op_output("FloorDiv", [shifted, k(max(per, 1))], None, "shard_rest")
    shard = ops.maximum(first, rest)
    in_extras = ops.less(shard, k(extras))
    row = slicing_ops.where_v2(in_extras,
                               ops.op_output("FloorMod", [flat_ids, k(per + 1)], None, "row_a"),
                               ops.op_output("FloorMod", [shifted, k(max(per, 1))], None,
                                             "row_b"))
    return shard, row


def _partitioned_lookup(shards: list[Any], ids: Tensor, strategy: str, max_norm: Any,
                        name: str) -> Tensor:
    flat_ids = ops.reshape(ids, [-1])
    shard, row = _assignments(shards, flat_ids, strategy)
    shard = ops.cast(shard, dtypes.int32)
    n = len(shards)
    gather_ids = array_gather.dynamic_partition(row, shard, n)
    positions = array_gather.dynamic_partition(array_gather.positions(flat_ids), shard, n)
    rows = [_gather(s, i, max_norm) for s, i in zip(shards, gather_ids)]
    stitched = array_gather.dynamic_stitch(positions, rows)
    tail = shards[0].shape.as_list()[1:]
    dims = ids.shape.as_list()
    if dims is not None and dims.count(None) <= 1:   # a static shape: at most one -1
        return ops.reshape(stitched, [-1 if d is None else d for d in dims] + tail, name=name)
    shape = concat([ops.shape(ids), ops.constant(np.asarray(tail, np.int32))], 0)
    return ops.reshape(stitched, shape, name=name)


def embedding_lookup_v2(params: Any, ids: Any, max_norm: Any = None,
                        name: str | None = None) -> Tensor:
    """TF2's ``tf.nn.embedding_lookup``: the ``div`` strategy."""
    return embedding_lookup(params, ids, "div", name, max_norm=max_norm)


def _sparse_parts(sp_ids: Any) -> tuple[Tensor, Tensor]:
    """(each id's row in the batch, the ids) of a 2-d SparseTensor of ids."""
    segments = slicing_ops.strided_slice(sp_ids.indices, [0, 0], [0, 1], begin_mask=1,
                                         end_mask=1, shrink_axis_mask=2)
    return ops.cast(segments, dtypes.int32), sp_ids.values


def embedding_lookup_sparse(params: Any, sp_ids: Any, sp_weights: Any,
                            partition_strategy: str = "mod", name: str | None = None,
                            combiner: str | None = None, max_norm: Any = None) -> Tensor:
    """Each row of ``sp_ids`` (a ``dt.SparseTensor`` of ids) combined into one
    embedding: ``"sum"``, ``"mean"`` (TF1's default) or ``"sqrtn"``, weighted
    by ``sp_weights`` (a SparseTensor of the same indices) or 1."""
    combiner = "mean" if combiner is None else combiner
    if combiner not in ("mean", "sqrtn", "sum"):
        raise InvalidArgumentError("combiner must be one of 'mean', 'sqrtn' or 'sum'")
    with name_scope(name, "embedding_lookup_sparse", []) as scope:
        segments, ids = _sparse_parts(sp_ids)
        unique_ids, idx = array_gather.unique(ids)
        emb = embedding_lookup(params, unique_ids, partition_strategy, max_norm=max_norm)
        rows = array_gather.gather(emb, idx)
        if sp_weights is None:
            weights = ops.ones_like(ops.cast(ids, rows.dtype))
        else:
            weights = ops.cast(sp_weights.values, rows.dtype)
        weighted = ops.multiply(rows, ops.reshape(weights, [-1, 1]))
        total = array_gather.segment_sum(weighted, segments)
        return _combine(total, weights, segments, combiner, scope[:-1], sorted_ids=True)


def _combine(total: Tensor, weights: Tensor, segments: Tensor, combiner: str, name: str,
             sorted_ids: bool, rows: Any = None) -> Tensor:
    if combiner == "sum":
        return ops.identity(total, name=name)
    w = weights if combiner == "mean" else ops.square(weights)
    norm = array_gather.segment_sum(w, segments) if sorted_ids else \
        array_gather.unsorted_segment_sum(w, segments, rows)
    if combiner == "sqrtn":
        norm = ops.sqrt(norm)
    safe = ops.maximum(norm, ops.constant(np.finfo(np.float32).tiny, dtype=norm.dtype))
    return ops.divide(total, ops.reshape(safe, [-1, 1]), name=name)


def safe_embedding_lookup_sparse(embedding_weights: Any, sparse_ids: Any,
                                 sparse_weights: Any = None, combiner: str = "mean",
                                 default_id: int | None = None, name: str | None = None,
                                 partition_strategy: str = "div",
                                 max_norm: Any = None) -> Tensor:
    """As ``embedding_lookup_sparse``, with TF's safety: invalid ids (< 0) and
    weights <= 0 are left out, and a row left empty gets the embedding of
    ``default_id`` (zeros without one); one output row per row of the batch."""
    if combiner not in ("mean", "sqrtn", "sum"):
        raise InvalidArgumentError("combiner must be one of 'mean', 'sqrtn' or 'sum'")
    with name_scope(name, "embedding_lookup", []) as scope:
        segments, ids = _sparse_parts(sparse_ids)
        batch = ops.cast(array_gather.slice_first(sparse_ids.dense_shape), dtypes.int32)
        zero = ops.constant(0, dtype=ids.dtype)
        valid = ops.greater_equal(ids, zero)
        if sparse_weights is not None:
            w = ops.cast(sparse_weights.values, embedding_weights_dtype(embedding_weights))
            valid = ops.logical_and(valid, ops.greater(w, ops.zeros_like(w)))
        else:
            w = ops.ones_like(ops.cast(ids, embedding_weights_dtype(embedding_weights)))
        w = slicing_ops.where_v2(valid, w, ops.zeros_like(w))
        safe_ids = slicing_ops.where_v2(valid, ids, ops.zeros_like(ids))
        unique_ids, idx = array_gather.unique(safe_ids)
        emb = embedding_lookup(embedding_weights, unique_ids, partition_strategy,
                               max_norm=max_norm)
        rows = ops.multiply(array_gather.gather(emb, idx), ops.reshape(w, [-1, 1]))
        total = array_gather.unsorted_segment_sum(rows, segments, batch)
        out = _combine(total, w, segments, combiner, "combined", sorted_ids=False, rows=batch)
        counts = array_gather.unsorted_segment_sum(ops.cast(valid, dtypes.int32), segments,
                                                   batch)
        empty = ops.reshape(ops.equal(counts, ops.constant(0)), [-1, 1])
        if default_id is None:
            fill = ops.zeros_like(out)
        else:
            default = embedding_lookup(embedding_weights,
                                       ops.constant([int(default_id)], dtype=ids.dtype),
                                       partition_strategy)
            fill = ops.add(ops.zeros_like(out), default)
        return ops.identity(slicing_ops.where_v2(empty, fill, out), name=scope[:-1])


def embedding_weights_dtype(params: Any) -> Any:
    shards, _ = _shards(params)
    return shards[0].dtype

