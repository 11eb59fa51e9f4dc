"""A strided slice's spec as a numpy index: TF's ``StridedSlice`` attrs
(begin, end, strides and the five bit masks) turned into the basic index
numpy cuts with. Shared by the CPU kernel (:mod:`kernels.cpu.slicing`) and
the op's static shape function, so the two cannot disagree; it registers
nothing (importing it loads no kernel).

Bit ``i`` of a mask is about entry ``i`` of the spec, not about dimension
``i`` (an ellipsis or a new axis shifts the dimensions); numpy's clamping of
out-of-range bounds is TF's.
"""
from __future__ import annotations

from typing import Any

from kernels.registry import KernelError

__all__ = ["strided_index"]


def strided_index(attrs: dict) -> tuple[Any, ...]:
    """The numpy index of a ``StridedSlice``'s attrs (begin, end, strides, masks)."""
    begin, end = list(attrs["begin"]), list(attrs["end"])
    strides = list(attrs.get("strides") or [1] * len(begin))
    if not len(begin) == len(end) == len(strides):
        raise KernelError(f"StridedSlice: begin {begin}, end {end} and strides {strides} must "
                          "have the same length")
    if any(int(s) == 0 for s in strides):
        raise KernelError(f"StridedSlice: strides {strides} must be non-zero")
    masks = {k: int(attrs.get(k) or 0) for k in (
        "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    index: list[Any] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        bit = 1 << i
        if masks["ellipsis_mask"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            index.append(None)
        elif masks["shrink_axis_mask"] & bit:
            index.append(int(b))
        else:
            index.append(slice(None if masks["begin_mask"] & bit else int(b),
                               None if masks["end_mask"] & bit else int(e), int(s)))
    return tuple(index)
