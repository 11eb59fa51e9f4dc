"""``dt.keras.initializers``: the starting values of layer weights (Keras' names,
arguments and defaults).

An initializer is called with a shape and a dtype and returns what
``dt.Variable`` takes as its initial value. Uniform and normal draws are graph
ops (``RandomUniform``/``RandomStandardNormal``), so a large kernel costs no
bytes in the GraphDef and the variable's initializer draws it on the server;
truncated normals (``TruncatedNormal``, ``GlorotNormal``, ``HeNormal``,
``LecunNormal``) have no op here and are drawn with numpy in the client (a
constant in the graph). Either way a given ``seed`` gives the same values on
every run, and an unseeded initializer takes the next seed of the graph's
sequence when ``dt.set_random_seed`` set one (``backend.derived_seed``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.framework import dtypes
from distrib.keras import backend, serialization
from distrib.ops import init_ops
from distrib.ops import math_ops as ops

__all__ = ["Initializer", "Zeros", "Ones", "Constant", "RandomNormal", "RandomUniform",
           "TruncatedNormal", "VarianceScaling", "GlorotUniform", "GlorotNormal", "HeNormal",
           "HeUniform", "LecunNormal", "LecunUniform", "get"]


# (the truncated normal and the variance scaling are TF1's initializers', ops.init_ops)
class Initializer:
    """Base class: ``initializer(shape, dtype)`` gives an initial value."""

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        raise NotImplementedError

    def get_config(self) -> dict[str, Any]:
        return {}


class Zeros(Initializer):
    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return ops.zeros(list(shape), dtype=dtypes.as_dtype(dtype or backend.floatx()))


class Ones(Initializer):
    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return ops.ones(list(shape), dtype=dtypes.as_dtype(dtype or backend.floatx()))


class Constant(Initializer):
    def __init__(self, value: Any = 0) -> None:
        self.value = value

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        np_dtype = dtypes.as_dtype(dtype or backend.floatx()).as_numpy_dtype
        return np.broadcast_to(np.asarray(self.value, dtype=np_dtype), tuple(shape)).copy()

    def get_config(self) -> dict[str, Any]:
        return {"value": self.value}


class RandomUniform(Initializer):
    def __init__(self, minval: float = -0.05, maxval: float = 0.05, seed: int | None = None
                 ) -> None:
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return ops.random_uniform(list(shape), self.minval, self.maxval,
                                  dtype=dtype or backend.floatx(),
                                  seed=backend.derived_seed(self.seed))

    def get_config(self) -> dict[str, Any]:
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class RandomNormal(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return ops.random_normal(list(shape), self.mean, self.stddev,
                                 dtype=dtype or backend.floatx(),
                                 seed=backend.derived_seed(self.seed))

    def get_config(self) -> dict[str, Any]:
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


def _truncated_normal(shape: Any, mean: float, stddev: float, seed: int | None,
                      dtype: Any) -> np.ndarray:
    """Normal draws, those beyond two standard deviations drawn again (TF's rule)."""
    return init_ops.truncated_normal_values(shape, mean, stddev, seed,
                                            dtype or backend.floatx())


class TruncatedNormal(Initializer):
    def __init__(self, mean: float = 0.0, stddev: float = 0.05, seed: int | None = None
                 ) -> None:
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return _truncated_normal(shape, self.mean, self.stddev,
                                 backend.derived_seed(self.seed), dtype)

    def get_config(self) -> dict[str, Any]:
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class VarianceScaling(Initializer):
    """Draws with variance ``scale / n`` (n: fan_in, fan_out or their mean)."""

    def __init__(self, scale: float = 1.0, mode: str = "fan_in",
                 distribution: str = "truncated_normal", seed: int | None = None) -> None:
        if scale <= 0.0:
            raise ValueError(f"Argument `scale` must be positive float. Received: {scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"Invalid `mode` argument: {mode!r}; use fan_in, fan_out or "
                             "fan_avg")
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise ValueError(f"Invalid `distribution` argument: {distribution!r}; use "
                             "truncated_normal, untruncated_normal or uniform")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape: Any, dtype: Any = None) -> Any:
        return init_ops.variance_scaled(tuple(shape), self.scale, self.mode, self.distribution,
                                        backend.derived_seed(self.seed),
                                        dtype or backend.floatx())

    def get_config(self) -> dict[str, Any]:
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed}


class GlorotUniform(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeNormal(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(2.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


class LecunUniform(VarianceScaling):
    def __init__(self, seed: int | None = None) -> None:
        super().__init__(1.0, "fan_in", "uniform", seed)


_BY_NAME: dict[str, type[Initializer]] = {
    "zeros": Zeros, "ones": Ones, "constant": Constant, "random_normal": RandomNormal,
    "random_uniform": RandomUniform, "truncated_normal": TruncatedNormal,
    "glorot_uniform": GlorotUniform, "glorot_normal": GlorotNormal, "he_normal": HeNormal,
    "he_uniform": HeUniform, "lecun_normal": LecunNormal, "lecun_uniform": LecunUniform,
    "variance_scaling": VarianceScaling}


def _name_key(name: str) -> str:
    return name if name in _BY_NAME else backend.snake_case(name)


def get(identifier: Any) -> Any:
    """An initializer for a name (``'glorot_uniform'``, ``'zeros'`` ...), an
    Initializer, or a function ``(shape, dtype) -> value``."""
    found = serialization.by_identifier(identifier, Initializer, _BY_NAME, _name_key)
    if found is not None:
        return found
    if callable(identifier) and not isinstance(identifier, type):
        return identifier
    raise ValueError(f"Could not interpret initializer identifier: {identifier!r}; use one of "
                     f"{sorted(_BY_NAME)} or a dt.keras.initializers object")

