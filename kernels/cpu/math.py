"""CPU kernels for math (TF's math ops): elementwise and reduction ops,
``Cast`` and the activations' gradients, the random ops, and the in-place
variants the executor may use (``IN_PLACE``). Importing this module
registers them; the CPU wing's other modules hold the array ops
(:mod:`kernels.cpu.array`), the nn ops (:mod:`kernels.cpu.nn`) and the
optimizer update rules (:mod:`kernels.cpu.update`).

Principles kept throughout the CPU wing:
- dtypes are preserved the TensorFlow way. numpy (NEP 50) treats a 0-d array
  as a *strong* operand, so ``float32 array * 0-d float64`` would upcast to
  float64; here a 0-d operand of a same-or-lower kind (bool < int < float)
  is cast to the other operand's dtype first, like a Python scalar would be.
  Reductions and ``Shape`` keep or fix their dtype explicitly for the same
  reason (numpy would sum int32 into int64).
- kernels never mutate inputs. ``Reshape``/``ExpandDims`` return views of
  their input (cheap, same as TF's buffer forwarding); ``Identity`` copies,
  because ``read_value`` is an Identity and must be a snapshot that later
  in-place updates of the variable do not change. ``Const`` returns a
  read-only view of its attr, so nothing downstream can alter the graph.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np

from kernels.dtypes import as_dtype, concrete_shape, reduction_axes
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["binary_operands", "rng"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_KIND_RANK = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


# --- random ----------------------------------------------------------------------

# Random ops a running step keeps a generator for (see rng_attrs).
RANDOM_OPS = frozenset({"RandomStandardNormal", "RandomUniform", "RandomShuffle",
                        "TruncatedNormal", "Multinomial", "SampleDistortedBoundingBoxV2"})


def rng_attrs(attrs: dict, name: str, generators: dict) -> dict:
    """``attrs`` of seeded random op ``name`` with its generator, found in or
    added to ``generators`` (an executor's, kept for a session): each run then
    draws the next numbers of the op's sequence, and a new session starts it
    over, as TF's random kernels do. Unseeded ops need none (fresh entropy
    every run)."""
    seed = attrs.get("seed")
    if seed is None:
        return attrs
    gen = generators.get((name, seed))
    if gen is None:
        gen = generators[(name, seed)] = np.random.default_rng(seed)
    return {**attrs, "_generator": gen}


def rng(attrs: dict) -> np.random.Generator:
    """The generator a random kernel draws from: the executor's for this op
    (see rng_attrs); else a given seed gives the same numbers on every call;
    and with none, this thread's generator, seeded once from the OS's
    entropy (a fresh ``default_rng()`` per call cost ~25 us, more than a
    small draw: CIFAR's per-image augmentation makes four)."""
    gen = attrs.get("_generator")
    if gen is not None:
        return gen
    seed = attrs.get("seed")
    if seed is not None:
        return np.random.default_rng(seed)
    gen = getattr(_entropy, "gen", None)
    if gen is None:
        gen = _entropy.gen = np.random.default_rng()
    return gen


# one unseeded generator per thread (a Generator is not thread-safe); a forked
# child starts new ones, so it never draws its parent's numbers
_entropy = threading.local()
os.register_at_fork(after_in_child=lambda: _entropy.__dict__.clear())
_rng = rng


@KERNELS("RandomStandardNormal", CPU)
def random_standard_normal(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype"))
    if dtype not in (np.float32, np.float64):
        raise KernelError(f"RandomStandardNormal makes float32 or float64, not {dtype}: "
                          "draw floats and Cast them")
    shape = concrete_shape(attrs.get("shape"), "RandomStandardNormal")
    out = _rng(attrs).standard_normal(shape, dtype=dtype)
    mean, stddev = attrs.get("mean", 0.0), attrs.get("stddev", 1.0)
    if stddev != 1.0:
        out *= dtype.type(stddev)
    if mean != 0.0:
        out += dtype.type(mean)
    return [out]


@KERNELS("RandomUniform", CPU)
def random_uniform(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype"))
    # the shape input when the op has one (its size known only at run time)
    shape = concrete_shape(inputs[0] if inputs else attrs.get("shape"), "RandomUniform")
    lo, hi = attrs.get("minval", 0), attrs.get("maxval")
    rng = _rng(attrs)
    if dtype.kind in "iu":
        if hi is None:  # TF: an integer uniform needs an explicit maxval
            raise KernelError("RandomUniform with an integer dtype needs maxval")
        return [rng.integers(lo, hi, size=shape, dtype=dtype)]
    if dtype not in (np.float32, np.float64):
        raise KernelError(f"RandomUniform makes float or int values, not {dtype}")
    hi = 1.0 if hi is None else hi
    out = rng.random(shape, dtype=dtype)  # [0, 1)
    out *= dtype.type(hi - lo)
    out += dtype.type(lo)
    return [out]


# --- elementwise ---------------------------------------------------------------

def binary_operands(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """``x, y`` as arrays, a 0-d operand cast to the other's dtype when that
    does not lower its kind (so ``float32 * 0-d float64`` stays float32)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype == y.dtype:
        return x, y
    if y.ndim == 0 and _fits_kind(y.dtype, x.dtype):
        return x, y.astype(x.dtype)
    if x.ndim == 0 and _fits_kind(x.dtype, y.dtype):
        return x.astype(y.dtype), y
    return x, y


def _fits_kind(src: np.dtype, dst: np.dtype) -> bool:
    a, b = _KIND_RANK.get(src.kind), _KIND_RANK.get(dst.kind)
    return a is not None and b is not None and a <= b


def _check_broadcast(op: str, x: np.ndarray, y: np.ndarray) -> None:
    # numpy's rule, checked here in a few steps (np.broadcast_shapes costs
    # more than a small kernel's arithmetic)
    xs, ys = x.shape, y.shape
    if xs == ys:
        return
    for a, b in zip(reversed(xs), reversed(ys)):
        if a != b and a != 1 and b != 1:
            raise KernelError(f"{op}: shapes {list(xs)} and {list(ys)} do not "
                              "broadcast (trailing dimensions must match or be 1)")


def _binary(op: str, fn: Callable[[np.ndarray, np.ndarray], Any]) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        x, y = binary_operands(inputs[0], inputs[1])
        _check_broadcast(op, x, y)
        return [np.asarray(fn(x, y))]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


def _real_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # TF's RealDiv is the float division op; tf.divide casts integers to float
    # before it. Silently truncating (C) or promoting (numpy) would both
    # surprise someone, so integers are refused with the fix in the message.
    if x.dtype.kind not in "fc" or y.dtype.kind not in "fc":
        raise KernelError(f"RealDiv needs floating-point inputs, got {x.dtype} and {y.dtype}: "
                          "Cast the operands to float32/float64 first")
    with np.errstate(divide="ignore", invalid="ignore"):  # x/0 is inf or nan, as in TF
        return np.true_divide(x, y)


_binary("Add", np.add)
_binary("Sub", np.subtract)
_binary("Mul", np.multiply)
_binary("RealDiv", _real_div)
_binary("Maximum", np.maximum)
_binary("Minimum", np.minimum)
_binary("Pow", np.power)
_binary("Equal", np.equal)
_binary("NotEqual", np.not_equal)
_binary("Less", np.less)
_binary("Greater", np.greater)
_binary("LogicalAnd", np.logical_and)


def _unary(op: str, fn: Callable[[np.ndarray], Any]) -> None:
    def kernel(inputs: list, attrs: dict) -> list:
        return [np.asarray(fn(np.asarray(inputs[0])))]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function without overflow: exp is only taken of -|x|."""
    e = np.exp(-np.abs(x))
    one = np.ones((), x.dtype)
    return np.where(x >= 0, one / (one + e), e / (one + e))


def _ignore_fp(fn: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], Any]:
    # log(0) = -inf and sqrt(-1) = nan are results in TF, not warnings.
    def wrapped(x: np.ndarray) -> Any:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(x)
    return wrapped


_unary("Neg", np.negative)
_unary("Log", _ignore_fp(np.log))
_unary("Exp", _ignore_fp(np.exp))
_unary("Square", np.square)
_unary("Sqrt", _ignore_fp(np.sqrt))
_unary("Abs", np.abs)
_unary("Relu", _relu)
_unary("Sigmoid", sigmoid)
_unary("Tanh", np.tanh)
_unary("Identity", np.array)  # a copy: see the module header
_unary("StopGradient", np.array)
_unary("LogicalNot", np.logical_not)
_unary("Sign", np.sign)
_unary("Floor", np.floor)


@KERNELS("Cast", CPU)
def cast(inputs: list, attrs: dict) -> list:
    return [np.asarray(inputs[0]).astype(as_dtype(attrs.get("dtype")))]


_SAME_WIDTH_INT = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


@KERNELS("ReluGrad", CPU)
def relu_grad(inputs: list, attrs: dict) -> list:
    dy, y = np.asarray(inputs[0]), np.asarray(inputs[1])
    bits = _SAME_WIDTH_INT.get(dy.dtype)
    if bits is None or dy.shape != y.shape:
        return [np.where(y > 0, dy, np.zeros((), dy.dtype))]
    # A select on random signs mispredicts every other branch: np.where took
    # ~740 us on [256, 512] float32, ten times this bitwise AND with an all-ones
    # or all-zeros mask, which gives the same bits (an inf or NaN where y <= 0
    # still becomes +0, unlike dy * (y > 0)).
    mask = -(y > 0).view(np.uint8).astype(bits)
    return [np.bitwise_and(np.ascontiguousarray(dy).view(bits), mask).view(dy.dtype)]


@KERNELS("SigmoidGrad", CPU)
def sigmoid_grad(inputs: list, attrs: dict) -> list:
    y, dy = binary_operands(inputs[0], inputs[1])
    return [dy * y * (np.ones((), y.dtype) - y)]


@KERNELS("TanhGrad", CPU)
def tanh_grad(inputs: list, attrs: dict) -> list:
    y, dy = binary_operands(inputs[0], inputs[1])
    return [dy * (np.ones((), y.dtype) - y * y)]


# --- reductions ----------------------------------------------------------------

def _reduce(op: str, fn: Callable[..., Any], keep_dtype: bool,
            ufunc: np.ufunc | None = None) -> None:
    mean = op == "Mean"

    def kernel(inputs: list, attrs: dict) -> list:
        x = inputs[0]
        if type(x) is not np.ndarray:
            x = np.asarray(x)
        axis = attrs.get("axis")
        axes = None if axis is None else reduction_axes(axis, x.ndim, op)
        keepdims = bool(attrs.get("keepdims", False))
        if ufunc is not None and x.size and x.dtype.type in _FAST_REDUCE:
            # float32/64 with something to reduce: the ufunc's reduce, as numpy's
            # own function computes it (pairwise sums in the input's dtype, then
            # one division for a mean), without its Python wrapper and errstate
            # (nothing here can divide by zero)
            out = ufunc.reduce(x, axis=axes, dtype=x.dtype, keepdims=keepdims)
            if mean:
                # as np.mean divides: by an intp count, computed in float64
                # and cast back (a Python int would divide in float32)
                count = np.intp(x.size // max(np.size(out), 1))
                if type(out) is np.ndarray:
                    np.true_divide(out, count, out=out, casting="unsafe")
                else:
                    out = out.dtype.type(out / count)
            return [np.asarray(out)]
        kwargs: dict[str, Any] = {"axis": axes, "keepdims": keepdims}
        if keep_dtype and x.dtype.kind in "iuf":
            kwargs["dtype"] = x.dtype  # numpy would widen int32 sums to int64
        with np.errstate(invalid="ignore", divide="ignore"):
            return [np.asarray(fn(x, **kwargs))]
    kernel.__name__ = kernel.__qualname__ = op
    KERNELS(op, CPU)(kernel)


_FAST_REDUCE = frozenset({np.float32, np.float64})


_reduce("Sum", np.sum, keep_dtype=True, ufunc=np.add)
_reduce("Prod", np.prod, keep_dtype=True, ufunc=np.multiply)
_reduce("Mean", np.mean, keep_dtype=True, ufunc=np.add)  # int mean truncates, as in TF
_reduce("Min", np.min, keep_dtype=False, ufunc=np.minimum)
_reduce("Max", np.max, keep_dtype=False, ufunc=np.maximum)


@KERNELS("ArgMax", CPU)
def arg_max(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis = attrs.get("axis")
    axis = 0 if axis is None else int(axis)  # TF1's tf.argmax default
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise KernelError(f"ArgMax: axis {axis} is out of range for a rank-{x.ndim} input")
    out_type = as_dtype(attrs.get("output_type") or "int64")
    return [np.asarray(np.argmax(x, axis=axis)).astype(out_type)]


# --- in place ------------------------------------------------------------------
# Variants that write the result into one of their inputs, for the executor to
# use when that input is a temporary of the step with no other reader (its
# last consumer is this op and nothing else holds it: TensorFlow's
# forward_input). They return None when the operands do not allow it (dtype,
# broadcasting), and the executor then runs the ordinary kernel.

def _add_into(inputs: list, attrs: dict) -> list | None:
    x, y = inputs
    if type(y) is not np.ndarray or x.dtype != y.dtype or y.ndim > x.ndim:
        return None
    if y.shape != x.shape[x.ndim - y.ndim:]:
        try:
            if np.broadcast_shapes(x.shape, y.shape) != x.shape:
                return None
        except ValueError:
            return None   # the ordinary kernel says what does not broadcast
    return [np.add(x, y, out=x)]


def _relu_into(inputs: list, attrs: dict) -> list | None:
    x = inputs[0]
    if x.dtype.kind != "f":
        return None
    return [np.maximum(x, np.zeros((), x.dtype), out=x)]


def _relu_grad_into(inputs: list, attrs: dict) -> list | None:
    dy, y = inputs
    bits = _SAME_WIDTH_INT.get(dy.dtype)
    if bits is None or type(y) is not np.ndarray or dy.shape != y.shape:
        return None
    mask = (y > 0).view(np.uint8).astype(bits)
    np.negative(mask, out=mask)
    view = dy.view(bits)
    np.bitwise_and(view, mask, out=view)
    return [dy]


# op -> (index of the input that may be overwritten, the in-place kernel)
IN_PLACE: dict[str, tuple[int, Callable[[list, dict], list | None]]] = {
    "Add": (0, _add_into),
    "BiasAdd": (0, _add_into),
    "Relu": (0, _relu_into),
    "ReluGrad": (0, _relu_grad_into),
}
