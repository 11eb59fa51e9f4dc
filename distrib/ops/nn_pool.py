"""Pooling: ``dt.nn.max_pool``, ``max_pool2d``, ``avg_pool``, ``avg_pool2d``
(TF's ``nn_ops.py``; ``tf.compat.v1`` signatures, TF2's ``input=`` too).

``ksize`` and ``strides`` are an int or 1, 2 or 4 ints (TF1's 4-element lists
as the CIFAR-10 model writes them: ``ksize=[1, 3, 3, 1]``); ``max_pool`` also
takes explicit padding as a list of 4 ``[before, after]`` pairs, as TF's
``MaxPool`` does (``AvgPool`` has only ``SAME`` and ``VALID``). One op each,
``MaxPool`` or ``AvgPool``, with TF's attrs.
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.nn_conv import NNArgumentError, channel_index, convert_padding, get_sequence, pick

__all__ = ["max_pool", "max_pool2d", "avg_pool", "avg_pool2d"]


def _pool_attrs(ksize: Any, strides: Any, padding: Any, data_format: str | None,
                explicit_ok: bool) -> dict:
    fmt = data_format or "NHWC"
    channel = channel_index(fmt)
    if ksize is None:
        raise NNArgumentError("ksize is required: an int, or 1, 2 or 4 ints")
    ksize = get_sequence(ksize, 2, channel, "ksize")
    if any(k == 0 for k in ksize):
        raise NNArgumentError(f"ksize cannot be zero, got {ksize}")
    attrs = {"ksize": ksize, "strides": get_sequence(strides, 2, channel, "strides"),
             "data_format": fmt}
    if explicit_ok:
        attrs["padding"], attrs["explicit_paddings"] = convert_padding(padding)
    elif isinstance(padding, (list, tuple)):
        raise NNArgumentError(f"avg_pool takes padding 'SAME' or 'VALID', not explicit pads "
                              f"({padding!r}); pad first with a zero padding")
    else:
        attrs["padding"] = padding
    return attrs


def max_pool(value: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
             name: str | None = None, input: Any = None) -> Tensor:  # noqa: A002 - TF's name
    """The largest value of each ``ksize`` window (a ``MaxPool`` op)."""
    value = pick("input", input, "value", value)
    attrs = _pool_attrs(ksize, strides, padding, data_format, explicit_ok=True)
    with name_scope(name, "MaxPool", [value]) as scope:
        return ops.op_output("MaxPool", [ops.convert_operand(value)], attrs, scope)


def max_pool2d(input: Any, ksize: Any, strides: Any, padding: Any,  # noqa: A002 - TF's name
               data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """``max_pool`` of a 4-d input (TF2's name)."""
    return max_pool(input, ksize, strides, padding, data_format=data_format, name=name)


def avg_pool(value: Any, ksize: Any, strides: Any, padding: Any, data_format: str = "NHWC",
             name: str | None = None, input: Any = None) -> Tensor:  # noqa: A002 - TF's name
    """The mean of each ``ksize`` window, over the window's elements inside the
    input (``SAME`` padding does not count the pads; an ``AvgPool`` op)."""
    value = pick("input", input, "value", value)
    attrs = _pool_attrs(ksize, strides, padding, data_format, explicit_ok=False)
    with name_scope(name, "AvgPool", [value]) as scope:
        return ops.op_output("AvgPool", [ops.convert_operand(value)], attrs, scope)


def avg_pool2d(input: Any, ksize: Any, strides: Any, padding: Any,  # noqa: A002 - TF's name
               data_format: str = "NHWC", name: str | None = None) -> Tensor:
    """``avg_pool`` of a 4-d input (TF2's name)."""
    return avg_pool(input, ksize, strides, padding, data_format=data_format, name=name)
