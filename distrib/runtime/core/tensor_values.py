"""How a step holds its tensors: on the host or a device, stand-ins for
inputs read only for their shape, and which inputs a kernel may overwrite.

Memory: a value is dropped as soon as its last consumer has started, so big
activations do not live for the whole step; an input read only for its shape
(a gradient's ``SumToShapeOf`` reference: ``shape_only_inputs`` in the op
catalogue) gets a stand-in (``shape_stand_in``) and does not keep the tensor
alive. Bias adds, relu and its gradient write
into an input that nothing else holds any more (``exclusive``, checked by
reference count: never a feed, a variable, a fetched or a received tensor),
as TensorFlow's kernels forward their input buffers.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["Node", "host_array", "args_to_device", "shape_stand_in", "exclusive"]

# A GraphDef node as the runtime sees it: the plain dict of docs/ops.md
Node = dict[str, Any]


def host_array(x: Any) -> Any:
    """``x`` as a host array: a numpy array as it is, a device array copied
    to the host (kernels.cuda.devices loads only when a device array may exist)."""
    if type(x) is np.ndarray or x is None:
        return x
    from kernels.cuda import devices
    return devices.to_host(x) if devices.is_device_array(x) else np.asarray(x)


def args_to_device(args: list[Any], dev: tuple[str, int]) -> list[Any]:
    """A GPU kernel's inputs on GPU ``dev[1]`` (host arrays are copied there)."""
    from kernels.cuda import devices
    return [a if devices.is_device_array(a) else devices.to_device(np.asarray(a), dev[1])
            for a in args]


_STAND_INS: dict[tuple[Any, tuple[int, ...]], np.ndarray] = {}


def shape_stand_in(value: Any) -> Any:
    """A stand-in for ``value`` with its shape and dtype and no memory (a
    read-only zero-stride view of one zero, made once per shape and dtype);
    ``value`` itself if it has no such pair."""
    if type(value) is not np.ndarray:
        return value
    key = (value.dtype, value.shape)
    stand_in = _STAND_INS.get(key)
    if stand_in is None:
        if len(_STAND_INS) >= 4096:
            _STAND_INS.clear()
        stand_in = _STAND_INS[key] = np.broadcast_to(np.zeros((), value.dtype), value.shape)
    return stand_in


def exclusive(args: list[Any], k: int) -> bool:
    """Whether ``args[k]`` is a temporary only this op can see: an ndarray that
    owns its memory (not a view, not a shared-memory or received buffer), is
    writable, and whose only references are ``args`` and this frame. A feed,
    a variable's value, a fetched value, a tensor still waiting to be sent or
    read by another op all have more, so they are never overwritten."""
    a = args[k]
    return (type(a) is np.ndarray and a.base is None and a.flags.writeable
            and a.flags.c_contiguous and sys.getrefcount(a) <= 3)
