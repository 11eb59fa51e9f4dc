"""The shape arithmetic of a 2-D convolution, as TensorFlow does it, shared by
the CPU convolution kernels (:mod:`kernels.cpu.conv`): the attrs decoded
(``strides``, ``padding``, ``explicit_paddings``, ``data_format``,
``dilations``), the output size and the padding each side.

The rules are TF's (``GetWindowedOutputSizeVerbose`` in
``tensorflow/core/framework/kernel_shape_util.cc``): with an effective filter
size ``(k - 1) * dilation + 1``, ``VALID`` gives ``(in - k_eff + stride) /
stride`` output positions, ``SAME`` gives ``ceil(in / stride)`` and pads
``max(0, (out - 1) * stride + k_eff - in)``, the smaller half before;
``EXPLICIT`` pads what ``explicit_paddings`` says (8 ints, in
``data_format``'s order, zero outside the two spatial dimensions). C++'s
division truncates toward zero, so ``VALID`` with a filter one past the
input is 0 positions rather than an error, as in TF; a negative size is an
error. Everything else a kernel sees is NHWC: an NCHW operand is transposed
on the way in and out (:func:`to_nhwc`, :func:`from_nhwc`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.registry import KernelError

__all__ = ["ConvAttrs", "ConvGeometry", "conv_attrs", "geometry", "to_nhwc", "from_nhwc",
           "nhwc_shape", "check_rank4", "check_dtypes", "sizes_vector"]

PADDINGS = ("SAME", "VALID", "EXPLICIT")
FORMATS = ("NHWC", "NCHW")


@dataclass(frozen=True)
class ConvAttrs:
    """The decoded attrs, spatial values as (height, width)."""

    strides: tuple[int, int]
    dilations: tuple[int, int]
    padding: str
    explicit: tuple[int, int, int, int]   # top, bottom, left, right (EXPLICIT only)
    nchw: bool


@dataclass(frozen=True)
class ConvGeometry:
    """One convolution's sizes, NHWC; ``pads`` = (top, bottom, left, right)."""

    batch: int
    in_h: int
    in_w: int
    in_c: int
    k_h: int
    k_w: int
    out_h: int
    out_w: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]

    @property
    def padded_h(self) -> int:
        return self.in_h + self.pads[0] + self.pads[1]

    @property
    def padded_w(self) -> int:
        return self.in_w + self.pads[2] + self.pads[3]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ints(op: str, name: str, value: Any, n: int | None) -> list[int]:
    try:
        out = [int(v) for v in np.asarray(value).reshape(-1).tolist()]
    except (TypeError, ValueError):
        raise KernelError(f"{op}: attr {name} must be a list of ints, got {value!r}") from None
    if n is not None and len(out) != n:
        raise KernelError(f"{op}: attr {name} must have {n} elements, got {len(out)} ({out})")
    return out


def conv_attrs(op: str, attrs: dict) -> ConvAttrs:
    """Decode and check a convolution's attrs (TF's names and defaults)."""
    fmt = _text(attrs.get("data_format", "NHWC") or "NHWC")
    if fmt not in FORMATS:
        raise KernelError(f"{op}: data_format must be one of {FORMATS}, got {fmt!r}")
    nchw = fmt == "NCHW"
    h, w, c = (2, 3, 1) if nchw else (1, 2, 3)
    if attrs.get("strides") is None:
        raise KernelError(f"{op}: attr strides is required (4 ints in {fmt} order)")
    strides = _ints(op, "strides", attrs["strides"], 4)
    dil = attrs.get("dilations")
    dilations = _ints(op, "dilations", [1, 1, 1, 1] if dil is None else dil, 4)
    if strides[0] != 1 or strides[c] != 1:
        raise KernelError(f"{op}: current implementation does not yet support strides in the "
                          f"batch and depth dimensions; strides={strides} ({fmt})")
    if dilations[0] != 1 or dilations[c] != 1:
        raise KernelError(f"{op}: current implementation does not yet support dilations in the "
                          f"batch and depth dimensions; dilations={dilations} ({fmt})")
    if min(strides[h], strides[w]) < 1 or min(dilations[h], dilations[w]) < 1:
        raise KernelError(f"{op}: strides and dilations must be >= 1, got strides={strides}, "
                          f"dilations={dilations}")
    padding = _text(attrs.get("padding", ""))
    if padding not in PADDINGS:
        raise KernelError(f"{op}: padding must be one of {PADDINGS}, got {padding!r}")
    raw = attrs.get("explicit_paddings")
    raw = [] if raw is None else _ints(op, "explicit_paddings", raw, None)
    explicit = (0, 0, 0, 0)
    if padding == "EXPLICIT":
        if len(raw) != 8:
            raise KernelError(f"{op}: explicit_paddings must have 8 elements (a before and an "
                              f"after per dimension, {fmt} order) with padding EXPLICIT, "
                              f"got {raw}")
        if min(raw) < 0:
            raise KernelError(f"{op}: All elements of explicit_paddings must be nonnegative, "
                              f"got {raw}")
        if raw[0] or raw[1] or raw[2 * c] or raw[2 * c + 1]:
            raise KernelError(f"{op}: explicit_paddings must be zero in the batch and depth "
                              f"dimensions, got {raw} ({fmt})")
        explicit = (raw[2 * h], raw[2 * h + 1], raw[2 * w], raw[2 * w + 1])
    elif raw:
        raise KernelError(f"{op}: explicit_paddings must be empty unless padding is EXPLICIT "
                          f"(padding={padding!r}, explicit_paddings={raw})")
    return ConvAttrs((strides[h], strides[w]), (dilations[h], dilations[w]), padding, explicit,
                     nchw)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _window(op: str, dim: str, size: int, k: int, stride: int, dilation: int, padding: str,
            before: int, after: int) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of one spatial dimension."""
    k_eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = (size + stride - 1) // stride
        need = max(0, (out - 1) * stride + k_eff - size)
        return out, need // 2, need - need // 2
    if padding == "VALID":
        before = after = 0
    out = _trunc_div(size + before + after - k_eff + stride, stride)
    if out < 0:
        raise KernelError(f"{op}: computed output size would be negative: {out} [{dim}: input "
                          f"{size}, effective filter size {k_eff}, stride {stride}, padding "
                          f"{before}+{after}]; use a smaller filter or more padding")
    return out, before, after


def geometry(op: str, a: ConvAttrs, in_shape: tuple[int, ...], k_h: int, k_w: int) -> ConvGeometry:
    """The geometry of a convolution of an NHWC input of ``in_shape`` with a
    ``k_h`` x ``k_w`` filter."""
    n, ih, iw, c = in_shape
    oh, pt, pb = _window(op, "rows", ih, k_h, a.strides[0], a.dilations[0], a.padding,
                         a.explicit[0], a.explicit[1])
    ow, pl, pr = _window(op, "cols", iw, k_w, a.strides[1], a.dilations[1], a.padding,
                         a.explicit[2], a.explicit[3])
    return ConvGeometry(n, ih, iw, c, k_h, k_w, oh, ow, a.strides, a.dilations, (pt, pb, pl, pr))


def check_rank4(op: str, name: str, x: np.ndarray) -> None:
    if x.ndim != 4:
        raise KernelError(f"{op}: {name} must be 4-dimensional, got shape {list(x.shape)}")


def check_dtypes(op: str, allowed: tuple[str, ...], *arrays: np.ndarray) -> np.dtype:
    dt = arrays[0].dtype
    for x in arrays[1:]:
        if x.dtype != dt:
            raise KernelError(f"{op}: operands have different dtypes {dt} and {x.dtype}; Cast "
                              "one of them so both match")
    if dt.name not in allowed:
        raise KernelError(f"{op}: dtype {dt} is not supported on CPU (supported: "
                          f"{', '.join(allowed)}); Cast first")
    return dt


def sizes_vector(op: str, name: str, value: Any, allowed: tuple[int, ...]) -> list[int]:
    """An int32/int64 shape vector input (``input_sizes``, ``filter_sizes``)."""
    v = np.asarray(value)
    if v.ndim != 1 or v.dtype.kind not in "iu" or len(v) not in allowed:
        raise KernelError(f"{op}: {name} must be an integer vector of "
                          f"{' or '.join(map(str, allowed))} elements, got {v.dtype} "
                          f"shape {list(v.shape)}")
    out = [int(s) for s in v.tolist()]
    if min(out, default=0) < 0:
        raise KernelError(f"{op}: {name} must not be negative, got {out}")
    return out


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    """``x`` as a C-contiguous NHWC array (a copy only when it must be)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1) if nchw else x)


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x


def nhwc_shape(shape: list[int] | tuple[int, ...], nchw: bool) -> tuple[int, int, int, int]:
    s = tuple(int(d) for d in shape)
    return (s[0], s[2], s[3], s[1]) if nchw else (s[0], s[1], s[2], s[3])
