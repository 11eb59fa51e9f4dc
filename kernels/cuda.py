"""GPU kernels: the ops of the training path as numba.cuda launches.

Importing this module registers a "GPU" kernel for every op below; it is
imported lazily by the registry on the first GPU lookup (numba is slow to
import). Inputs are numba device arrays; host arrays are accepted and copied
to the current device first. Outputs are device arrays: a tensor made on a GPU
stays there for the next GPU op, and the worker copies it to the host only to
cross devices or tasks (``kernels.devices.to_host``).

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

from kernels import CPU, GPU, KernelError, get_kernel, register
from kernels import cuda_math as cm
from kernels.cpu import binary_operands
from kernels.devices import CUDASIM, backend, is_device_array, to_host
from kernels.dtypes import as_dtype, concrete_shape

__all__ = ["launch_1d"]

logger = logging.getLogger(__name__)

_SIM = backend() == CUDASIM
# The simulator runs every CUDA thread as a Python thread: keep grids tiny
# there (grid-stride loops make any size correct with any grid).
_THREADS = 64 if _SIM else 256
_MAX_BLOCKS = 4 if _SIM else 8192
_fallback_logged: set[str] = set()


# --- device array plumbing ---------------------------------------------------------

def launch_1d(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``n`` elements."""
    return max(1, min(math.ceil(n / _THREADS), _MAX_BLOCKS)), _THREADS


def _dev(x: Any) -> Any:
    """``x`` as a device array on the current device (copied if on the host)."""
    if is_device_array(x):
        return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)
    return cuda.to_device(np.asarray(x, order="C"))


def _flat(x: Any) -> Any:
    return x.reshape(x.size)


def _empty(shape: tuple[int, ...], dtype: Any) -> Any:
    return cuda.device_array(tuple(shape), dtype=np.dtype(dtype))


def _is_host_only(x: Any) -> bool:
    # Strings and objects have no device representation.
    return not is_device_array(x) and np.asarray(x).dtype.kind in "UOS"


def _host_fallback(op: str, inputs: list, attrs: dict) -> list:
    if op not in _fallback_logged:
        _fallback_logged.add(op)
        logger.debug("%s: case not covered on the GPU, running the CPU kernel on a host copy", op)
    outs = get_kernel(op, CPU)([to_host(x) for x in inputs], attrs)
    return [o if o.dtype.kind in "UOS" else cuda.to_device(np.asarray(o, order="C")) for o in outs]


def _guarded(op: str, fn: Callable[[list, dict], list]) -> Callable[[list, dict], list]:
    """Register ``fn`` for ``op``; string inputs go to the CPU kernel."""
    def kernel(inputs: list, attrs: dict) -> list:
        if any(_is_host_only(x) for x in inputs):
            return get_kernel(op, CPU)(inputs, attrs)
        return fn(inputs, attrs)
    kernel.__name__ = kernel.__qualname__ = f"{op}_gpu"
    return register(op, GPU)(kernel)


def _gpu(op: str) -> Callable[[Callable], Callable]:
    return lambda fn: _guarded(op, fn)


# --- sources and copies ------------------------------------------------------------

def _filled(shape: tuple[int, ...], dtype: np.dtype, value: int) -> Any:
    out = _empty(shape, dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        cm.fill[blocks, threads](_flat(out), dtype.type(value))
    return out


def _copy(x: Any) -> Any:
    out = _empty(x.shape, x.dtype)
    if x.size:
        blocks, threads = launch_1d(x.size)
        cm.cast_copy[blocks, threads](_flat(x), _flat(out))
    return out


@_gpu("Const")
def const(inputs: list, attrs: dict) -> list:
    return [_dev(get_kernel("Const", CPU)(inputs, attrs)[0])]


@_gpu("Zeros")
def zeros(inputs: list, attrs: dict) -> list:
    return [_filled(concrete_shape(attrs.get("shape"), "Zeros"), as_dtype(attrs.get("dtype")), 0)]


@_gpu("Ones")
def ones(inputs: list, attrs: dict) -> list:
    return [_filled(concrete_shape(attrs.get("shape"), "Ones"), as_dtype(attrs.get("dtype")), 1)]


@_gpu("ZerosLike")
def zeros_like(inputs: list, attrs: dict) -> list:
    x = _dev(inputs[0])
    return [_filled(x.shape, np.dtype(x.dtype), 0)]


@_gpu("OnesLike")
def ones_like(inputs: list, attrs: dict) -> list:
    x = _dev(inputs[0])
    return [_filled(x.shape, np.dtype(x.dtype), 1)]


@_gpu("Identity")
def identity(inputs: list, attrs: dict) -> list:
    return [_copy(_dev(inputs[0]))]  # a snapshot, as on CPU


@_gpu("Cast")
def cast(inputs: list, attrs: dict) -> list:
    x, dtype = _dev(inputs[0]), as_dtype(attrs.get("dtype"))
    if dtype.kind in "UOS":
        return _host_fallback("Cast", inputs, attrs)
    out = _empty(x.shape, dtype)
    if x.size:
        blocks, threads = launch_1d(x.size)
        kern = cm.cast_bool if dtype == np.bool_ else cm.cast_copy
        kern[blocks, threads](_flat(x), _flat(out))
    return [out]


@_gpu("Reshape")
def reshape(inputs: list, attrs: dict) -> list:
    x = _dev(inputs[0])
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
            check: Callable[[Any, Any], None] | None = None) -> None:
    same, bcast = cm.binary_same(fn), cm.binary_bcast(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        a, b = _dev(inputs[0]), _dev(inputs[1])
        if check is not None:
            check(a, b)
        shape = _broadcast_plan(op, a.shape, b.shape)
        if shape is None:
            return _host_fallback(op, inputs, attrs)
        out = _empty(shape, out_dtype or _result_dtype(a, b))
        if out.size:
            blocks, threads = launch_1d(out.size)
            launch = same if a.shape == b.shape else bcast
            launch[blocks, threads](_flat(a), _flat(b), _flat(out))
        return [out]
    _guarded(op, kernel)


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


@_gpu("ReluGrad")
def relu_grad(inputs: list, attrs: dict) -> list:
    dy, y = _dev(inputs[0]), _dev(inputs[1])
    if dy.shape != y.shape:
        raise KernelError(f"ReluGrad: dy {list(dy.shape)} and y {list(y.shape)} must match")
    out = _empty(dy.shape, dy.dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        _RELU_GRAD[blocks, threads](_flat(dy), _flat(y), _flat(out))
    return [out]


_RELU_GRAD = cm.binary_same(_relu_grad)


@_gpu("BiasAdd")
def bias_add(inputs: list, attrs: dict) -> list:
    x, bias = _dev(inputs[0]), _dev(inputs[1])
    if bias.ndim != 1 or x.ndim < 1 or bias.shape[0] != tuple(x.shape)[-1]:
        raise KernelError(f"BiasAdd: bias must be a vector as long as the last dimension of "
                          f"x; got x {list(x.shape)} and bias {list(bias.shape)}")
    return get_kernel("Add", GPU)([x, bias], attrs)


def _unary(op: str, fn: Callable, float_out: bool) -> None:
    launch = cm.unary(fn)

    def kernel(inputs: list, attrs: dict) -> list:
        x = _dev(inputs[0])
        dtype = np.dtype(x.dtype)
        if float_out and dtype.kind != "f":
            dtype = np.dtype(np.float64)  # what numpy gives for exp/log/sqrt of ints
        out = _empty(x.shape, dtype)
        if out.size:
            blocks, threads = launch_1d(out.size)
            launch[blocks, threads](_flat(x), _flat(out))
        return [out]
    _guarded(op, kernel)


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

# Reductions, softmax, losses, matmul and updates register from their own module.
from kernels import cuda_nn as _cuda_nn  # noqa: E402,F401
