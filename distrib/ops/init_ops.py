"""TF1's initializer objects: ``dt.zeros_initializer()``, ``dt.constant_initializer(v)``,
``dt.random_normal_initializer``, ``dt.truncated_normal_initializer``,
``dt.glorot_uniform_initializer`` ... (``tf.compat.v1.initializers``).

An initializer is called as ``init(shape, dtype=None, partition_info=None)``
and returns what ``dt.Variable`` takes as its initial value; ``get_variable``
calls it inside the variable's ``Initializer`` name scope, so its ops run
only when the variable is initialized. Each keeps TF1's arguments, defaults
(``dtype=float32``) and checks: the random ones refuse a non-float dtype with
TF's ``ValueError``.

Uniform and normal draws are graph ops (``RandomUniform``,
``RandomStandardNormal``): a large variable costs no bytes in the GraphDef.
A truncated normal has no op here and is drawn with numpy when the graph is
built (a constant), by :func:`truncated_normal_values`, which Keras'
initializers share; so do the fan counts (:func:`compute_fans`) and the
variance-scaling rule. Either way a given ``seed`` gives the same values on
every build, and an unseeded initializer follows the graph's seed
(``dt.set_random_seed``) as TF's do.

This is the ops layer: ``dt.keras.initializers`` (a layer above) reuse these
helpers rather than the other way round.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from distrib.framework import dtypes
from distrib.framework.graph import get_default_graph
from distrib.ops import math_ops as ops

__all__ = [
    "Initializer", "Zeros", "Ones", "Constant", "RandomUniform", "RandomNormal",
    "TruncatedNormal", "VarianceScaling", "GlorotUniform", "GlorotNormal",
    "zeros_initializer", "ones_initializer", "constant_initializer",
    "random_uniform_initializer", "random_normal_initializer",
    "truncated_normal_initializer", "variance_scaling_initializer",
    "glorot_uniform_initializer", "glorot_normal_initializer",
    "compute_fans", "truncated_normal_values", "variance_scaled",
]

# scipy.stats.truncnorm.std(a=-2, b=2, loc=0., scale=1.): a unit normal cut at
# two standard deviations has this standard deviation (TF's constant)
TRUNCATED_STDDEV = 0.87962566103423978


def compute_fans(shape: Any) -> tuple[float, float]:
    """(fan_in, fan_out) of a weight of ``shape`` (TF's ``_compute_fans``): a
    scalar counts 1, a vector its length, a matrix its rows and columns, a
    convolution kernel ``(..., in, out)`` times its receptive field."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
    return shape[-2] * receptive, shape[-1] * receptive


def truncated_normal_values(shape: Any, mean: float, stddev: float, seed: int | None,
                            dtype: Any) -> np.ndarray:
    """Normal draws of ``shape``, those beyond two standard deviations drawn
    again (TF's ``TruncatedNormal`` rule), scaled by ``stddev`` and moved by ``mean``."""
    rng = np.random.default_rng(seed)
    out = rng.standard_normal(tuple(int(d) for d in shape))
    bad = np.abs(out) > 2.0
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2.0
    return (out * stddev + mean).astype(dtypes.as_dtype(dtype).as_numpy_dtype)


def variance_scaled(shape: Any, scale: float, mode: str, distribution: str,
                    seed: int | None, dtype: Any) -> Any:
    """A draw with variance ``scale / n`` (n: fan_in, fan_out or their mean) from
    ``distribution`` (TF's ``VarianceScaling.__call__``; ``"normal"`` is TF1's
    old name of ``"truncated_normal"``)."""
    fan_in, fan_out = compute_fans(shape)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2.0}[mode]
    scale = scale / max(1.0, n)
    if distribution in ("normal", "truncated_normal"):
        return truncated_normal_values(shape, 0.0, math.sqrt(scale) / TRUNCATED_STDDEV,
                                       seed, dtype)
    if distribution == "untruncated_normal":
        return ops.random_normal(list(shape), 0.0, math.sqrt(scale), dtype=dtype, seed=seed)
    limit = math.sqrt(3.0 * scale)
    return ops.random_uniform(list(shape), -limit, limit, dtype=dtype, seed=seed)


def _float_dtype(dtype: Any) -> dtypes.DType:
    dt = dtypes.as_dtype(dtype)
    if not dt.is_floating:
        raise ValueError(f"Expected floating point type, got {dt.name}.")
    return dt


def _client_seed(seed: int | None) -> int | None:
    """The seed of a draw made in the client (a truncated normal): ``seed``
    itself, else one derived from the graph's seed and its size (as the random
    ops derive theirs), else None (fresh entropy)."""
    if seed is not None:
        return int(seed)
    graph = get_default_graph()
    if graph.seed is None:
        return None
    return (int(graph.seed) * 1_000_003 + len(graph)) % (2**31 - 1)


class Initializer:
    """Base class: ``init(shape, dtype=None, partition_info=None)`` gives an
    initial value of ``shape`` (``dtype`` None: the initializer's own)."""

    dtype: dtypes.DType = dtypes.float32

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Initializer:
        return cls(**config)

    def _dtype(self, dtype: Any) -> dtypes.DType:
        return dtypes.as_dtype(dtype) if dtype is not None else self.dtype


class Zeros(Initializer):
    """``zeros_initializer(dtype=dt.float32)``: all zeros."""

    def __init__(self, dtype: Any = dtypes.float32) -> None:
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        return ops.zeros(list(shape), dtype=self._dtype(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"dtype": self.dtype.name}


class Ones(Initializer):
    """``ones_initializer(dtype=dt.float32)``: all ones."""

    def __init__(self, dtype: Any = dtypes.float32) -> None:
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        return ops.ones(list(shape), dtype=self._dtype(dtype))

    def get_config(self) -> dict[str, Any]:
        return {"dtype": self.dtype.name}


class Constant(Initializer):
    """``constant_initializer(value=0, dtype=dt.float32, verify_shape=False)``:
    ``value`` broadcast to the shape (a scalar fills it; a list of fewer
    elements is filled out with its last one, as TF1's ``constant``)."""

    def __init__(self, value: Any = 0, dtype: Any = dtypes.float32,
                 verify_shape: bool = False) -> None:
        if not np.isscalar(value) and not isinstance(value, (list, tuple, np.ndarray)):
            raise TypeError(f"Invalid type for initial value: {type(value).__name__} (expected "
                            "Python scalar, list or tuple of values, or numpy.ndarray).")
        self.value, self.dtype, self._verify_shape = value, dtypes.as_dtype(dtype), verify_shape

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None,
                 verify_shape: Any = None) -> Any:
        verify = self._verify_shape if verify_shape is None else verify_shape
        dt = self._dtype(dtype)
        value = np.asarray(self.value, dtype=dt.as_numpy_dtype)
        dims = [int(d) for d in shape]
        need = int(np.prod(dims)) if dims else 1
        if verify and list(value.shape) != dims:
            raise TypeError(f"Expected Tensor's shape: {tuple(dims)}, got {value.shape}.")
        if value.size > need:
            raise ValueError(f"Too many elements provided. Needed at most {need}, but "
                             f"received {value.size}")
        if 0 < value.size < need:   # TF1: the last value fills the rest
            flat = value.reshape(-1)
            value = np.concatenate([flat, np.full(need - flat.size, flat[-1], flat.dtype)])
        return ops.constant(value.reshape(dims) if value.size == need else value, dtype=dt,
                            shape=dims)

    def get_config(self) -> dict[str, Any]:
        value = self.value.tolist() if isinstance(self.value, np.ndarray) else self.value
        return {"value": value, "dtype": self.dtype.name}


class RandomUniform(Initializer):
    """``random_uniform_initializer(minval=0, maxval=None, seed=None,
    dtype=dt.float32)``: uniform in ``[minval, maxval)`` (maxval None: 1)."""

    def __init__(self, minval: Any = 0, maxval: Any = None, seed: int | None = None,
                 dtype: Any = dtypes.float32) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, seed
        self.dtype = dtypes.as_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        return ops.random_uniform(list(shape), self.minval, self.maxval,
                                  dtype=self._dtype(dtype), seed=self.seed)

    def get_config(self) -> dict[str, Any]:
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed,
                "dtype": self.dtype.name}


class RandomNormal(Initializer):
    """``random_normal_initializer(mean=0.0, stddev=1.0, seed=None, dtype=dt.float32)``."""

    def __init__(self, mean: float = 0.0, stddev: float = 1.0, seed: int | None = None,
                 dtype: Any = dtypes.float32) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed
        self.dtype = _float_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        return ops.random_normal(list(shape), self.mean, self.stddev,
                                 dtype=_float_dtype(self._dtype(dtype)), seed=self.seed)

    def get_config(self) -> dict[str, Any]:
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed,
                "dtype": self.dtype.name}


class TruncatedNormal(RandomNormal):
    """``truncated_normal_initializer(mean=0.0, stddev=1.0, seed=None,
    dtype=dt.float32)``: normal draws beyond two standard deviations drawn again."""

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        dt = _float_dtype(self._dtype(dtype))
        return ops.constant(truncated_normal_values(shape, self.mean, self.stddev,
                                                    _client_seed(self.seed), dt), dtype=dt)


class VarianceScaling(Initializer):
    """``variance_scaling_initializer(scale=1.0, mode="fan_in",
    distribution="truncated_normal", seed=None, dtype=dt.float32)``."""

    def __init__(self, scale: float = 1.0, mode: str = "fan_in",
                 distribution: str = "truncated_normal", seed: int | None = None,
                 dtype: Any = dtypes.float32) -> None:
        if scale <= 0.0:
            raise ValueError("`scale` must be positive float.")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"Invalid `mode` argument: {mode}")
        distribution = distribution.lower()
        if distribution not in ("normal", "uniform", "truncated_normal", "untruncated_normal"):
            raise ValueError(f"Invalid `distribution` argument: {distribution}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed
        self.dtype = _float_dtype(dtype)

    def __call__(self, shape: Any, dtype: Any = None, partition_info: Any = None) -> Any:
        dt = _float_dtype(self._dtype(dtype))
        full = partition_info.full_shape if partition_info is not None else shape
        seed = _client_seed(self.seed) if self.distribution in ("normal", "truncated_normal") \
            else self.seed
        value = variance_scaled(full, self.scale, self.mode, self.distribution, seed, dt)
        return ops.constant(value, dtype=dt) if isinstance(value, np.ndarray) else value

    def get_config(self) -> dict[str, Any]:
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed, "dtype": self.dtype.name}


class GlorotUniform(VarianceScaling):
    """``glorot_uniform_initializer(seed=None, dtype=dt.float32)``: uniform with
    limit ``sqrt(6 / (fan_in + fan_out))``; ``get_variable``'s default for floats."""

    def __init__(self, seed: int | None = None, dtype: Any = dtypes.float32) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed, dtype)

    def get_config(self) -> dict[str, Any]:
        return {"seed": self.seed, "dtype": self.dtype.name}


class GlorotNormal(VarianceScaling):
    """``glorot_normal_initializer(seed=None, dtype=dt.float32)``: a truncated
    normal with variance ``2 / (fan_in + fan_out)``."""

    def __init__(self, seed: int | None = None, dtype: Any = dtypes.float32) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed, dtype)

    def get_config(self) -> dict[str, Any]:
        return {"seed": self.seed, "dtype": self.dtype.name}


# TF1's names: the classes themselves (tf.zeros_initializer is init_ops.Zeros)
zeros_initializer = Zeros
ones_initializer = Ones
constant_initializer = Constant
random_uniform_initializer = RandomUniform
random_normal_initializer = RandomNormal
truncated_normal_initializer = TruncatedNormal
variance_scaling_initializer = VarianceScaling
glorot_uniform_initializer = GlorotUniform
glorot_normal_initializer = GlorotNormal
