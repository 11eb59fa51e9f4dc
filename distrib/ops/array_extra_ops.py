"""TF's everyday array builders: ``dt.squeeze``, ``dt.stack``/``dt.unstack``,
``dt.split`` (a number of equal parts or a list of sizes), ``dt.tile``,
``dt.range``, ``dt.one_hot``, ``dt.boolean_mask``, ``dt.where(condition)``
(the coordinates of the true elements) and ``dt.clip_by_value``.

Names, arguments and defaults are TF's (``tf.one_hot(indices, depth,
on_value=None, off_value=None, axis=None, dtype=None)``, ``tf.range(start,
limit=None, delta=1, dtype=None)``, ``tf.split(value, num_or_size_splits,
axis=0, num=None)``). What the graph must know to give the output its shape
is read when the graph is built: ``one_hot``'s depth, ``split``'s count or
sizes, ``range``'s bounds (Python numbers), ``tile``'s multiples (or an int32
tensor, then the output's dimensions are unknown). ``boolean_mask`` is TF's
composite: the tensor's masked dimensions flattened, then gathered at
``where(mask)``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.array_gather import gather
from distrib.ops.slicing_ops import where_v2

__all__ = ["squeeze", "stack", "unstack", "split", "tile", "range", "one_hot", "boolean_mask",
           "where_coordinates", "where", "clip_by_value"]


def squeeze(input: Any, axis: Any = None, name: str | None = None,  # noqa: A002 - TF's name
            squeeze_dims: Any = None) -> Tensor:
    """``input`` without its size-1 dimensions (only those of ``axis`` when given)."""
    axis = squeeze_dims if axis is None else axis
    dims = [] if axis is None else [int(a) for a in np.atleast_1d(axis)]
    return ops.op_output("Squeeze", [ops.convert_operand(input)], {"squeeze_dims": dims},
                         name or "Squeeze")


def stack(values: Sequence[Any], axis: int = 0, name: str = "stack") -> Tensor:
    """The same-shaped ``values`` joined along a new dimension ``axis`` (TF's ``tf.stack``)."""
    values = list(values)
    if not values:
        raise InvalidArgumentError("dt.stack needs at least one tensor")
    with name_scope(name, "stack", values) as scope:
        tensors = [ops.convert_to_tensor(v) for v in values]
        return ops.op_output("Pack", tensors, {"axis": int(axis)}, scope)


def unstack(value: Any, num: int | None = None, axis: int = 0, name: str = "unstack"
            ) -> list[Tensor]:
    """The tensors along dimension ``axis`` of ``value`` (its size must be known, or ``num``)."""
    x = ops.convert_to_tensor(value)
    if num is None:
        dims = x.shape.as_list()
        if dims is None or not -len(dims) <= axis < len(dims) or dims[axis] is None:
            raise InvalidArgumentError(f"dt.unstack: cannot infer num from shape {x.shape}; "
                                       "pass num=")
        num = dims[axis]
    op = ops.make_op("Unpack", [x], {"num": int(num), "axis": int(axis)}, name or "unstack")
    return list(op.outputs)


def split(value: Any, num_or_size_splits: Any, axis: int = 0, num: int | None = None,
          name: str = "split") -> list[Tensor]:
    """``value`` cut along ``axis``: into ``num_or_size_splits`` equal parts (an int)
    or into parts of the given sizes (a list; one -1 takes the rest)."""
    x = ops.convert_to_tensor(value)
    axis = int(axis)
    if isinstance(num_or_size_splits, (int, np.integer)):
        op = ops.make_op("Split", [x], {"axis": axis, "num_split": int(num_or_size_splits)},
                               name or "split")
        return list(op.outputs)
    sizes = [int(s) for s in np.asarray(num_or_size_splits).reshape(-1)]
    if sizes.count(-1) > 1:
        raise InvalidArgumentError(f"dt.split: size_splits {sizes} has more than one -1")
    if -1 in sizes:
        dims = x.shape.as_list()
        total = None if dims is None else dims[axis]
        if total is None:
            raise InvalidArgumentError("dt.split: a -1 size needs the split dimension known "
                                       f"(shape {x.shape})")
        sizes[sizes.index(-1)] = total - (sum(sizes) + 1)
    op = ops.make_op("SplitV", [x], {"axis": axis, "size_splits": sizes}, name or "split")
    return list(op.outputs)


def tile(input: Any, multiples: Any, name: str | None = None) -> Tensor:  # noqa: A002 - TF's name
    """``input`` repeated ``multiples[d]`` times along each dimension d."""
    x = ops.convert_operand(input)
    if ops.is_tensor(multiples):
        m = ops.cast(multiples, dtypes.int32)
        out = TensorShape(None if x.shape.rank is None else [None] * x.shape.rank)
        return x.graph.create_op("Tile", [x, m], {"multiples": None}, name or "Tile",
                                 output_specs=[(x.dtype, out)]).outputs[0]
    mult = [int(v) for v in np.asarray(multiples).reshape(-1)]
    dims = x.shape.as_list()
    if dims is not None and len(dims) != len(mult):
        raise InvalidArgumentError(f"dt.tile: multiples {mult} need one entry per dimension of "
                                   f"{x.shape}")
    out = TensorShape(None if dims is None else
                      [None if d is None else d * m for d, m in zip(dims, mult)])
    return x.graph.create_op("Tile", [x], {"multiples": mult}, name or "Tile",
                             output_specs=[(x.dtype, out)]).outputs[0]


def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None,  # noqa: A001
          name: str = "range") -> Tensor:
    """``[start, start + delta, ...)`` up to ``limit`` (``range(n)``: 0..n-1), TF's
    ``tf.range``; the dtype is inferred from the arguments (int32 or float32) unless given."""
    if limit is None:
        start, limit = 0, start
    args = [start, limit, delta]
    if any(ops.is_tensor(a) for a in args):
        raise InvalidArgumentError("dt.range takes Python numbers here (the output's length "
                                   "must be known when the graph is built)")
    if dtype is None:
        floating = any(isinstance(a, float) or np.asarray(a).dtype.kind == "f" for a in args)
        dtype = dtypes.float32 if floating else dtypes.int32
    dt = dtypes.as_dtype(dtype)
    conv = float if dt.is_floating else int
    return ops.op_output("Range", [], {"start": conv(start), "limit": conv(limit),
                                       "delta": conv(delta), "dtype": dt}, name or "range")


def one_hot(indices: Any, depth: int, on_value: Any = None, off_value: Any = None,
            axis: int | None = None, dtype: Any = None, name: str | None = None) -> Tensor:
    """A ``depth``-long one-hot vector per index (all ``off_value`` for an index
    outside ``[0, depth)``), along a new dimension ``axis`` (default: last)."""
    idx = ops.convert_operand(indices)
    if ops.is_tensor(depth):
        raise InvalidArgumentError("dt.one_hot: depth must be a Python int here")
    given = next((v for v in (on_value, off_value) if v is not None), None)
    if dtype is None:
        dtype = ops.convert_to_tensor(given).dtype if given is not None else dtypes.float32
    dt = dtypes.as_dtype(dtype)
    conv = float if dt.is_floating else (bool if dt.is_bool else int)
    attrs = {"depth": int(depth), "axis": -1 if axis is None else int(axis), "dtype": dt,
             "on_value": conv(1 if on_value is None else on_value),
             "off_value": conv(0 if off_value is None else off_value)}
    return ops.op_output("OneHot", [idx], attrs, name or "one_hot")


def where_coordinates(condition: Any, name: str | None = None) -> Tensor:
    """The coordinates (int64 ``[n, rank]``) of ``condition``'s true elements, in row-major
    order (TF's ``tf.where(condition)``)."""
    c = ops.convert_operand(condition)
    if not c.dtype.is_bool:
        c = ops.not_equal(c, ops.zeros_like(c))
    return ops.op_output("Where", [c], None, name or "Where")


def where(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """TF's ``tf.where``: ``x`` where ``condition``, else ``y`` (broadcast); with
    neither, the coordinates of ``condition``'s true elements."""
    if x is None and y is None:
        return where_coordinates(condition, name=name)
    return where_v2(condition, x, y, name=name)


def boolean_mask(tensor: Any, mask: Any, name: str = "boolean_mask", axis: Any = None) -> Tensor:
    """The elements (or slices) of ``tensor`` where ``mask`` is true; the mask
    covers ``tensor``'s dimensions ``axis .. axis + rank(mask)`` (TF's composite:
    those dimensions flattened, then gathered at ``where(mask)``)."""
    with name_scope(name, "boolean_mask", [tensor, mask]) as scope:
        x, m = ops.convert_to_tensor(tensor), ops.convert_to_tensor(mask)
        ms, xs = m.shape.as_list(), x.shape.as_list()
        if ms is None or xs is None:
            raise InvalidArgumentError("dt.boolean_mask needs the ranks of tensor and mask known")
        k, axis = len(ms), int(axis or 0)
        if k == 0 or axis + k > len(xs):
            raise InvalidArgumentError(f"dt.boolean_mask: mask {m.shape} does not fit tensor "
                                       f"{x.shape} at axis {axis}")
        lead, rest = xs[:axis], xs[axis + k:]
        if any(d is None for d in lead + rest):
            raise InvalidArgumentError("dt.boolean_mask here needs the dimensions outside the "
                                       f"mask known, got {x.shape}")
        flat = ops.reshape(x, lead + [-1] + rest)
        idx = ops.reshape(where_coordinates(ops.reshape(m, [-1])), [-1])
        return gather(flat, idx, axis=axis, name=scope)


def clip_by_value(t: Any, clip_value_min: Any, clip_value_max: Any,
                  name: str | None = None) -> Tensor:
    """``min(max(t, clip_value_min), clip_value_max)``, TF's ``tf.clip_by_value``."""
    with name_scope(name, "clip_by_value", [t, clip_value_min, clip_value_max]) as scope:
        x = ops.convert_to_tensor(t)
        lower = ops.minimum(x, ops.convert_to_tensor(clip_value_max, dtype=x.dtype))
        return ops.maximum(lower, ops.convert_to_tensor(clip_value_min, dtype=x.dtype), name=scope)
