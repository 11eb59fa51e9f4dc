"""TF1's proximal optimizers and Adagrad dual averaging:
``dt.train.ProximalAdagradOptimizer``, ``ProximalGradientDescentOptimizer`` and
``AdagradDAOptimizer``, one ``Apply*`` op per variable (docs/ops.md).

The proximal step (FOBOS) after a plain step ``prox = var - step * g``:
``var = sign(prox) * max(|prox| - step * l1, 0) / (1 + step * l2)``, with
``step = lr`` (gradient descent) or ``lr / sqrt(accum)`` (Adagrad, ``accum``
from ``initial_accumulator_value``). Adagrad-DA keeps the sums of the
gradients and of their squares (slots ``gradient_accumulator`` and
``gradient_squared_accumulator``) and sets ``var`` from them and the global
step (plus one, as TF's) each update.
"""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer, OptimizerArgumentError

__all__ = ["ProximalAdagradOptimizer", "ProximalGradientDescentOptimizer", "AdagradDAOptimizer"]


def _filled(var: Variable, value: float) -> Any:
    return lambda: ops.multiply(ops.ones(var.shape.as_list(), dtype=var.dtype),
                                ops.constant(value, dtype=var.dtype))


class ProximalAdagradOptimizer(Optimizer):
    """``ProximalAdagradOptimizer(learning_rate, initial_accumulator_value=0.1,
    l1_regularization_strength=0.0, l2_regularization_strength=0.0,
    use_locking=False, name='ProximalAdagrad')``."""

    def __init__(self, learning_rate: Any, initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0,
                 use_locking: bool = False, name: str = "ProximalAdagrad") -> None:
        if initial_accumulator_value <= 0.0:
            raise OptimizerArgumentError(
                f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._initial = float(initial_accumulator_value)
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._get_or_make_slot(var, "accumulator", self._name, _filled(var, self._initial))

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        inputs = [self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._l1, var, "l1_regularization_strength"),
                  self._hyper(self._l2, var, "l2_regularization_strength"), grad]
        return self._apply_op("ApplyProximalAdagrad", var, inputs,
                              {"accum": self.get_slot(var, "accumulator")})


class ProximalGradientDescentOptimizer(Optimizer):
    """``ProximalGradientDescentOptimizer(learning_rate, l1_regularization_strength=0.0,
    l2_regularization_strength=0.0, use_locking=False, name='ProximalGradientDescent')``."""

    def __init__(self, learning_rate: Any, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, use_locking: bool = False,
                 name: str = "ProximalGradientDescent") -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        inputs = [self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._l1, var, "l1_regularization_strength"),
                  self._hyper(self._l2, var, "l2_regularization_strength"), grad]
        return self._apply_op("ApplyProximalGradientDescent", var, inputs)


class AdagradDAOptimizer(Optimizer):
    """``AdagradDAOptimizer(learning_rate, global_step,
    initial_gradient_squared_accumulator_value=0.1, l1_regularization_strength=0.0,
    l2_regularization_strength=0.0, use_locking=False, name='AdagradDA')``."""

    def __init__(self, learning_rate: Any, global_step: Any,
                 initial_gradient_squared_accumulator_value: float = 0.1,
                 l1_regularization_strength: float = 0.0, l2_regularization_strength: float = 0.0,
                 use_locking: bool = False, name: str = "AdagradDA") -> None:
        if initial_gradient_squared_accumulator_value <= 0.0:
            raise OptimizerArgumentError("initial_gradient_squared_accumulator_value must be "
                                         f"positive: {initial_gradient_squared_accumulator_value}")
        super().__init__(use_locking, name)
        self._learning_rate, self._global_step = learning_rate, global_step
        self._initial = float(initial_gradient_squared_accumulator_value)
        self._l1, self._l2 = float(l1_regularization_strength), float(l2_regularization_strength)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._zeros_slot(var, "gradient_accumulator", self._name)
            self._get_or_make_slot(var, "gradient_squared_accumulator", self._name,
                                   _filled(var, self._initial))

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        step = ops.add(ops.cast(ops.convert_to_tensor(self._global_step), dtypes.int64),
                       ops.constant(1, dtype=dtypes.int64))   # TF's step on the worker, plus one
        inputs = [grad, self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._l1, var, "l1_regularization_strength"),
                  self._hyper(self._l2, var, "l2_regularization_strength"), step]
        return self._apply_op("ApplyAdagradDA", var, inputs,
                              {"gradient_accumulator": self.get_slot(var, "gradient_accumulator"),
                               "gradient_squared_accumulator":
                                   self.get_slot(var, "gradient_squared_accumulator")})
