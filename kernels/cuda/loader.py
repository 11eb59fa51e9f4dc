"""Loads the GPU kernels on the first GPU lookup: numba's import alone costs
about half a second, and most tasks never touch a GPU."""
from __future__ import annotations

import importlib

from kernels.registry import GPU, register_loader

__all__ = ["load_gpu_kernels"]


def load_gpu_kernels() -> None:
    """Import the modules that register the GPU kernels (an ImportError means
    no usable numba: the registry then leaves GPU ops to the CPU)."""
    importlib.import_module("kernels.cuda.elementwise")
    importlib.import_module("kernels.cuda.nn")


register_loader(GPU, load_gpu_kernels)
