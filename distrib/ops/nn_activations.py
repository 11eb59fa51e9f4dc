"""TF's activations beyond relu: ``dt.nn.elu``, ``selu``, ``gelu``
(``approximate=False``: ``0.5 x (1 + erf(x / sqrt 2))``; ``True``: the tanh
form), ``leaky_relu`` (``alpha=0.2``), ``relu6``, ``silu``/``swish``
(``x * sigmoid(beta x)``), ``softplus``, ``softsign``, ``crelu``.

The ones TF gives an op of their own (``Elu``, ``Selu``, ``Relu6``,
``LeakyRelu``, ``Softplus``, ``Softsign``) are one op here too, with TF's
gradient op beside it (``EluGrad`` ...: distrib/ops/vocabulary_grad.py) and a
GPU kernel each (kernels/cuda/activations.py): they sit on a training step's
path. ``gelu`` and ``silu`` are TF's composites of existing ops, so their
gradients come from those ops' gradients.
"""
from __future__ import annotations

import math
from typing import Any

from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat

__all__ = ["elu", "selu", "gelu", "leaky_relu", "relu6", "silu", "swish", "softplus",
           "softsign", "crelu"]


def elu(features: Any, name: str | None = None) -> Tensor:
    """``x`` where ``x > 0``, else ``exp(x) - 1``."""
    return ops.unary_op("Elu", features, name or "Elu")


def selu(features: Any, name: str | None = None) -> Tensor:
    """``scale * elu(x, alpha)`` with SELU's fixed scale and alpha."""
    return ops.unary_op("Selu", features, name or "Selu")


def relu6(features: Any, name: str | None = None) -> Tensor:
    """``min(max(x, 0), 6)``."""
    return ops.unary_op("Relu6", features, name or "Relu6")


def leaky_relu(features: Any, alpha: float = 0.2, name: str | None = None) -> Tensor:
    """``x`` where ``x > 0``, else ``alpha * x``."""
    x = ops.convert_operand(features)
    if not x.dtype.is_floating:
        x = ops.cast(x, "float32")
    return ops.op_output("LeakyRelu", [x], {"alpha": float(alpha)}, name or "LeakyRelu")


def softplus(features: Any, name: str | None = None) -> Tensor:
    """``log(exp(x) + 1)``, without overflow."""
    return ops.unary_op("Softplus", features, name or "Softplus")


def softsign(features: Any, name: str | None = None) -> Tensor:
    """``x / (abs(x) + 1)``."""
    return ops.unary_op("Softsign", features, name or "Softsign")


def gelu(features: Any, approximate: bool = False, name: str | None = None) -> Tensor:
    """Gaussian error linear unit: ``x * P(X <= x)`` for a standard normal X
    (``approximate=True``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``)."""
    with name_scope(name, "Gelu", [features]) as scope:
        x = ops.convert_operand(features)
        if approximate:
            c = math.sqrt(2.0 / math.pi)
            inner = ops.multiply(c, ops.add(x, ops.multiply(0.044715, ops.multiply(
                ops.multiply(x, x), x))))
            return ops.multiply(ops.multiply(0.5, x), ops.add(1.0, ops.tanh(inner)), name=scope)
        cdf = ops.add(1.0, ops.unary_op("Erf", ops.multiply(x, 1.0 / math.sqrt(2.0)), None))
        return ops.multiply(ops.multiply(0.5, x), cdf, name=scope)


def silu(features: Any, beta: float = 1.0, name: str | None = None) -> Tensor:
    """``x * sigmoid(beta * x)`` (also ``dt.nn.swish``)."""
    with name_scope(name, "silu", [features]) as scope:
        x = ops.convert_operand(features)
        z = x if beta == 1.0 else ops.multiply(x, beta)
        return ops.multiply(x, ops.sigmoid(z), name=scope)


swish = silu


def crelu(features: Any, name: str | None = None, axis: int = -1) -> Tensor:
    """``concat([relu(x), relu(-x)], axis)``."""
    with name_scope(name, "CRelu", [features]) as scope:
        x = ops.convert_operand(features)
        return concat([ops.unary_op("Relu", x, None), ops.unary_op("Relu", ops.negative(x), None)],
                      axis, name=scope)
