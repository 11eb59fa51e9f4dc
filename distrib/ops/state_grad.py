"""The variable ops and their updates, for the gradients: none is
differentiable (TF's ``state_grad.py``). A variable is differentiated at its
``VariableV2`` output by ``dt.gradients`` (through every read of it); nothing
flows back *into* a variable op, an assignment, or the ``NoOp`` that groups
updates.

A gradient family, as :mod:`distrib.ops.math_grad` describes; installed into
the op catalogue by :mod:`distrib.ops.gradients`, importing this writes
nothing. Sparse updates (the scatter ops) belong here.
"""
from __future__ import annotations

from typing import Callable

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]

GRADIENTS: dict[str, Callable[..., list]] = {}

NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "VariableV2", "IsVariableInitialized", "Assign", "AssignAdd", "AssignSub", "NoOp",
)
