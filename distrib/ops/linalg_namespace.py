"""``dt.linalg``: TF's ``tf.linalg`` names this runtime has (re-exports only):
``inv``, ``det``, ``matmul``, ``norm``, ``eye``, ``einsum``, ``tensordot``.
The builders live in :mod:`distrib.ops.linalg_ops` and
:mod:`distrib.ops.everyday_ops`."""
from __future__ import annotations

from distrib.ops.everyday_ops import eye
from distrib.ops.linalg_ops import det, einsum, inv, matmul, norm, tensordot

__all__ = ["inv", "det", "matmul", "norm", "eye", "einsum", "tensordot"]
