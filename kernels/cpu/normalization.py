"""CPU kernels for local response normalization (``LRN``, ``LRNGrad``) and
fused batch normalization (``FusedBatchNormV3``, ``FusedBatchNormGradV3``),
with TensorFlow's inputs, attrs and numbers.

LRN (attrs ``depth_radius`` 5, ``bias`` 1, ``alpha`` 1, ``beta`` 0.5, TF's
defaults), on a 4-D NHWC input: ``y = x / (bias + alpha * sqr_sum) ** beta``
where ``sqr_sum`` runs over channels ``d - depth_radius .. d + depth_radius``
(clipped): alpha is *not* divided by the window's size (cuda-convnet's
convention, which cifar10.py's ``alpha=0.001 / 9.0`` spells out).
``LRNGrad`` (input_grads, input_image, output_image) is TF's CPU formula,
which reads the forward output it is given.

FusedBatchNormV3 (x, scale, offset, mean, variance; attrs ``epsilon``
(1e-4), ``exponential_avg_factor`` (1), ``data_format`` (NHWC; NCHW, and the
5-D NDHWC/NCDHW), ``is_training`` (True)) -> y, batch_mean, batch_variance,
reserve_space_1, reserve_space_2, reserve_space_3:
- training: batch statistics over every axis but the channels; y uses the
  biased variance; ``batch_variance`` is the unbiased one (Bessel's
  correction n/(n-1), n the count per channel, n = 1 left as is), and with
  ``exponential_avg_factor`` f != 1 the outputs are ``(1-f)*input + f*batch``
  running averages, as TF; reserve spaces 1 and 2 hold the batch mean and the
  *biased* variance the gradient needs; 3 is TF's CPU placeholder, a float 0
  of shape ();
- inference: the given mean and variance normalize; they are also the
  batch_mean/batch_variance outputs and the reserve spaces (TF leaves its
  reserve spaces unset there; its gradient then reads the op's inputs);
- an empty x gives NaN statistics, as TF.
Computation is in the float type ``U`` of scale/offset: float32 for float16
and float32 inputs, float64 for float64 (TF's CPU kernel has no float64;
distrib's does).

FusedBatchNormGradV3 (y_backprop, x, scale, reserve_space_1,
reserve_space_2, reserve_space_3; attrs ``epsilon``, ``data_format``,
``is_training``) -> x_backprop, scale_backprop, offset_backprop and two
empty placeholders, TF's formulas for both modes.

The loops are numba (:mod:`kernels.cpu.normalization_jit`), compiled off the
step; until then, and for float16, numpy runs them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.cpu.jit_loader import BackgroundJit, split_batch
from kernels.cpu.pooling import attr_str
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["JIT", "lrn_numpy", "lrn_grad_numpy", "batch_norm_forward", "batch_norm_grad"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

JIT = BackgroundJit("kernels.cpu.normalization_jit")
_FLOATS = frozenset("efd")


def _float(op: str, name: str, x: Any, ndim: tuple[int, ...]) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim not in ndim:
        raise KernelError(f"{op}: {name} must be {' or '.join(map(str, ndim))}-dimensional, "
                          f"got shape {list(x.shape)}")
    if x.dtype.char not in _FLOATS:
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; it takes float16, float32 or "
                          "float64 (Cast first)")
    return x


def _writable(x: np.ndarray) -> np.ndarray:
    """A C-contiguous, writable array (numba compiles read-only arrays apart)."""
    x = np.ascontiguousarray(x)
    return x if x.flags.writeable else x.copy()


# --- LRN --------------------------------------------------------------------------------

def _lrn_attrs(attrs: dict, op: str) -> tuple[int, float, float, float]:
    radius = attrs.get("depth_radius", 5)
    if isinstance(radius, bool) or int(radius) != radius or not 0 <= int(radius) < 1 << 31:
        raise KernelError(f"{op}: depth_radius must be a non-negative int32, got {radius!r}")
    return (int(radius), float(attrs.get("bias", 1.0)), float(attrs.get("alpha", 1.0)),
            float(attrs.get("beta", 0.5)))


def _sqr_sums(x: np.ndarray, radius: int) -> np.ndarray:
    """Each channel's window sum of squares (NHWC, window over the last axis)."""
    sq = x * x
    depth = x.shape[-1]
    s = np.zeros_like(sq)
    for off in range(-min(radius, depth), min(radius, depth) + 1):
        if off >= 0:
            s[..., :depth - off] += sq[..., off:]
        else:
            s[..., -off:] += sq[..., :depth + off]
    return s


def lrn_numpy(x: np.ndarray, radius: int, bias: float, alpha: float, beta: float) -> np.ndarray:
    t = x.dtype.type
    return x * (t(bias) + t(alpha) * _sqr_sums(x, radius)) ** t(-beta)


def lrn_grad_numpy(g: np.ndarray, x: np.ndarray, y: np.ndarray, radius: int, bias: float,
                   alpha: float, beta: float) -> np.ndarray:
    tp = x.dtype.type
    norm = tp(bias) + tp(alpha) * _sqr_sums(x, radius)
    t = g * y / norm
    depth = x.shape[-1]
    s = np.zeros_like(t)
    for off in range(-min(radius, depth), min(radius, depth) + 1):
        if off >= 0:
            s[..., :depth - off] += t[..., off:]
        else:
            s[..., -off:] += t[..., :depth + off]
    return g * norm ** tp(-beta) - tp(2 * alpha * beta) * x * s


@KERNELS("LRN", CPU)
def lrn(inputs: list, attrs: dict) -> list:
    x = _float("LRN", "input", inputs[0], (4,))
    radius, bias, alpha, beta = _lrn_attrs(attrs, "LRN")
    jit = JIT.ready(x.dtype) if x.size else None
    if jit is None:
        return [lrn_numpy(x, radius, bias, alpha, beta)]
    x2 = _writable(x).reshape(-1, x.shape[-1])
    out = np.empty(x2.shape, x.dtype)
    t = x.dtype.type
    kind = jit.pow_kind(beta)
    split_batch(lambda r0, r1: jit.lrn(x2, radius, t(bias), t(alpha), t(beta), kind, out,
                                       r0, r1),
                x2.shape[0], x2.size * (2 * radius + 1))
    return [out.reshape(x.shape)]


@KERNELS("LRNGrad", CPU)
def lrn_grad(inputs: list, attrs: dict) -> list:
    op = "LRNGrad"
    g = _float(op, "input_grads", inputs[0], (4,))
    x = _float(op, "input_image", inputs[1], (4,))
    y = _float(op, "output_image", inputs[2], (4,))
    if not g.shape == x.shape == y.shape or not g.dtype == x.dtype == y.dtype:
        raise KernelError(f"{op}: input_grads, input_image and output_image must have one "
                          f"shape and dtype, got {list(g.shape)} {g.dtype}, {list(x.shape)} "
                          f"{x.dtype}, {list(y.shape)} {y.dtype}")
    radius, bias, alpha, beta = _lrn_attrs(attrs, op)
    jit = JIT.ready(x.dtype) if x.size else None
    if jit is None:
        return [lrn_grad_numpy(g, x, y, radius, bias, alpha, beta)]
    depth = x.shape[-1]
    g2, x2, y2 = (_writable(a).reshape(-1, depth) for a in (g, x, y))
    dx = np.empty(x2.shape, x.dtype)
    t = x.dtype.type
    kind = jit.pow_kind(beta)
    split_batch(lambda r0, r1: jit.lrn_grad(g2, x2, y2, radius, t(bias), t(alpha), t(beta),
                                            kind, dx, r0, r1),
                x2.shape[0], 2 * x2.size * (2 * radius + 1))
    return [dx.reshape(x.shape)]


# --- batch norm -----------------------------------------------------------------------------

_FORMATS = {"NHWC": 4, "NCHW": 4, "NDHWC": 5, "NCDHW": 5}


def _bn_format(attrs: dict, op: str, x: np.ndarray) -> bool:
    """True when the channels are axis 1 (NCHW, NCDHW), after checking the format."""
    fmt = attr_str(attrs.get("data_format", "NHWC"), "data_format", op)
    if fmt not in _FORMATS:
        raise KernelError(f"{op}: data_format {fmt!r} is not supported: use one of "
                          f"{sorted(_FORMATS)}")
    if x.ndim != _FORMATS[fmt]:
        raise KernelError(f"{op}: data_format {fmt} needs a {_FORMATS[fmt]}-D x, got shape "
                          f"{list(x.shape)}")
    return fmt.startswith("NC")


def _rows(x: np.ndarray, channels_first: bool) -> np.ndarray:
    """x as a C-contiguous (rows, channels) matrix."""
    if channels_first:
        x = np.moveaxis(x, 1, -1)
    return _writable(x).reshape(-1, x.shape[-1])


def _unrows(y2: np.ndarray, shape: tuple, channels_first: bool) -> np.ndarray:
    if not channels_first:
        return y2.reshape(shape)
    last = (shape[0],) + tuple(shape[2:]) + (shape[1],)
    return np.ascontiguousarray(np.moveaxis(y2.reshape(last), -1, 1))


def _u_type(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float64 if x.dtype == np.float64 else np.float32)


def _vector(op: str, name: str, v: Any, u: np.dtype, depth: int | None) -> np.ndarray:
    v = np.asarray(v)
    if v.ndim != 1:
        raise KernelError(f"{op}: {name} must be 1-dimensional, got shape {list(v.shape)}")
    if v.dtype != u:
        raise KernelError(f"{op}: {name} must be {u} for x of this dtype, got {v.dtype}")
    if depth is not None and v.shape[0] != depth:
        raise KernelError(f"{op}: {name} must have the same number of elements as the "
                          f"channels of x, got {v.shape[0]} and {depth}")
    return _writable(v)


def _moments(x2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and biased variance of a (rows, channels) matrix, in float64."""
    jit = JIT.ready(x2.dtype)
    if jit is None:
        m = x2.mean(axis=0, dtype=np.float64)
        return m, np.square(x2 - m).mean(axis=0)
    m, v = np.empty(x2.shape[1]), np.empty(x2.shape[1])
    jit.channel_moments(x2, m, v)
    return m, v


def _affine(x2: np.ndarray, mean: np.ndarray, mul: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """(x - mean) * mul + offset, computed in mul's dtype, returned in x's."""
    jit = JIT.ready(x2.dtype) if x2.dtype == mul.dtype else None
    if jit is None:
        return ((x2.astype(mul.dtype, copy=False) - mean) * mul + offset).astype(x2.dtype,
                                                                                 copy=False)
    out = np.empty(x2.shape, x2.dtype)
    split_batch(lambda r0, r1: jit.normalize(x2, mean, mul, offset, out, r0, r1),
                x2.shape[0], x2.size)
    return out


def batch_norm_forward(x2: np.ndarray, scale: np.ndarray, offset: np.ndarray,
                       mean_in: np.ndarray, var_in: np.ndarray, epsilon: float,
                       factor: float, training: bool) -> list[np.ndarray]:
    """FusedBatchNormV3's outputs on a (rows, channels) matrix (y as a matrix)."""
    u = scale.dtype
    depth = x2.shape[1]
    rows = x2.shape[0]
    zero = np.zeros((), u)
    if x2.size == 0:
        nan = np.full(depth, np.nan, u)
        return [np.empty(x2.shape, x2.dtype), nan, nan.copy(), nan.copy(), nan.copy(), zero]
    if training:
        m64, v64 = _moments(x2)
        mean, var = m64.astype(u), v64.astype(u)
    else:
        mean, var = mean_in, var_in
    mul = (u.type(1) / np.sqrt(var + u.type(epsilon))) * scale
    y2 = _affine(x2, mean, mul, offset)
    if not training:
        return [y2, mean_in.copy(), var_in.copy(), mean_in.copy(), var_in.copy(), zero]
    adjust = u.type(rows) / u.type(rows - 1 if rows > 1 else 1)
    if factor == 1.0:
        batch_mean, batch_var = mean.copy(), var * adjust
    else:
        f = u.type(factor)
        keep = u.type(1) - f
        batch_mean = keep * mean_in + f * mean
        batch_var = keep * var_in + (f * adjust) * var
    return [y2, batch_mean, batch_var, mean, var, zero]


def batch_norm_grad(dy2: np.ndarray, x2: np.ndarray, scale: np.ndarray, mean: np.ndarray,
                    var: np.ndarray, epsilon: float, training: bool) -> list[np.ndarray]:
    """FusedBatchNormGradV3's outputs on (rows, channels) matrices (dx as a matrix)."""
    u = scale.dtype
    rows, depth = x2.shape
    empty = np.empty((0,), u)
    if x2.size == 0:
        return [np.empty(x2.shape, x2.dtype), np.zeros(depth, u), np.zeros(depth, u),
                empty, empty.copy()]
    jit = JIT.ready(x2.dtype) if x2.dtype == u else None
    if jit is None:
        xc = x2.astype(np.float64) - mean
        sum_dy = dy2.sum(axis=0, dtype=np.float64)
        sum_dy_xc = (dy2 * xc).sum(axis=0)
    else:
        sum_dy, sum_dy_xc = np.empty(depth), np.empty(depth)
        jit.grad_sums(dy2, x2, mean, sum_dy, sum_dy_xc)
    coef0 = u.type(1) / np.sqrt(var + u.type(epsilon))
    scale_bp = sum_dy_xc.astype(u) * coef0
    offset_bp = sum_dy.astype(u)
    a = scale * coef0
    if training:
        b = (sum_dy / rows).astype(u)
        k = coef0 * coef0 * (sum_dy_xc / rows).astype(u)
    else:
        b = k = np.zeros(depth, u)
    if jit is None:
        dx = (a * (dy2.astype(u) - b - (x2.astype(u) - mean) * k)).astype(x2.dtype, copy=False)
    else:
        dx = np.empty(x2.shape, x2.dtype)
        split_batch(lambda r0, r1: jit.grad_apply(dy2, x2, mean, a, b, k, dx, r0, r1),
                    rows, x2.size)
    return [dx, scale_bp, offset_bp, empty, empty.copy()]


def _epsilon(attrs: dict) -> float:
    return float(attrs.get("epsilon", 1e-4))


@KERNELS("FusedBatchNormV3", CPU)
def fused_batch_norm(inputs: list, attrs: dict) -> list:
    op = "FusedBatchNormV3"
    x = _float(op, "x", inputs[0], (4, 5))
    first = _bn_format(attrs, op, x)
    depth = x.shape[1] if first else x.shape[-1]
    u = _u_type(x)
    training = bool(attrs.get("is_training", True))
    factor = float(attrs.get("exponential_avg_factor", 1.0))
    scale = _vector(op, "scale", inputs[1], u, depth)
    offset = _vector(op, "offset", inputs[2], u, depth)
    need = None if training and factor == 1.0 else depth
    mean = _vector(op, "mean", inputs[3], u, need)
    var = _vector(op, "variance", inputs[4], u, need)
    outs = batch_norm_forward(_rows(x, first), scale, offset, mean, var, _epsilon(attrs),
                              factor, training)
    outs[0] = _unrows(outs[0], x.shape, first)
    return outs


@KERNELS("FusedBatchNormGradV3", CPU)
def fused_batch_norm_grad(inputs: list, attrs: dict) -> list:
    op = "FusedBatchNormGradV3"
    dy = _float(op, "y_backprop", inputs[0], (4, 5))
    x = _float(op, "x", inputs[1], (4, 5))
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise KernelError(f"{op}: x and y_backprop must have the same shape and dtype, got "
                          f"{list(x.shape)} {x.dtype} and {list(dy.shape)} {dy.dtype}")
    first = _bn_format(attrs, op, x)
    depth = x.shape[1] if first else x.shape[-1]
    u = _u_type(x)
    scale = _vector(op, "scale", inputs[2], u, depth)
    mean = _vector(op, "reserve_space_1", inputs[3], u, depth)
    var = _vector(op, "reserve_space_2", inputs[4], u, depth)
    outs = batch_norm_grad(_rows(dy, first), _rows(x, first), scale, mean, var,
                           _epsilon(attrs), bool(attrs.get("is_training", True)))
    outs[0] = _unrows(outs[0], x.shape, first)
    return outs
