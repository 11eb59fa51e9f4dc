"""GPU update kernels of TF1's remaining optimizers: ``ApplyAdadelta``,
``ApplyFtrl``/``ApplyFtrlV2``, ``ApplyProximalAdagrad``,
``ApplyProximalGradientDescent``, ``ApplyAdagradDA``: one fused grid-stride
launch each, updating the variable and its slots in place on the device
(the CPU kernels' rules, :mod:`kernels.cpu.update_extra`).

As the other GPU updates (:mod:`kernels.cuda.nn`): the variable and its slots
must be device arrays of one float dtype and shape; hyper-parameters travel
as 1-element device arrays read inside the kernel (a device-resident
learning rate never costs a synchronizing copy), scalars from the host are
copied once per value (``memory.device_scalar``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from kernels.cuda.devices import is_device_array
from kernels.cuda.launch import as_device, flat, gpu_kernel, run_1d, scalar_operand
from kernels.cuda.memory import device_scalar
from kernels.registry import KernelError

__all__: list[str] = []


def _state(op: str, name: str, x: Any, like: Any = None) -> Any:
    if not is_device_array(x):
        raise KernelError(f"{op}: {name} must be a device array to update it in place on the "
                          f"GPU, got {type(x).__name__}; keep the variable's storage on the device")
    if np.dtype(x.dtype).kind != "f":
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; update rules need float variables")
    if like is not None and (x.shape != like.shape or x.dtype != like.dtype):
        raise KernelError(f"{op}: {name} is {x.dtype} {list(x.shape)} but the variable is "
                          f"{like.dtype} {list(like.shape)}")
    return flat(x)


def _tensor(op: str, name: str, x: Any, var: Any) -> Any:
    g = as_device(np.asarray(x, dtype=var.dtype) if not is_device_array(x) else x)
    if g.shape != var.shape:
        raise KernelError(f"{op}: {name} has shape {list(g.shape)}, the variable "
                          f"{list(var.shape)}")
    return flat(g)


def _run(kern: Any, var: Any, *args: Any) -> None:
    if var.size:
        run_1d(kern, var.size, *args)


@cuda.jit(device=True)
def _sign(x):
    return 1 if x > 0 else (-1 if x < 0 else 0)


@cuda.jit(device=True)
def _prox(prox, step, l1, l2):
    if l1 > 0:
        prox = _sign(prox) * max(abs(prox) - step * l1, 0)
    return prox / (1 + step * l2)


@cuda.jit(cache=True)
def adadelta_kernel(var, accum, accum_update, lr, rho, eps, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        a = rho[0] * accum[i] + (1 - rho[0]) * g * g
        accum[i] = a
        update = math.sqrt(accum_update[i] + eps[0]) / math.sqrt(a + eps[0]) * g
        accum_update[i] = rho[0] * accum_update[i] + (1 - rho[0]) * update * update
        var[i] -= lr[0] * update
        i += stride


@cuda.jit(cache=True)
def ftrl_kernel(var, accum, linear, grad, lr, l1, l2, shrink, power):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        w = var[i]
        shrunk = g + 2 * shrink[0] * w
        old = accum[i]
        new = old + g * g
        if power[0] == -0.5:
            sigma = (math.sqrt(new) - math.sqrt(old)) / lr[0]
            quad = math.sqrt(new) / lr[0] + 2 * l2[0]
        else:
            sigma = (new ** -power[0] - old ** -power[0]) / lr[0]
            quad = new ** -power[0] / lr[0] + 2 * l2[0]
        lin = linear[i] + shrunk - sigma * w
        linear[i] = lin
        if abs(lin) > l1[0]:
            var[i] = (_sign(lin) * l1[0] - lin) / quad
        else:
            var[i] = 0
        accum[i] = new
        i += stride


@cuda.jit(cache=True)
def proximal_adagrad_kernel(var, accum, lr, l1, l2, grad):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        a = accum[i] + g * g
        accum[i] = a
        step = lr[0] / math.sqrt(a)
        var[i] = _prox(var[i] - g * step, step, l1[0], l2[0])
        i += stride


@cuda.jit(cache=True)
def proximal_gd_kernel(var, alpha, l1, l2, delta):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        var[i] = _prox(var[i] - alpha[0] * delta[i], alpha[0], l1[0], l2[0])
        i += stride


@cuda.jit(cache=True)
def adagrad_da_kernel(var, g_acc, g_sq, grad, lr, l1, l2, step):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < var.size:
        g = grad[i]
        acc = g_acc[i] + g
        sq = g_sq[i] + g * g
        g_acc[i] = acc
        g_sq[i] = sq
        if l1[0] > 0:
            top = _sign(-acc) * max(abs(acc) - l1[0] * step[0], 0)
        else:
            top = -acc
        var[i] = top * lr[0] / (l2[0] * step[0] * lr[0] + math.sqrt(sq))
        i += stride


def _hyper(op: str, names: tuple[str, ...], values: list, dtype: Any) -> list:
    return [scalar_operand(op, n, x, dtype) for n, x in zip(names, values)]


@gpu_kernel("ApplyAdadelta")
def apply_adadelta(inputs: list, attrs: dict) -> list:
    op, var = "ApplyAdadelta", inputs[0]
    flat_var = _state(op, "var", var)
    accum, upd = _state(op, "accum", inputs[1], var), _state(op, "accum_update", inputs[2], var)
    hyper = _hyper(op, ("lr", "rho", "epsilon"), inputs[3:6], var.dtype)
    _run(adadelta_kernel, var, flat_var, accum, upd, *hyper, _tensor(op, "grad", inputs[6], var))
    return [var]


def _ftrl(op: str, inputs: list, shrinkage: bool) -> list:
    var = inputs[0]
    flat_var = _state(op, "var", var)
    accum, linear = _state(op, "accum", inputs[1], var), _state(op, "linear", inputs[2], var)
    grad = _tensor(op, "grad", inputs[3], var)
    if shrinkage:
        lr, l1, l2, shrink, power = _hyper(op, ("lr", "l1", "l2", "l2_shrinkage", "lr_power"),
                                           inputs[4:9], var.dtype)
    else:
        lr, l1, l2, power = _hyper(op, ("lr", "l1", "l2", "lr_power"), inputs[4:8], var.dtype)
        shrink = device_scalar(np.zeros(()), var.dtype)
    _run(ftrl_kernel, var, flat_var, accum, linear, grad, lr, l1, l2, shrink, power)
    return [var]


@gpu_kernel("ApplyFtrl")
def apply_ftrl(inputs: list, attrs: dict) -> list:
    return _ftrl("ApplyFtrl", inputs, shrinkage=False)


@gpu_kernel("ApplyFtrlV2")
def apply_ftrl_v2(inputs: list, attrs: dict) -> list:
    return _ftrl("ApplyFtrlV2", inputs, shrinkage=True)


@gpu_kernel("ApplyProximalAdagrad")
def apply_proximal_adagrad(inputs: list, attrs: dict) -> list:
    op, var = "ApplyProximalAdagrad", inputs[0]
    flat_var, accum = _state(op, "var", var), _state(op, "accum", inputs[1], var)
    hyper = _hyper(op, ("lr", "l1", "l2"), inputs[2:5], var.dtype)
    _run(proximal_adagrad_kernel, var, flat_var, accum, *hyper,
         _tensor(op, "grad", inputs[5], var))
    return [var]


@gpu_kernel("ApplyProximalGradientDescent")
def apply_proximal_gradient_descent(inputs: list, attrs: dict) -> list:
    op, var = "ApplyProximalGradientDescent", inputs[0]
    flat_var = _state(op, "var", var)
    hyper = _hyper(op, ("alpha", "l1", "l2"), inputs[1:4], var.dtype)
    _run(proximal_gd_kernel, var, flat_var, *hyper, _tensor(op, "delta", inputs[4], var))
    return [var]


@gpu_kernel("ApplyAdagradDA")
def apply_adagrad_da(inputs: list, attrs: dict) -> list:
    op, var = "ApplyAdagradDA", inputs[0]
    flat_var = _state(op, "var", var)
    g_acc = _state(op, "gradient_accumulator", inputs[1], var)
    g_sq = _state(op, "gradient_squared_accumulator", inputs[2], var)
    grad = _tensor(op, "grad", inputs[3], var)
    hyper = _hyper(op, ("lr", "l1", "l2", "global_step"), inputs[4:8], var.dtype)
    _run(adagrad_da_kernel, var, flat_var, g_acc, g_sq, grad, *hyper)
    return [var]
