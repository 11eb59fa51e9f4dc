"""Attr decoding shared by the CPU and GPU kernels: dtypes, shapes, axes.

Attrs arrive as msgpack-able values (dtype names as strings, shapes and axes as
lists), so every kernel needs the same few conversions; they live here once
and fail with a message that names the op and the bad value.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import KernelError

__all__ = ["as_dtype", "concrete_shape", "reduction_axes"]

# TF spellings that numpy does not know; strings are object arrays as in distrib.framework.dtypes.
_ALIASES = {"string": "object", "half": "float16", "float": "float32", "double": "float64"}


def as_dtype(dtype: Any) -> np.dtype:
    """A numpy dtype from an attr (``"float32"``, ``np.float32``, ``"string"``...)."""
    if dtype is None:
        return np.dtype(np.float32)  # TF's default for float-producing ops
    name = getattr(dtype, "name", dtype)
    if isinstance(name, str):
        name = _ALIASES.get(name, name)
    try:
        return np.dtype(name)
    except TypeError:
        raise KernelError(f"unknown dtype {dtype!r}: use a numpy name like 'float32'") from None


def concrete_shape(shape: Any, op: str) -> tuple[int, ...]:
    """A shape attr with every dimension known; ``None`` dims are an error."""
    if shape is None:
        raise KernelError(f"{op}: a shape is required")
    if np.ndim(shape) == 0:
        shape = [shape]
    dims = list(np.asarray(shape, dtype=object).reshape(-1)) if len(shape) else []
    if any(d is None or int(d) < 0 for d in dims):
        raise KernelError(f"{op}: shape {list(shape)} must be fully known and non-negative")
    return tuple(int(d) for d in dims)


def reduction_axes(axis: Any, ndim: int, op: str) -> tuple[int, ...] | None:
    """Normalize a reduction ``axis`` attr (None | int | list) to a tuple of
    non-negative axes, or None for "all axes"."""
    if axis is None:
        return None
    items = [axis] if np.ndim(axis) == 0 else list(np.asarray(axis).reshape(-1))
    out = []
    for a in items:
        a = int(a)
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise KernelError(f"{op}: axis {a} is out of range for a rank-{ndim} input")
        a = a % ndim if ndim else 0
        if a not in out:
            out.append(a)
    return tuple(out) if ndim else ()
