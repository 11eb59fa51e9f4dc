"""Loads the CPU kernels on the first CPU lookup (``kernels.registry.LOADERS``):
each module below registers its kernels as it is imported. A new kernel module
of this wing is added to ``MODULES``."""
from __future__ import annotations

import importlib

__all__ = ["MODULES", "load"]

MODULES = ("array", "math", "nn", "update", "fused", "pooling", "normalization", "topk", "conv")


def load() -> None:
    """Import the modules that register the CPU kernels."""
    for name in MODULES:
        importlib.import_module(f"kernels.cpu.{name}")
