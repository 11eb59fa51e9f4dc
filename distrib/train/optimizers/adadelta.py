"""``dt.train.AdadeltaOptimizer``: TF1's Adadelta, one ``ApplyAdadelta`` op per
variable with its slots ``accum`` and ``accum_update`` (zeros, ``<var>/Adadelta``
and ``<var>/Adadelta_1``). TF's rule (``training_ops.cc``)::

    accum        = rho * accum + (1 - rho) * g * g
    update       = sqrt(accum_update + epsilon) / sqrt(accum + epsilon) * g
    accum_update = rho * accum_update + (1 - rho) * update * update
    var         -= lr * update
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer

__all__ = ["AdadeltaOptimizer"]


class AdadeltaOptimizer(Optimizer):
    """``AdadeltaOptimizer(learning_rate=0.001, rho=0.95, epsilon=1e-08,
    use_locking=False, name='Adadelta')``."""

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.95, epsilon: Any = 1e-8,
                 use_locking: bool = False, name: str = "Adadelta") -> None:
        super().__init__(use_locking, name)
        self._learning_rate, self._rho, self._epsilon = learning_rate, rho, epsilon

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._zeros_slot(var, "accum", self._name)
            self._zeros_slot(var, "accum_update", self._name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        inputs = [self._hyper(self._learning_rate, var, "lr"), self._hyper(self._rho, var, "rho"),
                  self._hyper(self._epsilon, var, "epsilon"), grad]
        return self._apply_op("ApplyAdadelta", var, inputs,
                              {"accum": self.get_slot(var, "accum"),
                               "accum_update": self.get_slot(var, "accum_update")})
