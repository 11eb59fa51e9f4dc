"""CPU update kernels: the TF1 optimizer rules, applied in place.

The runtime's stateful ops (distrib/runtime/state/stateful.py) call these with the variable's storage first
(and its slots after it, see docs/ops.md); they update those arrays in place
and return ``[var]``. Hyper-parameters (lr, momentum, betas, epsilon, the beta
powers) arrive as 0-d arrays or Python numbers and are cast to the variable's
dtype, so a float32 variable is updated in float32 arithmetic, as in TF.
Temporaries are kept to one per step where numpy allows (``out=``), because
these run on the parameter servers for every gradient of every replica.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, Callable

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["gradient_descent_into"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

logger = logging.getLogger(__name__)

# Below this many elements numpy's two passes cost less than the foreign call;
# from this many on, a BLAS with 32-bit sizes would not count them right.
_AXPY_MIN = 1024
_AXPY_MAX = 2**31 - 1
_UNSET: Any = object()
_axpy_by_dtype: Any = _UNSET   # {dtype: ?axpy} once looked for, or None
_axpy_lock = threading.Lock()  # one lookup, published when it is final


def _blas_axpy() -> dict[np.dtype, Callable] | None:
    """``y += a * x`` (saxpy, daxpy) from the BLAS that numpy is linked with,
    or None when it cannot be found or fails its check.

    An SGD step in numpy (``var -= lr * grad``) makes two passes over memory
    and a temporary the size of the variable; axpy makes one, as Eigen's fused
    expression does in TensorFlow's kernel. On a parameter server applying
    2.7 MB of gradients per worker step it is ~25% less time in the update.
    The library is the one already mapped into this process (numpy loaded it);
    each candidate is checked against numpy on a small array before use."""
    global _axpy_by_dtype
    found = _axpy_by_dtype
    if found is _UNSET:
        with _axpy_lock:
            if _axpy_by_dtype is _UNSET:
                # (another thread must not take numpy's path meanwhile: its
                # bits differ, and they must not depend on the timing)
                _axpy_by_dtype = _find_axpy()
            found = _axpy_by_dtype
    return found


def _find_axpy() -> dict[np.dtype, Callable] | None:
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "blas" in line.rsplit("/", 1)[-1].lower() and ".so" in line})
    except OSError:
        return None
    names = (("scipy_cblas_", "64_", ctypes.c_int64), ("cblas_", "64_", ctypes.c_int64),
             ("cblas_", "", ctypes.c_int))
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, int_t in names:
            found = {}
            for dt, letter, real in ((np.float32, "s", ctypes.c_float),
                                     (np.float64, "d", ctypes.c_double)):
                fn = getattr(lib, f"{prefix}{letter}axpy{suffix}", None)
                if fn is None:
                    break
                fn.restype = None
                fn.argtypes = [int_t, real, ctypes.c_void_p, int_t, ctypes.c_void_p, int_t]
                found[np.dtype(dt)] = fn
            if len(found) == 2 and all(_axpy_works(fn, dt) for dt, fn in found.items()):
                logger.debug("SGD updates use %s%saxpy%s of %s", prefix, "?", suffix, path)
                return found
    return None


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.ctypes.data == b.ctypes.data and a.shape == b.shape
            and a.strides == b.strides)


def _axpy_works(fn: Callable, dt: np.dtype) -> bool:
    n = 37   # not a multiple of any vector width: the tail loop runs too
    x = np.linspace(-3, 5, n).astype(dt)
    y = np.linspace(2, -1, n + 1).astype(dt)   # one more: it must stay untouched
    want = y[:n] + dt.type(-0.25) * x
    last = y[n]
    try:
        fn(n, -0.25, x.ctypes.data, 1, y.ctypes.data, 1)
    except Exception:
        return False
    return bool(np.allclose(y[:n], want, rtol=1e-6, atol=0) and y[n] == last)


def _state(op: str, name: str, x: Any, like: np.ndarray | None = None) -> np.ndarray:
    """A variable or slot that will be written: must be a writable float ndarray."""
    if not isinstance(x, np.ndarray):
        raise KernelError(f"{op}: {name} must be the variable store's ndarray, got {type(x).__name__}")
    if not x.flags.writeable:
        raise KernelError(f"{op}: {name} is read-only; the variable store must own a "
                          "writable copy of the value (copy it on Assign)")
    if x.dtype.kind != "f":
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; update rules need float variables")
    if like is not None and x.shape != like.shape:
        raise KernelError(f"{op}: {name} has shape {list(x.shape)} but the variable has "
                          f"{list(like.shape)}")
    return x


def _grad(op: str, grad: Any, var: np.ndarray) -> np.ndarray:
    g = np.asarray(grad)
    if g.shape != var.shape:
        raise KernelError(f"{op}: gradient shape {list(g.shape)} differs from the variable's "
                          f"{list(var.shape)}")
    return g.astype(var.dtype, copy=False)


def _scalar(op: str, name: str, x: Any, dtype: np.dtype) -> np.generic:
    a = np.asarray(x)
    if a.size != 1:
        raise KernelError(f"{op}: {name} must be a scalar, got shape {list(a.shape)}")
    return dtype.type(a.reshape(()).item())


@KERNELS("ApplyGradientDescent", CPU)
def apply_gradient_descent(inputs: list, attrs: dict) -> list:
    return [gradient_descent_into(inputs[0], inputs[0], inputs[1], inputs[2])]


def gradient_descent_into(out: np.ndarray, var: Any, lr: Any, grad: Any) -> np.ndarray:
    """``out = var - lr * grad``; ``out`` is ``var`` (in place) or a fresh
    array of its shape (the variable store's copy on write: the new version
    is written once, instead of a copy followed by an in-place update)."""
    op = "ApplyGradientDescent"
    out = _state(op, "var", out)
    var = np.asarray(var)
    if var.shape != out.shape or var.dtype != out.dtype:
        raise KernelError(f"{op}: the variable and its new storage differ: {list(var.shape)} "
                          f"{var.dtype} vs {list(out.shape)} {out.dtype}")
    lr = _scalar(op, "lr", lr, out.dtype)
    grad = _grad(op, grad, out)
    axpy = None
    # (lr 0: a BLAS may skip the update, and with it a NaN in the gradient)
    if _AXPY_MIN <= out.size <= _AXPY_MAX and out.flags.c_contiguous and lr != 0:
        table = _blas_axpy()
        axpy = None if table is None else table.get(out.dtype)   # float32/64, native order
    if axpy is not None:
        # var += (-lr) * grad in one pass. Written elsewhere (the store's copy
        # on write) it is a copy then the same axpy: the bits never depend on
        # whether someone held the variable.
        if not grad.flags.c_contiguous or np.may_share_memory(out, grad):
            grad = np.array(grad, order="C")
        if not (out is var or _same_memory(out, var)):
            np.copyto(out, var)
        axpy(out.size, -lr, grad.ctypes.data, 1, out.ctypes.data, 1)
    elif out is var or np.may_share_memory(out, var) or np.may_share_memory(out, grad):
        np.subtract(var, lr * grad, out=out)
    else:
        # a fresh array: (-lr * grad) + var, the same bits as var - lr * grad,
        # written in two passes over ``out`` with no temporary (~20% faster
        # on a parameter server, where the arrays are not in cache)
        np.multiply(grad, -lr, out=out)
        np.add(out, var, out=out)
    return out


@KERNELS("ApplyMomentum", CPU)
def apply_momentum(inputs: list, attrs: dict) -> list:
    op = "ApplyMomentum"
    var = _state(op, "var", inputs[0])
    accum = _state(op, "accum", inputs[1], var)
    lr = _scalar(op, "lr", inputs[2], var.dtype)
    grad = _grad(op, inputs[3], var)
    momentum = _scalar(op, "momentum", inputs[4], var.dtype)
    accum *= momentum
    accum += grad
    if attrs.get("use_nesterov"):
        var -= lr * grad + lr * momentum * accum
    else:
        var -= lr * accum
    return [var]


@KERNELS("ApplyAdagrad", CPU)
def apply_adagrad(inputs: list, attrs: dict) -> list:
    op = "ApplyAdagrad"
    var = _state(op, "var", inputs[0])
    accum = _state(op, "accum", inputs[1], var)
    lr = _scalar(op, "lr", inputs[2], var.dtype)
    grad = _grad(op, inputs[3], var)
    accum += grad * grad
    var -= lr * grad / np.sqrt(accum)
    return [var]


@KERNELS("ApplyAdam", CPU)
def apply_adam(inputs: list, attrs: dict) -> list:
    op = "ApplyAdam"
    var = _state(op, "var", inputs[0])
    m = _state(op, "m", inputs[1], var)
    v = _state(op, "v", inputs[2], var)
    b1p, b2p, lr, b1, b2, eps = (_scalar(op, name, x, var.dtype) for name, x in zip(
        ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"), inputs[3:9]))
    grad = _grad(op, inputs[9], var)
    one = var.dtype.type(1)
    lr_t = lr * np.sqrt(one - b2p) / (one - b1p)
    m *= b1
    m += (one - b1) * grad
    v *= b2
    v += (one - b2) * (grad * grad)
    var -= lr_t * m / (np.sqrt(v) + eps)
    return [var]


@KERNELS("ApplyRMSProp", CPU)
def apply_rms_prop(inputs: list, attrs: dict) -> list:
    """TF1's ``ApplyRMSProp``: ``ms += (g*g - ms) * (1 - rho)``,
    ``mom = momentum * mom + lr * g / sqrt(ms + epsilon)``, ``var -= mom``."""
    op = "ApplyRMSProp"
    var = _state(op, "var", inputs[0])
    ms, mom = _state(op, "ms", inputs[1], var), _state(op, "mom", inputs[2], var)
    lr, rho, momentum, eps = (_scalar(op, name, x, var.dtype) for name, x in zip(
        ("lr", "rho", "momentum", "epsilon"), inputs[3:7]))
    grad = _grad(op, inputs[7], var)
    ms += (grad * grad - ms) * (var.dtype.type(1) - rho)
    _momentum_step(mom, momentum, lr, grad, np.add(ms, eps, out=np.empty_like(ms)))
    var -= mom
    return [var]


@KERNELS("ApplyCenteredRMSProp", CPU)
def apply_centered_rms_prop(inputs: list, attrs: dict) -> list:
    """TF1's ``ApplyCenteredRMSProp``: as ``ApplyRMSProp``, the mean gradient
    ``mg += (g - mg) * (1 - rho)`` taken out of the denominator:
    ``sqrt(ms - mg*mg + epsilon)``."""
    op = "ApplyCenteredRMSProp"
    var = _state(op, "var", inputs[0])
    mg, ms, mom = (_state(op, name, x, var) for name, x in zip(("mg", "ms", "mom"),
                                                                inputs[1:4]))
    lr, rho, momentum, eps = (_scalar(op, name, x, var.dtype) for name, x in zip(
        ("lr", "rho", "momentum", "epsilon"), inputs[4:8]))
    grad = _grad(op, inputs[8], var)
    one_minus_rho = var.dtype.type(1) - rho
    ms += (grad * grad - ms) * one_minus_rho
    mg += (grad - mg) * one_minus_rho
    denom = np.subtract(ms, mg * mg, out=np.empty_like(ms))
    denom += eps
    _momentum_step(mom, momentum, lr, grad, denom)
    var -= mom
    return [var]


def _momentum_step(mom: np.ndarray, momentum: np.generic, lr: np.generic, grad: np.ndarray,
                   denom: np.ndarray) -> None:
    """``mom = momentum * mom + grad * lr / sqrt(denom)``, in place (``denom`` is a
    temporary ndarray of the step and is overwritten). The callers make ``denom``
    with ``out=``: on a 0-d variable numpy arithmetic returns a scalar, which
    ``out=`` cannot write (issue 36: RMSProp on a scalar variable failed)."""
    with np.errstate(divide="ignore", invalid="ignore"):   # TF: inf/nan are results
        np.sqrt(denom, out=denom)
        np.divide(grad * lr, denom, out=denom)
    mom *= momentum
    mom += denom
