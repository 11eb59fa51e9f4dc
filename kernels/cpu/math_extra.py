"""CPU kernels for the rest of ``tf.math``: trigonometry and its inverses,
``log1p``/``expm1``, ``rsqrt``, ``erf``/``erfc``, ``lgamma``/``digamma``,
rounding (``Ceil``, ``Rint``, ``Round``: halves to even, as TF), the float
predicates, floor division and modulo (Python's signs, as TF's), ``Atan2``,
``SquaredDifference``, ``Xlogy``/``Xdivy``/``DivNoNan`` (0 where ``x`` is 0
or the divisor is), ``All``/``Any``, ``ArgMin``, ``Cumsum``/``Cumprod``
(``exclusive``, ``reverse``) and ``CheckNumerics``.

Rules of the CPU wing (:mod:`kernels.cpu.math`): dtypes kept (a 0-d operand
takes the other's), inputs never written, floating-point exceptions are
results (inf, nan), not warnings. ``erf``, ``lgamma`` and ``digamma`` have no
numpy ufunc (and scipy is no dependency): ``erf``, ``erfc`` and ``lgamma`` run
the C library's functions in numba loops (:mod:`kernels.cpu.special_jit`,
compiled off the step by :class:`~kernels.cpu.jit_loader.BackgroundJit`; until
then, and for float16, Python's ``math`` function per element, the same
numbers ~30x slower); ``digamma`` a recurrence and its asymptotic series
(float64 exact to ~1e-14). ``erf`` sits on a training step through
``gelu(approximate=False)``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from kernels.cpu.jit_loader import BackgroundJit
from kernels.cpu.math import binary_operands
from kernels.dtypes import as_dtype, reduction_axes
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["digamma"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


def _float_in(op: str, x: np.ndarray) -> np.ndarray:
    if x.dtype.kind != "f":
        raise KernelError(f"{op} needs a floating-point tensor, got {x.dtype}: Cast it first")
    return x


def _unary(op: str, fn: Callable[[np.ndarray], Any], floats: bool = True) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x = np.asarray(inputs[0])
        if floats:
            _float_in(op, x)
        with np.errstate(all="ignore"):
            return [np.asarray(fn(x)).astype(x.dtype, copy=False)]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


JIT = BackgroundJit("kernels.cpu.special_jit")


def _per_element(fn: Callable[[float], float], jitted: str) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` over an array: the numba loop ``jitted`` once compiled (module header)."""
    ufunc = np.frompyfunc(fn, 1, 1)

    def run(x: np.ndarray) -> np.ndarray:
        jit = JIT.ready(x.dtype)
        if jit is None:
            return ufunc(x.astype(np.float64)).astype(x.dtype)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty_like(flat)
        getattr(jit, jitted)(flat, out)
        return out.reshape(x.shape)
    return run


def _safe(fn: Callable[[float], float]) -> Callable[[float], float]:
    def wrapped(v: float) -> float:
        try:
            return fn(v)
        except (ValueError, OverflowError):
            return math.inf if v <= 0 and fn is math.lgamma else math.nan
    return wrapped


def digamma(x: np.ndarray) -> np.ndarray:
    """psi(x): reflection for x < 0.5, the recurrence up to 6, then the series."""
    v = np.asarray(x, dtype=np.float64)
    out = np.empty_like(v)
    with np.errstate(all="ignore"):
        neg = v < 0.5
        w = np.where(neg, 1.0 - v, v)
        acc = np.zeros_like(w)
        while True:
            small = w < 6.0
            if not small.any():
                break
            acc -= np.where(small, 1.0 / w, 0.0)
            w = np.where(small, w + 1.0, w)
        inv2 = 1.0 / (w * w)
        series = (np.log(w) - 0.5 / w
                  - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
                      1 / 240 - inv2 * (1 / 132))))))
        out = acc + series
        out = np.where(neg, out - np.pi / np.tan(np.pi * v), out)
        out = np.where((v <= 0) & (v == np.floor(v)), np.nan, out)
    return out.astype(np.asarray(x).dtype)


_unary("Sin", np.sin)
_unary("Cos", np.cos)
_unary("Tan", np.tan)
_unary("Asin", np.arcsin)
_unary("Acos", np.arccos)
_unary("Atan", np.arctan)
_unary("Sinh", np.sinh)
_unary("Cosh", np.cosh)
_unary("Asinh", np.arcsinh)
_unary("Acosh", np.arccosh)
_unary("Atanh", np.arctanh)
_unary("Log1p", np.log1p)
_unary("Expm1", np.expm1)
_unary("Rsqrt", lambda x: np.ones((), x.dtype) / np.sqrt(x))
_unary("Erf", _per_element(math.erf, "erf"))
_unary("Erfc", _per_element(math.erfc, "erfc"))
_unary("Lgamma", _per_element(_safe(math.lgamma), "lgamma"))
_unary("Digamma", digamma)
_unary("Ceil", np.ceil)
_unary("Rint", np.rint)
_unary("Round", np.round, floats=False)   # numpy rounds halves to even, as TF's Round
_unary("Reciprocal", lambda x: np.ones((), x.dtype) / x if x.dtype.kind in "fc"
       else np.floor_divide(np.ones((), x.dtype), x), floats=False)


def _predicate(op: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        return [np.asarray(fn(_float_in(op, np.asarray(inputs[0]))))]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


_predicate("IsNan", np.isnan)
_predicate("IsInf", np.isinf)
_predicate("IsFinite", np.isfinite)


# --- binary -------------------------------------------------------------------------

def _binary(op: str, fn: Callable[[np.ndarray, np.ndarray], Any], floats: bool = False) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x, y = binary_operands(inputs[0], inputs[1])
        if x.dtype != y.dtype:
            raise KernelError(f"{op}: operands have different dtypes {x.dtype} and {y.dtype}; "
                              "Cast one first")
        if floats:
            _float_in(op, x)
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(fn(x, y))
        except ValueError as e:
            raise KernelError(f"{op}: shapes {list(x.shape)} and {list(y.shape)} do not "
                              f"broadcast ({e})") from None
        return [out.astype(x.dtype, copy=False)]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


def _int_divisor(op: str, y: np.ndarray) -> None:
    if y.dtype.kind in "iu" and not np.all(y):
        raise KernelError(f"{op}: integer division by zero")


def _floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _int_divisor("FloorDiv", y)
    return np.floor_divide(x, y)


def _floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    _int_divisor("FloorMod", y)
    return np.mod(x, y)


def _xlogy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(x == 0, np.zeros((), x.dtype), x * np.log(y))


def _xdivy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(x == 0, np.zeros((), x.dtype), x / y)


def _div_no_nan(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    safe = np.where(y == 0, np.ones((), y.dtype), y)
    return np.where(y == 0, np.zeros((), x.dtype), x / safe)


_binary("FloorDiv", _floor_div)
_binary("FloorMod", _floor_mod)
_binary("SquaredDifference", lambda x, y: np.square(x - y))
_binary("Atan2", np.arctan2, floats=True)
_binary("Xlogy", _xlogy, floats=True)
_binary("Xdivy", _xdivy, floats=True)
_binary("DivNoNan", _div_no_nan, floats=True)


# --- reductions and scans ----------------------------------------------------------------

def _bool_reduce(op: str, fn: Callable[..., Any]) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x = np.asarray(inputs[0])
        if x.dtype != np.bool_:
            raise KernelError(f"{op} reduces a bool tensor, got {x.dtype}")
        axis = attrs.get("axis")
        axes = None if axis is None else reduction_axes(axis, x.ndim, op)
        return [np.asarray(fn(x, axis=axes, keepdims=bool(attrs.get("keepdims"))))]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


_bool_reduce("All", np.all)
_bool_reduce("Any", np.any)


@KERNELS("ArgMin", CPU)
def arg_min(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis = int(attrs.get("axis") or 0)
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise KernelError(f"ArgMin: axis {axis} is out of range for a rank-{x.ndim} input")
    return [np.asarray(np.argmin(x, axis=axis)).astype(as_dtype(attrs.get("output_type")
                                                                or "int64"))]


def _scan(op: str, ufunc: np.ufunc) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x = np.asarray(inputs[0])
        if x.ndim == 0:
            raise KernelError(f"{op} needs a tensor of rank >= 1, got a scalar")
        axis = int(attrs.get("axis", 0))
        if not -x.ndim <= axis < x.ndim:
            raise KernelError(f"{op}: axis {axis} is out of range for a rank-{x.ndim} input")
        rev = bool(attrs.get("reverse"))
        y = np.flip(x, axis) if rev else x
        out = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
        if attrs.get("exclusive"):
            identity = np.full_like(np.take(out, [0], axis=axis), ufunc.identity)
            out = np.concatenate([identity, np.delete(out, -1, axis=axis)], axis=axis) \
                if out.shape[axis] else out
        return [np.ascontiguousarray(np.flip(out, axis) if rev else out)]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


_scan("Cumsum", np.add)
_scan("Cumprod", np.multiply)


@KERNELS("CheckNumerics", CPU)
def check_numerics(inputs: list, attrs: dict) -> list:
    """The input unchanged; a ``KernelError`` (the runtime's ``InvalidArgumentError``)
    naming the message when it holds an inf or a NaN, as TF's CheckNumerics."""
    x = _float_in("CheckNumerics", np.asarray(inputs[0]))
    if not np.all(np.isfinite(x)):
        kinds = [k for k, bad in (("NaN", np.isnan(x).any()), ("Inf", np.isinf(x).any())) if bad]
        raise KernelError(f"{attrs.get('message', '')} : Tensor had {' and '.join(kinds)} "
                          "values")
    return [np.array(x)]
