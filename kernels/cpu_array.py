"""CPU kernels that join and cut arrays along an axis: ``ConcatV2`` (``dt.concat``,
and what ``strategy.gather`` and the collective all-gather build on) and
``SliceAxis``, a contiguous range of one axis (the gradient of a concat)."""
from __future__ import annotations

import numpy as np

from kernels.registry import CPU, KernelError, register

__all__ = ["concat", "slice_axis"]


@register("ConcatV2", CPU)
def concat(inputs: list, attrs: dict) -> list:
    arrays = [np.asarray(x) for x in inputs]
    axis = int(attrs.get("axis", 0))
    try:
        return [np.concatenate(arrays, axis=axis)]
    except (ValueError, np.exceptions.AxisError) as e:
        shapes = [list(a.shape) for a in arrays]
        raise KernelError(f"ConcatV2: cannot join shapes {shapes} along axis {axis}: {e}") from None


@register("SliceAxis", CPU)
def slice_axis(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis, begin, size = int(attrs["axis"]), int(attrs["begin"]), int(attrs["size"])
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim or begin < 0 or begin + size > x.shape[axis]:
        raise KernelError(f"SliceAxis: [{begin}, {begin + size}) of axis {axis} is outside "
                          f"shape {list(x.shape)}")
    index = [slice(None)] * x.ndim
    index[axis] = slice(begin, begin + size)
    return [np.array(x[tuple(index)])]
