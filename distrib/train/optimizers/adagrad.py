"""``dt.train.AdagradOptimizer``: TF1's Adagrad, one ``ApplyAdagrad`` op per variable
with its ``accumulator`` slot (``<var>/Adagrad``, from ``initial_accumulator_value``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer, OptimizerArgumentError

__all__ = ["AdagradOptimizer"]


class AdagradOptimizer(Optimizer):
    """``accum += grad**2; var -= lr * grad / sqrt(accum)``."""

    def __init__(self, learning_rate: Any, initial_accumulator_value: float = 0.1,
                 use_locking: bool = False, name: str = "Adagrad") -> None:
        if initial_accumulator_value <= 0.0:
            raise OptimizerArgumentError(
                f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial_accumulator_value = float(initial_accumulator_value)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._get_or_make_slot(var, "accumulator", self._name, self._accum_initial(var))

    def _accum_initial(self, var: Variable) -> Callable[[], Tensor]:
        value = self._initial_accumulator_value
        # ones * value keeps the GraphDef small (no full-size Const) for big variables
        return lambda: ops.multiply(ops.ones(var.shape.as_list(), dtype=var.dtype),
                                    ops.constant(value, dtype=var.dtype))

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        accum = self.get_slot(var, "accumulator")
        return self._apply_op("ApplyAdagrad", var, [lr, grad], {"accum": accum})

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        return self._apply_op("SparseApplyAdagrad", var, [lr, grad.values, grad.indices],
                              {"accum": self.get_slot(var, "accumulator")})
