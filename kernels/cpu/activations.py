"""CPU kernels for TF's activations beyond relu/sigmoid/tanh and their
gradient ops (TF's ``nn_ops.cc``, ``relu_op_functor.h``, ``softplus_op.h``):
``Elu``, ``Selu``, ``Relu6``, ``LeakyRelu`` (attr ``alpha``, default 0.2),
``Softplus``, ``Softsign``, and ``EluGrad``/``SeluGrad`` (gradients,
outputs), ``Relu6Grad``/``LeakyReluGrad``/``SoftplusGrad``/``SoftsignGrad``
(gradients, features).

The formulas are TF's, branch for branch: ELU's gradient reads the output
(``outputs < 0 ? g * (outputs + 1) : g``), ReLU6's passes where
``0 < features < 6`` (neither bound), leaky ReLU's takes ``alpha`` where
``features <= 0``. Softplus is ``log(1 + exp(x))`` without overflow
(``logaddexp(0, x)``). Every result has the input's dtype; nothing is
written into an input.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["SELU_SCALE", "SELU_ALPHA"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

SELU_SCALE = 1.0507009873554804934193349852946
SELU_ALPHA = 1.6732632423543772848170429916717


def _floats(op: str, *xs: np.ndarray) -> None:
    for x in xs:
        if x.dtype.kind != "f":
            raise KernelError(f"{op} needs floating-point tensors, got {x.dtype}: Cast first")


def _activation(op: str, fn: Callable[[np.ndarray, dict], Any], floats: bool = True) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x = np.asarray(inputs[0])
        if floats:
            _floats(op, x)
        elif x.dtype.kind not in "fiu":
            raise KernelError(f"{op} needs a numeric tensor, got {x.dtype}")
        with np.errstate(over="ignore", invalid="ignore"):
            return [np.asarray(fn(x, attrs)).astype(x.dtype, copy=False)]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


def _grad(op: str, fn: Callable[[np.ndarray, np.ndarray, dict], Any]) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        g, f = np.asarray(inputs[0]), np.asarray(inputs[1])
        _floats(op, g, f)
        if g.shape != f.shape:
            raise KernelError(f"{op}: gradients {list(g.shape)} and the forward tensor "
                              f"{list(f.shape)} must have one shape")
        with np.errstate(over="ignore", invalid="ignore"):
            return [np.asarray(fn(g, f, attrs)).astype(g.dtype, copy=False)]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


def _c(x: np.ndarray, v: float) -> Any:
    return x.dtype.type(v)


def _elu(x: np.ndarray, attrs: dict) -> np.ndarray:
    return np.where(x < 0, np.expm1(np.minimum(x, _c(x, 0))), x)


def _selu(x: np.ndarray, attrs: dict) -> np.ndarray:
    neg = _c(x, SELU_SCALE * SELU_ALPHA) * np.expm1(np.minimum(x, _c(x, 0)))
    return np.where(x < 0, neg, _c(x, SELU_SCALE) * x)


def _relu6(x: np.ndarray, attrs: dict) -> np.ndarray:
    return np.minimum(np.maximum(x, _c(x, 0)), _c(x, 6))


def _leaky_relu(x: np.ndarray, attrs: dict) -> np.ndarray:
    alpha = _c(x, attrs.get("alpha", 0.2))
    return np.where(x > 0, x, x * alpha)


def _softplus(x: np.ndarray, attrs: dict) -> np.ndarray:
    return np.logaddexp(_c(x, 0), x)


def _softsign(x: np.ndarray, attrs: dict) -> np.ndarray:
    return x / (_c(x, 1) + np.abs(x))


_activation("Elu", _elu)
_activation("Selu", _selu)
_activation("Relu6", _relu6, floats=False)
_activation("LeakyRelu", _leaky_relu, floats=False)
_activation("Softplus", _softplus)
_activation("Softsign", _softsign)


def _elu_grad(g: np.ndarray, y: np.ndarray, attrs: dict) -> np.ndarray:
    return np.where(y < 0, g * (y + _c(y, 1)), g)


def _selu_grad(g: np.ndarray, y: np.ndarray, attrs: dict) -> np.ndarray:
    return np.where(y < 0, g * (y + _c(y, SELU_SCALE * SELU_ALPHA)), g * _c(y, SELU_SCALE))


def _relu6_grad(g: np.ndarray, f: np.ndarray, attrs: dict) -> np.ndarray:
    return np.where((f > 0) & (f < 6), g, _c(g, 0))


def _leaky_relu_grad(g: np.ndarray, f: np.ndarray, attrs: dict) -> np.ndarray:
    return np.where(f > 0, g, g * _c(g, attrs.get("alpha", 0.2)))


def _softplus_grad(g: np.ndarray, f: np.ndarray, attrs: dict) -> np.ndarray:
    return g / (_c(f, 1) + np.exp(-f))


def _softsign_grad(g: np.ndarray, f: np.ndarray, attrs: dict) -> np.ndarray:
    d = _c(f, 1) + np.abs(f)
    return g / (d * d)


_grad("EluGrad", _elu_grad)
_grad("SeluGrad", _selu_grad)
_grad("Relu6Grad", _relu6_grad)
_grad("LeakyReluGrad", _leaky_relu_grad)
_grad("SoftplusGrad", _softplus_grad)
_grad("SoftsignGrad", _softsign_grad)
