"""``dt.train.AdamOptimizer``: TF1's Adam, one ``ApplyAdam`` op per variable with its
``m`` and ``v`` slots (``<var>/Adam``, ``<var>/Adam_1``); ``beta1_power`` and
``beta2_power`` live beside the first variable (by name) and are advanced after
all the updates of a step, as in TF1."""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Operation, Tensor
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import Optimizer, OptimizerArgumentError, deduplicate

__all__ = ["AdamOptimizer"]


class AdamOptimizer(Optimizer):
    """Adam with TF1's rule: ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)``,
    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``, ``var -= lr_t * m / (sqrt(v) + eps)``.

    ``lr=`` is accepted as an alias of ``learning_rate`` (the design contract's spelling).
    """

    def __init__(self, learning_rate: Any = 0.001, beta1: Any = 0.9, beta2: Any = 0.999,
                 epsilon: Any = 1e-8, use_locking: bool = False, name: str = "Adam",
                 *, lr: Any = None) -> None:
        super().__init__(use_locking, name)
        if lr is not None:
            if learning_rate != 0.001:
                raise OptimizerArgumentError("pass either learning_rate= or lr=, not both")
            learning_rate = lr
        self._learning_rate = learning_rate
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon

    def _first_variable(self, var_list: list[Variable]) -> Variable:
        return min(var_list, key=lambda v: v.name)

    def _create_slots(self, var_list: list[Variable]) -> None:
        first = self._first_variable(var_list)
        self._create_non_slot_variable(self._beta1, "beta1_power", first)
        self._create_non_slot_variable(self._beta2, "beta2_power", first)
        for var in var_list:
            self._zeros_slot(var, "m", self._name)
            self._zeros_slot(var, "v", self._name)

    def _get_beta_accumulators(self, graph: Any) -> tuple[Variable, Variable]:
        b1 = self._get_non_slot_variable("beta1_power", graph)
        b2 = self._get_non_slot_variable("beta2_power", graph)
        assert b1 is not None and b2 is not None, "_create_slots runs before the updates"
        return b1, b2

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph)
        inputs = [self._hyper(beta1_power, var, "beta1_power"),
                  self._hyper(beta2_power, var, "beta2_power"),
                  self._hyper(self._learning_rate, var, "learning_rate"),
                  self._hyper(self._beta1, var, "beta1"),
                  self._hyper(self._beta2, var, "beta2"),
                  self._hyper(self._epsilon, var, "epsilon"), grad]
        slots = {"m": self.get_slot(var, "m"), "v": self.get_slot(var, "v")}
        return self._apply_op("ApplyAdam", var, inputs, slots)

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: Variable) -> Operation:
        return self._apply_sparse(deduplicate(grad), var)   # v sums squares: one row per index

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """TF1's sparse Adam: ``m`` and ``v`` decay whole, the rows' terms are
        scattered in, and the whole variable moves (not lazy: TF1's rule)."""
        beta1_power, beta2_power = self._get_beta_accumulators(var.graph)
        b1p, b2p = (self._hyper(p, var, n) for p, n in ((beta1_power, "beta1_power"),
                                                        (beta2_power, "beta2_power")))
        lr_t = self._hyper(self._learning_rate, var, "learning_rate")
        b1, b2 = self._hyper(self._beta1, var, "beta1"), self._hyper(self._beta2, var, "beta2")
        eps = self._hyper(self._epsilon, var, "epsilon")
        one = ops.constant(1, dtype=var.dtype, name="one")
        lr = lr_t * ops.sqrt(one - b2p) / (one - b1p)
        m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
        graph = var.graph
        m_t = m.assign(m.read_value() * b1)
        with graph.control_dependencies([m_t]):
            m_t = array_gather.scatter_add(m, grad.indices, grad.values * (one - b1))
        v_t = v.assign(v.read_value() * b2)
        with graph.control_dependencies([v_t]):
            v_t = array_gather.scatter_add(v, grad.indices,
                                           grad.values * grad.values * (one - b2))
        var_update = var.assign_sub(lr * m_t / (ops.sqrt(v_t) + eps), read_value=False)
        return ops.group(var_update, m_t.op, v_t.op)

    def _finish(self, update_ops: list[Operation], name: str) -> Operation:
        """Advance ``beta1_power`` and ``beta2_power`` after every update of this step."""
        graph = update_ops[0].graph
        beta1_power, beta2_power = self._get_beta_accumulators(graph)
        with graph.control_dependencies(update_ops), graph.colocate_with(beta1_power.op):
            update_beta1 = beta1_power.assign(
                beta1_power * self._hyper(self._beta1, beta1_power, "beta1"), read_value=False)
            update_beta2 = beta2_power.assign(
                beta2_power * self._hyper(self._beta2, beta2_power, "beta2"), read_value=False)
        return ops.group(*update_ops, update_beta1, update_beta2, name=name)
