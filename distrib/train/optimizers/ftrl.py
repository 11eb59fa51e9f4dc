"""``dt.train.FtrlOptimizer``: TF1's FTRL-proximal (McMahan et al., 2013), one
``ApplyFtrl`` op per variable, or ``ApplyFtrlV2`` when
``l2_shrinkage_regularization_strength`` is set. Slots ``accum`` (from
``initial_accumulator_value``, named ``<var>/<accum_name or name>``) and
``linear`` (zeros, ``<var>/<linear_name or name_1>``). TF's rule::

    g'        = g + 2 * l2_shrinkage * var            (V2 only)
    new_accum = accum + g * g                         (the plain gradient)
    linear   += g' - (new_accum^-p - accum^-p) / lr * var
    quadratic = new_accum^-p / lr + 2 * l2
    var       = (sign(linear) * l1 - linear) / quadratic  if |linear| > l1  else 0
    accum     = new_accum

with ``p = learning_rate_power`` (-0.5: Adagrad's schedule; 0: a fixed rate).
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer, OptimizerArgumentError

__all__ = ["FtrlOptimizer"]


class FtrlOptimizer(Optimizer):
    """``FtrlOptimizer(learning_rate, learning_rate_power=-0.5,
    initial_accumulator_value=0.1, l1_regularization_strength=0.0,
    l2_regularization_strength=0.0, use_locking=False, name='Ftrl', accum_name=None,
    linear_name=None, l2_shrinkage_regularization_strength=0.0)``."""

    def __init__(self, learning_rate: Any, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, use_locking: bool = False,
                 name: str = "Ftrl", accum_name: str | None = None,
                 linear_name: str | None = None,
                 l2_shrinkage_regularization_strength: float = 0.0) -> None:
        super().__init__(use_locking, name)
        checks = [(initial_accumulator_value < 0.0, "initial_accumulator_value",
                   initial_accumulator_value, "zero or positive"),
                  (learning_rate_power > 0.0, "learning_rate_power", learning_rate_power,
                   "less than or equal to 0.0"),
                  (l1_regularization_strength < 0.0, "l1_regularization_strength",
                   l1_regularization_strength, "zero or positive"),
                  (l2_regularization_strength < 0.0, "l2_regularization_strength",
                   l2_regularization_strength, "zero or positive"),
                  (l2_shrinkage_regularization_strength < 0.0,
                   "l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength,
                   "zero or positive")]
        for bad, what, value, rule in checks:
            if bad:
                raise OptimizerArgumentError(f"{what} {value} must be {rule}")
        self._learning_rate = learning_rate
        self._power = float(learning_rate_power)
        self._initial = float(initial_accumulator_value)
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)
        self._shrinkage = float(l2_shrinkage_regularization_strength)
        self._accum_name, self._linear_name = accum_name, linear_name

    def _create_slots(self, var_list: list[Variable]) -> None:
        value = self._initial
        for var in var_list:
            self._get_or_make_slot(
                var, "accum", self._accum_name or self._name,
                lambda var=var: ops.multiply(ops.ones(var.shape.as_list(), dtype=var.dtype),
                                             ops.constant(value, dtype=var.dtype)))
            self._zeros_slot(var, "linear", self._linear_name or self._name + "_1")

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        return self._ftrl_op("ApplyFtrl", var, [grad])

    def _apply_sparse(self, grad: Any, var: Variable) -> Operation:
        """TF1's ``SparseApplyFtrl``: the rule on the rows of ``grad.indices`` only (a
        repeated index's rows summed first), on the variable's task."""
        return self._ftrl_op("SparseApplyFtrl", var, [grad.values, grad.indices])

    def _ftrl_op(self, op: str, var: Variable, grad: list[Tensor]) -> Operation:
        """``op`` (``op + "V2"`` with L2 shrinkage) on ``grad`` and the hyper-parameters."""
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        l1 = self._hyper(self._l1, var, "l1_regularization_strength")
        l2 = self._hyper(self._l2, var, "l2_regularization_strength")
        power = self._hyper(self._power, var, "learning_rate_power")
        slots = {"accum": self.get_slot(var, "accum"), "linear": self.get_slot(var, "linear")}
        if self._shrinkage == 0.0:
            return self._apply_op(op, var, [*grad, lr, l1, l2, power], slots)
        shrink = self._hyper(self._shrinkage, var, "l2_shrinkage_regularization_strength")
        return self._apply_op(op + "V2", var, [*grad, lr, l1, l2, shrink, power], slots)
