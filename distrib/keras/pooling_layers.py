"""``dt.keras.layers.MaxPooling2D`` (``MaxPool2D``), ``AveragePooling2D``
(``AvgPool2D``), ``GlobalAveragePooling2D`` (``GlobalAvgPool2D``) and
``GlobalMaxPooling2D`` (``GlobalMaxPool2D``): Keras 3's arguments, defaults and
configs.

The window poolings are one ``MaxPool``/``AvgPool`` op each (``strides``
defaults to ``pool_size``, as in Keras; ``"same"`` average pooling counts only
the window's elements inside the input, as TF's op does); the global ones a
``Mean``/``Max`` over the two spatial axes (``keepdims`` keeps them as 1s).
None has weights.
"""
from __future__ import annotations

from typing import Any

from distrib.keras import conv_utils
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.ops import math_ops as ops
from distrib.ops import nn

__all__ = ["MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling2D", "GlobalMaxPooling2D",
           "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "GlobalMaxPool2D"]


def _check_rank(layer: Layer, shape: tuple[int | None, ...]) -> None:
    if len(shape) != 4:
        raise ValueError(f"Input 0 of layer {layer.name!r} is incompatible with the layer: "
                         f"expected ndim=4, found ndim={len(shape)}. Full shape received: "
                         f"{shape}")


class _Pooling2D(Layer):
    _MODE = "max"

    def __init__(self, pool_size: Any = (2, 2), strides: Any = None, padding: str = "valid",
                 data_format: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool_size = conv_utils.standardize_tuple(pool_size, 2, "pool_size")
        self.strides = conv_utils.standardize_tuple(pool_size if strides is None else strides,
                                                    2, "strides", allow_zero=True)
        self.padding = conv_utils.standardize_padding(padding)
        self.data_format = conv_utils.standardize_data_format(data_format)

    def call(self, inputs: Any, training: Any = None) -> Any:
        _check_rank(self, shape_tuple(inputs.shape))
        pool = nn.max_pool2d if self._MODE == "max" else nn.avg_pool2d
        return pool(inputs, conv_utils.four(self.pool_size, self.data_format),
                    conv_utils.four(self.strides, self.data_format), self.padding.upper(),
                    data_format=conv_utils.tf_data_format(self.data_format))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        _check_rank(self, shape)
        return conv_utils.pooling_output_shape(shape, self.pool_size, self.strides,
                                               self.padding, self.data_format)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "pool_size": self.pool_size, "padding": self.padding,
                "strides": self.strides, "data_format": self.data_format}


class MaxPooling2D(_Pooling2D):
    """``MaxPooling2D(pool_size=(2, 2), strides=None, padding='valid', data_format=None)``."""
    _MODE = "max"


class AveragePooling2D(_Pooling2D):
    """``AveragePooling2D(pool_size=(2, 2), strides=None, padding='valid',
    data_format=None)``."""
    _MODE = "average"


class _GlobalPooling2D(Layer):
    def __init__(self, data_format: str | None = None, keepdims: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_format = conv_utils.standardize_data_format(data_format)
        self.keepdims = bool(keepdims)

    def _axes(self) -> list[int]:
        return [1, 2] if self.data_format == "channels_last" else [2, 3]

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        _check_rank(self, shape)
        if self.data_format == "channels_last":
            return (shape[0], 1, 1, shape[-1]) if self.keepdims else (shape[0], shape[-1])
        return (shape[0], shape[1], 1, 1) if self.keepdims else (shape[0], shape[1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format,
                "keepdims": self.keepdims}


class GlobalAveragePooling2D(_GlobalPooling2D):
    """``GlobalAveragePooling2D(data_format=None, keepdims=False)``: the mean over H, W."""

    def call(self, inputs: Any, training: Any = None) -> Any:
        _check_rank(self, shape_tuple(inputs.shape))
        return ops.reduce_mean(inputs, self._axes(), keepdims=self.keepdims)


class GlobalMaxPooling2D(_GlobalPooling2D):
    """``GlobalMaxPooling2D(data_format=None, keepdims=False)``: the max over H, W."""

    def call(self, inputs: Any, training: Any = None) -> Any:
        _check_rank(self, shape_tuple(inputs.shape))
        return ops.reduce_max(inputs, self._axes(), keepdims=self.keepdims)


# Keras' aliases
MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D
GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D
