"""GPU kernels for the activations of the everyday vocabulary (they sit on a
training step's path): ``Elu``, ``Selu``, ``Relu6``, ``LeakyRelu``,
``Softplus``, ``Softsign``, ``Erf`` (``gelu``'s exact form) and the gradient
ops ``EluGrad``, ``SeluGrad``, ``Relu6Grad``, ``LeakyReluGrad``,
``SoftplusGrad``, ``SoftsignGrad``.

Same conventions as :mod:`kernels.cuda.elementwise`: device arrays in and out
(host arrays copied in), one grid-stride launch over the flat tensor, the
math of the CPU kernels (:mod:`kernels.cpu.activations`) branch for branch.
Cases the device code does not cover (an integer input, gradient and
forward tensors of different shapes) run the CPU kernel on a host copy.
``LeakyRelu``'s ``alpha`` is a launch argument of the input's dtype.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numba import cuda

from kernels.cpu.activations import SELU_ALPHA, SELU_SCALE
from kernels.cuda import math as cm
from kernels.cuda.launch import as_device, device_empty, flat, host_fallback, launch, launch_1d, register_gpu

__all__: list[str] = []

_SA = SELU_SCALE * SELU_ALPHA


def _floats(*xs: Any) -> bool:
    return all(np.dtype(x.dtype).kind == "f" for x in xs)


def _unary(op: str, fn: Callable) -> None:
    kern = cm.unary(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        x = as_device(inputs[0])
        if not _floats(x):
            return host_fallback(op, inputs, attrs)
        out = device_empty(x.shape, x.dtype)
        if out.size:
            blocks, threads = launch_1d(out.size)
            launch(kern, blocks, threads, flat(x), flat(out))
        return [out]
    register_gpu(op, kernel)


def _grad(op: str, fn: Callable) -> None:
    kern = cm.binary_same(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        g, f = as_device(inputs[0]), as_device(inputs[1])
        if g.shape != f.shape or g.dtype != f.dtype or not _floats(g):
            return host_fallback(op, inputs, attrs)
        out = device_empty(g.shape, g.dtype)
        if out.size:
            blocks, threads = launch_1d(out.size)
            launch(kern, blocks, threads, flat(g), flat(f), flat(out))
        return [out]
    register_gpu(op, kernel)


@cuda.jit(device=True)
def _elu(x):
    return math.expm1(x) if x < 0 else x


@cuda.jit(device=True)
def _selu(x):
    return _SA * math.expm1(x) if x < 0 else SELU_SCALE * x


@cuda.jit(device=True)
def _relu6(x):
    return min(max(x, 0), 6)


@cuda.jit(device=True)
def _softplus(x):
    # log(1 + exp(x)) without overflow: exp only of -|x|
    if x > 0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@cuda.jit(device=True)
def _softsign(x):
    return x / (1 + abs(x))


@cuda.jit(device=True)
def _erf(x):
    return math.erf(x)


@cuda.jit(device=True)
def _elu_grad(g, y):
    return g * (y + 1) if y < 0 else g


@cuda.jit(device=True)
def _selu_grad(g, y):
    return g * (y + _SA) if y < 0 else g * SELU_SCALE


@cuda.jit(device=True)
def _relu6_grad(g, f):
    return g if f > 0 and f < 6 else 0


@cuda.jit(device=True)
def _softplus_grad(g, f):
    return g / (1 + math.exp(-f))


@cuda.jit(device=True)
def _softsign_grad(g, f):
    d = 1 + abs(f)
    return g / (d * d)


_unary("Elu", _elu)
_unary("Selu", _selu)
_unary("Relu6", _relu6)
_unary("Softplus", _softplus)
_unary("Softsign", _softsign)
_unary("Erf", _erf)
_grad("EluGrad", _elu_grad)
_grad("SeluGrad", _selu_grad)
_grad("Relu6Grad", _relu6_grad)
_grad("SoftplusGrad", _softplus_grad)
_grad("SoftsignGrad", _softsign_grad)


@cuda.jit(cache=True)
def leaky_relu_kernel(x, alpha, out):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        v = x[i]
        out[i] = v if v > 0 else v * alpha
        i += stride


@cuda.jit(cache=True)
def leaky_relu_grad_kernel(g, f, alpha, out):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < out.size:
        out[i] = g[i] if f[i] > 0 else g[i] * alpha
        i += stride


def leaky_relu(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    if not _floats(x):
        return host_fallback("LeakyRelu", inputs, attrs)
    out = device_empty(x.shape, x.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        alpha = np.dtype(x.dtype).type(attrs.get("alpha", 0.2))
        launch(leaky_relu_kernel, blocks, threads, flat(x), alpha, flat(out))
    return [out]


def leaky_relu_grad(inputs: list, attrs: dict) -> list:
    g, f = as_device(inputs[0]), as_device(inputs[1])
    if g.shape != f.shape or g.dtype != f.dtype or not _floats(g):
        return host_fallback("LeakyReluGrad", inputs, attrs)
    out = device_empty(g.shape, g.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        alpha = np.dtype(g.dtype).type(attrs.get("alpha", 0.2))
        launch(leaky_relu_grad_kernel, blocks, threads, flat(g), flat(f), alpha, flat(out))
    return [out]


register_gpu("LeakyRelu", leaky_relu)
register_gpu("LeakyReluGrad", leaky_relu_grad)
