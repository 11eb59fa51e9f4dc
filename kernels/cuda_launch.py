"""Launching numba.cuda kernels: grid sizes, device arrays, and the
registration wrapper every GPU kernel goes through (strings and uncovered
cases go to the CPU kernel on a host copy). Shared by ``kernels.cuda`` and
``kernels.cuda_nn``; imported only once a GPU kernel is wanted."""
from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable

import numpy as np
from numba import cuda

from kernels import cuda_math as cm
from kernels.devices import CUDASIM, backend, is_device_array, to_host
from kernels.registry import CPU, GPU, get_kernel, register

__all__ = ["SIM", "launch_1d", "as_device", "flat", "device_empty", "device_filled",
           "host_fallback", "gpu_kernel", "register_gpu"]

logger = logging.getLogger(__name__)

SIM = backend() == CUDASIM
# The simulator runs every CUDA thread as a Python thread: keep grids tiny
# there (grid-stride loops make any size correct with any grid).
THREADS = 64 if SIM else 256
MAX_BLOCKS = 4 if SIM else 8192
_fallback_logged: set[str] = set()


def launch_1d(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``n`` elements."""
    return max(1, min(math.ceil(n / THREADS), MAX_BLOCKS)), THREADS


def as_device(x: Any) -> Any:
    """``x`` as a device array on the current device (copied if on the host)."""
    if is_device_array(x):
        return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)
    return cuda.to_device(np.asarray(x, order="C"))


def flat(x: Any) -> Any:
    return x.reshape(x.size)


def device_empty(shape: tuple[int, ...], dtype: Any) -> Any:
    return cuda.device_array(tuple(shape), dtype=np.dtype(dtype))


def _is_host_only(x: Any) -> bool:
    # Strings and objects have no device representation.
    return not is_device_array(x) and np.asarray(x).dtype.kind in "UOS"


def host_fallback(op: str, inputs: list, attrs: dict) -> list:
    if op not in _fallback_logged:
        _fallback_logged.add(op)
        logger.debug("%s: case not covered on the GPU, running the CPU kernel on a host copy", op)
    outs = get_kernel(op, CPU)([to_host(x) for x in inputs], attrs)
    return [o if o.dtype.kind in "UOS" else cuda.to_device(np.asarray(o, order="C")) for o in outs]


# The simulator swaps numba.cuda for its fake module in a kernel's globals
# while the kernel runs, so two kernels at once on two threads (the kernel
# pool runs a GPU op's first launch, see distrib's kernel_pool) break each
# other: there, one GPU op runs at a time.
_SIM_LOCK = threading.RLock()


def register_gpu(op: str, fn: Callable[[list, dict], list]) -> Callable[[list, dict], list]:
    """Register ``fn`` for ``op``; string inputs go to the CPU kernel."""
    def kernel(inputs: list, attrs: dict) -> list:
        if any(_is_host_only(x) for x in inputs):
            return get_kernel(op, CPU)(inputs, attrs)
        if SIM:
            with _SIM_LOCK:
                return fn(inputs, attrs)
        return fn(inputs, attrs)
    kernel.__name__ = kernel.__qualname__ = f"{op}_gpu"
    return register(op, GPU)(kernel)


def gpu_kernel(op: str) -> Callable[[Callable], Callable]:
    return lambda fn: register_gpu(op, fn)


def device_filled(shape: tuple[int, ...], dtype: np.dtype, value: int) -> Any:
    out = device_empty(shape, dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        cm.fill[blocks, threads](flat(out), dtype.type(value))
    return out
