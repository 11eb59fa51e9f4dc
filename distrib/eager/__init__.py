"""Eager values (TF's eager execution): ops that run at once in the process.

Re-exports only; see :mod:`distrib.eager.context` for the switch and the
rule that decides when an op runs eagerly.
"""
from __future__ import annotations

from distrib.eager.context import executing_eagerly, graph_mode
from distrib.eager.switch import enable_eager_execution
from distrib.eager.tensor import EagerTensor

__all__ = ["enable_eager_execution", "executing_eagerly", "graph_mode", "EagerTensor"]
