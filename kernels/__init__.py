"""Math on one device: the kernel registry, numpy kernels for the CPU and
numba.cuda kernels for GPUs (docs/ops.md).

Two wings over shared modules (kernels/README.md): ``kernels.cpu`` (numpy)
and ``kernels.cuda`` (numba.cuda, and the GPU's device handling); the
registry, dtypes, counters and constants at this level serve both.
``import kernels`` imports numpy and registers the CPU kernels (the modules
of ``kernels.cpu`` imported below), never numba: the GPU kernels load on the
first GPU lookup (``kernels.cuda.loader``). This package knows nothing of
networks or of the runtime: it raises :class:`KernelError` (a ``ValueError``) or plain
``ValueError``/``TypeError`` for bad inputs and :class:`KernelNotFound` (a
``KeyError``) for a missing kernel; the runtime maps them to its own typed
errors. Re-exports only.
"""
from __future__ import annotations

# registered by importing them (bound to private names: this package re-exports the registry only)
from kernels.cpu import array as _cpu_array  # noqa: F401
from kernels.cpu import fused as _cpu_fused  # noqa: F401
from kernels.cpu import math as _cpu_math  # noqa: F401
from kernels.cpu import nn as _cpu_nn  # noqa: F401
from kernels.cpu import update as _cpu_update  # noqa: F401
from kernels.cuda import loader as _gpu_loader  # noqa: F401  (registers the GPU kernels' loader)
from kernels.registry import (
    CPU,
    GPU,
    Kernel,
    KernelError,
    KernelNotFound,
    device_types,
    get_kernel,
    has_kernel,
    register,
    register_loader,
    registered_ops,
    unregister,
)

__all__ = [
    "CPU", "GPU", "Kernel", "KernelError", "KernelNotFound",
    "register", "unregister", "register_loader", "get_kernel", "has_kernel", "registered_ops",
    "device_types",
]
