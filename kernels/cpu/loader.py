"""Loads the CPU kernels on the first CPU lookup (``kernels.registry.LOADERS``):
each module below declares its kernels in its ``KERNELS`` table
(``@KERNELS("Op", CPU)``), and :func:`load` registers them, so importing a
module of this wing for a constant of it (the runtime reads ``IN_PLACE``,
``RANDOM_OPS``, the fused opcodes) registers nothing. A new kernel module of
this wing is added to ``MODULES``."""
from __future__ import annotations

import importlib

from kernels.registry import register_table

__all__ = ["MODULES", "load"]

MODULES = ("array", "math", "nn", "update", "fused", "pooling", "normalization", "topk", "conv",
           "slicing", "image", "gather", "sparse_update", "hashing",
           "math_extra", "activations", "array_extra", "update_extra", "parsing",
           "image_codec", "image_resize", "image_color", "batch_rows", "image_boxes",
           "py_func", "everyday_array", "gather_nd", "linalg")


def load() -> None:
    """Register the kernels each module declares (its ``KERNELS``): importing a
    module for a constant of it registers nothing."""
    for name in MODULES:
        register_table(importlib.import_module(f"kernels.cpu.{name}").KERNELS)
