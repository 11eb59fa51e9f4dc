"""Shape functions of the op catalogue for cutting, padding, choosing and
decoding: ``StridedSlice`` (and its gradient), ``Slice``, ``Pad``,
``SelectV2`` and ``DecodeRaw`` (see :mod:`distrib.framework.op_shapes` for
the rules every shape function keeps: unknown dims pass, two known facts
that disagree are an ``InvalidArgumentError`` naming the op).

A strided slice's static shape is found the way its kernel cuts: the numpy
index of its spec applied to a stand-in of the input's shape that holds no
memory (a broadcast scalar). An unknown dimension is tried at two sizes;
an output dimension that differs between the two is unknown.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.op_shapes import Spec, broadcast_shape
from distrib.framework.tensor_shape import TensorShape
from kernels.cpu.slice_spec import strided_index
from kernels.registry import KernelError

__all__ = ["strided_slice", "strided_slice_grad", "slice_", "pad", "select_v2", "decode_raw"]

_PROBES = (1_000_003, 1_000_033)   # sizes that stand for an unknown dimension


def _cut(dims: list[Any], index: tuple, probe: int) -> tuple[int, ...]:
    stand_in = np.broadcast_to(np.empty((), np.bool_), [probe if d is None else d for d in dims])
    return stand_in[index].shape


def strided_slice(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    if x.shape.rank is None:
        return [(x.dtype, TensorShape(None))]
    dims = x.shape.as_list()
    try:
        index = strided_index(attrs)
        a, b = (_cut(dims, index, p) for p in _PROBES)
    except (IndexError, ValueError) as e:
        raise InvalidArgumentError(f"{op_type} of shape {dims}: {e}", op=name) from None
    except KernelError as e:   # a malformed spec
        raise InvalidArgumentError(f"{op_type}: {e}", op=name) from None
    return [(x.dtype, TensorShape([p if p == q else None for p, q in zip(a, b)]))]


def strided_slice_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(inputs[0].dtype, inputs[1].shape)]


def slice_(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, size = inputs[0], [int(s) for s in attrs["size"]]
    begin = attrs.get("begin")
    if x.shape.rank is not None and len(size) != x.shape.rank:
        raise InvalidArgumentError(f"{op_type}: size {size} needs one entry per dimension of "
                                   f"shape {x.shape.as_list()}", op=name)
    dims: list[int | None] = []
    for i, s in enumerate(size):
        if s != -1:
            dims.append(s)
            continue
        known = x.shape.rank is not None and x.shape.as_list()[i] is not None
        dims.append(x.shape.as_list()[i] - int(begin[i]) if known and begin is not None
                    and len(inputs) == 1 else None)
    return [(x.dtype, TensorShape(dims))]


def pad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    if attrs.get("paddings") is None:   # given as a tensor (input 1)
        return [(x.dtype, TensorShape(None if x.shape.rank is None else [None] * x.shape.rank))]
    paddings = np.asarray(attrs["paddings"], dtype=np.int64).reshape(-1, 2)
    if x.shape.rank is None:
        return [(x.dtype, TensorShape([None] * len(paddings)))]
    if len(paddings) != x.shape.rank or (paddings < 0).any():
        raise InvalidArgumentError(f"{op_type}: paddings {paddings.tolist()} need one "
                                   "non-negative [before, after] pair per dimension of shape "
                                   f"{x.shape.as_list()}", op=name)
    return [(x.dtype, TensorShape([None if d is None else d + int(a + b)
                                   for d, (a, b) in zip(x.shape.as_list(), paddings)]))]


def select_v2(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    cond, t, e = inputs
    if cond.dtype != dtypes.bool:
        raise InvalidArgumentError(f"{op_type}: the condition must be bool, got "
                                   f"{cond.dtype.name}", op=name)
    if t.dtype != e.dtype:
        raise InvalidArgumentError(f"{op_type}: both branches need one dtype, got "
                                   f"{t.dtype.name} and {e.dtype.name}", op=name)
    shape = broadcast_shape(broadcast_shape(cond.shape, t.shape, op_type, name), e.shape,
                            op_type, name)
    return [(t.dtype, shape)]


def decode_raw(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x = inputs[0]
    if x.dtype != dtypes.string:
        raise InvalidArgumentError(f"{op_type} decodes strings, got {x.dtype.name}", op=name)
    out = dtypes.as_dtype(attrs.get("out_type") or "uint8")
    dims = None if x.shape.rank is None else [*x.shape.as_list(), None]
    return [(out, TensorShape(dims))]
