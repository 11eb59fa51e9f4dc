"""The converters of :mod:`distrib.train.input.vectorize`: for each op type a
queue runner's per-example subgraph meets, the ops that compute it for a
batch of ``n`` examples (a leading dimension the per-example op does not
have, its size known only when the step runs).

Rules (TF's pfor converters follow the same ones): an axis attr of a
per-example op moves up one (``Transpose``, ``ReverseV2``, reductions,
``StridedSlice``'s spec and masks, ``ExpandDims``, ``Squeeze``);
an elementwise op whose per-example operands have a lower rank than its
result gets them reshaped to ``[n, 1, ..., 1, shape]`` first (a per-example
scalar, one brightness delta per image, must not broadcast against the
image's last dimension); a random op of shape ``s`` draws ``[n] + s``
(each example its own draw); a ``Slice`` whose begin is per-example is a
``BatchSlice``, a ``SelectV2`` of a per-example scalar condition a
``BatchSelect``; ``AdjustContrastv2`` with a per-example factor is its
formula in ops (mean over height and width, scaled difference, mean
added back). An invariant value (a constant, a variable's read) is used as
it is. A converter raises :class:`NotVectorizable` for a case it does not
cover, and the runner then runs the original op once per record.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from distrib.framework import dtypes
from distrib.framework.graph import Graph, Operation, Tensor
from distrib.framework.tensor_shape import TensorShape

__all__ = ["NotVectorizable", "Value", "Builder", "CONVERTERS", "RANDOM_OPS"]

# the random ops converted: those whose entry takes the shape as an input (``[n] + s``
# drawn in one run); every other random op of kernels.cpu.math.RANDOM_OPS is
# per-example too (vectorize._classify) and has no converter: its runner falls back
RANDOM_OPS = frozenset({"RandomUniform"})

_UNARY = ("Cast", "Floor", "Ceil", "Round", "Sqrt", "Rsqrt", "Square", "Neg", "Abs", "Exp",
          "Log", "Sigmoid", "Tanh", "Relu", "Sign", "Identity", "StopGradient", "LogicalNot")
_ELEMENTWISE = ("Add", "AddV2", "Sub", "Mul", "RealDiv", "Div", "Maximum", "Minimum", "Pow",
                "SquaredDifference", "FloorDiv", "FloorMod", "Equal", "NotEqual", "Less",
                "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "SelectV2")
_REDUCTIONS = ("Sum", "Mean", "Min", "Max", "Prod")


class NotVectorizable(Exception):
    """The subgraph (or one op of it) has no batched form here: run it per record."""


@dataclass(frozen=True)
class Value:
    """A value of the batched graph: ``tensor``, with a leading batch dimension
    when ``variant``; ``shape`` is the per-example (original) static shape."""

    tensor: Tensor
    variant: bool
    shape: TensorShape

    @classmethod
    def invariant(cls, t: Tensor) -> Value:
        return cls(t, False, t.shape)

    @property
    def rank(self) -> int:
        if self.shape.rank is None:
            raise NotVectorizable(f"the rank of {self.tensor.name} is not known")
        return self.shape.rank


class Builder:
    """Adds the batched ops to ``graph``, each on its original op's device."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._count: Tensor | None = None   # [n] as an int32 vector (the chunk's size)

    def op(self, orig: Operation, op_type: str, inputs: list[Tensor], attrs: dict[str, Any],
           outputs: list[tuple[Any, Any]], suffix: str = "") -> Operation:
        return self.graph.create_op(op_type, inputs, attrs, orig.name + suffix,
                                    output_specs=outputs, device=orig.device)

    def batched(self, orig: Operation, op_type: str, inputs: list[Tensor],
                attrs: dict[str, Any] | None = None, suffix: str = "") -> list[Value]:
        """``op_type`` over ``inputs`` with ``orig``'s outputs, batched."""
        specs = [(t.dtype, [None, *t.shape.as_list()]) for t in orig.outputs]
        made = self.op(orig, op_type, inputs, dict(orig.attrs) if attrs is None else attrs,
                       specs, suffix)
        return [Value(t, True, o.shape) for t, o in zip(made.outputs, orig.outputs)]

    def const(self, orig: Operation, value: Any, dtype: Any, suffix: str) -> Tensor:
        arr = np.asarray(value, dtype=dtypes.as_dtype(dtype).as_numpy_dtype)
        return self.op(orig, "Const", [], {"value": arr, "dtype": dtypes.as_dtype(dtype)},
                       [(dtype, list(arr.shape))], suffix).outputs[0]

    def read_up_to(self, reader: Operation, chunk: int) -> tuple[Value, Value]:
        count = self.const(reader, chunk, dtypes.int64, "/num_records")
        made = self.op(reader, "ReaderReadUpToV2", [count], dict(reader.attrs),
                       [(dtypes.string, [None]), (dtypes.string, [None])], "_up_to")
        return (Value(made.outputs[0], True, TensorShape([])),
                Value(made.outputs[1], True, TensorShape([])))

    def count_from(self, keys: Tensor) -> None:
        self._count = self.graph.create_op("Shape", [keys], {"out_type": dtypes.int32},
                                           "chunk_size", output_specs=[(dtypes.int32, [1])],
                                           device=keys.op.device).outputs[0]

    def batch_shape(self, orig: Operation, shape: list[int]) -> Tensor:
        """``[n] + shape`` as an int32 vector (a random op's shape input)."""
        assert self._count is not None
        tail = self.const(orig, shape, dtypes.int32, "/example_shape")
        return self.op(orig, "ConcatV2", [self._count, tail], {"axis": 0},
                       [(dtypes.int32, [1 + len(shape)])], "/batch_shape").outputs[0]

    def lifted(self, orig: Operation, v: Value, rank: int, k: int) -> Tensor:
        """A per-example operand of rank ``v.rank`` reshaped to broadcast as a
        batched operand of per-example rank ``rank``: ``[n, 1.., shape]``."""
        if not v.variant or v.rank >= rank:
            return v.tensor
        if not v.shape.is_fully_defined():
            raise NotVectorizable(f"{v.tensor.name} needs a known shape to broadcast per "
                                  "example")
        shape = [1] * (rank - v.rank) + v.shape.as_list()
        return self.op(orig, "Reshape", [v.tensor], {"shape": [-1, *shape]},
                       [(v.tensor.dtype, [None, *shape])], f"/lift_{k}").outputs[0]

    def enqueue_many(self, enqueue: Operation, ins: list[Value]) -> Operation:
        if not all(v.variant for v in ins):
            raise NotVectorizable("a component of the element is the same for every record")
        return self.op(enqueue, "QueueEnqueueManyV2", [v.tensor for v in ins],
                       dict(enqueue.attrs), [], "_many")


Converter = Callable[[Builder, Operation, list[Value]], list[Value]]
CONVERTERS: dict[str, Converter] = {}


def _converts(*types: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for t in types:
            CONVERTERS[t] = fn
        return fn
    return register


def _axis_attrs(op: Operation, keys: tuple[str, ...]) -> None:
    """Only attr-given axes are converted: an axis, perm or shape input is not."""
    extra = len(op.inputs) - 1
    if extra > 0:
        raise NotVectorizable(f"{op.type} {op.name} takes its {keys[0]} as an input")


def _shifted(axes: Any, rank: int) -> list[int]:
    """Per-example axes (negative from the end) as axes of the batched value; an
    axis out of range is not converted (the per-example op says what is wrong)."""
    if rank == 0:
        raise NotVectorizable("an axis of a scalar")
    axes = [int(a) for a in (axes if isinstance(axes, (list, tuple)) else [axes])]
    if any(not -rank <= a < rank for a in axes):
        raise NotVectorizable(f"axes {axes} out of range for rank {rank}")
    return [a % rank + 1 for a in axes]


@_converts(*_UNARY)
def _unary(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    return b.batched(op, op.type, [ins[0].tensor])


@_converts(*_ELEMENTWISE)
def _elementwise(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    rank = op.outputs[0].shape.rank
    if op.type == "SelectV2" and _row_select(op, ins):   # whole rows: a per-example flip
        return b.batched(op, "BatchSelect", [v.tensor for v in ins], {})
    return b.batched(op, op.type, [b.lifted(op, v, rank, k) for k, v in enumerate(ins)])


def _row_select(op: Operation, ins: list[Value]) -> bool:
    """A ``SelectV2`` of one condition per example between two per-example
    values of the result's shape: it picks whole rows."""
    cond, t, e = ins
    out = op.outputs[0].shape
    return cond.variant and cond.rank == 0 and t.variant and e.variant and \
        out.is_fully_defined() and t.shape.as_list() == e.shape.as_list() == out.as_list() \
        and t.tensor.dtype == e.tensor.dtype


@_converts("DecodeRaw")
def _decode_raw(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    """[n] strings -> [n, length]: only a fixed-length reader's records, whose
    lengths agree (others may differ from record to record, and would not stack)."""
    source = ins[0].tensor.op
    if source.type != "ReaderReadUpToV2" or ins[0].tensor.value_index != 1 or \
            (source.attrs.get("reader_spec") or {}).get("kind") != "fixed_length":
        raise NotVectorizable(f"DecodeRaw {op.name} of records that may differ in length")
    return b.batched(op, op.type, [ins[0].tensor])


@_converts(*RANDOM_OPS)
def _random(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    shape = op.outputs[0].shape
    if op.inputs or not shape.is_fully_defined():
        raise NotVectorizable(f"random op {op.name} has a shape known only when it runs")
    attrs = {**op.attrs, "shape": [None, *shape.as_list()]}
    return b.batched(op, op.type, [b.batch_shape(op, shape.as_list())], attrs)


@_converts("Reshape")
def _reshape(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    _axis_attrs(op, ("shape",))
    out = op.outputs[0].shape
    shape = out.as_list() if out.is_fully_defined() else [int(d) for d in op.attrs["shape"]]
    if -1 in shape:
        raise NotVectorizable(f"Reshape {op.name} to {shape}: the per-example shape is not known")
    return b.batched(op, "Reshape", [ins[0].tensor], {**op.attrs, "shape": [-1, *shape]})


@_converts("Transpose")
def _transpose(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    _axis_attrs(op, ("perm",))
    rank, perm = ins[0].rank, op.attrs.get("perm")
    perm = list(range(rank))[::-1] if perm is None else \
        [int(p) % rank if -rank <= int(p) < rank else -1 for p in perm]
    if sorted(perm) != list(range(rank)):
        raise NotVectorizable(f"Transpose {op.name}: perm {op.attrs.get('perm')} is not a "
                              f"permutation of rank {rank}'s axes")
    return b.batched(op, "Transpose", [ins[0].tensor],
                     {**op.attrs, "perm": [0, *(p + 1 for p in perm)]})


@_converts("ReverseV2")
def _reverse(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    _axis_attrs(op, ("axis",))
    axis = op.attrs.get("axis") or []
    return b.batched(op, "ReverseV2", [ins[0].tensor],
                     {**op.attrs, "axis": _shifted(axis, ins[0].rank) if axis else []})


@_converts(*_REDUCTIONS)
def _reduce(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    _axis_attrs(op, ("axis",))
    rank, axis = ins[0].rank, op.attrs.get("axis")
    axes = list(range(1, rank + 1)) if axis is None else _shifted(axis, rank)
    return b.batched(op, op.type, [ins[0].tensor], {**op.attrs, "axis": axes})


@_converts("ExpandDims")
def _expand_dims(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    _axis_attrs(op, ("axis",))
    axis, rank = int(op.attrs["axis"]), ins[0].rank
    if not -rank - 1 <= axis <= rank:
        raise NotVectorizable(f"ExpandDims {op.name}: axis {axis} out of range")
    axis = axis if axis >= 0 else axis + rank + 1
    return b.batched(op, "ExpandDims", [ins[0].tensor], {**op.attrs, "axis": axis + 1})


@_converts("Squeeze")
def _squeeze(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    dims = list(op.attrs.get("squeeze_dims") or [])
    if not dims:   # every size-1 dimension of the example, never the batch's
        shape = ins[0].shape
        if not shape.is_fully_defined():
            raise NotVectorizable(f"Squeeze {op.name} of a shape not known")
        dims = [i for i, d in enumerate(shape.as_list()) if d == 1]
        if not dims:
            return b.batched(op, "Identity", [ins[0].tensor], {})
    return b.batched(op, "Squeeze", [ins[0].tensor],
                     {**op.attrs, "squeeze_dims": _shifted(dims, ins[0].rank)})


@_converts("StridedSlice")
def _strided_slice(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    a = op.attrs
    begin, end = list(a["begin"]), list(a["end"])
    strides = list(a.get("strides") or [1] * len(begin))
    masks = {k: int(a.get(k) or 0) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                             "new_axis_mask", "shrink_axis_mask")}
    attrs = {**a, "begin": [0, *begin], "end": [0, *end], "strides": [1, *strides],
             **{k: m << 1 for k, m in masks.items()}}
    attrs["begin_mask"] |= 1
    attrs["end_mask"] |= 1
    return b.batched(op, "StridedSlice", [ins[0].tensor], attrs)


@_converts("Slice")
def _slice(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    x, size = ins[0], [int(s) for s in op.attrs["size"]]
    if not x.variant:
        raise NotVectorizable(f"Slice {op.name} of an invariant value at per-example places")
    if len(ins) == 1:   # begin an attr: the same window of every example
        return b.batched(op, "Slice", [x.tensor], {**op.attrs, "begin": [0, *op.attrs["begin"]],
                                                   "size": [-1, *size]})
    begin = ins[1]
    if not begin.variant:
        raise NotVectorizable(f"Slice {op.name}: a begin tensor the same for every example")
    if -1 in size:
        raise NotVectorizable(f"Slice {op.name}: size {size} must be known for every example")
    return b.batched(op, "BatchSlice", [x.tensor, begin.tensor], {"size": size})


@_converts("AdjustContrastv2")
def _adjust_contrast(b: Builder, op: Operation, ins: list[Value]) -> list[Value]:
    images, factor = ins
    if not images.variant:
        raise NotVectorizable(f"AdjustContrastv2 {op.name}: the same images for every example")
    if not factor.variant:   # the kernel takes any leading dimensions
        return b.batched(op, op.type, [images.tensor, factor.tensor])
    rank, dtype = images.rank, images.tensor.dtype
    if rank < 3 or dtype not in (dtypes.float32, dtypes.float64) or factor.tensor.dtype != dtype:
        raise NotVectorizable(f"AdjustContrastv2 {op.name} of {dtype} images, {factor.tensor.dtype} "
                              "factors")
    x = images.tensor
    out = op.outputs[0]
    spec = [(dtype, [None, *out.shape.as_list()])]
    keep = [None, *out.shape.as_list()[:-3], 1, 1, out.shape.as_list()[-1]]
    mean = b.op(op, "Mean", [x], {"axis": [rank - 2, rank - 1], "keepdims": True},
                [(dtype, keep)], "/mean").outputs[0]
    centred = b.op(op, "Sub", [x, mean], {}, spec, "/centred").outputs[0]
    scale = b.lifted(op, factor, rank, 1)
    scaled = b.op(op, "Mul", [centred, scale], {}, spec, "/scaled").outputs[0]
    return b.batched(op, "Add", [scaled, mean], {})
