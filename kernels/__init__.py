"""Math on one device: the kernel registry, numpy kernels for the CPU and
numba.cuda kernels for GPUs (docs/ops.md).

Two wings over shared modules (kernels/README.md): ``kernels.cpu`` (numpy)
and ``kernels.cuda`` (numba.cuda, and the GPU's device handling); the
registry, dtypes, counters and constants at this level serve both.
``import kernels`` imports the registry only and registers nothing: a wing's
kernels load on the first lookup for its device type (``kernels.cpu.loader``,
``kernels.cuda.loader``), so numba is imported only when a GPU kernel is asked for. This package knows nothing of
networks or of the runtime: it raises :class:`KernelError` (a ``ValueError``) or plain
``ValueError``/``TypeError`` for bad inputs and :class:`KernelNotFound` (a
``KeyError``) for a missing kernel; the runtime maps them to its own typed
errors. Re-exports only.
"""
from __future__ import annotations

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
