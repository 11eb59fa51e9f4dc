"""``tensor[...]``: TF's Python slicing of a tensor (``_slice_helper``), one
``StridedSlice`` op built from the index, and the ``//`` and ``%`` operators
(``FloorDiv``, ``FloorMod``).

Each entry of the index becomes one entry of the strided slice's spec, with
TF's masks: an int takes one element and drops the dimension (shrink axis),
a ``slice`` takes ``begin:end:step`` (an omitted bound sets the begin or end
mask, so negative steps run from the end as in numpy), ``...`` stands for
every dimension not named (ellipsis mask), ``None`` / ``dt.newaxis`` inserts
a dimension of size 1 (new axis mask). The gradient is ``StridedSliceGrad``,
as for ``dt.strided_slice``. Slice bounds must be Python ints. An index may
be a scalar integer tensor (``x[i]`` in a loop) when the other entries are
ints or whole dimensions (``:``): that is a ``Slice`` with its begin as a
tensor (a negative index counted from the end, as TF's), then a ``Reshape``
dropping the indexed dimensions; other uses of tensors are refused with what
to use instead.
The process runtime binds these to every tensor (``distrib.process``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor
from distrib.ops import math_ops as ops
from distrib.ops.math_extra_ops import floordiv, floormod
from distrib.ops.slicing_ops import strided_slice

__all__ = ["tensor_getitem", "newaxis", "OPERATORS"]

newaxis = None


def _int(v: Any, what: str) -> int:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    raise InvalidArgumentError(
        f"tensor[...]: {what} must be a Python int known when the graph is built, got {v!r}; "
        "for an index known only at run time use dt.slice or dt.gather")


def _is_index_tensor(item: Any) -> bool:
    return ops.is_tensor(item) and item.shape.rank == 0 and item.dtype.is_integer


def _tensor_index(tensor: Any, items: tuple) -> Tensor:
    """``tensor[i, :, 2]`` with ``i`` a scalar int tensor: a ``Slice`` whose begin
    is a tensor, then the indexed dimensions dropped."""
    x = ops.convert_operand(tensor)
    dims = x.shape.as_list()
    if dims is None or len(items) > len(dims):
        raise InvalidArgumentError(f"tensor[...]: {len(items)} indices for a tensor of shape "
                                   f"{x.shape}")
    items = items + (slice(None),) * (len(dims) - len(items))
    begins, size, kept = [], [], []
    shape = None
    for d, item in enumerate(items):
        if isinstance(item, slice):
            if item != slice(None):
                raise InvalidArgumentError(
                    "tensor[...]: beside a tensor index only ints and whole dimensions (:) are "
                    "supported here; use dt.slice or dt.gather")
            begins.append(ops.constant(0, dtype=dtypes.int32))
            size.append(-1 if dims[d] is None else dims[d])
            kept.append(-1 if dims[d] is None else dims[d])
            continue
        if _is_index_tensor(item):
            i = ops.cast(item, dtypes.int32)
            if shape is None:
                shape = ops.shape(x)
            dim = strided_slice(shape, [d], [d + 1], shrink_axis_mask=1)
            i = ops.add(i, ops.multiply(ops.cast(ops.less(i, 0), dtypes.int32), dim))
        else:
            i = ops.constant(_int(item, "an index"), dtype=dtypes.int32)
            if int(item) < 0:
                if dims[d] is None:
                    raise InvalidArgumentError("tensor[...]: a negative int index beside a "
                                               "tensor index needs that dimension known")
                i = ops.constant(int(item) + dims[d], dtype=dtypes.int32)
        begins.append(i)
        size.append(1)
    begin = ops.op_output("Pack", begins, {"axis": 0}, "stack")
    cut = ops.op_output("Slice", [x, begin], {"begin": None, "size": size}, "Slice")
    if kept.count(-1) > 1:
        raise InvalidArgumentError("tensor[...]: more than one unknown dimension beside a "
                                   f"tensor index (shape {x.shape})")
    return ops.reshape(cut, kept, name="strided_slice")


def tensor_getitem(tensor: Any, key: Any) -> Tensor:
    """``tensor[key]`` as one ``StridedSlice`` (TF's slicing rules)."""
    items = key if isinstance(key, tuple) else (key,)
    if any(_is_index_tensor(item) for item in items):
        return _tensor_index(tensor, items)
    begin, end, strides = [], [], []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0,
             "shrink_axis_mask": 0}
    for i, item in enumerate(items):
        bit = 1 << i
        if item is Ellipsis:
            begin.append(0), end.append(0), strides.append(1)
            masks["ellipsis_mask"] |= bit
        elif item is None:
            begin.append(0), end.append(0), strides.append(1)
            masks["new_axis_mask"] |= bit
        elif isinstance(item, slice):
            step = 1 if item.step is None else _int(item.step, "a step")
            if step == 0:
                raise InvalidArgumentError("tensor[...]: a slice step must not be 0")
            strides.append(step)
            if item.start is None:
                begin.append(0)
                masks["begin_mask"] |= bit
            else:
                begin.append(_int(item.start, "a slice start"))
            if item.stop is None:
                end.append(0)
                masks["end_mask"] |= bit
            else:
                end.append(_int(item.stop, "a slice stop"))
        else:
            if ops.is_tensor(item) or isinstance(item, (list, np.ndarray)):
                raise InvalidArgumentError(
                    "tensor[...]: indexing by a non-scalar tensor or a list is not supported "
                    "here; use dt.gather (rows at indices) or dt.boolean_mask (rows where a "
                    "mask is true)")
            idx = _int(item, "an index")
            begin.append(idx), end.append(idx + 1), strides.append(1)   # end: ignored
            masks["shrink_axis_mask"] |= bit
    return strided_slice(tensor, begin, end, strides, name="strided_slice", **masks)


# the operators the process runtime binds beside math_ops' (distrib.process)
OPERATORS = {
    "getitem": tensor_getitem,
    "floordiv": lambda x, y: floordiv(x, y, name="floordiv"),
    "mod": lambda x, y: floormod(x, y, name="mod"),
}
