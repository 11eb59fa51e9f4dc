"""Argument rules and shape arithmetic the convolutional layers share (Keras 3's
``argument_validation``, ``standardize_data_format`` and ``operation_utils``).

A layer keeps its arguments in Keras' standard form from the constructor on
(``kernel_size=3`` is ``(3, 3)``, ``padding="SAME"`` is ``"same"``,
``data_format=None`` is ``"channels_last"``), so ``get_config`` gives Keras'
values and ``from_config(get_config())`` makes an equal layer. The output
shapes are Keras' ``compute_output_shape`` formulas (None where a dimension
is unknown), and the TF attrs a layer's op takes come from here too
(``"NHWC"``/``"NCHW"``, 4-element strides), so the layers and their shapes
cannot disagree.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.keras import backend

__all__ = ["standardize_tuple", "standardize_data_format", "standardize_padding",
           "tf_data_format", "four", "conv_output_shape", "conv_transpose_output_shape",
           "pooling_output_shape", "channel_axis"]


def standardize_tuple(value: Any, n: int, name: str, allow_zero: bool = False
                      ) -> tuple[int, ...]:
    """``value`` (an int or ``n`` ints) as a tuple of ``n`` ints (Keras' rule and error)."""
    if isinstance(value, int):
        out: tuple[int, ...] = (value,) * n
    else:
        try:
            out = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. "
                             f"Received {name}={value}") from None
        if len(out) != n:
            raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. "
                             f"Received {name}={value}")
    least = 0 if allow_zero else 1
    if any(v < least for v in out):
        relation = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"The `{name}` argument must be a tuple of {n} integers. Received "
                         f"{name}={value}, including values {out} that do not satisfy "
                         f"`value {relation}`")
    return out


def standardize_data_format(data_format: str | None) -> str:
    """``None`` is ``backend.image_data_format()`` (``"channels_last"``)."""
    if data_format is None:
        return backend.image_data_format()
    value = str(data_format).lower()
    if value not in ("channels_first", "channels_last"):
        raise ValueError("The `data_format` argument must be one of {'channels_first', "
                         f"'channels_last'}}. Received: data_format={data_format}")
    return value


def standardize_padding(padding: str) -> str:
    value = str(padding).lower()
    if value not in ("valid", "same"):
        raise ValueError("The `padding` argument must be a list/tuple or one of ('valid', "
                         f"'same'). Received: {padding}")
    return value


def tf_data_format(data_format: str) -> str:
    return "NHWC" if data_format == "channels_last" else "NCHW"


def channel_axis(data_format: str) -> int:
    return -1 if data_format == "channels_last" else 1


def four(pair: Sequence[int], data_format: str) -> list[int]:
    """Two spatial values as TF's 4-element attr (1 on the batch and channel axes)."""
    h, w = (int(v) for v in pair)
    return [1, h, w, 1] if data_format == "channels_last" else [1, 1, h, w]


def _spatial(shape: Sequence[Any], data_format: str) -> tuple[Any, ...]:
    return tuple(shape[1:-1]) if data_format == "channels_last" else tuple(shape[2:])


def _with_spatial(shape: Sequence[Any], spatial: Sequence[Any], channels: Any,
                  data_format: str) -> tuple[Any, ...]:
    if data_format == "channels_last":
        return (shape[0], *spatial, channels)
    return (shape[0], channels, *spatial)


def conv_output_shape(input_shape: Sequence[Any], filters: int, kernel_size: Sequence[int],
                      strides: Sequence[int], padding: str, data_format: str,
                      dilation_rate: Sequence[int]) -> tuple[Any, ...]:
    """Keras' ``compute_conv_output_shape``: ``valid`` keeps the windows that fit
    (an error when none does), ``same`` is ``ceil(size / stride)``."""
    out = []
    for size, k, s, d in zip(_spatial(input_shape, data_format), kernel_size, strides,
                             dilation_rate):
        if size is None:
            out.append(None)
        elif padding == "valid":
            n = (size - d * (k - 1) - 1) // s + 1
            if n <= 0:
                raise ValueError(f"Computed output size would be zero or negative. Received "
                                 f"`inputs shape={tuple(input_shape)}`, `kernel size="
                                 f"{tuple(kernel_size)}`, `dilation_rate={tuple(dilation_rate)}`"
                                 f", `strides={tuple(strides)}`, `padding={padding}`.")
            out.append(n)
        else:
            out.append((size - 1) // s + 1)
    return _with_spatial(input_shape, out, filters, data_format)


def conv_transpose_output_shape(input_shape: Sequence[Any], filters: int,
                                kernel_size: Sequence[int], strides: Sequence[int],
                                padding: str, output_padding: Sequence[int] | None,
                                data_format: str, dilation_rate: Sequence[int]
                                ) -> tuple[Any, ...]:
    """Keras' ``compute_conv_transpose_output_shape`` (TF's deconv output length)."""
    out = []
    for i, (size, k, s, d) in enumerate(zip(_spatial(input_shape, data_format), kernel_size,
                                            strides, dilation_rate)):
        extra = None if output_padding is None else output_padding[i]
        k = (k - 1) * d + 1
        if size is None:
            out.append(None)
        elif padding == "valid":
            out.append((size - 1) * s + k + (max(k, s) - k if extra is None else extra))
        elif extra is None:
            out.append(size * s)
        else:
            out.append((size - 1) * s + k % 2 + extra)
    return _with_spatial(input_shape, out, filters, data_format)


def pooling_output_shape(input_shape: Sequence[Any], pool_size: Sequence[int],
                         strides: Sequence[int], padding: str, data_format: str
                         ) -> tuple[Any, ...]:
    """Keras' ``compute_pooling_output_shape``."""
    out = []
    for size, p, s in zip(_spatial(input_shape, data_format), pool_size, strides):
        if size is None:
            out.append(None)
        elif padding == "valid":
            out.append((size - p) // s + 1)
        else:
            out.append((size - 1) // s + 1)
    channels = input_shape[-1] if data_format == "channels_last" else input_shape[1]
    return _with_spatial(input_shape, out, channels, data_format)
