"""``dt.train.ExponentialMovingAverage``: TF1's shadow variables that follow
variables (and tensors) with ``shadow -= (1 - decay) * (shadow - value)``.

The CIFAR-10 tutorial keeps one for its losses (summaries of smoothed
losses) and one for every trainable variable, which its evaluation restores
in place of the variables (``variables_to_restore``). TF1's rules, kept
because checkpoints and ported scripts depend on them:

* **Names.** The shadow of ``conv1/weights`` is ``conv1/weights/<name>``
  (``ExponentialMovingAverage`` by default, ``avg`` in the tutorial's loss
  averages), under the variable scope ``apply`` is called in (a name scope,
  such as ``SyncReplicasOptimizer``'s, does not count); ``average_name``
  gives that name before the shadow exists (under the current name scope,
  as TF's ``unique_name``), which is how an evaluation graph with no
  averages finds them in a training checkpoint.
* **Placement and start.** A shadow is a non-trainable global variable built
  beside what it follows (``colocate_with``: on the ps with
  ``replica_device_setter``), outside the caller's control dependencies (TF's
  ``init_scope``). A variable's shadow starts at the variable's initial value;
  a tensor's at zeros (its value is unknown until a step runs), debiased as
  Adam's moments are when ``zero_debias=True`` (TF's ``_zero_debias``:
  ``biased`` and ``local_step`` variables beside the shadow).
* **Decay.** With ``num_updates`` the decay is ``min(decay, (1 + n) / (10 +
  n))`` (n cast to float32), so early averages move fast; the update runs
  in the shadow's dtype with ``1 - decay`` computed first, as TF does.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import GraphKeys, Operation, Tensor, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.variable_scope import get_variable_scope
from distrib.ops.variables import Variable, global_variables, trainable_variables

__all__ = ["ExponentialMovingAverage", "assign_moving_average", "moving_average_variables"]

_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)


def moving_average_variables(scope: str | None = None) -> list[Variable]:
    """The variables an ``ExponentialMovingAverage`` has averaged (TF1's
    ``tf.moving_average_variables``): the graph's ``MOVING_AVERAGE_VARIABLES``."""
    return get_default_graph().get_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, scope)


def assign_moving_average(variable: Variable, value: Any, decay: Any, zero_debias: bool = True,
                          name: str | None = None) -> Tensor:
    """``variable -= (variable - value) * (1 - decay)`` (TF's ``assign_moving_average``),
    debiased by ``1 - decay^t`` with ``zero_debias`` (TF's default here, not in
    ``ExponentialMovingAverage``'s variables)."""
    graph = variable.graph
    with graph.as_default(), graph.name_scope(name or "AssignMovingAvg") as scope:
        # 1 - decay first, in float32, then the variable's dtype (TF's order of rounding)
        one_minus = 1.0 - ops.convert_to_tensor(decay) if ops.is_tensor(decay) \
            else ops.constant(1.0 - float(decay), name="decay")
        if one_minus.dtype != variable.dtype:
            one_minus = ops.cast(one_minus, variable.dtype)
        value = ops.convert_to_tensor(value)
        with graph.colocate_with(variable.op):
            if zero_debias:
                return _zero_debias(variable, value, one_minus, scope)
            return variable.assign_sub((variable - value) * one_minus, name=scope[:-1])


def _zero_debias(shadow: Variable, value: Tensor, one_minus: Tensor, scope: str) -> Tensor:
    """TF's ``_zero_debias``: ``biased`` moves as the shadow would, ``local_step``
    counts, and the shadow is ``biased / (1 - decay^t)``."""
    biased, local_step = _debias_variables(shadow)
    with shadow.graph.colocate_with(shadow.op):
        update_biased = biased.assign_sub((biased - value) * one_minus)
        step = local_step.assign_add(ops.constant(1.0, dtype=shadow.dtype))
        bias_factor = 1.0 - ops.pow(1.0 - one_minus, step)
        return shadow.assign(update_biased / bias_factor, name=scope[:-1])


def _debias_variables(shadow: Variable) -> tuple[Variable, Variable]:
    graph = shadow.graph
    prefix = shadow.op.name
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
            graph.colocate_with(shadow.op):
        biased = Variable(lambda: ops.zeros(shadow.shape.as_list(), dtype=shadow.dtype),
                          trainable=False, name=f"{prefix}/biased")
        local_step = Variable(lambda: ops.constant(0.0, dtype=shadow.dtype),
                              trainable=False, name=f"{prefix}/local_step")
    return biased, local_step


class ExponentialMovingAverage:
    """``dt.train.ExponentialMovingAverage(decay, num_updates=None,
    zero_debias=False, name="ExponentialMovingAverage")`` (TF1's).

    ``apply(var_list)`` makes a shadow per variable or tensor (once) and returns
    the op that updates them all; ``average(var)`` is the shadow,
    ``average_name(var)`` its name, ``variables_to_restore()`` the Saver's
    map that loads shadows into the variables they follow.
    """

    def __init__(self, decay: Any, num_updates: Any = None, zero_debias: bool = False,
                 name: str = "ExponentialMovingAverage") -> None:
        self._decay = decay
        self._num_updates = num_updates
        self._zero_debias = bool(zero_debias)
        self._name = name
        self._averages: dict[Any, Variable] = {}
        self._debiased: set[Variable] = set()

    @property
    def name(self) -> str:
        return self._name

    def apply(self, var_list: Sequence[Any] | None = None) -> Operation:
        """Create the shadows of ``var_list`` (the trainable variables) that do not
        exist yet, and return one op updating all of ``var_list``'s shadows."""
        var_list = list(trainable_variables() if var_list is None else var_list)
        graph = get_default_graph()
        for var in var_list:
            dtype = var.dtype
            if dtype not in _FLOATS:
                raise TypeError(f"The variables must be half, float, or double: {var.name}")
            if var not in self._averages:
                self._averages[var] = self._make_shadow(var, graph)
        with graph.name_scope(self._name) as scope:
            decay = self._decay_tensor()
            updates = [assign_moving_average(self._averages[v], v, decay,
                                             zero_debias=self._averages[v] in self._debiased)
                       for v in var_list]
            return ops.group(*updates, name=scope[:-1])

    def average(self, var: Any) -> Variable | None:
        """The shadow of ``var``, or None if ``apply`` has not seen it."""
        return self._averages.get(var)

    def average_name(self, var: Any) -> str:
        """The shadow's op name: ``<var>/<name>`` under the current name scope
        until ``apply`` made it (the checkpoint key an evaluation restores from)."""
        shadow = self._averages.get(var)
        if shadow is not None:
            return shadow.op.name
        return get_default_graph().unique_name(f"{var.op.name}/{self._name}", mark_as_used=False)

    def variables_to_restore(self, moving_avg_variables: Iterable[Any] | None = None
                             ) -> dict[str, Any]:
        """``{checkpoint name: variable}`` that restores each averaged variable from
        its shadow and every other global variable from itself (TF1's map)."""
        if moving_avg_variables is None:
            moving_avg_variables = trainable_variables() + moving_average_variables()
        averaged = list(dict.fromkeys(moving_avg_variables))
        name_map = {self.average_name(v): v for v in averaged}
        for v in global_variables():
            if v not in averaged and v.op.name not in name_map:
                name_map[v.op.name] = v
        return name_map

    # -- pieces ----------------------------------------------------------------
    def _decay_tensor(self) -> Tensor:
        decay = ops.convert_to_tensor(self._decay, name="decay") if ops.is_tensor(self._decay) \
            else ops.constant(float(self._decay), name="decay")
        if self._num_updates is None:
            return decay
        n = ops.cast(self._num_updates, dtypes.float32, name="num_updates")
        if decay.dtype != dtypes.float32:
            decay = ops.cast(decay, dtypes.float32)
        return ops.minimum(decay, (1.0 + n) / (10.0 + n))

    def _make_shadow(self, var: Any, graph: Any) -> Variable:
        is_variable = isinstance(var, Variable)
        if not var.shape.is_fully_defined():
            raise ValueError(f"ExponentialMovingAverage: {var.name} has shape {var.shape}, not "
                             "fully known; average fully shaped variables and tensors")
        prefix = get_variable_scope().name   # TF: the variable scope's, not the name scope's
        name = f"{prefix + '/' if prefix else ''}{var.op.name}/{self._name}"
        if is_variable:
            initial = var.initial_value
        else:
            def initial() -> Tensor:
                return ops.zeros(var.shape.as_list(), dtype=var.dtype)
        # TF's init_scope: no surrounding control deps; a variable's shadow beside
        # it, a tensor's on the current device
        with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), \
                (graph.colocate_with(var.op) if is_variable else contextlib.nullcontext()):
            shadow = Variable(initial, trainable=False, name=name)
        if is_variable:
            graph.add_to_collection(GraphKeys.MOVING_AVERAGE_VARIABLES, var)
        elif self._zero_debias:
            self._debiased.add(shadow)
        return shadow
