"""``dt.keras.activations``: the element-wise functions a layer ends with.

``get('relu')`` gives the function for a name (Keras' names; ``None`` and
``'linear'`` are the identity). ``softmax`` and ``sigmoid`` remember the
logits they were computed from (``logits_of``), as Keras' backend does with
``_keras_logits``: a cross-entropy on probabilities then works on those
logits with the fused, numerically stable op instead of taking ``log`` of a
rounded probability, and gives the same values.
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.framework.graph import Tensor
from distrib.ops import math_ops as ops
from distrib.ops import nn

__all__ = ["get", "serialize", "relu", "sigmoid", "softmax", "tanh", "linear", "logits_of"]

_LOGITS_ATTR = "_keras_logits"


def linear(x: Any) -> Any:
    return x


def relu(x: Any) -> Tensor:
    return nn.relu(x)


def tanh(x: Any) -> Tensor:
    return ops.tanh(x)


def sigmoid(x: Any) -> Tensor:
    out = ops.sigmoid(x)
    setattr(out, _LOGITS_ATTR, ("sigmoid", x))
    return out


def softmax(x: Any, axis: int = -1) -> Tensor:
    out = nn.softmax(x, axis=axis)
    setattr(out, _LOGITS_ATTR, ("softmax", x))
    return out


def logits_of(probabilities: Any, kind: str) -> Tensor | None:
    """The logits ``probabilities`` came from through ``kind`` ('softmax' or
    'sigmoid'), or None when they did not come from that activation."""
    found = getattr(probabilities, _LOGITS_ATTR, None)
    return found[1] if found is not None and found[0] == kind else None


_BY_NAME: dict[str, Callable[..., Any]] = {
    "linear": linear, "relu": relu, "tanh": tanh, "sigmoid": sigmoid, "softmax": softmax}


def get(identifier: Any) -> Callable[..., Any]:
    """The activation function for a name, a function, or None (linear)."""
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]
    raise ValueError(f"Unknown activation function: {identifier!r}; use one of "
                     f"{sorted(_BY_NAME)}, None, or a function of a tensor")


def serialize(activation: Callable[..., Any]) -> str:
    for name, fn in _BY_NAME.items():
        if fn is activation:
            return name
    return getattr(activation, "__name__", repr(activation))
