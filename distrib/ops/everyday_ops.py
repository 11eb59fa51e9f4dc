"""TF's everyday array names real TF2 programs call (issue 39's remainder):
``dt.fill``, ``dt.size``, ``dt.rank``, ``dt.linspace``/``lin_space``,
``dt.eye``, ``dt.sequence_mask``, ``dt.roll``, ``dt.meshgrid``, ``dt.sort``,
``dt.argsort``, ``dt.searchsorted``, ``dt.nn.depth_to_space``/
``space_to_depth`` and ``dt.nn.conv1d``.

Arguments and defaults are TF2's. Each is TF's op (``Fill``, ``Size``,
``Rank``, ``LinSpace``, ``Roll``, ``LowerBound``/``UpperBound``,
``DepthToSpace``/``SpaceToDepth``; kernels in
kernels/cpu/everyday_array.py) or TF's composite of ops: ``sort`` and
``argsort`` are ``top_k`` of the whole last axis (of the negated values
when ascending, so ties keep their order), ``conv1d`` is ``conv2d`` on a
height of 1 (``expand_dims``, then ``squeeze``), ``meshgrid`` broadcasts
reshaped vectors, ``sequence_mask`` compares a range with the lengths.
Eager execution and dataset functions run them at once through the same
kernels. ``eye`` of Python sizes is a constant (TF's is ``matrix_diag`` of
ones; the value is the same).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.array_extra_ops import squeeze, stack
from distrib.ops.array_ops import concat, expand_dims
from distrib.ops.broadcast_ops import broadcast_to
from distrib.ops.math_extra_ops import cumsum
from distrib.ops.nn_classification import top_k
from distrib.ops.nn_conv import conv2d

__all__ = ["fill", "size", "rank", "linspace", "lin_space", "eye", "sequence_mask", "roll",
           "meshgrid", "sort", "argsort", "searchsorted", "depth_to_space", "space_to_depth",
           "conv1d", "GRADIENTS", "NOT_DIFFERENTIABLE"]


def _int_tensor(x: Any, dtype: Any = dtypes.int32) -> Tensor:
    t = ops.convert_to_tensor(x) if ops.is_tensor(x) else ops.convert_to_tensor(x, dtype=dtype)
    if not t.dtype.is_integer:
        raise InvalidArgumentError(f"expected an integer tensor, got {t.dtype.name}")
    return t


def fill(dims: Any, value: Any, name: str | None = None) -> Tensor:
    """A tensor of shape ``dims`` whose every element is ``value`` (TF's ``tf.fill``)."""
    with name_scope(name, "Fill", [dims, value]) as scope:
        return ops.op_output("Fill", [_int_tensor(dims), ops.convert_to_tensor(value)], None,
                             scope)


def size(input: Any, out_type: Any = dtypes.int32, name: str | None = None  # noqa: A002
         ) -> Tensor:
    """The number of elements of ``input`` (TF2's ``tf.size``)."""
    x = ops.convert_operand(input)
    return ops.op_output("Size", [x], {"out_type": dtypes.as_dtype(out_type)}, name or "Size")


def rank(input: Any, name: str | None = None) -> Tensor:  # noqa: A002 - TF's name
    """The number of dimensions of ``input``, an int32 scalar (TF's ``tf.rank``)."""
    return ops.op_output("Rank", [ops.convert_operand(input)], None, name or "Rank")


def linspace(start: Any, stop: Any, num: Any, name: str | None = None, axis: int = 0
             ) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop`` inclusive (TF's
    ``tf.linspace`` of scalars; the last value is ``stop`` exactly)."""
    if axis != 0:
        raise InvalidArgumentError("dt.linspace here takes scalar start and stop (axis=0)")
    with name_scope(name, "LinSpace", [start, stop, num]) as scope:
        s = ops.convert_to_tensor(start)
        if not s.dtype.is_floating:
            s = ops.cast(s, dtypes.float32)
        e = ops.convert_to_tensor(stop, dtype=s.dtype) if not ops.is_tensor(stop) else \
            ops.cast(stop, s.dtype)
        return ops.op_output("LinSpace", [s, e, _int_tensor(num)], None, scope)


lin_space = linspace


def eye(num_rows: int, num_columns: int | None = None, batch_shape: Any = None,
        dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """The identity matrix ``[num_rows, num_columns]`` (ones on the diagonal),
    repeated over ``batch_shape`` (TF's ``tf.eye``; Python sizes here)."""
    sizes = [num_rows, num_columns] + list(batch_shape or [])
    if any(ops.is_tensor(v) for v in sizes):
        raise InvalidArgumentError("dt.eye here takes Python ints for num_rows, num_columns "
                                   "and batch_shape")
    m = np.eye(int(num_rows), int(num_rows if num_columns is None else num_columns),
               dtype=dtypes.as_dtype(dtype).as_numpy_dtype)
    value = np.broadcast_to(m, tuple(int(b) for b in (batch_shape or [])) + m.shape).copy()
    return ops.constant(value, dtype=dtype, name=name or "eye")


def sequence_mask(lengths: Any, maxlen: Any = None, dtype: Any = dtypes.bool,
                  name: str | None = None) -> Tensor:
    """``mask[i..., j] = j < lengths[i...]`` for ``j < maxlen`` (default: the
    largest length), of ``dtype`` (TF's ``tf.sequence_mask``)."""
    with name_scope(name, "SequenceMask", [lengths, maxlen]) as scope:
        lens = _int_tensor(lengths)
        if maxlen is None or ops.is_tensor(maxlen):
            zero = ops.constant([0], dtype=lens.dtype)   # TF's max(0, max(lengths)): 0 if empty
            n = ops.reduce_max(concat([ops.reshape(lens, [-1]), zero], 0)) if maxlen is None \
                else ops.maximum(ops.cast(maxlen, lens.dtype), zero[0])
            one = ops.constant(1, dtype=lens.dtype)   # 0 .. n-1 (n may be 0)
            steps = ops.subtract(cumsum(fill(ops.reshape(ops.cast(n, dtypes.int32), [1]), one)),
                                 one)
        else:
            if int(maxlen) < 0:
                raise InvalidArgumentError(f"maxlen must be non-negative, got {maxlen}")
            steps = ops.constant(np.arange(int(maxlen)), dtype=lens.dtype)
        mask = ops.less(steps, expand_dims(lens, -1))
        want = dtypes.as_dtype(dtype)
        return mask if want == dtypes.bool else ops.cast(mask, want, name=scope)


def roll(input: Any, shift: Any, axis: Any, name: str | None = None) -> Tensor:  # noqa: A002
    """``input`` rotated by ``shift`` places along ``axis`` (scalars or equal-length
    vectors; an axis named twice shifts by the sum), TF's ``tf.roll``."""
    with name_scope(name, "Roll", [input, shift, axis]) as scope:
        x = ops.convert_operand(input)
        return ops.op_output("Roll", [x, _int_tensor(shift), _int_tensor(axis)], None, scope)


def meshgrid(*args: Any, **kwargs: Any) -> list[Tensor]:
    """N-D coordinate arrays from N vectors; ``indexing='xy'`` (default, Cartesian:
    the first two outputs' dimensions swapped) or ``'ij'`` (matrix), TF's ``tf.meshgrid``."""
    indexing = kwargs.pop("indexing", "xy")
    name = kwargs.pop("name", "meshgrid")
    if kwargs:
        raise TypeError(f"dt.meshgrid: unexpected arguments {sorted(kwargs)}")
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"indexing parameter must be either 'xy' or 'ij', got "
                                   f"{indexing!r}")
    with name_scope(name, "meshgrid", list(args)):
        xs = [ops.reshape(ops.convert_to_tensor(a), [-1]) for a in args]
        n = len(xs)
        if n == 0:
            return []
        sizes: list[Any] = [x.shape.as_list()[0] for x in xs]
        order = list(range(n))
        if indexing == "xy" and n > 1:
            order[0], order[1] = 1, 0
        out_sizes = [sizes[k] for k in order]
        target: Any = out_sizes if None not in out_sizes else \
            stack([size(xs[k]) for k in order])
        outs = []
        for i, x in enumerate(xs):
            where = order.index(i)
            shape = [1] * n
            shape[where] = -1
            outs.append(broadcast_to(ops.reshape(x, shape), target))
        return outs


def _last_axis(x: Tensor, axis: int, what: str) -> tuple[Tensor, list[int] | None]:
    """``x`` with ``axis`` moved last, and the permutation that undoes it."""
    dims = x.shape.as_list()
    if dims is None:
        if axis != -1:
            raise InvalidArgumentError(f"dt.{what} on an axis other than -1 needs the rank known")
        return x, None
    if not -len(dims) <= axis < len(dims) or not dims:
        raise InvalidArgumentError(f"dt.{what}: axis {axis} is out of range for shape "
                                   f"{x.shape}")
    a = axis % len(dims)
    if a == len(dims) - 1:
        return x, None
    perm = [d for d in range(len(dims)) if d != a] + [a]
    inverse = list(np.argsort(perm))
    return ops.transpose(x, perm), [int(p) for p in inverse]


def _sorted(values: Any, axis: int, direction: str, what: str, scope: str) -> tuple:
    if direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"{direction!r} is not a valid direction: use ASCENDING or "
                                   "DESCENDING")
    x = ops.convert_operand(values)
    moved, inverse = _last_axis(x, int(axis), what)
    n = moved.shape.as_list()[-1] if moved.shape.rank else None
    k = n if n is not None else ops.shape(moved)[-1]
    ascending = direction == "ASCENDING"
    if ascending and moved.dtype.is_unsigned:   # TF's flip of unsigned values: max - x
        flip = ops.constant(np.iinfo(moved.dtype.as_numpy_dtype).max, dtype=moved.dtype)
        top, idx = top_k(ops.subtract(flip, moved), k, name=scope)
        top = ops.subtract(flip, top)
    elif ascending and moved.dtype.is_integer:   # TF's -x - 1: the minimum does not overflow
        minus_one = ops.constant(-1, dtype=moved.dtype)
        top, idx = top_k(ops.add(ops.negative(moved), minus_one), k, name=scope)
        top = ops.add(ops.negative(top), minus_one)
    else:
        top, idx = top_k(ops.negative(moved) if ascending else moved, k, name=scope)
        top = ops.negative(top) if ascending else top
    if inverse is not None:
        top, idx = ops.transpose(top, inverse), ops.transpose(idx, inverse)
    return top, idx


def sort(values: Any, axis: int = -1, direction: str = "ASCENDING",
         name: str | None = None) -> Tensor:
    """``values`` sorted along ``axis`` (TF's ``tf.sort``, on ``top_k``)."""
    with name_scope(name, "sort", [values]) as scope:
        return _sorted(values, axis, direction, "sort", scope)[0]


def argsort(values: Any, axis: int = -1, direction: str = "ASCENDING", stable: bool = False,
            name: str | None = None) -> Tensor:
    """The indices that sort ``values`` along ``axis``, int32 (TF's ``tf.argsort``:
    equal values keep their order, so it is stable either way)."""
    with name_scope(name, "argsort", [values]) as scope:
        return _sorted(values, axis, direction, "argsort", scope)[1]


def searchsorted(sorted_sequence: Any, values: Any, side: str = "left",
                 out_type: Any = dtypes.int32, name: str | None = None) -> Tensor:
    """Where each of ``values`` would go in the innermost dimension of
    ``sorted_sequence`` (TF's ``tf.searchsorted``: ``LowerBound`` for ``'left'``,
    ``UpperBound`` for ``'right'``)."""
    if side not in ("left", "right"):
        raise InvalidArgumentError(f"side must be either 'left' or 'right', got {side!r}")
    op_type = "LowerBound" if side == "left" else "UpperBound"
    with name_scope(name, "searchsorted", [sorted_sequence, values]) as scope:
        seq, vals = ops.convert_pair(sorted_sequence, values)
        return ops.op_output(op_type, [seq, vals], {"out_type": dtypes.as_dtype(out_type)},
                             scope)


def depth_to_space(input: Any, block_size: int, data_format: str = "NHWC",  # noqa: A002
                   name: str | None = None) -> Tensor:
    """Depth rearranged into ``block_size`` x ``block_size`` spatial blocks (TF's)."""
    x = ops.convert_operand(input)
    return ops.op_output("DepthToSpace", [x], {"block_size": int(block_size),
                                               "data_format": data_format},
                         name or "DepthToSpace")


def space_to_depth(input: Any, block_size: int, data_format: str = "NHWC",  # noqa: A002
                   name: str | None = None) -> Tensor:
    """Spatial ``block_size`` x ``block_size`` blocks moved into depth (TF's)."""
    x = ops.convert_operand(input)
    return ops.op_output("SpaceToDepth", [x], {"block_size": int(block_size),
                                               "data_format": data_format},
                         name or "SpaceToDepth")


def conv1d(input: Any, filters: Any, stride: Any, padding: str,  # noqa: A002 - TF's names
           data_format: str = "NWC", dilations: Any = None, name: str | None = None
           ) -> Tensor:
    """1-D convolution of ``input`` [batch, width, in] (``NWC``; ``NCW``: [batch, in,
    width]) by ``filters`` [fw, in, out]: TF's ``tf.nn.conv1d``, a ``conv2d`` on a
    height of 1."""
    if data_format not in ("NWC", "NCW"):
        raise InvalidArgumentError(f"data_format must be NWC or NCW, got {data_format!r}")

    def one(v: Any, what: str) -> int:
        items = [int(s) for s in np.atleast_1d(1 if v is None else v)]
        if len(items) == 3:
            items = [items[1] if data_format == "NWC" else items[2]]
        if len(items) != 1:
            raise InvalidArgumentError(f"dt.nn.conv1d: {what} must be an int or a list of 1 "
                                       f"or 3, got {v!r}")
        return items[0]
    s, d = one(stride, "stride"), one(dilations, "dilations")
    with name_scope(name, "conv1d", [input, filters]) as scope:
        nwc = data_format == "NWC"
        x = expand_dims(ops.convert_operand(input), 1 if nwc else 2)
        f = expand_dims(ops.convert_to_tensor(filters, dtype=x.dtype), 0)
        strides, dil = ([1, 1, s, 1], [1, 1, d, 1]) if nwc else ([1, 1, 1, s], [1, 1, 1, d])
        y = conv2d(x, f, strides, padding, data_format="NHWC" if nwc else "NCHW",
                   dilations=dil)
        return squeeze(y, [1 if nwc else 2], name=scope)


# -- gradients (TF's array_grad) ------------------------------------------------------------
def _fill_grad(op: Operation, grad: Tensor) -> list:
    return [None, ops.reduce_sum(grad)]


def _roll_grad(op: Operation, grad: Tensor) -> list:
    return [roll(grad, ops.negative(op.inputs[1]), op.inputs[2]), None, None]


def _space_grad(to: str) -> Any:
    def grad_fn(op: Operation, grad: Tensor) -> list:
        attrs = {"block_size": op.get_attr("block_size"),
                 "data_format": op.get_attr("data_format") or "NHWC"}
        return [ops.op_output(to, [grad], attrs, to)]
    return grad_fn


GRADIENTS: dict[str, Any] = {"Fill": _fill_grad, "Roll": _roll_grad,
                             "DepthToSpace": _space_grad("SpaceToDepth"),
                             "SpaceToDepth": _space_grad("DepthToSpace")}
NOT_DIFFERENTIABLE: tuple[str, ...] = ("Size", "Rank", "LinSpace", "LowerBound", "UpperBound")
