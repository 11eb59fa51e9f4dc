"""``dt.train.MomentumOptimizer``: TF1's momentum (and Nesterov), one ``ApplyMomentum``
op per variable with its ``momentum`` slot (``<var>/Momentum``), colocated with it."""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer

__all__ = ["MomentumOptimizer"]


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= lr * accum`` (Nesterov:
    ``var -= lr * grad + lr * momentum * accum``)."""

    def __init__(self, learning_rate: Any, momentum: Any, use_locking: bool = False,
                 name: str = "Momentum", use_nesterov: bool = False) -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._zeros_slot(var, "momentum", self._name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        momentum = self._hyper(self._momentum, var, "momentum")
        accum = self.get_slot(var, "momentum")
        return self._apply_op("ApplyMomentum", var, [lr, grad, momentum], {"accum": accum},
                              use_nesterov=self._use_nesterov)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        momentum = self._hyper(self._momentum, var, "momentum")
        return self._apply_op("SparseApplyMomentum", var,
                              [lr, grad.values, grad.indices, momentum],
                              {"accum": self.get_slot(var, "momentum")},
                              use_nesterov=self._use_nesterov)
