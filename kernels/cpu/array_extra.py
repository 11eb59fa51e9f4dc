"""CPU kernels for TF's everyday array ops: ``OneHot``, ``Range``,
``Squeeze``, ``Pack``/``Unpack`` (``tf.stack``/``tf.unstack``),
``Split``/``SplitV``, ``Where`` (the coordinates of the true elements), and
the random ops ``TruncatedNormal`` (normal draws redrawn until within two
standard deviations, as TF's) and ``Multinomial`` (``tf.random.categorical``).

Attrs as the catalogue's entries say (distrib/framework/vocabulary_ops.py):
a value TF takes as an input but the graph must know for the output's shape
(``depth``, ``num_split``, the range's bounds, ``num_samples``) is an attr.
The random ops draw from the executor's generator for a seeded op (each step
the next numbers of its sequence, :func:`kernels.cpu.math.rng_attrs`), else a
fresh one. Outputs never alias inputs that a later in-place kernel might
write, except ``Squeeze`` (a view, as ``Reshape``).
"""
from __future__ import annotations

import numpy as np

from kernels.cpu.math import rng
from kernels.dtypes import as_dtype, concrete_shape
from kernels.registry import CPU, KernelError, KernelTable

__all__: list[str] = []

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them


@KERNELS("OneHot", CPU)
def one_hot(inputs: list, attrs: dict) -> list:
    idx = np.asarray(inputs[0])
    if idx.dtype.kind not in "iu":
        raise KernelError(f"OneHot: indices must be integers, got {idx.dtype}")
    depth, axis = int(attrs["depth"]), int(attrs.get("axis", -1))
    dtype = as_dtype(attrs.get("dtype") or "float32")
    on, off = attrs.get("on_value", 1), attrs.get("off_value", 0)
    hot = idx[..., None] == np.arange(depth, dtype=idx.dtype)   # out-of-range: all off
    out = np.where(hot, np.asarray(on, dtype), np.asarray(off, dtype))
    if axis != -1:
        out = np.moveaxis(out, -1, axis)
    return [np.ascontiguousarray(out)]


@KERNELS("Range", CPU)
def range_(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype") or "int32")
    start, limit, delta = attrs["start"], attrs["limit"], attrs["delta"]
    if delta == 0:
        raise KernelError("Range: delta must not be 0")
    n = max(0, int(np.ceil((limit - start) / delta)))
    return [(start + delta * np.arange(n, dtype=np.float64 if dtype.kind == "f" else np.int64)
             ).astype(dtype)]


@KERNELS("Squeeze", CPU)
def squeeze(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axes = [int(a) for a in attrs.get("squeeze_dims") or []]
    try:
        return [np.squeeze(x, axis=tuple(axes) if axes else None)]
    except (ValueError, np.exceptions.AxisError) as e:
        raise KernelError(f"Squeeze: cannot squeeze axes {axes} of shape {list(x.shape)} "
                          f"({e})") from None


@KERNELS("Pack", CPU)
def pack(inputs: list, attrs: dict) -> list:
    arrays = [np.asarray(x) for x in inputs]
    try:
        return [np.stack(arrays, axis=int(attrs.get("axis", 0)))]
    except (ValueError, np.exceptions.AxisError) as e:
        raise KernelError(f"Pack: values of shapes {[list(a.shape) for a in arrays]} do not "
                          f"stack ({e})") from None


@KERNELS("Unpack", CPU)
def unpack(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis, num = int(attrs.get("axis", 0)), int(attrs["num"])
    if not -x.ndim <= axis < x.ndim or x.shape[axis] != num:
        raise KernelError(f"Unpack: value of shape {list(x.shape)} has no axis {axis} of size "
                          f"{num}")
    return [np.array(np.take(x, i, axis=axis)) for i in range(num)]


@KERNELS("Split", CPU)
def split(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis, n = int(attrs.get("axis", 0)), int(attrs["num_split"])
    if not -x.ndim <= axis < x.ndim or n <= 0 or x.shape[axis] % n:
        raise KernelError(f"Split: dimension {axis} of shape {list(x.shape)} does not split "
                          f"evenly into {n}")
    return [np.array(p) for p in np.split(x, n, axis=axis)]


@KERNELS("SplitV", CPU)
def split_v(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    axis, sizes = int(attrs.get("axis", 0)), [int(s) for s in attrs["size_splits"]]
    if not -x.ndim <= axis < x.ndim or sum(sizes) != x.shape[axis]:
        raise KernelError(f"SplitV: size_splits {sizes} do not add up to dimension {axis} of "
                          f"{list(x.shape)}")
    cuts = np.cumsum(sizes)[:-1]
    return [np.array(p) for p in np.split(x, cuts, axis=axis)]


@KERNELS("Where", CPU)
def where(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    return [np.argwhere(x).astype(np.int64).reshape(-1, x.ndim)]


def _mirror_args(op: str, x: np.ndarray, attrs: dict) -> tuple[list, str]:
    pairs = [[int(a), int(b)] for a, b in attrs["paddings"]]
    mode = str(attrs.get("mode", "REFLECT")).upper()
    if mode not in ("REFLECT", "SYMMETRIC") or len(pairs) != x.ndim:
        raise KernelError(f"{op}: mode {mode!r} and paddings {pairs} do not fit an input of "
                          f"shape {list(x.shape)}")
    return pairs, mode


@KERNELS("MirrorPad", CPU)
def mirror_pad(inputs: list, attrs: dict) -> list:
    x = np.asarray(inputs[0])
    pairs, mode = _mirror_args("MirrorPad", x, attrs)
    offset = 1 if mode == "REFLECT" else 0
    for d, (a, b) in zip(x.shape, pairs):
        if max(a, b) > d - offset:
            raise KernelError(f"MirrorPad: paddings {pairs} must be at most "
                              f"{'dim - 1' if offset else 'dim'} for mode {mode} (shape "
                              f"{list(x.shape)})")
    return [np.pad(x, pairs, mode="reflect" if offset else "symmetric")]


@KERNELS("MirrorPadGrad", CPU)
def mirror_pad_grad(inputs: list, attrs: dict) -> list:
    """The gradient of MirrorPad: each padded position's gradient added back onto
    the element it copied, one dimension at a time."""
    g = np.asarray(inputs[0])
    pairs, mode = _mirror_args("MirrorPadGrad", g, attrs)
    out = g
    for axis, (a, b) in enumerate(pairs):
        n = out.shape[axis] - a - b
        source = np.pad(np.arange(n), (a, b), mode="reflect" if mode == "REFLECT"
                        else "symmetric")
        moved = np.moveaxis(out, axis, 0)
        acc = np.zeros((n,) + moved.shape[1:], dtype=g.dtype)
        np.add.at(acc, source, moved)
        out = np.moveaxis(acc, 0, axis)
    return [np.ascontiguousarray(out)]


# --- random ------------------------------------------------------------------------------

_rng = rng   # (kernels.cpu.math: the executor's, a seed's, or this thread's)


@KERNELS("TruncatedNormal", CPU)
def truncated_normal(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype"))
    if dtype not in (np.float32, np.float64, np.float16):
        raise KernelError(f"TruncatedNormal makes floats, not {dtype}")
    shape = concrete_shape(attrs.get("shape"), "TruncatedNormal")
    rng = _rng(attrs)
    out = rng.standard_normal(shape)
    bad = np.abs(out) > 2.0
    while bad.any():   # redraw the tails: P(|z| > 2) is 4.6%, so this ends fast
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2.0
    mean, stddev = attrs.get("mean", 0.0), attrs.get("stddev", 1.0)
    return [(out * stddev + mean).astype(dtype)]


def _stateless_attrs(attrs: dict) -> dict:
    # a fresh generator from the seed on every run: the same numbers each step
    return {k: v for k, v in attrs.items() if k != "_generator"}


@KERNELS("StatelessTruncatedNormal", CPU)
def stateless_truncated_normal(inputs: list, attrs: dict) -> list:
    return truncated_normal(inputs, _stateless_attrs(attrs))


@KERNELS("StatelessRandomNormal", CPU)
def stateless_random_normal(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype"))
    shape = concrete_shape(attrs.get("shape"), "StatelessRandomNormal")
    out = _rng(_stateless_attrs(attrs)).standard_normal(shape)
    return [(out * attrs.get("stddev", 1.0) + attrs.get("mean", 0.0)).astype(dtype)]


@KERNELS("StatelessRandomUniform", CPU)
def stateless_random_uniform(inputs: list, attrs: dict) -> list:
    dtype = as_dtype(attrs.get("dtype"))
    shape = concrete_shape(attrs.get("shape"), "StatelessRandomUniform")
    lo, hi = attrs.get("minval", 0.0), attrs.get("maxval", 1.0)
    out = _rng(_stateless_attrs(attrs)).random(shape)
    return [(out * (hi - lo) + lo).astype(dtype)]


@KERNELS("Multinomial", CPU)
def multinomial(inputs: list, attrs: dict) -> list:
    logits = np.asarray(inputs[0], dtype=np.float64)
    if logits.ndim != 2:
        raise KernelError(f"Multinomial: logits must be [batch, classes], got "
                          f"{list(logits.shape)}")
    n = int(attrs["num_samples"])
    out_dtype = as_dtype(attrs.get("output_dtype") or "int64")
    if logits.shape[1] == 0:
        raise KernelError("Multinomial: logits need at least one class")
    z = logits - logits.max(axis=1, keepdims=True)
    cdf = np.cumsum(np.exp(z), axis=1)
    u = _rng(attrs).random((logits.shape[0], n)) * cdf[:, -1:]
    picks = np.stack([np.searchsorted(cdf[b], u[b], side="right")
                      for b in range(logits.shape[0])]) if logits.shape[0] else \
        np.zeros((0, n), np.int64)
    return [np.minimum(picks, logits.shape[1] - 1).astype(out_dtype)]
