"""``dt.keras.layers.Flatten``, ``ZeroPadding2D`` and ``Reshape`` (Keras 3's
arguments, defaults and configs).

``Flatten`` folds every dimension but the batch into one (channels first: the
channels moved last before, so the order is the channels-last one, as Keras).

``ZeroPadding2D`` joins blocks of zeros to each side of the two spatial axes
with ``ConcatV2`` (the catalogue has no ``Pad`` op; a block is a ``ZerosLike``
of a one-row slice of the input, repeated, so it works with a batch known only
at run time, and its gradient is the concatenation's: the slice of the
inputs). ``Reshape`` keeps the batch and reshapes the rest to
``target_shape`` (one ``-1`` allowed).
"""
from __future__ import annotations

import math
from typing import Any

from distrib.keras import backend, conv_utils
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat, slice_rows

__all__ = ["Flatten", "ZeroPadding2D", "Reshape"]


class Flatten(Layer):
    """``Flatten(data_format=None)``: every dimension but the first folded into one
    (channels first: moved last before, so the order is the channels-last one, as Keras)."""

    def __init__(self, data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        fmt = backend.image_data_format() if data_format is None else str(data_format).lower()
        if fmt not in ("channels_first", "channels_last"):
            raise ValueError("The `data_format` argument must be one of {'channels_first', "
                             f"'channels_last'}}. Received: data_format={data_format}")
        self.data_format = fmt

    def call(self, inputs: Any, training: Any = None) -> Any:
        shape = shape_tuple(inputs.shape)
        if any(d is None for d in shape[1:]):
            raise ValueError(f"Flatten needs every dimension but the first known; got {shape}")
        if self.data_format == "channels_first" and len(shape) > 2:
            inputs = ops.transpose(inputs, [0, *range(2, len(shape)), 1])
        return ops.reshape(inputs, [-1, int(math.prod(shape[1:]))])

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        return (shape[0], int(math.prod(shape[1:])))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format}


class ZeroPadding2D(Layer):
    """``ZeroPadding2D(padding=(1, 1), data_format=None)``: ``padding`` an int, 2 ints
    (symmetric height, width) or ``((top, bottom), (left, right))``."""

    def __init__(self, padding: Any = (1, 1), data_format: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_format = conv_utils.standardize_data_format(data_format)
        if isinstance(padding, int):
            self.padding = ((padding, padding), (padding, padding))
        elif hasattr(padding, "__len__"):
            if len(padding) != 2:
                raise ValueError(f"`padding` should have two elements. Received: "
                                 f"padding={padding}.")
            self.padding = (
                conv_utils.standardize_tuple(padding[0], 2, "1st entry of padding",
                                             allow_zero=True),
                conv_utils.standardize_tuple(padding[1], 2, "2nd entry of padding",
                                             allow_zero=True))
        else:
            raise ValueError("`padding` should be either an int, a tuple of 2 ints "
                             "(symmetric_height_pad, symmetric_width_pad), or a tuple of 2 "
                             "tuples of 2 ints ((top_pad, bottom_pad), (left_pad, right_pad)). "
                             f"Received: padding={padding}.")

    def _spatial_axes(self) -> tuple[int, int]:
        return (1, 2) if self.data_format == "channels_last" else (2, 3)

    def call(self, inputs: Any, training: Any = None) -> Any:
        if len(shape_tuple(inputs.shape)) != 4:
            raise ValueError(f"ZeroPadding2D needs inputs of rank 4, got shape "
                             f"{shape_tuple(inputs.shape)}")
        x = inputs
        for axis, (before, after) in zip(self._spatial_axes(), self.padding):
            if before == 0 and after == 0:
                continue
            zero = ops.zeros_like(slice_rows(x, 0, 1, axis=axis))
            x = concat([zero] * before + [x] + [zero] * after, axis)
        return x

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = list(shape_tuple(input_shape))
        for axis, (before, after) in zip(self._spatial_axes(), self.padding):
            if shape[axis] is not None:
                shape[axis] += before + after
        return tuple(shape)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "padding": self.padding,
                "data_format": self.data_format}


def _resolved(input_dims: tuple[int | None, ...], target: tuple[int, ...]
              ) -> tuple[int | None, ...]:
    """``target`` with its -1 worked out from ``input_dims`` (Keras'
    ``compute_reshape_output_shape``): None while an input dimension is unknown."""
    if -1 not in target:
        if None not in input_dims and math.prod(input_dims) != math.prod(target):
            raise ValueError(f"The total size of the tensor must be unchanged. Received: "
                             f"input_shape={input_dims}, target_shape={target}")
        return target
    if None in input_dims:
        return tuple(None if d == -1 else d for d in target)
    known = math.prod(d for d in target if d != -1)
    total = math.prod(input_dims)
    if known == 0 or total % known:
        raise ValueError(f"The total size of the tensor must be unchanged. Received: "
                         f"input_shape={input_dims}, target_shape={target}")
    return tuple(total // known if d == -1 else d for d in target)


class Reshape(Layer):
    """``Reshape(target_shape)``: every dimension but the batch's reshaped."""

    def __init__(self, target_shape: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        target = tuple(int(d) for d in target_shape)
        if sum(d == -1 for d in target) > 1 or any(d < -1 or d == 0 for d in target):
            raise ValueError(f"There cannot be more than one unknown dimension, and the others "
                             f"must be positive, in `target_shape`. Received: "
                             f"target_shape={tuple(target_shape)}")
        self.target_shape = target

    def call(self, inputs: Any, training: Any = None) -> Any:
        dims = _resolved(shape_tuple(inputs.shape)[1:], self.target_shape)
        if None not in dims:
            return ops.reshape(inputs, [-1, *dims])
        # a -1 an unknown dimension decides: the batch from the input's shape at run time
        shape = concat([slice_rows(ops.shape(inputs), 0, 1),
                        ops.constant(list(self.target_shape), dtype="int32")], 0)
        return ops.reshape(inputs, shape)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        return (shape[0], *_resolved(shape[1:], self.target_shape))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "target_shape": self.target_shape}
