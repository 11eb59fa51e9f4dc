"""``dt.keras.regularizers``: ``L1``, ``L2``, ``L1L2`` (Keras 2's names, defaults, configs).

A regularizer is a callable from a weight (or a layer's output) to a scalar
penalty: ``L1(l1=0.01)`` is ``l1 * sum(|x|)``, ``L2(l2=0.01)`` is
``l2 * sum(x**2)``, ``L1L2(l1=0.0, l2=0.0)`` both. A layer given
``kernel_regularizer=`` / ``bias_regularizer=`` keeps one penalty per weight
and ``activity_regularizer=`` one per call (divided by the batch's rows, as
Keras 2 does); ``layer.losses`` / ``model.losses`` build them in the graph
being traced, so ``fit`` adds them to the loss of every step (and a custom
loop adds ``dt.nn.scale_regularization_loss(model.losses)``).

The penalties are computed in float32 from the weight as it is (a mirrored
variable's replica copy inside ``strategy.run``). ``get(identifier)`` takes
Keras' names (``'l1'``, ``'l2'``, ``'l1_l2'``), a config dict, a regularizer
or any callable; ``serialize``/``deserialize`` are Keras'.
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Tensor
from distrib.keras import serialization
from distrib.ops import math_ops as ops

__all__ = ["Regularizer", "L1", "L2", "L1L2", "l1", "l2", "l1_l2", "get", "serialize",
           "deserialize"]


def _factor(value: Any, name: str) -> float:
    value = float(value)
    if not value >= 0.0 or value == float("inf"):
        raise ValueError(f"Value '{name}' must be a non-negative finite number. Received: "
                         f"{name}={value}")
    return value


class Regularizer:
    """Base of the regularizers: ``__call__(x) -> scalar penalty``."""

    def __call__(self, x: Any) -> Tensor:
        return ops.constant(0.0)

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not implement get_config()")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Regularizer:
        return cls(**config)


class L1L2(Regularizer):
    """``L1L2(l1=0.0, l2=0.0)``: ``l1 * sum(|x|) + l2 * sum(x**2)``."""

    def __init__(self, l1: float = 0.0, l2: float = 0.0) -> None:  # noqa: E741 - Keras' names
        self.l1 = _factor(l1, "l1")
        self.l2 = _factor(l2, "l2")

    def __call__(self, x: Any) -> Tensor:
        x = ops.convert_to_tensor(x)
        if x.dtype.name != "float32":
            x = ops.cast(x, "float32")
        terms = []
        if self.l1:
            terms.append(self.l1 * ops.reduce_sum(ops.abs(x)))
        if self.l2:
            terms.append(self.l2 * ops.reduce_sum(ops.square(x)))
        if not terms:
            return ops.constant(0.0)
        return terms[0] if len(terms) == 1 else terms[0] + terms[1]

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """``L1(l1=0.01)``: ``l1 * sum(|x|)``."""

    def __init__(self, l1: float = 0.01, **kwargs: Any) -> None:
        l1 = kwargs.pop("l", l1)   # Keras 2's alias
        if kwargs:
            raise TypeError(f"L1: unexpected keyword argument(s) {sorted(kwargs)}")
        super().__init__(l1=0.01 if l1 is None else l1)

    def get_config(self) -> dict[str, Any]:
        return {"l1": self.l1}


class L2(L1L2):
    """``L2(l2=0.01)``: ``l2 * sum(x**2)``."""

    def __init__(self, l2: float = 0.01, **kwargs: Any) -> None:
        l2 = kwargs.pop("l", l2)   # Keras 2's alias
        if kwargs:
            raise TypeError(f"L2: unexpected keyword argument(s) {sorted(kwargs)}")
        super().__init__(l2=0.01 if l2 is None else l2)

    def get_config(self) -> dict[str, Any]:
        return {"l2": self.l2}


def l1_l2(l1: float = 0.01, l2: float = 0.01) -> L1L2:  # noqa: E741 - Keras' names
    """Keras' ``l1_l2`` function (both factors 0.01 by default)."""
    return L1L2(l1=l1, l2=l2)


l1 = L1   # Keras' lower-case aliases
l2 = L2

_BY_NAME = {"L1": L1, "L2": L2, "L1L2": L1L2, "l1": L1, "l2": L2, "l1_l2": l1_l2,
            "Regularizer": Regularizer}


def serialize(regularizer: Any) -> Any:
    """Keras' ``{"module", "class_name", "config", "registered_name"}`` (None stays None)."""
    if regularizer is None:
        return None
    if not isinstance(regularizer, Regularizer):
        return serialization.serialize_function(regularizer)
    return {"module": "keras.regularizers", "class_name": type(regularizer).__name__,
            "config": regularizer.get_config(),
            "registered_name": serialization.get_registered_name(type(regularizer))}


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """What ``serialize`` gave: a regularizer (a user's through ``custom_objects``)."""
    if config is None:
        return None
    if isinstance(config, str):
        return get(config)
    return serialization.deserialize_keras_object(config, _BY_NAME, custom_objects,
                                                  printable_module_name="regularizer")


def get(identifier: Any) -> Any:
    """A regularizer for None, a name (``'l2'`` ...), a config dict, or a callable."""
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"Could not interpret regularizer identifier: {identifier!r}; "
                             f"use one of {sorted(_BY_NAME)}")
        return _BY_NAME[identifier]()
    if callable(identifier):
        return identifier
    raise ValueError(f"Could not interpret regularizer identifier: {identifier!r}")
