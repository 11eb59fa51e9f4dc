"""``dt.train.GradientDescentOptimizer``: TF1's plain SGD, one ``ApplyGradientDescent``
op per variable, colocated with it (``optimizer.py`` holds what every optimizer shares)."""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer

__all__ = ["GradientDescentOptimizer"]


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * grad``."""

    def __init__(self, learning_rate: Any, use_locking: bool = False,
                 name: str = "GradientDescent") -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        return self._apply_op("ApplyGradientDescent", var, [lr, grad])

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Operation:
        return self._apply_sparse(grad, var)   # a scatter adds repeated rows itself

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """``var[indices] -= lr * values`` (TF1's ``ScatterSub``), on the variable's task."""
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        return array_gather.scatter_sub(var, grad.indices, ops.multiply(grad.values, lr)).op
