"""What users build graphs with: op builders (``math_ops``), ``nn``,
variables and ``gradients``. Re-exports only; ``dt.*`` re-exports these."""
from __future__ import annotations

from distrib.ops import collective_ops, math_ops, nn
from distrib.ops.gradients import gradients
from distrib.ops.variables import Variable

__all__ = ["collective_ops", "math_ops", "nn", "gradients", "Variable"]
