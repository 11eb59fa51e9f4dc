"""CPU kernels that make, reshape, join and cut arrays (TF's array ops).

- sources: ``Const`` (a read-only view of its attr, marked as a runtime
  constant: :mod:`kernels.constants`), ``Placeholder`` (an error: it must be
  fed), ``NoOp``, ``Zeros``/``Ones`` and their ``*Like`` forms;
- shape: ``Reshape`` and ``ExpandDims`` (views of their input, as TF forwards
  the buffer), ``Transpose`` (a contiguous copy), ``Shape``, ``Tile``, and the
  gradients' ``SumToShapeOf``/``BroadcastToShapeOf``;
- joining and cutting: ``ConcatV2`` (``dt.concat``, and what
  ``strategy.gather`` and the collective all-gather build on) and
  ``SliceAxis``, a contiguous range of one axis (the gradient of a concat).

Kernels never mutate their inputs (:mod:`kernels.cpu.math`'s header).
"""
from __future__ import annotations

import math

import numpy as np

from kernels.constants import mark_constant
from kernels.dtypes import as_dtype, concrete_shape, reduction_axes
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["concat", "slice_axis", "sum_to_shape"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


# --- sources -------------------------------------------------------------------

@KERNELS("Const", CPU)
def const(inputs: list, attrs: dict) -> list:
    value = np.asarray(attrs["value"])
    dtype = attrs.get("dtype")
    if dtype is not None and value.dtype.kind not in "UOS":
        want = as_dtype(dtype)
        if want.kind not in "UOS" and value.dtype != want:
            value = value.astype(want)
    # read-only, and a constant of the runtime's: a GPU keeps its copy (kernels.cuda.memory)
    return [mark_constant(value.view())]


@KERNELS("Placeholder", CPU)
def placeholder(inputs: list, attrs: dict) -> list:
    raise KernelError("a Placeholder was run without a value: feed it in feed_dict "
                      f"(dtype {attrs.get('dtype')}, shape {attrs.get('shape')})")


@KERNELS("NoOp", CPU)
def no_op(inputs: list, attrs: dict) -> list:
    return []


@KERNELS("Zeros", CPU)
def zeros(inputs: list, attrs: dict) -> list:
    return [np.zeros(concrete_shape(attrs.get("shape"), "Zeros"), as_dtype(attrs.get("dtype")))]


@KERNELS("Ones", CPU)
def ones(inputs: list, attrs: dict) -> list:
    return [np.ones(concrete_shape(attrs.get("shape"), "Ones"), as_dtype(attrs.get("dtype")))]


@KERNELS("ZerosLike", CPU)
def zeros_like(inputs: list, attrs: dict) -> list:
    return [np.zeros_like(np.asarray(inputs[0]))]


@KERNELS("OnesLike", CPU)
def ones_like(inputs: list, attrs: dict) -> list:
    return [np.ones_like(np.asarray(inputs[0]))]


# --- shape ---------------------------------------------------------------------

@KERNELS("Reshape", CPU)
def reshape(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    shape = attrs.get("shape") if len(inputs) < 2 else np.asarray(inputs[1]).tolist()
    shape = [int(d) for d in shape]
    if sum(d == -1 for d in shape) > 1:
        raise KernelError(f"Reshape: at most one dimension may be -1, got {shape}")
    try:
        return [x.reshape(shape)]
    except ValueError:
        raise KernelError(f"Reshape: cannot reshape {list(x.shape)} ({x.size} elements) "
                          f"into {shape}") from None


@KERNELS("Transpose", CPU)
def transpose(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(p % max(x.ndim, 1) for p in perm) != list(range(x.ndim)):
        raise KernelError(f"Transpose: perm {perm} is not a permutation of 0..{x.ndim - 1}")
    # Contiguous output: BLAS and the wire both prefer C order.
    return [np.array(np.transpose(x, perm), order="C")]


@KERNELS("Shape", CPU)
def shape(inputs: list, attrs: dict) -> list:
    out_type = as_dtype(attrs.get("out_type") or "int32")
    return [np.asarray(np.shape(inputs[0]), dtype=out_type)]


def sum_to_shape(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting ``shape`` to it added."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    if lead < 0:
        raise KernelError(f"SumToShapeOf: gradient shape {list(grad.shape)} has lower rank "
                          f"than the reference {list(shape)}")
    axes = list(range(lead))
    for i, d in enumerate(shape):
        g = grad.shape[lead + i]
        if d == 1 and g != 1:
            axes.append(lead + i)
        elif d != g:
            raise KernelError(f"SumToShapeOf: gradient shape {list(grad.shape)} is not a "
                              f"broadcast of {list(shape)}")
    dtype = grad.dtype if grad.dtype.kind in "iuf" else None
    out = np.asarray(np.add.reduce(grad, axis=tuple(axes), dtype=dtype))   # (0-d: an array)
    return out if out.shape == shape else out.reshape(shape)


@KERNELS("SumToShapeOf", CPU)
def sum_to_shape_of(inputs: list, attrs: dict) -> list:
    grad = np.asarray(inputs[0])
    if grad.shape == np.shape(inputs[1]):
        # nothing to sum: forward the gradient (kernels never mutate inputs),
        # which saves a copy of every dense layer's gradient in a backward pass
        return [grad]
    out = sum_to_shape(grad, np.shape(inputs[1]))
    # a result of its own (a reduction's is; a reshaped one is a view of it)
    return [out if out.base is None else np.array(out)]


@KERNELS("BroadcastToShapeOf", CPU)
def broadcast_to_shape_of(inputs: list, attrs: dict) -> list:
    grad, ref_shape = np.asarray(inputs[0]), tuple(np.shape(inputs[1]))
    ndim = len(ref_shape)
    axes = reduction_axes(attrs.get("axis"), ndim, "BroadcastToShapeOf")
    axes = tuple(range(ndim)) if axes is None else axes
    if not attrs.get("keepdims", False):
        kept = [1 if i in axes else d for i, d in enumerate(ref_shape)]
        if grad.size != math.prod(kept):
            raise KernelError(f"BroadcastToShapeOf: gradient {list(grad.shape)} does not "
                              f"match {list(ref_shape)} reduced over {list(axes)}")
        grad = grad.reshape(kept)
    # A real array, not a zero-stride view: consumers (and the wire) get plain memory.
    out = np.empty(ref_shape, grad.dtype)
    try:
        np.copyto(out, grad)
    except ValueError:
        raise KernelError(f"BroadcastToShapeOf: cannot broadcast {list(grad.shape)} to "
                          f"{list(ref_shape)}") from None
    if attrs.get("mean"):
        # the gradient of a mean: each input shares its output's gradient with
        # the others it was averaged with
        if out.dtype.kind not in "fc":
            raise KernelError(f"BroadcastToShapeOf: the gradient of a mean must be float, "
                              f"got {out.dtype}")
        count = 1
        for a in axes:
            count *= ref_shape[a]
        if count > 1:
            np.divide(out, np.asarray(count, out.dtype), out=out)
    return [out]


@KERNELS("Tile", CPU)
def tile(inputs: list, attrs: dict) -> list:
    multiples = attrs.get("multiples") if len(inputs) < 2 else np.asarray(inputs[1]).tolist()
    x = np.asarray(inputs[0])
    if multiples is None or len(multiples) != x.ndim:
        raise KernelError(f"Tile: multiples {multiples} must have one entry per dimension "
                          f"of the rank-{x.ndim} input")
    return [np.tile(x, [int(m) for m in multiples])]


@KERNELS("ExpandDims", CPU)
def expand_dims(inputs: list, attrs: dict) -> list:
    axis = attrs.get("axis") if len(inputs) < 2 else int(np.asarray(inputs[1]))
    x = np.asarray(inputs[0])
    try:
        return [np.expand_dims(x, int(axis))]
    except (np.exceptions.AxisError, TypeError):
        raise KernelError(f"ExpandDims: axis {axis} is out of range for a rank-{x.ndim} "
                          "input") from None


# --- joining and cutting ---------------------------------------------------------

@KERNELS("ConcatV2", CPU)
def concat(inputs: list, attrs: dict) -> list:
    arrays = [np.asarray(x) for x in inputs]
    axis = int(attrs.get("axis", 0))
    try:
        return [np.concatenate(arrays, axis=axis)]
    except (ValueError, np.exceptions.AxisError) as e:
        shapes = [list(a.shape) for a in arrays]
        raise KernelError(f"ConcatV2: cannot join shapes {shapes} along axis {axis}: {e}") from None


@KERNELS("SliceAxis", CPU)
def slice_axis(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis, begin, size = int(attrs["axis"]), int(attrs["begin"]), int(attrs["size"])
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim or begin < 0 or begin + size > x.shape[axis]:
        raise KernelError(f"SliceAxis: [{begin}, {begin + size}) of axis {axis} is outside "
                          f"shape {list(x.shape)}")
    index = [slice(None)] * x.ndim
    index[axis] = slice(begin, begin + size)
    return [np.array(x[tuple(index)])]
