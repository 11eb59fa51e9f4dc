"""Static shapes of the convolution and pooling ops (TF's
``Conv2DShapeWithExplicitPadding``, ``DepthwiseConv2DNativeShape``,
``MaxPoolShape`` ... in ``common_shape_fns.cc``), their cost in multiply-adds
for the kernel pool, and the helpers :mod:`distrib.framework.nn_shapes`
(normalization, top-k) shares.

The same rules as :mod:`distrib.framework.op_shapes`: each function takes the
op's type, final name, input tensors and attrs (TF's attr names: ``strides``,
``padding``, ``explicit_paddings``, ``data_format``, ``dilations``,
``ksize``) and returns the outputs' (dtype, shape); a known fact that
contradicts another (a filter whose depth is not the input's, a stride in the
batch dimension, padding ``"FULL"``) is an ``InvalidArgumentError`` naming
the op and the shapes, at build time. Unknown dimensions stay None.

A window's output size is TF's ``GetWindowedOutputSizeVerbose``: with the
effective filter ``(k - 1) * dilation + 1``, ``VALID`` gives
``(in - eff + stride) / stride`` (C's truncating division; negative is an
error), ``SAME`` ``ceil(in / stride)``, ``EXPLICIT`` ``VALID`` on the padded
input. The backprop ops' outputs have the shape their ``*_sizes`` input
holds: a constant, or the ``Shape`` of a tensor (what the gradients pass),
whose static shape is then the answer.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.dtypes import DType
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape

__all__ = [
    "FORMATS", "window_output", "spatial_axes", "known_int_values", "fail", "data_format_of",
    "rank4", "same_float", "merge_dim",
    "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "depthwise_conv2d",
    "pool", "max_pool_grad", "avg_pool_grad",
    "conv2d_flops", "conv2d_backprop_flops", "depthwise_flops",
]

FORMATS = ("NHWC", "NCHW")


def fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


def spatial_axes(data_format: str) -> tuple[int, int, int]:
    """(height, width, channel) axes of a 4-d tensor in ``data_format``."""
    return (2, 3, 1) if data_format == "NCHW" else (1, 2, 3)


def window_output(size: int | None, k: int | None, stride: int, dilation: int, padding: str,
                  pads: tuple[int, int] = (0, 0)) -> int | None:
    """The output size of a window of ``k`` (dilated by ``dilation``) sliding by
    ``stride`` over ``size`` elements (TF's rule, see the module header); None
    when unknown; negative when the window does not fit (the caller says so)."""
    if size is None or k is None:
        return None
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        return (size + stride - 1) // stride
    if padding == "EXPLICIT":
        size += pads[0] + pads[1]
    num = size - eff + stride
    return num // stride if num >= 0 else -(-num // stride)   # C's truncation


def known_int_values(t: Any) -> list[int | None] | None:
    """What is known at build time of the int vector ``t``: a constant's values, or
    the static dims of the tensor whose ``Shape`` it is (None where unknown); None
    when nothing is known."""
    op = t.op
    if op.type == "Const":
        return [int(v) for v in np.asarray(op.attrs["value"]).reshape(-1)]
    if op.type == "Shape" and op.inputs:
        return op.inputs[0].shape.as_list()
    return None


# -- attrs ------------------------------------------------------------------------------------
def data_format_of(op_type: str, name: str, attrs: dict) -> str:
    fmt = attrs.get("data_format", "NHWC")
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    if fmt not in FORMATS:
        raise fail(op_type, name, f"data_format {fmt!r} is not supported; use 'NHWC' or 'NCHW'")
    return fmt


def _four(op_type: str, name: str, attrs: dict, key: str, fmt: str, default: Any = None,
          spatial_only: bool = True) -> list[int]:
    """A 4-int attr (strides, dilations, ksize), >= 1, and 1 off the spatial axes."""
    value = attrs.get(key, default)
    if value is None:
        raise fail(op_type, name, f"attr {key!r} is required (4 ints, one per dimension of "
                    f"{fmt})")
    try:
        ints = [int(v) for v in value]
    except (TypeError, ValueError):
        ints = []
    if len(ints) != 4 or min(ints) < 1:
        raise fail(op_type, name, f"{key} must be 4 positive ints (one per dimension of {fmt}), "
                    f"got {value!r}")
    h, w, c = spatial_axes(fmt)
    if spatial_only and (ints[0] != 1 or ints[c] != 1):
        raise fail(op_type, name, f"{key} {ints} must be 1 in the batch and depth dimensions "
                    f"({fmt}); only the spatial dimensions take other values")
    return ints


def _padding(op_type: str, name: str, attrs: dict, fmt: str, explicit_ok: bool
             ) -> tuple[str, list[tuple[int, int]]]:
    """The padding attr and the (before, after) pads of height and width."""
    padding = attrs.get("padding")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    allowed = ("SAME", "VALID", "EXPLICIT") if explicit_ok else ("SAME", "VALID")
    if padding not in allowed:
        raise fail(op_type, name, f"padding must be one of {allowed}, got {padding!r}")
    explicit = list(attrs.get("explicit_paddings") or [])
    if padding != "EXPLICIT":
        if explicit:
            raise fail(op_type, name, f"explicit_paddings {explicit} must be empty when padding "
                        f"is {padding!r}")
        return padding, [(0, 0), (0, 0)]
    if len(explicit) != 8 or any(int(p) < 0 for p in explicit):
        raise fail(op_type, name, f"explicit_paddings must be 8 non-negative ints (a before and "
                    f"after pad per dimension of {fmt}), got {explicit}")
    pairs = [(int(explicit[2 * i]), int(explicit[2 * i + 1])) for i in range(4)]
    h, w, c = spatial_axes(fmt)
    if pairs[0] != (0, 0) or pairs[c] != (0, 0):
        raise fail(op_type, name, f"explicit_paddings {explicit} must be 0 in the batch and "
                    f"depth dimensions ({fmt})")
    return padding, [pairs[h], pairs[w]]


def rank4(op_type: str, name: str, t: Any, what: str) -> list[int | None]:
    if t.shape.rank is None:
        return [None] * 4
    if t.shape.rank != 4:
        raise fail(op_type, name, f"{what} must be 4-dimensional, got {t.name} of shape {t.shape}")
    return list(t.shape.dims)


def same_float(op_type: str, name: str, *ts: Any) -> DType:
    dtype = ts[0].dtype
    for t in ts:
        if t.dtype != dtype or not t.dtype.is_floating:
            raise fail(op_type, name, "inputs must share one floating-point dtype, got "
                        + ", ".join(f"{x.name} {x.dtype.name}" for x in ts))
    return dtype


def merge_dim(op_type: str, name: str, a: int | None, b: int | None, detail: str) -> int | None:
    if a is not None and b is not None and a != b:
        raise fail(op_type, name, detail)
    return a if a is not None else b


def _out_sizes(op_type: str, name: str, dims: list[int | None], kh: int | None,
               kw: int | None, fmt: str, attrs: dict, explicit_ok: bool = True,
               dilations: list[int] | None = None) -> tuple[int | None, int | None]:
    h, w, _ = spatial_axes(fmt)
    strides = _four(op_type, name, attrs, "strides", fmt)
    padding, pads = _padding(op_type, name, attrs, fmt, explicit_ok)
    dil = dilations or [1, 1, 1, 1]
    out = []
    for axis, k, pad in ((h, kh, pads[0]), (w, kw, pads[1])):
        size = window_output(dims[axis], k, strides[axis], dil[axis], padding, pad)
        if size is not None and size < 0:
            raise fail(op_type, name, f"the window {k} (dilation {dil[axis]}) is larger than "
                        f"the {'padded ' if padding == 'EXPLICIT' else ''}input ({dims[axis]}) "
                        f"along axis {axis} of {fmt} with padding {padding}: the output size "
                        "would be negative")
        out.append(size)
    return out[0], out[1]


def _nhwc_shape(fmt: str, n: Any, oh: Any, ow: Any, c: Any) -> TensorShape:
    return TensorShape([n, c, oh, ow] if fmt == "NCHW" else [n, oh, ow, c])


# -- convolution -------------------------------------------------------------------------------
def conv2d(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """Conv2D (input, filter [fh, fw, in, out]) and DepthwiseConv2dNative (filter
    [fh, fw, in, multiplier]: out = in * multiplier)."""
    x, f = inputs
    # TF's Conv2D also takes int32 (its T); the depthwise op and the gradients do not
    int_ok = op_type == "Conv2D" and x.dtype == f.dtype == dtypes.int32
    dtype = x.dtype if int_ok else same_float(op_type, name, x, f)
    fmt = data_format_of(op_type, name, attrs)
    dims, fd = rank4(op_type, name, x, "input"), rank4(op_type, name, f, "filter")
    _, _, c = spatial_axes(fmt)
    dil = _four(op_type, name, attrs, "dilations", fmt, [1, 1, 1, 1])
    depth, fin = dims[c], fd[2]
    if op_type == "DepthwiseConv2dNative":
        depth = merge_dim(op_type, name, depth, fin, f"input depth {depth} ({x.shape}, {fmt}) is "
                       f"not the filter's input depth {fin} ({f.shape})")
        out_c = None if depth is None or fd[3] is None else depth * fd[3]
    else:
        if depth is not None and fin is not None and (fin == 0 or depth % fin):
            raise fail(op_type, name, f"input depth {depth} ({x.shape}, {fmt}) is not a "
                        f"multiple of the filter's input depth {fin} ({f.shape})")
        out_c = fd[3]
        if None not in (depth, fin, out_c) and out_c % (depth // fin):
            raise fail(op_type, name, f"output depth {out_c} is not a multiple of the number of "
                       f"groups {depth // fin} (input depth {depth} / filter depth {fin})")
    oh, ow = _out_sizes(op_type, name, dims, fd[0], fd[1], fmt, attrs, dilations=dil)
    return [(dtype, _nhwc_shape(fmt, dims[0], oh, ow, out_c))]


def depthwise_conv2d(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return conv2d(op_type, name, inputs, attrs)


def _sizes(op_type: str, name: str, t: Any, what: str) -> list[int | None]:
    if not t.dtype.is_integer:
        raise fail(op_type, name, f"{what} must be an int32 vector of 4 sizes, got {t.name} "
                    f"{t.dtype.name}")
    if not t.shape.is_compatible_with([4]):
        raise fail(op_type, name, f"{what} must be a vector of 4 sizes, got shape {t.shape}")
    known = known_int_values(t)
    if known is not None and len(known) != 4:
        raise fail(op_type, name, f"{what} must hold 4 sizes, got {known}")
    return known if known is not None else [None] * 4


def _check_window(op_type: str, name: str, dims: list, fd: list, gd: list, fmt: str,
                  attrs: dict) -> None:
    """The input of ``dims`` convolved by a filter of ``fd`` has out_backprop's
    spatial size ``gd`` (where both are known)."""
    dil = _four(op_type, name, attrs, "dilations", fmt, [1, 1, 1, 1])
    oh, ow = _out_sizes(op_type, name, dims, fd[0], fd[1], fmt, attrs, dilations=dil)
    h, w, _ = spatial_axes(fmt)
    for axis, want in ((h, oh), (w, ow)):
        merge_dim(op_type, name, gd[axis], want, f"out_backprop {gd} has size {gd[axis]} along "
                  f"axis {axis} of {fmt}, but the input {dims} convolved by the filter {fd} "
                  f"(strides {attrs.get('strides')}, padding {attrs.get('padding')}) gives {want}")


def conv2d_backprop_input(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """Conv2DBackpropInput / DepthwiseConv2dNativeBackpropInput (input_sizes,
    filter, out_backprop): an input of ``input_sizes``."""
    sizes, f, dy = inputs
    dtype = same_float(op_type, name, f, dy)
    fmt = data_format_of(op_type, name, attrs)
    dims = _sizes(op_type, name, sizes, "input_sizes")
    fd, gd = rank4(op_type, name, f, "filter"), rank4(op_type, name, dy, "out_backprop")
    n, c = 0, spatial_axes(fmt)[2]
    depthwise = op_type.startswith("Depthwise")
    out_c = None if None in (fd[2], fd[3]) else (fd[2] * fd[3] if depthwise else fd[3])
    merge_dim(op_type, name, gd[c], out_c, f"out_backprop depth {gd[c]} ({dy.shape}, {fmt}) is "
              f"not the filter's output depth {out_c} ({f.shape})")
    if depthwise:
        dims[c] = merge_dim(op_type, name, dims[c], fd[2], f"input depth {dims[c]} is not the "
                            f"filter's input depth {fd[2]}")
    elif dims[c] is None:
        dims[c] = fd[2]
    elif fd[2] is not None and (fd[2] == 0 or dims[c] % fd[2]):
        raise fail(op_type, name, f"input depth {dims[c]} (input_sizes {dims}) is not a "
                   f"multiple of the filter's input depth {fd[2]} ({f.shape})")
    dims[n] = merge_dim(op_type, name, dims[n], gd[n], f"input_sizes {dims} and out_backprop "
                        f"{dy.shape} have different batch sizes")
    _check_window(op_type, name, dims, fd, gd, fmt, attrs)
    return [(dtype, TensorShape(dims))]


def conv2d_backprop_filter(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """Conv2DBackpropFilter / DepthwiseConv2dNativeBackpropFilter (input,
    filter_sizes, out_backprop): a filter of ``filter_sizes``."""
    x, sizes, dy = inputs
    dtype = same_float(op_type, name, x, dy)
    fmt = data_format_of(op_type, name, attrs)
    dims, gd = rank4(op_type, name, x, "input"), rank4(op_type, name, dy, "out_backprop")
    fd = _sizes(op_type, name, sizes, "filter_sizes")
    _check_window(op_type, name, dims, fd, gd, fmt, attrs)
    return [(dtype, TensorShape(fd))]


# -- pooling -----------------------------------------------------------------------------------
def pool(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """MaxPool (SAME, VALID, EXPLICIT) and AvgPool (SAME, VALID)."""
    x = inputs[0]
    ok = (lambda d: d.is_numeric) if op_type == "MaxPool" else (lambda d: d.is_floating)
    if not ok(x.dtype):
        raise fail(op_type, name, f"input {x.name} has dtype {x.dtype.name}; {op_type} needs a "
                    f"{'numeric' if op_type == 'MaxPool' else 'floating-point'} tensor")
    fmt = data_format_of(op_type, name, attrs)
    dims = rank4(op_type, name, x, "input")
    h, w, c = spatial_axes(fmt)
    ksize = _four(op_type, name, attrs, "ksize", fmt)
    oh, ow = _out_sizes(op_type, name, dims, ksize[h], ksize[w], fmt, attrs,
                        explicit_ok=op_type == "MaxPool")
    return [(x.dtype, _nhwc_shape(fmt, dims[0], oh, ow, dims[c]))]


def max_pool_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """MaxPoolGrad (orig_input, orig_output, grad): orig_input's shape."""
    x, y, g = inputs
    dtype = same_float(op_type, name, x, y, g)
    fmt = data_format_of(op_type, name, attrs)
    _four(op_type, name, attrs, "ksize", fmt)
    _four(op_type, name, attrs, "strides", fmt)
    _padding(op_type, name, attrs, fmt, True)
    try:
        y.shape.merge_with(g.shape)
    except ValueError:
        raise fail(op_type, name, f"orig_output {y.shape} and grad {g.shape} differ") from None
    return [(dtype, TensorShape(rank4(op_type, name, x, "orig_input")))]


def avg_pool_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    """AvgPoolGrad (orig_input_shape, grad): a tensor of orig_input_shape."""
    sizes, g = inputs
    same_float(op_type, name, g)
    fmt = data_format_of(op_type, name, attrs)
    _four(op_type, name, attrs, "ksize", fmt)
    _four(op_type, name, attrs, "strides", fmt)
    _padding(op_type, name, attrs, fmt, False)
    rank4(op_type, name, g, "grad")
    return [(g.dtype, TensorShape(_sizes(op_type, name, sizes, "orig_input_shape")))]


# -- costs (multiply-adds of a run, from its input values) --------------------------------------
def _nhwc_dims(shape: tuple, fmt: str) -> tuple[int, int, int, int]:
    n, a, b, c = shape
    return (n, b, c, a) if fmt == "NCHW" else (n, a, b, c)


def _run_out(args_shape: tuple, kh: int, kw: int, attrs: dict) -> tuple[int, int, int]:
    fmt = attrs.get("data_format", "NHWC")
    n, hh, ww, _ = _nhwc_dims(args_shape, fmt)
    h, w, _ = spatial_axes(fmt)
    strides = attrs.get("strides") or [1, 1, 1, 1]
    dil = attrs.get("dilations") or [1, 1, 1, 1]
    explicit = list(attrs.get("explicit_paddings") or [0] * 8)
    pad = attrs.get("padding", "VALID")
    oh = window_output(hh, kh, strides[h], dil[h], pad, (explicit[2 * h], explicit[2 * h + 1]))
    ow = window_output(ww, kw, strides[w], dil[w], pad, (explicit[2 * w], explicit[2 * w + 1]))
    return n, max(oh or 0, 0), max(ow or 0, 0)


def conv2d_flops(args: list, attrs: dict) -> int | None:
    """Conv2D: batch * out_h * out_w * fh * fw * in_depth * out_depth."""
    try:
        fh, fw, fin, fout = args[1].shape
        n, oh, ow = _run_out(args[0].shape, fh, fw, attrs)
    except (ValueError, TypeError, AttributeError, IndexError):
        return None
    return n * oh * ow * fh * fw * fin * fout


def conv2d_backprop_flops(args: list, attrs: dict) -> int | None:
    """Either backprop of Conv2D: as many multiply-adds as the forward, counted
    from out_backprop (always input 2) and the filter or its sizes."""
    try:
        dy, fshape = args[2], args[1]
        fh, fw, fin, fout = (fshape.shape if getattr(fshape, "ndim", 1) == 4
                             else [int(v) for v in fshape])
        n, a, b, _ = _nhwc_dims(dy.shape, attrs.get("data_format", "NHWC"))
    except (ValueError, TypeError, AttributeError, IndexError):
        return None
    return n * a * b * fh * fw * fin * fout


def depthwise_flops(args: list, attrs: dict) -> int | None:
    """DepthwiseConv2dNative: batch * out_h * out_w * fh * fw * in_depth * multiplier."""
    return conv2d_flops(args, attrs)
