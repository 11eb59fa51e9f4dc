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
"""
from __future__ import annotations

import functools
import logging
import os
from typing import Any

import numpy as np

__all__ = ["backend", "gpu_devices", "to_device", "to_host", "is_device_array"]

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


def gpu_devices() -> list[dict]:
    """One ``{"name": "GPU:i", "memory_bytes": int, "description": str}`` per
    visible GPU (the simulator counts as one, with host memory); [] if none."""
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
    if found:
        _load_gpu_kernels()
    return found


def _load_gpu_kernels() -> None:
    # A task that has found a GPU is about to use it: register its kernels now.
    from kernels.registry import GPU, has_kernel
    has_kernel("MatMul", GPU)


def is_device_array(x: Any) -> bool:
    """Whether ``x`` lives on a GPU (a numba device array or another CUDA array)."""
    if isinstance(x, np.ndarray):
        return False
    return hasattr(x, "copy_to_host") or hasattr(x, "__cuda_array_interface__")


def to_device(array: Any, index: int = 0) -> Any:
    """Copy a host array to GPU ``index`` (a device array passes through)."""
    from numba import cuda
    if is_device_array(array):
        if not hasattr(array, "copy_to_host"):  # e.g. a CuPy array: wrap, no copy
            return cuda.as_cuda_array(array)
        return array
    host = np.asarray(array, order="C")  # not ascontiguousarray: that makes 0-d arrays 1-d
    if backend() == CUDASIM:
        return cuda.to_device(host)
    with cuda.gpus[index]:
        return cuda.to_device(host)


def to_host(array: Any) -> np.ndarray:
    """A numpy array with ``array``'s contents (numpy passes through unchanged)."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if hasattr(array, "__cuda_array_interface__"):
        from numba import cuda
        return cuda.as_cuda_array(array).copy_to_host()
    return np.asarray(array)
