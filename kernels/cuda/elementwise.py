"""GPU kernels: the ops of the training path as numba.cuda launches.

Importing this module registers a "GPU" kernel for every op below; it is
imported by ``kernels.cuda.loader`` on the first GPU lookup (numba is slow to
import). Inputs are numba device arrays; host arrays are accepted and copied
to the current device first. Outputs are device arrays: a tensor made on a GPU
stays there for the next GPU op, and the worker copies it to the host only to
cross devices or tasks (``kernels.cuda.devices.to_host``).

Cases the device code does not cover (a broadcast that is neither equal
shapes, a scalar, nor a trailing row; a reduction over several axes; integer
matmul; string tensors) run the CPU kernel on a host copy and copy the result
back, logged once per op at DEBUG. Ops with no entry here at all raise
``KernelNotFound`` from the registry and the worker places them on CPU.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np
from numba import cuda

from kernels.cpu.math import binary_operands
from kernels.cuda import math as cm
from kernels.cuda.devices import is_device_array, to_host
from kernels.cuda.fusion import FUSED_BIAS_RELU
from kernels.cuda.launch import (
    as_device,
    device_empty,
    device_filled,
    flat,
    gpu_kernel,
    host_fallback,
    launch,
    launch_1d,
    register_gpu,
    repeat_plan,
)
from kernels.cuda.memory import copy_in, current_device
from kernels.dtypes import as_dtype, concrete_shape
from kernels.registry import CPU, GPU, KernelError, get_kernel

logger = logging.getLogger(__name__)

# --- sources and copies ------------------------------------------------------------

def _copy(x: Any) -> Any:
    out = device_empty(x.shape, x.dtype)
    if x.size:
        blocks, threads = launch_1d(x.size)
        launch(cm.cast_copy, blocks, threads, flat(x), flat(out))
    return out


# a Const node's device value, by its attrs (one dict per node for the graph's
# life, held here so its id stays its own) and device: copied in once, not every step
_CONSTS: dict[tuple[int, int], tuple[dict, Any]] = {}


@gpu_kernel("Const")
def const(inputs: list, attrs: dict) -> list:
    key = (id(attrs), current_device())
    hit = _CONSTS.get(key)
    if hit is not None and hit[0] is attrs:
        return [hit[1]]
    value = as_device(get_kernel("Const", CPU)(inputs, attrs)[0])
    if len(_CONSTS) >= 4096:
        _CONSTS.clear()
    _CONSTS[key] = (attrs, value)   # no GPU kernel writes into its inputs
    return [value]


@gpu_kernel("Zeros")
def zeros(inputs: list, attrs: dict) -> list:
    return [device_filled(concrete_shape(attrs.get("shape"), "Zeros"), as_dtype(attrs.get("dtype")), 0)]


@gpu_kernel("Ones")
def ones(inputs: list, attrs: dict) -> list:
    return [device_filled(concrete_shape(attrs.get("shape"), "Ones"), as_dtype(attrs.get("dtype")), 1)]


@gpu_kernel("ZerosLike")
def zeros_like(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    return [device_filled(x.shape, np.dtype(x.dtype), 0)]


@gpu_kernel("OnesLike")
def ones_like(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    return [device_filled(x.shape, np.dtype(x.dtype), 1)]


@gpu_kernel("Identity")
def identity(inputs: list, attrs: dict) -> list:
    return [_copy(as_device(inputs[0]))]  # a snapshot, as on CPU


gpu_kernel("StopGradient")(identity)


@gpu_kernel("Cast")
def cast(inputs: list, attrs: dict) -> list:
    x, dtype = as_device(inputs[0]), as_dtype(attrs.get("dtype"))
    if dtype.kind in "UOS":
        return host_fallback("Cast", inputs, attrs)
    out = device_empty(x.shape, dtype)
    if x.size:
        blocks, threads = launch_1d(x.size)
        kern = cm.cast_bool if dtype == np.bool_ else cm.cast_copy
        launch(kern, blocks, threads, flat(x), flat(out))
    return [out]


@gpu_kernel("Reshape")
def reshape(inputs: list, attrs: dict) -> list:
    x = as_device(inputs[0])
    shape = attrs.get("shape") if len(inputs) < 2 else to_host(inputs[1]).tolist()
    try:  # resolve -1 and validate with numpy's rules, on a dummy of x's shape
        target = np.empty(x.shape, dtype=np.bool_).reshape([int(d) for d in shape]).shape
    except ValueError:
        raise KernelError(f"Reshape: cannot reshape {list(x.shape)} ({x.size} elements) "
                          f"into {list(shape)}") from None
    return [x.reshape(target)]


# --- elementwise -------------------------------------------------------------------

def _broadcast_plan(op: str, sa: tuple, sb: tuple) -> tuple | None:
    """The output shape if each operand is the full shape, a scalar, or a
    trailing block of it (so ``out[i]`` reads ``x[i % x.size]``); else None."""
    try:
        out = tuple(np.broadcast_shapes(sa, sb))
    except ValueError:
        raise KernelError(f"{op}: shapes {list(sa)} and {list(sb)} do not broadcast") from None

    def repeats_cleanly(s: tuple) -> bool:
        if math.prod(s) == 1:
            return True
        while s and s[0] == 1:
            s = s[1:]
        return out[len(out) - len(s):] == s
    return out if repeats_cleanly(sa) and repeats_cleanly(sb) else None


def _result_dtype(a: Any, b: Any) -> np.dtype:
    # The CPU kernels' rule (a 0-d operand takes the other's dtype), on tiny stand-ins.
    x, y = binary_operands(*(np.zeros((1,) * t.ndim, t.dtype) for t in (a, b)))
    return np.result_type(x, y)


def _binary(op: str, fn: Callable, out_dtype: Any = None,
            check: Callable[[Any, Any], None] | None = None) -> Callable:
    """Register ``op`` as ``out = fn(a, b)`` with numpy's broadcasting."""
    return register_gpu(op, _binary_kernel(op, fn, out_dtype, check))


def _binary_kernel(op: str, fn: Callable, out_dtype: Any = None,
                   check: Callable[[Any, Any], None] | None = None,
                   uncovered: Callable[[list, dict], list] | None = None) -> Callable:
    """``out = fn(a, b)`` with numpy's broadcasting, as a kernel function; a
    broadcast the device code does not cover runs ``uncovered`` (default: the
    CPU kernel of ``op`` on host copies)."""
    same, bcast, rep = cm.binary_same(fn), cm.binary_bcast(fn), cm.binary_rep(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        a, b = as_device(inputs[0]), as_device(inputs[1])
        if check is not None:
            check(a, b)
        shape = _broadcast_plan(op, a.shape, b.shape)
        plans = None
        if shape is None:   # e.g. a column (rows, 1) against (rows, cols)
            shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
            plans = repeat_plan(tuple(a.shape), shape), repeat_plan(tuple(b.shape), shape)
            if None in plans:
                if uncovered is not None:
                    return uncovered([a, b], attrs)
                return host_fallback(op, inputs, attrs)
        out = device_empty(shape, out_dtype or _result_dtype(a, b))
        if out.size:
            blocks, threads = launch_1d(out.size)
            if plans is not None:
                (da, _), (db, _) = plans
                launch(rep, blocks, threads, flat(a), da, flat(b), db, flat(out))
            else:
                kern = same if a.shape == b.shape else bcast
                launch(kern, blocks, threads, flat(a), flat(b), flat(out))
        return [out]
    return kernel


def _floats_only(a: Any, b: Any) -> None:
    if np.dtype(a.dtype).kind != "f" or np.dtype(b.dtype).kind != "f":
        raise KernelError(f"RealDiv needs floating-point inputs, got {a.dtype} and {b.dtype}: "
                          "Cast the operands to float32/float64 first")


@cuda.jit(device=True)
def _add(x, y):
    return x + y


@cuda.jit(device=True)
def _sub(x, y):
    return x - y


@cuda.jit(device=True)
def _mul(x, y):
    return x * y


@cuda.jit(device=True)
def _div(x, y):
    return x / y


@cuda.jit(device=True)
def _eq(x, y):
    return x == y


@cuda.jit(device=True)
def _relu_grad(dy, y):
    return dy if y > 0 else 0


@cuda.jit(device=True)
def _sigmoid_grad(y, dy):
    return dy * y * (1 - y)


@cuda.jit(device=True)
def _tanh_grad(y, dy):
    return dy * (1 - y * y)


_binary("Add", _add)
_binary("Sub", _sub)
_binary("Mul", _mul)
_binary("RealDiv", _div, check=_floats_only)
_binary("Equal", _eq, out_dtype=np.bool_)
_binary("SigmoidGrad", _sigmoid_grad)
_binary("TanhGrad", _tanh_grad)


def _assign_update(op: str, fn: Callable, ufunc: Any) -> None:
    """``var = fn(var, delta)`` in place in a device variable (AssignAdd,
    AssignSub): numpy's ufuncs cannot write into device memory. ``delta`` is
    cast to the variable's dtype first, as on the CPU; a broadcast the device
    code does not cover runs on a host copy, written back."""
    same, bcast = cm.binary_same(fn), cm.binary_bcast(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        var = inputs[0]
        if not is_device_array(var):
            raise KernelError(f"{op}: the variable must be a device array to update it on the "
                              f"GPU, got {type(var).__name__}")
        delta = as_device(inputs[1])
        if delta.dtype != var.dtype:
            delta = cast([delta], {"dtype": np.dtype(var.dtype).name})[0]
        shape = _broadcast_plan(op, tuple(delta.shape), tuple(var.shape))
        if shape is not None and shape != tuple(var.shape):
            raise KernelError(f"{op}: a delta of shape {list(delta.shape)} does not fit the "
                              f"variable's shape {list(var.shape)}")
        if shape is None:   # a broadcast the device code does not cover
            host = to_host(var)
            ufunc(host, to_host(delta), out=host)
            copy_in(var, host)
        elif var.size:
            blocks, threads = launch_1d(var.size)
            kern = same if delta.shape == var.shape else bcast
            launch(kern, blocks, threads, flat(var), flat(delta), flat(var))
        return [var]
    register_gpu(op, kernel)


_assign_update("AssignAdd", _add, np.add)
_assign_update("AssignSub", _sub, np.subtract)


@gpu_kernel("ReluGrad")
def relu_grad(inputs: list, attrs: dict) -> list:
    dy, y = as_device(inputs[0]), as_device(inputs[1])
    if dy.shape != y.shape:
        raise KernelError(f"ReluGrad: dy {list(dy.shape)} and y {list(y.shape)} must match")
    out = device_empty(dy.shape, dy.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(_RELU_GRAD, blocks, threads, flat(dy), flat(y), flat(out))
    return [out]


_RELU_GRAD = cm.binary_same(_relu_grad)


def _check_bias(op: str, x: Any, bias: Any) -> None:
    if bias.ndim != 1 or x.ndim < 1 or bias.shape[0] != tuple(x.shape)[-1]:
        raise KernelError(f"{op}: bias must be a vector as long as the last dimension of "
                          f"x; got x {list(x.shape)} and bias {list(bias.shape)}")


@gpu_kernel("BiasAdd")
def bias_add(inputs: list, attrs: dict) -> list:
    x, bias = as_device(inputs[0]), as_device(inputs[1])
    _check_bias("BiasAdd", x, bias)
    return get_kernel("Add", GPU)([x, bias], attrs)


@cuda.jit(device=True)
def _add_relu(x, b):
    s = x + b
    return s if s > 0 else 0


def _add_then_relu(inputs: list, attrs: dict) -> list:
    # a broadcast the fused kernel does not cover: the two ops, as unfused
    return get_kernel("Relu", GPU)(get_kernel("Add", GPU)(inputs, {}), {})


_fused_add_relu = _binary_kernel(FUSED_BIAS_RELU, _add_relu, uncovered=_add_then_relu)


@gpu_kernel(FUSED_BIAS_RELU)
def fused_bias_relu(inputs: list, attrs: dict) -> list:
    """``Relu(Add(x, b))`` or ``Relu(BiasAdd(x, b))`` in one launch
    (kernels.cuda.fusion writes the node)."""
    x, b = as_device(inputs[0]), as_device(inputs[1])
    if attrs.get("bias_add"):
        _check_bias("BiasAdd", x, b)
    return _fused_add_relu([x, b], attrs)


def _unary(op: str, fn: Callable, float_out: bool) -> None:
    unary_kern = cm.unary(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        x = as_device(inputs[0])
        dtype = np.dtype(x.dtype)
        if float_out and dtype.kind != "f":
            dtype = np.dtype(np.float64)  # what numpy gives for exp/log/sqrt of ints
        out = device_empty(x.shape, dtype)
        if out.size:
            blocks, threads = launch_1d(out.size)
            launch(unary_kern, blocks, threads, flat(x), flat(out))
        return [out]
    register_gpu(op, kernel)


@cuda.jit(device=True)
def _neg(x):
    return -x


@cuda.jit(device=True)
def _square(x):
    return x * x


@cuda.jit(device=True)
def _exp(x):
    return math.exp(x)


@cuda.jit(device=True)
def _log(x):
    return math.log(x)


@cuda.jit(device=True)
def _sqrt(x):
    return math.sqrt(x)


@cuda.jit(device=True)
def _relu(x):
    return x if x > 0 else 0


@cuda.jit(device=True)
def _sigmoid(x):
    # exp only of -|x|, so neither branch overflows
    if x >= 0:
        return 1 / (1 + math.exp(-x))
    e = math.exp(x)
    return e / (1 + e)


@cuda.jit(device=True)
def _tanh(x):
    return math.tanh(x)


_unary("Neg", _neg, float_out=False)
_unary("Square", _square, float_out=False)
_unary("Exp", _exp, float_out=True)
_unary("Log", _log, float_out=True)
_unary("Sqrt", _sqrt, float_out=True)
_unary("Relu", _relu, float_out=False)
_unary("Sigmoid", _sigmoid, float_out=True)
_unary("Tanh", _tanh, float_out=True)

