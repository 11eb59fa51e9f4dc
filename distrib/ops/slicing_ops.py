"""Cutting, padding, reversing and choosing: ``dt.strided_slice``,
``dt.slice``, ``dt.pad``, ``dt.reverse``, ``dt.where`` (TF's names and
arguments; ops ``StridedSlice``, ``Slice``, ``Pad``, ``ReverseV2``,
``SelectV2``), and ``tensor[...]`` on a ``dt.Tensor`` is not here (a
strided slice is what it would build).

``dt.slice`` takes ``begin`` as a list or as an int32 tensor (a random
crop's offset, known only when the step runs); ``size`` is static, so the
output's shape is known when the graph is built.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["strided_slice", "slice", "pad", "reverse", "reverse_v2", "where", "where_v2"]


def _ints(value: Any, what: str, op: str) -> list[int]:
    try:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{op}: {what} must be a list of ints known when the graph "
                                   f"is built, got {value!r}") from None


def strided_slice(input_: Any, begin: Sequence[int], end: Sequence[int],
                  strides: Sequence[int] | None = None, begin_mask: int = 0, end_mask: int = 0,
                  ellipsis_mask: int = 0, new_axis_mask: int = 0, shrink_axis_mask: int = 0,
                  var: Any = None, name: str | None = None) -> Tensor:
    """TF's ``tf.strided_slice``: ``input_[begin:end:strides]`` per spec entry,
    with TF's five bit masks."""
    x = ops.convert_operand(input_)
    begin, end = _ints(begin, "begin", "strided_slice"), _ints(end, "end", "strided_slice")
    strides = [1] * len(begin) if strides is None else _ints(strides, "strides", "strided_slice")
    attrs = {"begin": begin, "end": end, "strides": strides, "begin_mask": int(begin_mask),
             "end_mask": int(end_mask), "ellipsis_mask": int(ellipsis_mask),
             "new_axis_mask": int(new_axis_mask), "shrink_axis_mask": int(shrink_axis_mask)}
    return ops.op_output("StridedSlice", [x], attrs, name or "StridedSlice")


def slice(input_: Any, begin: Any, size: Sequence[int], name: str | None = None  # noqa: A001
          ) -> Tensor:
    """TF's ``tf.slice``: ``size`` elements from ``begin`` per dimension (-1: the rest)."""
    x = ops.convert_operand(input_)
    size = _ints(size, "size", "slice")
    if isinstance(begin, Tensor):
        b = ops.cast(begin, dtypes.int32)
        return ops.op_output("Slice", [x, b], {"begin": None, "size": size}, name or "Slice")
    return ops.op_output("Slice", [x], {"begin": _ints(begin, "begin", "slice"), "size": size},
                         name or "Slice")


def pad(tensor: Any, paddings: Any, mode: str = "CONSTANT", name: str | None = None,
        constant_values: Any = 0) -> Tensor:
    """TF's ``tf.pad``: ``paddings[d] = [before, after]`` of ``constant_values``
    (``CONSTANT``), or mirrored (``REFLECT``: the edge not repeated; ``SYMMETRIC``:
    repeated; op ``MirrorPad``)."""
    kind = str(mode).upper()
    if kind not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise InvalidArgumentError(f"pad: mode {mode!r} is not one of CONSTANT, REFLECT, "
                                   "SYMMETRIC")
    x = ops.convert_operand(tensor)
    pairs = np.asarray(_ints(paddings, "paddings", "pad")).reshape(-1, 2).tolist()
    if kind != "CONSTANT":
        return ops.op_output("MirrorPad", [x], {"paddings": pairs, "mode": kind},
                             name or "MirrorPad")
    attrs: dict[str, Any] = {"paddings": pairs}
    if constant_values != 0:
        attrs["constant_values"] = float(constant_values) if x.dtype.is_floating \
            else int(constant_values)
    return ops.op_output("Pad", [x], attrs, name or "Pad")


def reverse_v2(tensor: Any, axis: Any, name: str | None = None) -> Tensor:
    """TF's ``tf.reverse``: ``tensor`` with the dimensions of ``axis`` reversed."""
    return ops.op_output("ReverseV2", [ops.convert_operand(tensor)],
                         {"axis": _ints(axis, "axis", "reverse")}, name or "ReverseV2")


reverse = reverse_v2


def where_v2(condition: Any, x: Any = None, y: Any = None, name: str | None = None) -> Tensor:
    """TF's ``tf.where`` (v2): ``x`` where ``condition``, else ``y``, broadcast."""
    if x is None or y is None:
        raise InvalidArgumentError("dt.where(condition) without x and y (the coordinates of "
                                   "true elements) is not supported here; pass x and y")
    with name_scope(name, "SelectV2", [condition, x, y]) as scope:
        cond = ops.convert_operand(condition)
        x, y = ops.convert_pair(x, y)
        return ops.op_output("SelectV2", [cond, x, y], None, scope)


where = where_v2
