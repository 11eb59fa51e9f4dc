"""Math on one device: the kernel registry, numpy kernels for the CPU and
numba.cuda kernels for GPUs (docs/ops.md).

``import kernels`` imports numpy and registers the CPU kernels
(``kernels.cpu``), never numba: the GPU kernels load on the first GPU lookup
(``kernels.gpu_loader``). This package knows nothing of networks or of the
runtime: it raises :class:`KernelError` (a ``ValueError``) or plain
``ValueError``/``TypeError`` for bad inputs and :class:`KernelNotFound` (a
``KeyError``) for a missing kernel; the runtime maps them to its own typed
errors. Re-exports only.
"""
from __future__ import annotations

from kernels import cpu, cpu_fused, gpu_loader  # noqa: F401  (register the CPU kernels, the GPU loader)
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
