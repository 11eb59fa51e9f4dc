"""``dt.keras.layers``: every layer by Keras' name, ``serialize`` and ``deserialize``.

``Layer`` (``base_layer``); ``Dense``, ``Activation``, ``Dropout`` and
``SpatialDropout2D`` here (``Dropout`` zeroes each value with probability
``rate`` while training and scales the rest by ``1 / (1 - rate)``;
``SpatialDropout2D`` drops whole feature maps: the noise shape ``(batch, 1, 1,
channels)``); the rest from modules by family, as Keras splits them:
``Flatten``, ``ZeroPadding2D``, ``Reshape`` (``reshaping_layers``), the
convolutions (``conv_layers``), poolings (``pooling_layers``) and batch
normalization (``normalization_layers``); Keras' aliases (``MaxPool2D`` ...) too.

``deserialize(config, custom_objects)`` makes any layer (a user's found
through ``custom_objects`` or ``register_keras_serializable``) from Keras'
dict, its class looked up in the one table below (and distrib's model
classes). Initializers are saved as Keras' ``{"class_name", "config"}``
dicts, activations by name (``layer_configs``).
"""
from __future__ import annotations

import types
from typing import Any, Sequence

from distrib.keras import (
    activations,
    backend,
    conv_utils,
    initializers,
    layer_configs,
    regularizers,
    serialization,
)
from distrib.keras.base_layer import Layer, listed_weights, shape_tuple
from distrib.keras.conv_layers import (
    Conv2D,
    Conv2DTranspose,
    Convolution2D,
    Convolution2DTranspose,
    DepthwiseConv2D,
    SeparableConv2D,
)
from distrib.keras.embedding_layers import Embedding, GlobalAveragePooling1D, GlobalAvgPool1D
from distrib.keras.input_layer import Input, InputLayer
from distrib.keras.lambda_layer import Lambda
from distrib.keras.lookup_layers import CategoryEncoding, Hashing, IntegerLookup, StringLookup
from distrib.keras.merge_layers import (
    Add,
    Average,
    Concatenate,
    Maximum,
    Minimum,
    Multiply,
    Subtract,
    add,
    average,
    concatenate,
    maximum,
    minimum,
    multiply,
    subtract,
)
from distrib.keras.normalization_layers import BatchNormalization, SyncBatchNormalization
from distrib.keras.pooling_layers import (
    AveragePooling2D,
    AvgPool2D,
    GlobalAveragePooling2D,
    GlobalAvgPool2D,
    GlobalMaxPool2D,
    GlobalMaxPooling2D,
    MaxPool2D,
    MaxPooling2D,
)
from distrib.keras.reshaping_layers import Flatten, Reshape, ZeroPadding2D
from distrib.ops import math_ops as ops
from distrib.ops import nn

__all__ = ["Embedding", "GlobalAveragePooling1D", "GlobalAvgPool1D",  # issue 41
           "StringLookup", "IntegerLookup", "Hashing", "CategoryEncoding",
           "Layer", "Dense", "Flatten", "Dropout", "Activation", "serialize", "deserialize",
           "listed_weights",
           "Conv2D", "Conv2DTranspose", "Convolution2D", "Convolution2DTranspose",
           "DepthwiseConv2D", "SeparableConv2D", "MaxPooling2D", "MaxPool2D",
           "AveragePooling2D", "AvgPool2D", "GlobalAveragePooling2D", "GlobalAvgPool2D",
           "GlobalMaxPooling2D", "GlobalMaxPool2D", "BatchNormalization",
           "SyncBatchNormalization", "ZeroPadding2D", "Reshape", "SpatialDropout2D",
           "experimental", "Input", "InputLayer", "Lambda", "Add", "Subtract", "Multiply",
           "Average", "Maximum", "Minimum", "Concatenate", "add", "subtract", "multiply",
           "average", "maximum", "minimum", "concatenate"]

# tf.keras.layers.experimental (Keras 2's home of SyncBatchNormalization)
experimental = types.SimpleNamespace(SyncBatchNormalization=SyncBatchNormalization)
# (and of the preprocessing layers, before TF 2.6 moved them up)
experimental.preprocessing = types.SimpleNamespace(
    StringLookup=StringLookup, IntegerLookup=IntegerLookup, Hashing=Hashing,
    CategoryEncoding=CategoryEncoding)


class Dense(Layer):
    """``Dense(units, activation=None, use_bias=True, kernel_initializer='glorot_uniform',
    bias_initializer='zeros', ...)``: ``activation(inputs @ kernel + bias)``."""

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        units = int(units) if not isinstance(units, bool) else 0
        if units <= 0:
            raise ValueError(f"Received an invalid value for `units`, expected a positive "
                             f"integer. Received: units={units}")
        unsupported = {k: v for k, v in (("kernel_constraint", kernel_constraint),
                                         ("bias_constraint", bias_constraint)) if v is not None}
        if unsupported:
            raise NotImplementedError(f"Dense: {sorted(unsupported)} are not supported by "
                                      "dt.keras; leave them None")
        self.units = units
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel: Any = None
        self.bias: Any = None

    def build(self, input_shape: Any) -> None:
        shape = shape_tuple(input_shape)
        if not shape or shape[-1] is None:
            raise ValueError(f"The last dimension of the inputs to a Dense layer should be "
                             f"defined. Found None. Full input shape received: {shape}")
        self.kernel = self.add_weight("kernel", (shape[-1], self.units),
                                      initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        shape = shape_tuple(inputs.shape)
        x = inputs
        if len(shape) != 2:   # applied on the last axis, as Keras' tensordot
            if any(d is None for d in shape[1:]):
                raise ValueError(f"Dense on inputs of rank {len(shape)} needs every dimension "
                                 f"but the first known; got {shape}")
            x = ops.reshape(x, [-1, shape[-1]])
        y = ops.matmul(x, self.kernel)
        if self.use_bias:
            y = nn.bias_add(y, self.bias)
        if len(shape) != 2:
            y = ops.reshape(y, [-1, *shape[1:-1], self.units])
        return self.activation(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return (*shape_tuple(input_shape)[:-1], self.units)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units,
                "activation": layer_configs.activation_name(self.activation), "use_bias": self.use_bias,
                "kernel_initializer": layer_configs.initializer_config(self.kernel_initializer),
                "bias_initializer": layer_configs.initializer_config(self.bias_initializer),
                "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "kernel_constraint": None, "bias_constraint": None}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["activation"] = layer_configs.activation_from(config.get("activation"))
        for key in ("kernel_initializer", "bias_initializer"):
            if key in config:
                config[key] = layer_configs.initializer_from(config[key])
        for key in ("kernel_regularizer", "bias_regularizer", "activity_regularizer"):
            config[key] = regularizers.deserialize(config.get(key))
        return super().from_config(config)


class Dropout(Layer):
    """``Dropout(rate, noise_shape=None, seed=None)``: while training, each value
    is zeroed with probability ``rate`` and the rest scaled by ``1 / (1 - rate)``;
    outside training the inputs pass unchanged."""

    def __init__(self, rate: float, noise_shape: Sequence[int | None] | None = None,
                 seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float "
                             f"value between 0 and 1. Received: rate={rate}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed

    def call(self, inputs: Any, training: Any = None) -> Any:
        if not training or self.rate == 0.0:
            return inputs
        shape = shape_tuple(inputs.shape)
        noise = self.noise_shape or shape
        noise = tuple(s if n is None else n for n, s in zip(noise, shape))
        if any(d is None for d in noise):
            raise ValueError(f"Dropout while training needs the input's shape known, got "
                             f"{shape}: run the model in a dt.function (it traces with the "
                             "batch's shape) or pass noise_shape")
        if self.rate == 1.0:
            return ops.zeros_like(inputs)
        draw = ops.random_uniform(list(noise), dtype=inputs.dtype,
                                  seed=backend.derived_seed(self.seed, inputs.graph))
        keep = ops.cast(ops.greater_equal(draw, self.rate), inputs.dtype)
        return inputs * keep * (1.0 / (1.0 - self.rate))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape,
                "seed": self.seed}


class SpatialDropout2D(Dropout):
    """``SpatialDropout2D(rate, data_format=None, seed=None)``: while training, whole
    feature maps (channels) are dropped with probability ``rate``."""

    def __init__(self, rate: float, data_format: str | None = None, seed: int | None = None,
                 **kwargs: Any) -> None:
        kwargs.pop("noise_shape", None)   # fixed by the data format
        self.data_format = conv_utils.standardize_data_format(data_format)
        noise = (None, 1, 1, None) if self.data_format == "channels_last" else \
            (None, None, 1, 1)
        super().__init__(rate, noise_shape=noise, seed=seed, **kwargs)

    def call(self, inputs: Any, training: Any = None) -> Any:
        if len(shape_tuple(inputs.shape)) != 4:
            raise ValueError(f"SpatialDropout2D needs inputs of rank 4, got shape "
                             f"{shape_tuple(inputs.shape)}")
        return super().call(inputs, training=training)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.pop("noise_shape", None)
        return {**config, "data_format": self.data_format}


class Activation(Layer):
    """``Activation('relu')``: an activation function as a layer."""

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self.activation(inputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "activation": layer_configs.activation_name(self.activation)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["activation"] = layer_configs.activation_from(config.get("activation"))
        return super().from_config(config)


# -- any layer --------------------------------------------------------------------------------
_LAYERS = {cls.__name__: cls for cls in (
    Layer, Dense, Flatten, Dropout, Activation, Conv2D, Conv2DTranspose, DepthwiseConv2D,
    SeparableConv2D, MaxPooling2D, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D,
    BatchNormalization, SyncBatchNormalization, ZeroPadding2D, Reshape, SpatialDropout2D,
    InputLayer, Lambda, Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate)}
_LAYERS.update(Embedding=Embedding, GlobalAveragePooling1D=GlobalAveragePooling1D,  # issue 41
               GlobalAvgPool1D=GlobalAveragePooling1D, StringLookup=StringLookup,
               IntegerLookup=IntegerLookup, Hashing=Hashing, CategoryEncoding=CategoryEncoding)
_LAYERS.update(Convolution2D=Conv2D, Convolution2DTranspose=Conv2DTranspose,   # Keras' aliases
               MaxPool2D=MaxPooling2D, AvgPool2D=AveragePooling2D,
               GlobalAvgPool2D=GlobalAveragePooling2D, GlobalMaxPool2D=GlobalMaxPooling2D)


def serialize(layer: Layer) -> dict[str, Any]:
    """Keras' dict of ``layer``: ``{"module", "class_name", "config", "registered_name"}``."""
    return serialization.serialize_keras_object(layer)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """The layer (or model) Keras' dict ``config`` describes; a user's class is found
    in ``custom_objects`` or among those registered (``register_keras_serializable``)."""
    return serialization.deserialize_keras_object(config, {**distrib_models(), **_LAYERS},
                                                  custom_objects, printable_module_name="layer")


def distrib_models() -> dict[str, Any]:
    """distrib's own model classes (``Sequential``, ...) by name: the subclasses of
    ``Layer`` defined in ``distrib.keras`` outside this module's table (their module
    imports this one, so they are looked up, not imported or registered)."""
    found: dict[str, Any] = {}
    todo = [Layer]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("distrib.keras.") and not sub.__name__.startswith("_"):
                found.setdefault(sub.__name__, sub)
    return found
