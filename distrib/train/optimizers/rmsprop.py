"""``dt.train.RMSPropOptimizer``: TF1's RMSProp, as the other TF1 optimizers are built.

TF1's rule, the ``ApplyRMSProp`` kernel's (docs/ops.md)::

    ms  = ms + (g * g - ms) * (1 - decay)
    mom = momentum * mom + lr * g / sqrt(ms + epsilon)
    var = var - mom

and with ``centered=True`` (``ApplyCenteredRMSProp``) the mean gradient
``mg = mg + (g - mg) * (1 - decay)`` is taken out of the denominator,
``sqrt(ms - mg * mg + epsilon)``. The slots are TF1's: ``rms`` (``<var>/RMSProp``,
initialized to **ones**, as TF1 does: the first steps are then close to plain
SGD instead of ``lr / sqrt(epsilon)``), ``mg`` when centered, and ``momentum``
(zeros), made in that order so they get TF1's names (``RMSProp``,
``RMSProp_1``, ``RMSProp_2``). Each update is one op colocated with its
variable, like Adam's, so with ``replica_device_setter`` the math runs on the
ps task that owns the variable; its slots are global variables, saved and
restored by the Saver and mirrored under the strategies as Adam's are.

Hyper-parameters may be numbers, tensors (a decayed learning rate, see
``learning_rate_decay``) or callables, as for every ``dt.train`` optimizer.
``initial_rms`` is not TF1's: ``dt.keras.optimizers.RMSprop`` uses it to start
``rms`` at zero as Keras does.
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer

__all__ = ["RMSPropOptimizer"]


class RMSPropOptimizer(Optimizer):
    """``RMSPropOptimizer(learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
    use_locking=False, centered=False, name='RMSProp')`` (see the module header)."""

    def __init__(self, learning_rate: Any, decay: Any = 0.9, momentum: Any = 0.0,
                 epsilon: Any = 1e-10, use_locking: bool = False, centered: bool = False,
                 name: str = "RMSProp", *, initial_rms: float = 1.0) -> None:
        super().__init__(use_locking, name)
        self._learning_rate = learning_rate
        self._decay, self._momentum, self._epsilon = decay, momentum, epsilon
        self._centered = bool(centered)
        self._initial_rms = float(initial_rms)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for var in var_list:
            self._get_or_make_slot(var, "rms", self._name, self._rms_initial(var))
            if self._centered:
                self._zeros_slot(var, "mg", self._name)
            self._zeros_slot(var, "momentum", self._name)

    def _rms_initial(self, var: Variable) -> Callable[[], Tensor]:
        if self._initial_rms == 0.0:
            return lambda: ops.zeros(var.shape.as_list(), dtype=var.dtype)
        if self._initial_rms == 1.0:
            return lambda: ops.ones(var.shape.as_list(), dtype=var.dtype)
        value = self._initial_rms
        return lambda: ops.multiply(ops.ones(var.shape.as_list(), dtype=var.dtype),
                                    ops.constant(value, dtype=var.dtype))

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        inputs = [self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._decay, var, "decay"),
                  self._hyper(self._momentum, var, "momentum"),
                  self._hyper(self._epsilon, var, "epsilon"), grad]
        slots = {"ms": self.get_slot(var, "rms"), "mom": self.get_slot(var, "momentum")}
        if self._centered:
            return self._apply_op("ApplyCenteredRMSProp", var, inputs,
                                  {"mg": self.get_slot(var, "mg"), **slots})
        return self._apply_op("ApplyRMSProp", var, inputs, slots)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """TF1's ``SparseApply(Centered)RMSProp``: the rows of the gradient only."""
        inputs = [self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._decay, var, "decay"),
                  self._hyper(self._momentum, var, "momentum"),
                  self._hyper(self._epsilon, var, "epsilon"), grad.values, grad.indices]
        slots = {"ms": self.get_slot(var, "rms"), "mom": self.get_slot(var, "momentum")}
        if self._centered:
            return self._apply_op("SparseApplyCenteredRMSProp", var, inputs,
                                  {"mg": self.get_slot(var, "mg"), **slots})
        return self._apply_op("SparseApplyRMSProp", var, inputs, slots)
