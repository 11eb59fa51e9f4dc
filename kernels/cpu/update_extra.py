"""CPU update kernels of TF1's remaining optimizers, applied in place (TF's
``training_ops.cc`` rules): ``ApplyAdadelta``, ``ApplyFtrl``/``ApplyFtrlV2``
(FTRL-proximal with L1, L2 and L2 shrinkage), ``ApplyProximalAdagrad``,
``ApplyProximalGradientDescent`` and ``ApplyAdagradDA``.

As :mod:`kernels.cpu.update`: the runtime calls each with the variable's
storage, then its slots (docs/ops.md), then the op's inputs; the kernel
updates those arrays in place and returns ``[var]``; hyper-parameters are
cast to the variable's dtype so a float32 variable is updated in float32, as
TF does. Read-only storage is refused (the variable store owns a writable copy).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__: list[str] = []

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def _state(op: str, name: str, x: Any, like: np.ndarray | None = None) -> np.ndarray:
    if not isinstance(x, np.ndarray) or not x.flags.writeable:
        raise KernelError(f"{op}: {name} must be writable storage (the variable store's copy)")
    if x.dtype.kind != "f":
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; update rules need float variables")
    if like is not None and x.shape != like.shape:
        raise KernelError(f"{op}: {name} has shape {list(x.shape)} but the variable has "
                          f"{list(like.shape)}")
    return x


def _tensor(op: str, name: str, x: Any, var: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=var.dtype)
    if a.shape != var.shape:
        raise KernelError(f"{op}: {name} has shape {list(a.shape)}, the variable "
                          f"{list(var.shape)}")
    return a


def _scalar(op: str, name: str, x: Any, var: np.ndarray) -> Any:
    a = np.asarray(x)
    if a.size != 1:
        raise KernelError(f"{op}: {name} must be a scalar, got shape {list(a.shape)}")
    return var.dtype.type(a.reshape(()))


def _shrink(prox: np.ndarray, step: Any, l1: Any, l2: Any) -> np.ndarray:
    """The proximal step: soft threshold by ``step * l1`` (when l1 > 0), then
    divide by ``1 + step * l2``."""
    one = prox.dtype.type(1)
    if l1 > 0:
        prox = np.sign(prox) * np.maximum(np.abs(prox) - step * l1, prox.dtype.type(0))
    return prox / (one + step * l2)


@KERNELS("ApplyAdadelta", CPU)
def apply_adadelta(inputs: list, attrs: dict) -> list:
    op = "ApplyAdadelta"
    var = _state(op, "var", inputs[0])
    accum, accum_update = (_state(op, n, x, var) for n, x in
                           (("accum", inputs[1]), ("accum_update", inputs[2])))
    lr, rho, eps = (_scalar(op, n, x, var) for n, x in zip(("lr", "rho", "epsilon"), inputs[3:6]))
    grad = _tensor(op, "grad", inputs[6], var)
    one = var.dtype.type(1)
    accum *= rho
    accum += (one - rho) * grad * grad
    update = np.sqrt(accum_update + eps) / np.sqrt(accum + eps) * grad
    accum_update *= rho
    accum_update += (one - rho) * update * update
    var -= lr * update
    return [var]


def _ftrl(op: str, inputs: list, shrinkage: bool) -> list:
    var = _state(op, "var", inputs[0])
    accum, linear = _state(op, "accum", inputs[1], var), _state(op, "linear", inputs[2], var)
    grad = _tensor(op, "grad", inputs[3], var)
    names = ("lr", "l1", "l2", "l2_shrinkage", "lr_power") if shrinkage else \
        ("lr", "l1", "l2", "lr_power")
    hyper = dict(zip(names, (_scalar(op, n, x, var) for n, x in zip(names, inputs[4:]))))
    lr, l1, l2, power = hyper["lr"], hyper["l1"], hyper["l2"], hyper["lr_power"]
    if lr <= 0:
        raise KernelError(f"{op}: lr must be positive, got {lr}")
    g_shrunk = grad + var.dtype.type(2) * hyper["l2_shrinkage"] * var if shrinkage else grad
    new_accum = accum + grad * grad
    with np.errstate(divide="ignore", invalid="ignore"):
        if power == var.dtype.type(-0.5):
            sigma = (np.sqrt(new_accum) - np.sqrt(accum)) / lr
            quadratic = np.sqrt(new_accum) / lr + var.dtype.type(2) * l2
        else:
            sigma = (np.power(new_accum, -power) - np.power(accum, -power)) / lr
            quadratic = np.power(new_accum, -power) / lr + var.dtype.type(2) * l2
    linear += g_shrunk - sigma * var
    pre = np.sign(linear) * l1 - linear
    var[...] = np.where(np.abs(linear) > l1, pre / quadratic, var.dtype.type(0))
    accum[...] = new_accum
    return [var]


@KERNELS("ApplyFtrl", CPU)
def apply_ftrl(inputs: list, attrs: dict) -> list:
    return _ftrl("ApplyFtrl", inputs, shrinkage=False)


@KERNELS("ApplyFtrlV2", CPU)
def apply_ftrl_v2(inputs: list, attrs: dict) -> list:
    return _ftrl("ApplyFtrlV2", inputs, shrinkage=True)


@KERNELS("ApplyProximalAdagrad", CPU)
def apply_proximal_adagrad(inputs: list, attrs: dict) -> list:
    op = "ApplyProximalAdagrad"
    var = _state(op, "var", inputs[0])
    accum = _state(op, "accum", inputs[1], var)
    lr, l1, l2 = (_scalar(op, n, x, var) for n, x in zip(("lr", "l1", "l2"), inputs[2:5]))
    grad = _tensor(op, "grad", inputs[5], var)
    accum += grad * grad
    step = lr / np.sqrt(accum)
    var[...] = _shrink(var - grad * step, step, l1, l2)
    return [var]


@KERNELS("ApplyProximalGradientDescent", CPU)
def apply_proximal_gradient_descent(inputs: list, attrs: dict) -> list:
    op = "ApplyProximalGradientDescent"
    var = _state(op, "var", inputs[0])
    alpha, l1, l2 = (_scalar(op, n, x, var) for n, x in zip(("alpha", "l1", "l2"), inputs[1:4]))
    delta = _tensor(op, "delta", inputs[4], var)
    var[...] = _shrink(var - alpha * delta, alpha, l1, l2)
    return [var]


@KERNELS("ApplyAdagradDA", CPU)
def apply_adagrad_da(inputs: list, attrs: dict) -> list:
    op = "ApplyAdagradDA"
    var = _state(op, "var", inputs[0])
    g_acc = _state(op, "gradient_accumulator", inputs[1], var)
    g_sq = _state(op, "gradient_squared_accumulator", inputs[2], var)
    grad = _tensor(op, "grad", inputs[3], var)
    lr, l1, l2 = (_scalar(op, n, x, var) for n, x in zip(("lr", "l1", "l2"), inputs[4:7]))
    step = var.dtype.type(np.asarray(inputs[7]).reshape(()))
    g_acc += grad
    g_sq += grad * grad
    zero = var.dtype.type(0)
    if l1 > 0:
        top = np.sign(-g_acc) * np.maximum(np.abs(g_acc) - l1 * step, zero)
    else:
        top = -g_acc
    var[...] = top * lr / (l2 * step * lr + np.sqrt(g_sq))
    return [var]
