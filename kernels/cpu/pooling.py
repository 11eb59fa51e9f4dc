"""CPU kernels for 2-D pooling: ``MaxPool``, ``AvgPool`` and their
gradients ``MaxPoolGrad`` (orig_input, orig_output, grad) and
``AvgPoolGrad`` (orig_input_shape, grad), with TensorFlow's attrs: ``ksize``
and ``strides`` (4 ints in ``data_format`` order, 1 on the batch axis),
``padding`` (``SAME``, ``VALID``, and for max pooling ``EXPLICIT`` with
``explicit_paddings``, 8 ints) and ``data_format`` (``NHWC``, TF's default,
or ``NCHW``, run as NHWC between two transposes, as TF's CPU kernels do for
batch norm; TF's CPU pooling refuses NCHW, its GPU takes it).

TensorFlow's rules, kept here:
- SAME pads ``max((out - 1) * stride + ksize - in, 0)`` cells, the smaller
  half before; an average divides by the count of the window's cells inside
  the input, never by ``ksize`` (forward and gradient);
- ``MaxPoolGrad`` recomputes each window's arg-max from ``orig_input`` (as
  TF's CPU kernel; ``orig_output`` is only shape-checked): the first cell in
  row-major order, replaced only by a strictly greater one, so ties and an
  all-NaN window send the gradient to the first cell;
- a ``ksize`` over the depth axis (``MaxPool`` only, spatial ksize 1, depth
  stride equal to the depth window, dividing the depth) pools across
  channels (TF's CPU "depthwise max pooling"); its gradient is refused, as
  TF's.

Forward NaN: a window holding a NaN pools to NaN (numpy's ``max``).

The loops are numba (:mod:`kernels.cpu.pooling_jit`), compiled off the step
by :class:`kernels.cpu.jit_loader.BackgroundJit`; until they are ready, and
for float16, the numpy path below runs (a loop over the window's kh*kw
offsets on strided views of a padded copy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.cpu.jit_loader import BackgroundJit, split_batch
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["Window", "window", "max_pool_numpy", "avg_pool_numpy", "max_pool_grad_numpy",
           "avg_pool_grad_numpy", "JIT", "to_nhwc", "from_nhwc", "attr_str"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

JIT = BackgroundJit("kernels.cpu.pooling_jit")
_FLOATS = frozenset("efd")   # float16, float32, float64 (numpy dtype.char)


@dataclass(frozen=True)
class Window:
    """A pooling window over NHWC: size, stride, padding before/after, output size."""

    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pb: int
    pl: int
    pr: int
    oh: int
    ow: int


def attr_str(value: Any, name: str, op: str) -> str:
    """A string attr (msgpack may hand bytes)."""
    if isinstance(value, bytes):
        value = value.decode()
    if not isinstance(value, str):
        raise KernelError(f"{op}: attr {name} must be a string, got {value!r}")
    return value


def _data_format(attrs: dict, op: str) -> str:
    fmt = attr_str(attrs.get("data_format", "NHWC"), "data_format", op)
    if fmt not in ("NHWC", "NCHW"):
        raise KernelError(f"{op}: data_format {fmt!r} is not supported: use 'NHWC' or 'NCHW'")
    return fmt


def _ints4(attrs: dict, name: str, op: str, fmt: str) -> tuple[int, int, int, int]:
    """A 4-int attr in data_format order, returned as (n, h, w, c)."""
    value = attrs.get(name)
    try:
        vals = [int(v) for v in np.asarray(value).reshape(-1)]
    except (TypeError, ValueError):
        vals = []
    if len(vals) != 4 or min(vals) < 1 or max(vals) >= 1 << 31:
        raise KernelError(f"{op}: {name} must be 4 positive int32 values in {fmt} order "
                          f"(e.g. [1, 3, 3, 1] for NHWC), got {value!r}")
    if fmt == "NCHW":
        return vals[0], vals[2], vals[3], vals[1]
    return vals[0], vals[1], vals[2], vals[3]


def _spatial(op: str, axis: str, size: int, k: int, s: int, padding: str,
             pads: tuple[int, int]) -> tuple[int, int, int]:
    """(pad before, pad after, output size) of one spatial axis."""
    if padding == "VALID":
        if k > size:
            raise KernelError(f"{op}: ksize dimension {axis} ({k}) is larger than the input "
                              f"tensor dimension ({size}) with VALID padding: use SAME "
                              "padding or a smaller window")
        return 0, 0, (size - k) // s + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        return total // 2, total - total // 2, out
    before, after = pads
    if before < 0 or after < 0 or before >= k or after >= k:
        raise KernelError(f"{op}: explicit padding of {axis} ({before}, {after}) must be "
                          f"non-negative and less than the window ({k})")
    span = size + before + after
    if span < k:
        raise KernelError(f"{op}: ksize dimension {axis} ({k}) is larger than the padded "
                          f"input ({span})")
    return before, after, (span - k) // s + 1


def _explicit(attrs: dict, op: str, fmt: str) -> tuple[tuple[int, int], tuple[int, int]]:
    value = attrs.get("explicit_paddings")
    vals = [int(v) for v in np.asarray(value if value is not None else []).reshape(-1)]
    if len(vals) != 8:
        raise KernelError(f"{op}: padding EXPLICIT needs explicit_paddings of 8 ints (a "
                          f"before/after pair per dimension, {fmt} order), got {value!r}")
    pairs = [(vals[2 * i], vals[2 * i + 1]) for i in range(4)]
    if fmt == "NCHW":
        pairs = [pairs[0], pairs[2], pairs[3], pairs[1]]
    if pairs[0] != (0, 0) or pairs[3] != (0, 0):
        raise KernelError(f"{op}: explicit_paddings must be 0 on the batch and depth "
                          f"dimensions, got {vals}")
    return pairs[1], pairs[2]


def window(op: str, shape_nhwc: tuple, attrs: dict, *, explicit: bool = False,
           depth_ok: bool = False) -> Window | int:
    """The window of ``attrs`` over an NHWC shape (its data_format already
    applied by the caller), or, for a depth window (``depth_ok``), the depth
    window's size."""
    fmt = _data_format(attrs, op)
    kn, kh, kw, kc = _ints4(attrs, "ksize", op, fmt)
    sn, sh, sw, sc = _ints4(attrs, "strides", op, fmt)
    if kn != 1 or sn != 1:
        raise KernelError(f"{op}: pooling is not supported on the batch dimension: ksize and "
                          f"strides must be 1 there (got ksize {kn}, stride {sn})")
    padding = attr_str(attrs.get("padding", ""), "padding", op)
    allowed = ("SAME", "VALID", "EXPLICIT") if explicit else ("SAME", "VALID")
    if padding not in allowed:
        raise KernelError(f"{op}: padding must be one of {list(allowed)}, got {padding!r}")
    _, h, w, c = shape_nhwc
    if kc != 1 or sc != 1:
        if not depth_ok:
            raise KernelError(f"{op}: pooling over the depth dimension is not supported here "
                              f"(ksize {kc}, stride {sc} on depth); use 1")
        if kh != 1 or kw != 1 or sh != 1 or sw != 1:
            raise KernelError(f"{op}: supports exactly one of pooling across depth or pooling "
                              "across width/height (depth ksize > 1 needs spatial ksize and "
                              "strides 1)")
        if sc != kc:
            raise KernelError(f"{op}: depthwise max pooling requires the depth window to "
                              f"equal the depth stride (got window {kc}, stride {sc})")
        if c % kc:
            raise KernelError(f"{op}: depthwise max pooling requires the depth window to "
                              f"evenly divide the input depth (got window {kc}, depth {c})")
        return kc
    pads = _explicit(attrs, op, fmt) if padding == "EXPLICIT" else ((0, 0), (0, 0))
    pt, pb, oh = _spatial(op, "H", h, kh, sh, padding, pads[0])
    pl, pr, ow = _spatial(op, "W", w, kw, sw, padding, pads[1])
    return Window(kh, kw, sh, sw, pt, pb, pl, pr, oh, ow)


def to_nhwc(x: np.ndarray, fmt: str) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if fmt == "NCHW" else x)


def from_nhwc(y: np.ndarray, fmt: str) -> np.ndarray:
    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)) if fmt == "NCHW" else y


def _float4(op: str, name: str, x: Any) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 4:
        raise KernelError(f"{op}: {name} must be 4-dimensional (batch, rows, cols, depth in "
                          f"data_format order), got shape {list(x.shape)}")
    if x.dtype.char not in _FLOATS:
        raise KernelError(f"{op}: {name} has dtype {x.dtype}; pooling takes float16, "
                          "float32 or float64 (Cast first)")
    return x


# --- numpy paths (NHWC) ---------------------------------------------------------------

def _padded(x: np.ndarray, win: Window, fill: float) -> np.ndarray:
    if not (win.pt or win.pb or win.pl or win.pr):
        return x
    return np.pad(x, ((0, 0), (win.pt, win.pb), (win.pl, win.pr), (0, 0)),
                  constant_values=fill)


def _tap(xp: np.ndarray, win: Window, a: int, b: int) -> np.ndarray:
    """The strided view of the padded input that offset (a, b) of every window reads."""
    return xp[:, a:a + win.sh * (win.oh - 1) + 1:win.sh, b:b + win.sw * (win.ow - 1) + 1:win.sw]


def _counts(size: int, k: int, s: int, pad: int, out: int) -> np.ndarray:
    start = np.arange(out) * s - pad
    return np.minimum(start + k, size) - np.maximum(start, 0)


def max_pool_numpy(x: np.ndarray, win: Window) -> np.ndarray:
    # -inf padding never wins over a real cell; np.maximum propagates NaN
    xp = _padded(x, win, -np.inf)
    out = _tap(xp, win, 0, 0).copy()
    for a in range(win.kh):
        for b in range(win.kw):
            if a or b:
                np.maximum(out, _tap(xp, win, a, b), out=out)
    return out


def avg_pool_numpy(x: np.ndarray, win: Window) -> np.ndarray:
    xp = _padded(x, win, 0)
    acc = np.zeros((x.shape[0], win.oh, win.ow, x.shape[3]), x.dtype)
    for a in range(win.kh):
        for b in range(win.kw):
            acc += _tap(xp, win, a, b)
    rows = _counts(x.shape[1], win.kh, win.sh, win.pt, win.oh)
    cols = _counts(x.shape[2], win.kw, win.sw, win.pl, win.ow)
    acc /= (rows[:, None] * cols[None, :]).astype(x.dtype)[None, :, :, None]
    return acc


def max_pool_grad_numpy(x: np.ndarray, g: np.ndarray, win: Window) -> np.ndarray:
    xp = _padded(x, win, 0)
    real = _padded(np.ones((1,) + x.shape[1:3] + (1,), bool), win, False)
    best = np.zeros(g.shape, x.dtype)
    arg = np.full(g.shape, -1, np.int32)
    for a in range(win.kh):
        for b in range(win.kw):
            tap = _tap(xp, win, a, b)
            # a window's first real cell, then only a strictly greater one
            take = _tap(real, win, a, b) & ((arg < 0) | (tap > best))
            best = np.where(take, tap, best)
            arg = np.where(take, np.int32(a * win.kw + b), arg)
    dxp = np.zeros(xp.shape, x.dtype)
    for a in range(win.kh):
        for b in range(win.kw):
            hit = arg == a * win.kw + b
            _tap(dxp, win, a, b)[...] += np.where(hit, g, g.dtype.type(0))
    return dxp[:, win.pt:win.pt + x.shape[1], win.pl:win.pl + x.shape[2]]


def avg_pool_grad_numpy(shape: tuple, g: np.ndarray, win: Window) -> np.ndarray:
    rows = _counts(shape[1], win.kh, win.sh, win.pt, win.oh)
    cols = _counts(shape[2], win.kw, win.sw, win.pl, win.ow)
    coef = (1 / (rows[:, None] * cols[None, :])).astype(g.dtype)
    gs = g * coef[None, :, :, None]
    dxp = np.zeros((shape[0], shape[1] + win.pt + win.pb, shape[2] + win.pl + win.pr,
                    shape[3]), g.dtype)
    for a in range(win.kh):
        for b in range(win.kw):
            _tap(dxp, win, a, b)[...] += gs
    return dxp[:, win.pt:win.pt + shape[1], win.pl:win.pl + shape[2]]


# --- the kernels ------------------------------------------------------------------------

def _run_forward(kind: str, x: np.ndarray, win: Window) -> np.ndarray:
    jit = JIT.ready(x.dtype)
    if jit is None:
        return (max_pool_numpy if kind == "max" else avg_pool_numpy)(x, win)
    if not x.flags.writeable:   # numba types a read-only array apart: one signature only
        x = x.copy()
    out = np.empty((x.shape[0], win.oh, win.ow, x.shape[3]), x.dtype)
    fn = jit.max_pool if kind == "max" else jit.avg_pool
    split_batch(lambda n0, n1: fn(x, win.kh, win.kw, win.sh, win.sw, win.pt, win.pl, out,
                                  n0, n1), x.shape[0], out.size * win.kh * win.kw)
    return out


@KERNELS("MaxPool", CPU)
def max_pool(inputs: list, attrs: dict) -> list:
    x = _float4("MaxPool", "input", inputs[0])
    fmt = _data_format(attrs, "MaxPool")
    xn = to_nhwc(x, fmt)
    win = window("MaxPool", xn.shape, attrs, explicit=True, depth_ok=True)
    if isinstance(win, int):   # depthwise: the max of each group of `win` channels
        n, h, w, c = xn.shape
        return [from_nhwc(xn.reshape(n, h, w, c // win, win).max(axis=4), fmt)]
    return [from_nhwc(_run_forward("max", xn, win), fmt)]


@KERNELS("AvgPool", CPU)
def avg_pool(inputs: list, attrs: dict) -> list:
    x = _float4("AvgPool", "value", inputs[0])
    fmt = _data_format(attrs, "AvgPool")
    xn = to_nhwc(x, fmt)
    win = window("AvgPool", xn.shape, attrs)
    return [from_nhwc(_run_forward("avg", xn, win), fmt)]


def _grad_dtype(op: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.dtype != b.dtype:
        raise KernelError(f"{op}: inputs have different dtypes {a.dtype} and {b.dtype}; "
                          "Cast them to one float type")


@KERNELS("MaxPoolGrad", CPU)
def max_pool_grad(inputs: list, attrs: dict) -> list:
    op = "MaxPoolGrad"
    x = _float4(op, "orig_input", inputs[0])
    y = _float4(op, "orig_output", inputs[1])
    g = _float4(op, "grad", inputs[2])
    _grad_dtype(op, x, g)
    fmt = _data_format(attrs, op)
    xn, gn = to_nhwc(x, fmt), to_nhwc(g, fmt)
    win = window(op, xn.shape, attrs, explicit=True)
    want = (xn.shape[0], win.oh, win.ow, xn.shape[3])
    if tuple(gn.shape) != want or tuple(to_nhwc(y, fmt).shape) != want:
        raise KernelError(f"{op}: orig_output and grad must have the pooled shape "
                          f"{list(from_nhwc(np.empty(want), fmt).shape)}, got "
                          f"{list(y.shape)} and {list(g.shape)}")
    jit = JIT.ready(xn.dtype)
    if jit is None:
        return [from_nhwc(np.ascontiguousarray(max_pool_grad_numpy(xn, gn, win)), fmt)]
    if not xn.flags.writeable:
        xn = xn.copy()
    if not gn.flags.writeable:
        gn = gn.copy()
    dx = np.zeros(xn.shape, xn.dtype)
    split_batch(lambda n0, n1: jit.max_pool_grad(xn, gn, win.kh, win.kw, win.sh, win.sw,
                                                 win.pt, win.pl, dx, n0, n1),
                xn.shape[0], gn.size * win.kh * win.kw)
    return [from_nhwc(dx, fmt)]


@KERNELS("AvgPoolGrad", CPU)
def avg_pool_grad(inputs: list, attrs: dict) -> list:
    op = "AvgPoolGrad"
    shape = np.asarray(inputs[0])
    if shape.shape != (4,) or shape.dtype.kind not in "iu" or (shape < 0).any():
        raise KernelError(f"{op}: orig_input_shape must be a vector of 4 non-negative "
                          f"ints, got {shape.tolist()!r}")
    g = _float4(op, "grad", inputs[1])
    fmt = _data_format(attrs, op)
    dims = [int(d) for d in shape]
    shape_nhwc = (dims[0], dims[2], dims[3], dims[1]) if fmt == "NCHW" else tuple(dims)
    gn = to_nhwc(g, fmt)
    win = window(op, shape_nhwc, attrs)
    want = (shape_nhwc[0], win.oh, win.ow, shape_nhwc[3])
    if tuple(gn.shape) != want:
        raise KernelError(f"{op}: grad must have the pooled shape "
                          f"{list(from_nhwc(np.empty(want), fmt).shape)}, got {list(g.shape)}")
    jit = JIT.ready(gn.dtype)
    if jit is None:
        return [from_nhwc(np.ascontiguousarray(avg_pool_grad_numpy(shape_nhwc, gn, win)), fmt)]
    if not gn.flags.writeable:
        gn = gn.copy()
    dx = np.zeros(shape_nhwc, gn.dtype)
    split_batch(lambda n0, n1: jit.avg_pool_grad(gn, win.kh, win.kw, win.sh, win.sw, win.pt,
                                                 win.pl, dx, n0, n1),
                shape_nhwc[0], gn.size * win.kh * win.kw)
    return [from_nhwc(dx, fmt)]
