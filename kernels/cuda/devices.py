"""GPU discovery and host/device copies, without ever crashing a CPU-only task.

``backend()`` says what ``numba.cuda`` would run on: the CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``, checked first because it needs no driver), a real
driver, or nothing. Every way a machine can lack CUDA (no driver library, no
device, ``CUDA_VISIBLE_DEVICES=""``, a driver that fails to initialise) ends
in ``"none"`` and an empty device list, never an exception: a task without a
GPU simply has no GPU devices.

numba is imported inside the functions, not at module level, so importing
this module stays as cheap as importing numpy. Works with numba's built-in
CUDA target and with the ``numba-cuda`` package alike (both are
``from numba import cuda``).

Which GPUs a process uses, and in which order (TF's ``visible_device_list``:
``[1, 0]`` makes the second GPU ``GPU:0``), is fixed once per process, as the
driver reads ``CUDA_VISIBLE_DEVICES`` once: the first ``gpu_devices(order)``
before the driver starts narrows ``CUDA_VISIBLE_DEVICES`` to that order for
the driver's start (then puts the variable back, so child processes see the
user's), and ``cuda.gpus[i]`` is ``GPU:i`` from then on. A later call may
list a prefix of that order; asking another order raises
:class:`GpuOrderError`, as TF refuses one GPU id mapped to two devices.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from typing import Any, Sequence

import numpy as np

from kernels.cuda import memory

__all__ = ["backend", "gpu_devices", "to_device", "to_host", "copy_in", "is_device_array",
           "GpuOrderError", "use_gpu", "current_gpu"]

logger = logging.getLogger(__name__)

CUDASIM = "cudasim"
CUDA = "cuda"
NONE = "none"


def _simulator_enabled(cuda: Any) -> bool:
    for holder in (getattr(cuda, "config", None), _numba_config()):
        flag = getattr(holder, "ENABLE_CUDASIM", None)
        if flag is not None:
            return bool(flag)
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _numba_config() -> Any:
    try:
        from numba import config
    except ImportError:
        return None
    return config


@functools.cache
def backend() -> str:
    """``"cudasim"`` | ``"cuda"`` | ``"none"``: what GPU kernels would run on.

    Cached: the driver reads ``CUDA_VISIBLE_DEVICES`` once per process anyway.
    """
    try:
        from numba import cuda
    except ImportError as exc:  # includes CudaSupportError
        logger.info("numba.cuda unavailable (%s): no GPU devices", exc)
        return NONE
    if _simulator_enabled(cuda):
        return CUDASIM
    try:
        memory.install()   # the caching allocator, before the first context
    except Exception as exc:   # numba's own allocator still works: note it, go on
        logger.warning("cannot install the caching GPU allocator (%s: %s); using numba's",
                       type(exc).__name__, exc)
    try:
        return CUDA if cuda.is_available() else NONE
    except Exception as exc:  # a driver that fails to initialise: treat as no GPU
        logger.warning("CUDA driver error while probing for GPUs (%s): no GPU devices", exc)
        return NONE


def _host_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def _describe_real_gpu(cuda: Any, index: int, gpu: Any) -> dict:
    with gpu:
        _free, total = cuda.current_context().get_memory_info()
    name = getattr(gpu, "name", b"CUDA device")
    name = name.decode() if isinstance(name, bytes) else str(name)
    major, minor = gpu.compute_capability
    return {"name": f"GPU:{index}", "memory_bytes": int(total),
            "description": f"{name}, compute capability {major}.{minor}"}


class GpuOrderError(ValueError):
    """A process's GPUs were fixed in another order than the one asked for."""


_order_lock = threading.Lock()
_order: tuple[int, ...] | None = None   # GPU:i -> the order[i]-th visible GPU; None: all, in order
_order_fixed = False


def _driver_started() -> bool:
    if backend.cache_info().currsize:
        return True
    driver = getattr(sys.modules.get("numba.cuda.cudadrv.driver"), "driver", None)
    return bool(getattr(driver, "is_initialized", False))


def _use_order(order: tuple[int, ...]) -> None:
    """Fix the process's GPU order to ``order`` (indices among the GPUs that
    CUDA_VISIBLE_DEVICES leaves), or check that ``order`` agrees with it."""
    global _order, _order_fixed
    with _order_lock:
        if not _order_fixed:
            _order_fixed = True
            if not _driver_started():
                _order = order
                _start_driver(order)
                return
        for i, p in enumerate(order):
            had = i if _order is None else (_order[i] if i < len(_order) else None)
            if had != p:
                was = "no device" if had is None else f"GPU {had} previously"
                raise GpuOrderError(f"GPU:{i} is being mapped to multiple CUDA devices ({p} now, "
                                    f"{was}): this process's GPUs were fixed when its CUDA "
                                    f"driver started ({'all' if _order is None else list(_order)})")


def _start_driver(order: tuple[int, ...]) -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entries = [e.strip() for e in visible.split(",")] if visible else None
    narrowed = ",".join(entries[p] if entries and p < len(entries) else str(p) for p in order)
    os.environ["CUDA_VISIBLE_DEVICES"] = narrowed
    try:
        backend()   # starts the driver (or the simulator), which reads the variable now
    finally:
        if visible is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible


def gpu_devices(order: Sequence[int] | None = None) -> list[dict]:
    """One ``{"name": "GPU:i", "memory_bytes": int, "description": str}`` per
    visible GPU (the simulator counts as one, with host memory); [] if none.
    ``order``: which of the GPUs CUDA_VISIBLE_DEVICES leaves, in this order
    (TF's ``visible_device_list``; the caller checks the ids exist); None: all."""
    if order is not None:
        _use_order(tuple(order))
    kind = backend()
    if kind == NONE:
        return []
    if kind == CUDASIM:
        found = [{"name": "GPU:0", "memory_bytes": _host_memory_bytes(),
                  "description": "numba CUDA simulator (runs on the host CPU)"}]
    else:
        from numba import cuda
        try:
            found = [_describe_real_gpu(cuda, i, gpu) for i, gpu in enumerate(cuda.gpus)]
        except Exception as exc:  # a device that cannot take a context is not usable
            logger.warning("CUDA devices present but not usable (%s): no GPU devices", exc)
            return []
    if order is not None:
        found = found[:len(order)]
    if found:
        _load_gpu_kernels()
    return found


def _load_gpu_kernels() -> None:
    # A task that has found a GPU is about to use it: register its kernels now.
    from kernels.registry import GPU, has_kernel
    has_kernel("MatMul", GPU)


# --- the current GPU of a thread ------------------------------------------------------

def use_gpu(index: int) -> None:
    """Make ``GPU:index`` this thread's current device: the launches, device
    allocations (the caching allocator keeps one pool per device), copies and
    default stream that follow on this thread are that GPU's, until another
    ``use_gpu``. Costs one thread-local read when it already is current (the
    executor calls it before every GPU op). On a real GPU it sets the device's
    primary context as the thread's current one (the driver's
    ``cuCtxSetCurrent``: replaces, never stacks, unlike a ``with
    cuda.gpus[i]:`` push per op); the simulator has one GPU, which every
    index shares (its memory is the host's)."""
    if getattr(memory.THREAD_GPU, "index", None) == index:
        return
    _select(index)
    memory.THREAD_GPU.index = index


def current_gpu() -> int | None:
    """The GPU :func:`use_gpu` made current on this thread (None: none yet)."""
    return getattr(memory.THREAD_GPU, "index", None)


def _select(index: int) -> None:
    """Make GPU ``index``'s primary context current on this thread (a no-op
    under the simulator and without GPUs)."""
    if backend() != CUDA:
        return
    from numba import cuda
    from numba.cuda.cudadrv.driver import driver
    ctx = cuda.gpus[index].get_primary_context()
    driver.cuCtxSetCurrent(ctx.handle)
    ctx.prepare_for_use()   # (its memory manager, on the context's first use)


def is_device_array(x: Any) -> bool:
    """Whether ``x`` lives on a GPU (a numba device array or another CUDA array)."""
    if isinstance(x, np.ndarray):
        return False
    return hasattr(x, "copy_to_host") or hasattr(x, "__cuda_array_interface__")


def _gpu_of(array: Any) -> int | None:
    """The driver's id of the GPU holding numba device array ``array`` (None:
    unknown, e.g. under the simulator)."""
    ctx = getattr(getattr(array, "gpu_data", None), "context", None)
    try:
        return int(ctx.device.id) if ctx is not None else None
    except (AttributeError, ReferenceError, TypeError, ValueError):
        return None


def to_device(array: Any, index: int = 0) -> Any:
    """Copy a host array to GPU ``index``; a device array passes through,
    unless it is on another GPU of this process: then it is copied device to
    device (a mirrored replica's tensor reaching the device that sums them:
    the bytes never cross the host). Leaves GPU ``index`` current on this
    thread (:func:`use_gpu`): the caller is an op of that GPU."""
    from numba import cuda
    use_gpu(index)
    if is_device_array(array):
        if not hasattr(array, "copy_to_host"):  # e.g. a CuPy array: wrap, no copy
            return cuda.as_cuda_array(array)
        if backend() == CUDA and len(cuda.gpus) > 1:
            src = _gpu_of(array)
            if src is not None and src != cuda.gpus[index].id:
                out = memory.device_empty(tuple(array.shape), array.dtype)
                out.copy_to_device(array)   # device to device (unified addressing)
                return out
        return array
    host = np.asarray(array, order="C")  # not ascontiguousarray: that makes 0-d arrays 1-d
    if backend() == CUDASIM:
        return memory.cached_to_device(host)
    # a constant's copy kept for reuse is kept per GPU
    return memory.cached_to_device(host, cuda.gpus[index].id)


def to_host(array: Any) -> np.ndarray:
    """A numpy array with ``array``'s contents (numpy passes through unchanged)."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "copy_to_host"):
        return memory.to_host(array)
    if hasattr(array, "__cuda_array_interface__"):
        from numba import cuda
        return memory.to_host(cuda.as_cuda_array(array))
    return np.asarray(array)


def copy_in(device_array: Any, host: Any) -> None:
    """Write host array ``host`` into the existing ``device_array`` (a counted
    copy in, see kernels.counters)."""
    memory.copy_in(device_array, host)
