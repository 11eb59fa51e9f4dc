"""TF1's learning-rate schedules: ``dt.train.exponential_decay``, ``piecewise_constant``,
``polynomial_decay``, ``natural_exp_decay``, ``inverse_time_decay``.

Each returns a scalar **graph tensor** computed from ``global_step`` (a
variable, usually the one ``minimize(global_step=...)`` advances), so the
learning rate changes as the step does: pass it to any ``dt.train`` optimizer
as its ``learning_rate`` and every run reads the current value. The math is
TF 1.15's (``tf.compat.v1.train.*``, Keras' legacy schedules), op for op:
the step is cast to the learning rate's dtype, ``staircase`` floors
``step / decay_steps`` (a ``Floor`` op, which has no gradient, as in TF), and
``global_step=None`` is TF's ``ValueError``.

``piecewise_constant`` has no ``tf.case`` here: its intervals are exclusive
and cover every step, so it is the sum of each value times the cast
predicate of its interval (exactly one is 1), which gives TF's result for
every finite value.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["exponential_decay", "piecewise_constant", "polynomial_decay",
           "natural_exp_decay", "inverse_time_decay", "LearningRateDecayError"]


class LearningRateDecayError(InvalidArgumentError, ValueError):
    """A bad argument to a learning-rate schedule. It is also a ``ValueError``, which is
    what TF raises, so ported ``except ValueError`` code keeps working."""


def _floor(x: Tensor) -> Tensor:
    return ops.unary_op("Floor", x, "Floor")


def _need_step(global_step: Any, fn: str) -> None:
    if global_step is None:
        raise LearningRateDecayError(f"global_step is required for {fn}.")


def _start(learning_rate: Any, global_step: Any, decay_steps: Any) -> tuple[Tensor, Tensor, Tensor]:
    """(learning rate, step, decay_steps) as tensors of the learning rate's dtype."""
    lr = ops.convert_to_tensor(learning_rate, name="learning_rate")
    if not lr.dtype.is_floating:
        raise LearningRateDecayError(f"learning_rate must be a float or a float tensor, got "
                                     f"{lr.dtype.name}")
    return lr, ops.cast(global_step, lr.dtype), ops.cast(decay_steps, lr.dtype)


def _progress(learning_rate: Any, global_step: Any, decay_steps: Any, decay_rate: Any,
              staircase: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(learning rate, decay rate, global_step / decay_steps floored with
    ``staircase``): what the exponential, natural-exp and inverse-time decays share."""
    lr, step, steps = _start(learning_rate, global_step, decay_steps)
    p = ops.divide(step, steps)
    return lr, ops.cast(decay_rate, lr.dtype), _floor(p) if staircase else p


def exponential_decay(learning_rate: Any, global_step: Any, decay_steps: Any, decay_rate: Any,
                      staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate * decay_rate ** (global_step / decay_steps)`` (the exponent
    floored with ``staircase``)."""
    _need_step(global_step, "exponential_decay")
    with name_scope(name, "ExponentialDecay", [learning_rate, global_step]) as scope:
        lr, rate, p = _progress(learning_rate, global_step, decay_steps, decay_rate, staircase)
        return ops.multiply(lr, ops.pow(rate, p), name=scope)


def natural_exp_decay(learning_rate: Any, global_step: Any, decay_steps: Any, decay_rate: Any,
                      staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate * exp(-decay_rate * global_step / decay_steps)``."""
    _need_step(global_step, "natural_exp_decay")
    with name_scope(name, "NaturalExpDecay", [learning_rate, global_step]) as scope:
        lr, rate, p = _progress(learning_rate, global_step, decay_steps, decay_rate, staircase)
        return ops.multiply(lr, ops.exp(ops.multiply(ops.negative(rate), p)), name=scope)


def inverse_time_decay(learning_rate: Any, global_step: Any, decay_steps: Any, decay_rate: Any,
                       staircase: bool = False, name: str | None = None) -> Tensor:
    """``learning_rate / (1 + decay_rate * global_step / decay_steps)``."""
    _need_step(global_step, "inverse_time_decay")
    with name_scope(name, "InverseTimeDecay", [learning_rate, global_step]) as scope:
        lr, rate, p = _progress(learning_rate, global_step, decay_steps, decay_rate, staircase)
        denom = ops.add(ops.constant(1, dtype=lr.dtype), ops.multiply(rate, p))
        return ops.divide(lr, denom, name=scope)


def polynomial_decay(learning_rate: Any, global_step: Any, decay_steps: Any,
                     end_learning_rate: Any = 0.0001, power: Any = 1.0, cycle: bool = False,
                     name: str | None = None) -> Tensor:
    """``(learning_rate - end) * (1 - step / decay_steps) ** power + end`` with the
    step held at ``decay_steps``; with ``cycle`` the decay restarts: decay_steps
    becomes its first multiple not below the step (1 x at step 0)."""
    _need_step(global_step, "polynomial_decay")
    with name_scope(name, "PolynomialDecay", [learning_rate, global_step]) as scope:
        lr, step, steps = _start(learning_rate, global_step, decay_steps)
        end = ops.cast(end_learning_rate, lr.dtype)
        power_t = ops.cast(power, lr.dtype)
        if cycle:
            # ceil(step / steps), and 1 at step 0 (TF's cond, without control flow:
            # ceil is 0 exactly there)
            ceil = ops.negative(_floor(ops.negative(ops.divide(step, steps))))
            at_zero = ops.cast(ops.equal(step, ops.constant(0, dtype=lr.dtype)), lr.dtype)
            steps = ops.multiply(steps, ops.add(ceil, at_zero))
        else:
            step = ops.minimum(step, steps)
        p = ops.divide(step, steps)
        decayed = ops.multiply(ops.subtract(lr, end),
                               ops.pow(ops.subtract(ops.constant(1, dtype=lr.dtype), p), power_t))
        return ops.add(decayed, end, name=scope)


def piecewise_constant(x: Any, boundaries: Sequence[Any], values: Sequence[Any],
                       name: str | None = None) -> Tensor:
    """``values[0]`` while ``x <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < x <= boundaries[i]``, ``values[-1]`` after the last
    boundary. Boundaries are cast to ``x``'s dtype; the values share one dtype."""
    boundaries, values = list(boundaries), list(values)
    if len(boundaries) != len(values) - 1:
        raise LearningRateDecayError(
            "The length of boundaries should be 1 less than the length of values")
    with name_scope(name, "PiecewiseConstant", [x]) as scope:
        x_t = ops.convert_to_tensor(x)
        bounds = [ops.cast(ops.convert_to_tensor(b), x_t.dtype) for b in boundaries]
        vals = [ops.convert_to_tensor(v) for v in values]
        for v in vals[1:]:
            if v.dtype != vals[0].dtype:
                raise LearningRateDecayError(
                    f"Values must have elements all with the same dtype ({vals[0].dtype.name} "
                    f"vs {v.dtype.name}).")
        if not bounds:
            return ops.identity(vals[0], name=scope)
        preds = [ops.less_equal(x_t, bounds[0])]
        preds += [ops.logical_and(ops.greater(x_t, lo), ops.less_equal(x_t, hi))
                  for lo, hi in zip(bounds[:-1], bounds[1:])]
        preds.append(ops.greater(x_t, bounds[-1]))
        terms = [ops.multiply(v, ops.cast(p, v.dtype)) for v, p in zip(vals, preds)]
        return ops.add_n(terms, name=scope)
