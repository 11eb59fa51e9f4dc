"""Loads the GPU kernels on the first GPU lookup (``kernels.registry.LOADERS``):
numba's import alone costs about half a second, and most tasks never touch a
GPU. A new kernel module of this wing is added to ``MODULES``."""
from __future__ import annotations

import importlib

__all__ = ["MODULES", "load"]

MODULES = ("elementwise", "nn", "conv", "conv_depthwise", "pooling", "normalization", "gather", "activations", "optimizers")


def load() -> None:
    """Import the modules that register the GPU kernels (an ImportError means
    no usable numba: the registry then leaves GPU ops to the CPU)."""
    for name in MODULES:
        importlib.import_module(f"kernels.cuda.{name}")
