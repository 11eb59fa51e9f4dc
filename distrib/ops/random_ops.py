"""``dt.random``: TF's random ops (``uniform``, ``normal``,
``truncated_normal``, ``shuffle``, ``categorical``, ``set_seed``, the
``stateless_*`` draws) and TF1's top-level names (``dt.truncated_normal``,
``dt.random_shuffle``, ``dt.multinomial``).

Seeds follow TF's rules in the graph: an op's seed comes from its own
``seed`` and the graph's (``dt.random.set_seed`` / ``dt.set_random_seed``),
:func:`distrib.ops.data_flow_ops.op_seed`; with either set a program draws
the same numbers every run, each step of a session the next ones of the
op's sequence (the executor keeps a generator per seeded op). The
``stateless_*`` draws depend only on their ``seed`` pair: the same numbers on
every run and every step, as TF's stateless ops. ``truncated_normal`` redraws
values beyond two standard deviations (TF's ``TruncatedNormal``).
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes, op_shapes
from distrib.framework.graph import Tensor
from distrib.ops import math_ops as ops
from distrib.ops.data_flow_ops import op_seed

__all__ = ["uniform", "normal", "truncated_normal", "shuffle", "categorical", "multinomial",
           "set_seed", "stateless_uniform", "stateless_normal", "stateless_truncated_normal",
           "random_shuffle"]

uniform = ops.random_uniform
normal = ops.random_normal


def set_seed(seed: int | None) -> None:
    """The graph-level seed (TF2's ``tf.random.set_seed``; TF1's ``set_random_seed``)."""
    ops.set_random_seed(seed)


def _float(dtype: Any, op: str) -> dtypes.DType:
    dt = dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise InvalidArgumentError(f"{op} makes floating-point values, not {dt.name}")
    return dt


def truncated_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0,
                     dtype: Any = dtypes.float32, seed: int | None = None,
                     name: str | None = None) -> Tensor:
    """Normal draws of ``mean`` and ``stddev``, none beyond two standard deviations."""
    attrs = {"shape": op_shapes.check_shape_arg("TruncatedNormal", shape),
             "dtype": _float(dtype, "truncated_normal"), "mean": float(mean),
             "stddev": float(stddev), "seed": op_seed(seed)}
    return ops.op_output("TruncatedNormal", [], attrs, name or "truncated_normal")


def shuffle(value: Any, seed: int | None = None, name: str | None = None) -> Tensor:
    """``value``'s rows (its first dimension) in a random order."""
    return ops.op_output("RandomShuffle", [ops.convert_operand(value)], {"seed": op_seed(seed)},
                         name or "RandomShuffle")


random_shuffle = shuffle


def categorical(logits: Any, num_samples: int, dtype: Any = None, seed: int | None = None,
                name: str | None = None) -> Tensor:
    """``num_samples`` class indices per row of ``logits`` ([batch, classes],
    unnormalized log-probabilities): int64 ``[batch, num_samples]``."""
    x = ops.convert_operand(logits)
    out = dtypes.as_dtype(dtype or dtypes.int64)
    if out not in (dtypes.int32, dtypes.int64):
        raise InvalidArgumentError(f"categorical: dtype must be int32 or int64, not {out.name}")
    return ops.op_output("Multinomial", [x], {"num_samples": int(num_samples),
                                              "output_dtype": out, "seed": op_seed(seed)},
                         name or "categorical")


def multinomial(logits: Any, num_samples: int, seed: int | None = None, name: str | None = None,
                output_dtype: Any = None) -> Tensor:
    """TF1's ``tf.multinomial``: :func:`categorical`."""
    return categorical(logits, num_samples, output_dtype, seed, name or "multinomial")


def _stateless_seed(seed: Any, op: str) -> int:
    try:
        a, b = (int(s) for s in seed)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{op}: seed must be a pair of ints, got {seed!r}") from None
    return ((a & 0xFFFFFFFF) << 32 | (b & 0xFFFFFFFF)) % (2**63 - 1)


def _stateless(op_type: str, shape: Any, seed: Any, dtype: Any, name: str, **extra: Any) -> Tensor:
    attrs = {"shape": op_shapes.check_shape_arg(op_type, shape),
             "dtype": _float(dtype, name), "seed": _stateless_seed(seed, name), **extra}
    return ops.op_output(op_type, [], attrs, name)


def stateless_uniform(shape: Any, seed: Any, minval: float = 0.0, maxval: float = 1.0,
                      dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Uniform draws in ``[minval, maxval)`` fixed by the ``seed`` pair."""
    return _stateless("StatelessRandomUniform", shape, seed, dtype, name or "stateless_uniform",
                      minval=float(minval), maxval=float(maxval))


def stateless_normal(shape: Any, seed: Any, mean: float = 0.0, stddev: float = 1.0,
                     dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Normal draws fixed by the ``seed`` pair."""
    return _stateless("StatelessRandomNormal", shape, seed, dtype, name or "stateless_normal",
                      mean=float(mean), stddev=float(stddev))


def stateless_truncated_normal(shape: Any, seed: Any, mean: float = 0.0, stddev: float = 1.0,
                               dtype: Any = dtypes.float32, name: str | None = None) -> Tensor:
    """Truncated normal draws fixed by the ``seed`` pair."""
    return _stateless("StatelessTruncatedNormal", shape, seed, dtype,
                      name or "stateless_truncated_normal", mean=float(mean), stddev=float(stddev))
