"""Convolutions: ``dt.nn.conv2d``, ``conv2d_transpose``, ``depthwise_conv2d``,
``depthwise_conv2d_native``, ``separable_conv2d`` and the two backprops
(TF's ``nn_ops.py``, with ``tf.compat.v1`` signatures that also take TF2's
keyword spellings: ``filters=``, ``input=``, ``dilations=``).

Each builder adds one op of TF's type with TF's attrs (``strides``,
``padding``, ``explicit_paddings``, ``data_format``, ``dilations``, all of 4
ints in the order of ``data_format``); the op catalogue's shape functions
(:mod:`distrib.framework.conv_shapes`) check shapes and report a mismatch at
the line that built it. As TF's Python layer does, ``strides`` and
``dilations`` may be an int, or 1, 2 or 4 ints (:func:`get_sequence`), and
``padding`` a list of 4 ``[before, after]`` pairs for explicit padding
(:func:`convert_padding`). A malformed argument is a :class:`NNArgumentError`,
which is also the ``ValueError`` TF raises. ``depthwise_conv2d``'s ``rate``
becomes the op's ``dilations`` (TF reaches the same numbers through
space-to-batch).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = [
    "NNArgumentError", "get_sequence", "convert_padding", "conv2d", "conv2d_transpose",
    "conv2d_backprop_input", "conv2d_backprop_filter", "depthwise_conv2d",
    "depthwise_conv2d_native", "depthwise_conv2d_native_backprop_input",
    "depthwise_conv2d_native_backprop_filter", "separable_conv2d",
]


class NNArgumentError(InvalidArgumentError, ValueError):
    """A malformed argument to a ``dt.nn`` builder (a stride list of the wrong
    length, both ``filter`` and ``filters``). Also a ``ValueError``, which is
    what TF raises, so ported ``except ValueError`` code keeps working."""


def channel_index(data_format: str | None) -> int:
    """The channel axis of a 4-d tensor: 1 for ``NC..`` formats, else 3 (TF's rule)."""
    return 1 if data_format is not None and data_format.startswith("NC") else 3


def get_sequence(value: Any, n: int, channel: int, name: str) -> list[int]:
    """TF's ``_get_sequence``: ``value`` (None, an int, or 1, ``n`` or ``n + 2``
    ints) as ``n + 2`` ints, 1 in the batch and channel dimensions."""
    if value is None:
        return [1] * (n + 2)
    if isinstance(value, (int, np.integer)):
        seq = [int(value)]
    else:
        try:
            seq = [int(v) for v in value]
        except (TypeError, ValueError):
            raise NNArgumentError(f"{name} should be an int or a list of ints, got "
                                  f"{value!r}") from None
    if len(seq) == n + 2:
        return seq
    if len(seq) == 1:
        seq = seq * n
    elif len(seq) != n:
        raise NNArgumentError(f"{name} should be of length 1, {n} or {n + 2} but was "
                              f"{len(seq)} ({value!r})")
    return [1, *seq, 1] if channel != 1 else [1, 1, *seq]


def convert_padding(padding: Any, expected_length: int = 4) -> tuple[Any, list[int]]:
    """TF's ``convert_padding``: a string passes as it is; a list of
    ``expected_length`` ``[before, after]`` pairs becomes ``"EXPLICIT"`` and
    the flat ``explicit_paddings``."""
    if isinstance(padding, str) and padding == "EXPLICIT":
        raise NNArgumentError("'EXPLICIT' is not a valid value for padding; to pad explicitly, "
                              "give padding as a list of [before, after] pairs")
    if not isinstance(padding, (list, tuple)):
        return padding, []
    flat: list[int] = []
    for pair in padding:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise NNArgumentError(f"when padding is a list, each element must be a [before, "
                                  f"after] pair; got {padding!r}")
        flat.extend(int(p) for p in pair)
    if len(padding) != expected_length:
        raise NNArgumentError(f"when padding is a list, it must be of size {expected_length} "
                              f"(one pair per dimension), got {padding!r}")
    return "EXPLICIT", flat


def pick(new_name: str, new: Any, old_name: str, old: Any) -> Any:
    """One argument that TF spells two ways (``filters`` / ``filter``)."""
    if new is not None and old is not None:
        raise NNArgumentError(f"cannot specify both {new_name!r} and {old_name!r}")
    return new if new is not None else old


def _conv_attrs(strides: Any, padding: Any, data_format: str | None, dilations: Any,
                use_cudnn_on_gpu: bool | None = True) -> dict:
    if isinstance(use_cudnn_on_gpu, str):
        raise NNArgumentError(f"use_cudnn_on_gpu is a bool; got {use_cudnn_on_gpu!r} (give "
                              "data_format as a keyword: dt.nn follows tf.compat.v1's order)")
    fmt = data_format or "NHWC"
    channel = channel_index(fmt)
    padding, explicit = convert_padding(padding)
    attrs = {"strides": get_sequence(strides, 2, channel, "strides"), "padding": padding,
             "explicit_paddings": explicit, "data_format": fmt,
             "dilations": get_sequence(dilations, 2, channel, "dilations")}
    if use_cudnn_on_gpu is not None:
        attrs["use_cudnn_on_gpu"] = bool(use_cudnn_on_gpu)
    return attrs


def _sizes_tensor(value: Any) -> Tensor:
    if ops.is_tensor(value):
        return ops.cast(ops.convert_to_tensor(value), dtypes.int32)
    return ops.constant([int(v) for v in value], dtype=dtypes.int32)


def conv2d(input: Any, filter: Any = None, strides: Any = None, padding: Any = None,  # noqa: A002
           use_cudnn_on_gpu: bool = True, data_format: str = "NHWC",
           dilations: Any = (1, 1, 1, 1), name: str | None = None, filters: Any = None
           ) -> Tensor:
    """2-D convolution of ``input`` [batch, h, w, in] by ``filter`` [fh, fw, in, out]
    (a ``Conv2D`` op)."""
    filter = pick("filters", filters, "filter", filter)  # noqa: A001 - TF's name
    attrs = _conv_attrs(strides, padding, data_format, dilations, use_cudnn_on_gpu)
    with name_scope(name, "Conv2D", [input, filter]) as scope:
        x, f = ops.convert_pair(input, filter)
        return ops.op_output("Conv2D", [x, f], attrs, scope)


def conv2d_backprop_input(input_sizes: Any, filter: Any = None,  # noqa: A002
                          out_backprop: Any = None, strides: Any = None, padding: Any = None,
                          use_cudnn_on_gpu: bool = True, data_format: str = "NHWC",
                          dilations: Any = (1, 1, 1, 1), name: str | None = None,
                          filters: Any = None) -> Tensor:
    """The gradient of ``conv2d`` with respect to its input, of shape
    ``input_sizes`` (a ``Conv2DBackpropInput`` op)."""
    filter = pick("filters", filters, "filter", filter)  # noqa: A001 - TF's name
    attrs = _conv_attrs(strides, padding, data_format, dilations, use_cudnn_on_gpu)
    with name_scope(name, "Conv2DBackpropInput", [filter, out_backprop]) as scope:
        f, dy = ops.convert_pair(filter, out_backprop)
        return ops.op_output("Conv2DBackpropInput", [_sizes_tensor(input_sizes), f, dy], attrs,
                             scope)


def conv2d_backprop_filter(input: Any, filter_sizes: Any, out_backprop: Any,  # noqa: A002
                           strides: Any = None, padding: Any = None,
                           use_cudnn_on_gpu: bool = True, data_format: str = "NHWC",
                           dilations: Any = (1, 1, 1, 1), name: str | None = None) -> Tensor:
    """The gradient of ``conv2d`` with respect to its filter, of shape
    ``filter_sizes`` (a ``Conv2DBackpropFilter`` op)."""
    attrs = _conv_attrs(strides, padding, data_format, dilations, use_cudnn_on_gpu)
    with name_scope(name, "Conv2DBackpropFilter", [input, out_backprop]) as scope:
        x, dy = ops.convert_pair(input, out_backprop)
        return ops.op_output("Conv2DBackpropFilter", [x, _sizes_tensor(filter_sizes), dy],
                             attrs, scope)


def conv2d_transpose(value: Any = None, filter: Any = None,  # noqa: A002
                     output_shape: Any = None, strides: Any = None, padding: Any = "SAME",
                     data_format: str = "NHWC", name: str | None = None, input: Any = None,  # noqa: A002
                     filters: Any = None, dilations: Any = None) -> Tensor:
    """The transpose of ``conv2d`` (its gradient with respect to the input):
    ``value`` [batch, h, w, in] by ``filter`` [fh, fw, out, in] to ``output_shape``
    (a ``Conv2DBackpropInput`` op)."""
    value = pick("input", input, "value", value)
    filter = pick("filters", filters, "filter", filter)  # noqa: A001 - TF's name
    if value is None or filter is None or output_shape is None:
        raise NNArgumentError("conv2d_transpose needs value (input), filter (filters) and "
                              "output_shape")
    attrs = _conv_attrs(strides, padding, data_format, dilations, None)
    with name_scope(name, "conv2d_transpose", [value, filter]) as scope:
        x, f = ops.convert_pair(value, filter)
        if not ops.is_tensor(output_shape) and len(list(output_shape)) != 4:
            raise NNArgumentError(f"output_shape must have 4 elements, got {output_shape!r}")
        return ops.op_output("Conv2DBackpropInput", [_sizes_tensor(output_shape), f, x], attrs,
                             scope)


# -- depthwise and separable ----------------------------------------------------------------------
def depthwise_conv2d_native(input: Any, filter: Any, strides: Any, padding: Any,  # noqa: A002
                            data_format: str = "NHWC", dilations: Any = (1, 1, 1, 1),
                            name: str | None = None) -> Tensor:
    """Each input channel convolved by its own ``channel_multiplier`` filters:
    ``filter`` [fh, fw, in, multiplier] gives ``in * multiplier`` channels (a
    ``DepthwiseConv2dNative`` op)."""
    attrs = _conv_attrs(strides, padding, data_format, dilations, None)
    with name_scope(name, "DepthwiseConv2dNative", [input, filter]) as scope:
        x, f = ops.convert_pair(input, filter)
        return ops.op_output("DepthwiseConv2dNative", [x, f], attrs, scope)


def depthwise_conv2d_native_backprop_input(input_sizes: Any, filter: Any,  # noqa: A002
                                           out_backprop: Any, strides: Any, padding: Any,
                                           data_format: str = "NHWC",
                                           dilations: Any = (1, 1, 1, 1),
                                           name: str | None = None) -> Tensor:
    attrs = _conv_attrs(strides, padding, data_format, dilations, None)
    with name_scope(name, "DepthwiseConv2dNativeBackpropInput", [filter, out_backprop]) as scope:
        f, dy = ops.convert_pair(filter, out_backprop)
        return ops.op_output("DepthwiseConv2dNativeBackpropInput",
                             [_sizes_tensor(input_sizes), f, dy], attrs, scope)


def depthwise_conv2d_native_backprop_filter(input: Any, filter_sizes: Any,  # noqa: A002
                                            out_backprop: Any, strides: Any, padding: Any,
                                            data_format: str = "NHWC",
                                            dilations: Any = (1, 1, 1, 1),
                                            name: str | None = None) -> Tensor:
    attrs = _conv_attrs(strides, padding, data_format, dilations, None)
    with name_scope(name, "DepthwiseConv2dNativeBackpropFilter", [input, out_backprop]) as scope:
        x, dy = ops.convert_pair(input, out_backprop)
        return ops.op_output("DepthwiseConv2dNativeBackpropFilter",
                             [x, _sizes_tensor(filter_sizes), dy], attrs, scope)


def _rate(rate: Any, dilations: Any) -> Any:
    """``rate`` (TF1's atrous rate, 2 ints or one) and ``dilations`` are one argument."""
    if rate is not None and dilations is not None:
        raise NNArgumentError("cannot specify both 'rate' and 'dilations'")
    return rate if rate is not None else dilations


def _check_atrous(strides: list[int], dilations: list[int], channel: int) -> None:
    spatial = [i for i in range(4) if i not in (0, channel)]
    if any(dilations[i] > 1 for i in spatial) and any(strides[i] > 1 for i in spatial):
        raise NNArgumentError(f"strides > 1 not supported in conjunction with dilation rate "
                              f"> 1 (strides {strides}, dilations {dilations})")


def depthwise_conv2d(input: Any, filter: Any, strides: Any, padding: Any,  # noqa: A002
                     rate: Any = None, name: str | None = None, data_format: str | None = None,
                     dilations: Any = None) -> Tensor:
    """TF's ``depthwise_conv2d``: a ``DepthwiseConv2dNative`` whose ``rate`` (or
    ``dilations``: 2 ints) dilates the filter."""
    fmt = data_format or "NHWC"
    channel = channel_index(fmt)
    dil = get_sequence(_rate(rate, dilations), 2, channel, "dilations")
    strides = get_sequence(strides, 2, channel, "strides")
    _check_atrous(strides, dil, channel)
    with name_scope(name, "depthwise", [input, filter]) as scope:
        return depthwise_conv2d_native(input, filter, strides, padding, data_format=fmt,
                                       dilations=dil, name=scope)


def separable_conv2d(input: Any, depthwise_filter: Any, pointwise_filter: Any,  # noqa: A002
                     strides: Any, padding: Any, rate: Any = None, name: str | None = None,
                     data_format: str | None = None, dilations: Any = None) -> Tensor:
    """A depthwise convolution (``depthwise_filter`` [fh, fw, in, multiplier]) then a
    1x1 convolution (``pointwise_filter`` [1, 1, in * multiplier, out]), as TF's."""
    fmt = data_format or "NHWC"
    with name_scope(name, "separable_conv2d", [input, depthwise_filter, pointwise_filter]
                    ) as scope:
        pointwise = ops.convert_operand(pointwise_filter)
        pd = pointwise.shape.as_list()
        if pd is not None and (len(pd) != 4 or pd[0] not in (1, None) or pd[1] not in (1, None)):
            raise NNArgumentError(f"pointwise_filter must be [1, 1, in * multiplier, out], got "
                                  f"{pointwise.shape}")
        depthwise = depthwise_conv2d(input, depthwise_filter, strides, padding, rate=rate,
                                     name="depthwise", data_format=fmt, dilations=dilations)
        return conv2d(depthwise, pointwise, [1, 1, 1, 1], "VALID", data_format=fmt,
                      name=scope)

