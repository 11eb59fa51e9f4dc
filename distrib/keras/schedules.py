"""``dt.keras.optimizers.schedules``: learning rates that follow the optimizer's step.

``LearningRateSchedule`` is Keras 2's base: ``schedule(step)`` gives the
rate at ``step`` (the optimizer's ``iterations``: 0 for the first update), and
an optimizer given one as its ``learning_rate`` reads it from ``iterations``
in every train step. The built-in ones are Keras 2's, argument for argument:
``ExponentialDecay``, ``PiecewiseConstantDecay``, ``PolynomialDecay`` and
``InverseTimeDecay`` are TF's formulas (built by the same ops as TF1's
``dt.train.exponential_decay`` ..., which they call), ``CosineDecay``
``0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps))`` scaled into
``[alpha, 1]``, after a linear warmup to ``warmup_target`` over
``warmup_steps`` when given (tf_keras 2.13's).

Each has ``get_config``/``from_config``; ``serialize``/``deserialize`` are
Keras' ``{"class_name", "config"}`` (how ``model.save`` keeps an optimizer
whose learning rate is a schedule). A user's subclass works the same way.
A schedule called with a plain number gives a graph tensor (a constant step).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from distrib.framework.graph import Tensor, name_scope
from distrib.keras import serialization
from distrib.ops import math_ops as ops
from distrib.train.optimizers import learning_rate_decay as decay

__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay",
           "PolynomialDecay", "InverseTimeDecay", "CosineDecay", "serialize", "deserialize"]


class LearningRateSchedule:
    """Base of the schedules: ``__call__(step) -> learning rate``."""

    def __call__(self, step: Any) -> Any:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `__call__(self, step)`.")

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"Learning rate schedule '{type(self).__name__}' must "
                                  "override `get_config()` in order to be serializable.")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LearningRateSchedule:
        return cls(**config)


def _step(step: Any) -> Tensor:
    return ops.cast(ops.convert_to_tensor(step), "float32")


class _RateDecay(LearningRateSchedule):
    """What ``ExponentialDecay`` and ``InverseTimeDecay`` share: the same arguments,
    handed to TF1's ``_decay`` function (named by the class when unnamed)."""

    _decay: Any = None

    def __init__(self, initial_learning_rate: float, decay_steps: int, decay_rate: float,
                 staircase: bool = False, name: str | None = None) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def __call__(self, step: Any) -> Tensor:
        return self._decay(float(self.initial_learning_rate), _step(step),
                           self.decay_steps, self.decay_rate, self.staircase,
                           name=self.name or self._default_name)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class ExponentialDecay(_RateDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored with
    ``staircase``)."""

    _decay = staticmethod(decay.exponential_decay)
    _default_name = "ExponentialDecay"


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, then ``values[-1]``."""

    def __init__(self, boundaries: Sequence[Any], values: Sequence[Any],
                 name: str | None = None) -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError(f"The length of boundaries should be 1 less than the length of "
                             f"values. Received: boundaries={boundaries} of length "
                             f"{len(boundaries)}, and values={values} of length {len(values)}.")
        self.boundaries = list(boundaries)
        self.values = list(values)
        self.name = name

    def __call__(self, step: Any) -> Tensor:
        values = [float(v) for v in self.values]
        return decay.piecewise_constant(_step(step), [float(b) for b in self.boundaries],
                                        values, name=self.name or "PiecewiseConstant")

    def get_config(self) -> dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """``(initial - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end``
    (with ``cycle``, decay_steps grows to the first multiple not below the step)."""

    def __init__(self, initial_learning_rate: float, decay_steps: int,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 name: str | None = None) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def __call__(self, step: Any) -> Tensor:
        return decay.polynomial_decay(float(self.initial_learning_rate), _step(step),
                                      self.decay_steps, self.end_learning_rate, self.power,
                                      self.cycle, name=self.name or "PolynomialDecay")

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "end_learning_rate": self.end_learning_rate,
                "power": self.power, "cycle": self.cycle, "name": self.name}


class InverseTimeDecay(_RateDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (floored with
    ``staircase``)."""

    _decay = staticmethod(decay.inverse_time_decay)
    _default_name = "InverseTimeDecay"


class CosineDecay(LearningRateSchedule):
    """``initial * ((1 - alpha) * 0.5 * (1 + cos(pi * p)) + alpha)``, ``p`` the step
    (past the warmup) over ``decay_steps``, held at 1; a linear warmup from
    ``initial_learning_rate`` to ``warmup_target`` first when ``warmup_target`` is set."""

    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0,
                 name: str | None = None, warmup_target: float | None = None,
                 warmup_steps: int = 0) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps

    def __call__(self, step: Any) -> Tensor:
        with name_scope(self.name or "CosineDecay"):
            s = _step(step)
            initial = float(self.initial_learning_rate)
            if self.warmup_target is None:
                return self._decayed(initial, s)
            target, warm = float(self.warmup_target), float(self.warmup_steps)
            warmup = initial + (target - initial) * (s / max(warm, 1e-12))
            after = self._decayed(target, ops.maximum(s - warm, 0.0))
            in_warmup = ops.cast(ops.less(s, warm), "float32")
            return in_warmup * warmup + (1.0 - in_warmup) * after

    def _decayed(self, rate: float, step: Tensor) -> Tensor:
        steps = float(self.decay_steps)
        p = ops.minimum(step, steps) / steps
        cosine = 0.5 * (1.0 + ops.unary_op("Cos", p * math.pi, "Cos"))
        return rate * ((1.0 - self.alpha) * cosine + self.alpha)

    def get_config(self) -> dict[str, Any]:
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


_BY_NAME = {cls.__name__: cls for cls in (LearningRateSchedule, ExponentialDecay,
                                          PiecewiseConstantDecay, PolynomialDecay,
                                          InverseTimeDecay, CosineDecay)}


def serialize(schedule: LearningRateSchedule) -> dict[str, Any]:
    """Keras' ``{"module", "class_name", "config", "registered_name"}``."""
    return {"module": "keras.optimizers.schedules", "class_name": type(schedule).__name__,
            "config": schedule.get_config(),
            "registered_name": serialization.get_registered_name(type(schedule))}


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None
                ) -> LearningRateSchedule:
    """What ``serialize`` gave (a user's schedule through ``custom_objects``)."""
    return serialization.deserialize_keras_object(config, _BY_NAME, custom_objects,
                                                  printable_module_name="decay")
