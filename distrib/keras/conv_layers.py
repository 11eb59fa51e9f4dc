"""``dt.keras.layers.Conv2D``, ``Conv2DTranspose``, ``DepthwiseConv2D`` and
``SeparableConv2D``: Keras 3's arguments, defaults, weights and configs, on the
graph runtime's convolution ops (``dt.nn.conv2d``, ``conv2d_transpose``,
``depthwise_conv2d``, ``separable_conv2d``).

Each layer is one op (two for the separable one) plus its bias and activation:
the kernel has Keras' layout (``kernel_size + (in, filters)``; the transpose's
``kernel_size + (filters, in)``; the depthwise ``kernel_size + (in,
depth_multiplier)``) and Keras' weight names (``kernel``, ``bias``,
``depthwise_kernel``, ``pointwise_kernel``), so a checkpoint's keys and
``count_params()`` are Keras'. ``data_format="channels_first"`` runs the ops
with TF's ``NCHW`` (the bias through ``dt.nn.bias_add(data_format="NCHW")``).
Keras' regularizers are taken (``kernel_regularizer`` and the others: each
weight's penalty joins ``layer.losses``, as Dense's); constraints,
``groups > 1`` and LoRA are not supported: passing one is refused, naming
it, rather than ignored.
"""
from __future__ import annotations

from typing import Any

from distrib.keras import activations, conv_utils, initializers, regularizers
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.keras.layer_configs import activation_from, activation_name, initializer_config, initializer_from
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.array_ops import concat, slice_rows

__all__ = ["Conv2D", "Conv2DTranspose", "DepthwiseConv2D", "SeparableConv2D",
           "Convolution2D", "Convolution2DTranspose", "refuse_unsupported"]


def refuse_unsupported(layer: str, **given: Any) -> None:
    """Keras arguments dt.keras does not implement (regularizers, constraints ...)
    must be left at None: a value would be silently ignored otherwise."""
    unsupported = sorted(k for k, v in given.items() if v is not None)
    if unsupported:
        raise NotImplementedError(f"{layer}: {unsupported} are not supported by dt.keras; "
                                  "leave them None")


class _Conv(Layer):
    """What the four convolutions share: Keras' argument forms, the input check,
    bias and activation, and the config of initializers and activation."""

    _INITIALIZERS: tuple[str, ...] = ()      # the initializer arguments, in Keras' order
    _NONE_KEYS: tuple[str, ...] = ()         # regularizers and constraints (always None)

    def __init__(self, filters: int | None, kernel_size: Any, strides: Any, padding: str,
                 data_format: str | None, dilation_rate: Any, activation: Any,
                 use_bias: bool, initializers_given: dict[str, Any],
                 unsupported: dict[str, Any], **kwargs: Any) -> None:
        unsupported = dict(unsupported)
        kwargs["activity_regularizer"] = unsupported.pop("activity_regularizer", None)
        # weight regularizers: by the weight they apply to (add_weight looks them up)
        self._regularizers = {key[:-len("_regularizer")]: regularizers.get(unsupported.pop(key))
                              for key in [k for k in unsupported if k.endswith("_regularizer")]}
        super().__init__(**kwargs)
        refuse_unsupported(type(self).__name__, **unsupported)
        if filters is not None:
            filters = int(filters)
            if filters <= 0:
                raise ValueError(f"Invalid value for argument `filters`. Expected a strictly "
                                 f"positive value. Received filters={filters}.")
        self.filters = filters
        self.kernel_size = conv_utils.standardize_tuple(kernel_size, 2, "kernel_size")
        self.strides = conv_utils.standardize_tuple(strides, 2, "strides")
        self.dilation_rate = conv_utils.standardize_tuple(dilation_rate, 2, "dilation_rate")
        self.padding = conv_utils.standardize_padding(padding)
        self.data_format = conv_utils.standardize_data_format(data_format)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(f"`strides > 1` not supported in conjunction with `dilation_rate "
                             f"> 1`. Received: strides={self.strides} and dilation_rate="
                             f"{self.dilation_rate}")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        for key, value in initializers_given.items():
            setattr(self, key, initializers.get(value))
        self.bias: Any = None

    # -- shapes --------------------------------------------------------------------------
    def _input_channels(self, input_shape: Any) -> int:
        shape = shape_tuple(input_shape)
        if len(shape) != 4:
            raise ValueError(f"Input 0 of layer {self.name!r} is incompatible with the layer: "
                             f"expected ndim=4, found ndim={len(shape)}. Full shape received: "
                             f"{shape}")
        channels = shape[conv_utils.channel_axis(self.data_format)]
        if channels is None:
            raise ValueError(f"The channel dimension of the inputs to {type(self).__name__} "
                             f"should be defined. Found None. Full input shape: {shape}")
        return int(channels)

    @property
    def _fmt(self) -> str:
        return conv_utils.tf_data_format(self.data_format)

    def _finish(self, y: Any) -> Any:
        if self.use_bias:
            y = nn.bias_add(y, self.bias, data_format=self._fmt)
        return self.activation(y)

    def _add_bias(self, n: int) -> None:
        if self.use_bias:
            self.bias = self.add_weight("bias", (n,), initializer=self.bias_initializer)

    def add_weight(self, name: str, shape: Any, dtype: Any = None, initializer: Any = None,
                   trainable: bool = True, regularizer: Any = None, **kwargs: Any) -> Any:
        """Layer.add_weight with the weight's own regularizer (``kernel`` is the
        depthwise kernel of DepthwiseConv2D, as its ``depthwise_regularizer`` says)."""
        if regularizer is None:
            key = name[:-len("_kernel")] if name.endswith("_kernel") else name
            regularizer = self._regularizers.get(key) or (
                self._regularizers.get("depthwise") if name == "kernel" else None)
        return super().add_weight(name, shape, dtype=dtype, initializer=initializer,
                                  trainable=trainable, regularizer=regularizer, **kwargs)

    # -- config ---------------------------------------------------------------------------
    def _common_config(self) -> dict[str, Any]:
        return {"kernel_size": self.kernel_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format,
                "dilation_rate": self.dilation_rate,
                "activation": activation_name(self.activation), "use_bias": self.use_bias}

    def _tail_config(self) -> dict[str, Any]:
        out = {key: initializer_config(getattr(self, key)) for key in self._INITIALIZERS}
        out.update({key: None for key in self._NONE_KEYS})
        for key in self._NONE_KEYS:
            if key == "activity_regularizer":
                out[key] = regularizers.serialize(self.activity_regularizer)
            elif key.endswith("_regularizer"):
                out[key] = regularizers.serialize(self._regularizers.get(key[:-12]))
        return out

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["activation"] = activation_from(config.get("activation"))
        for key in cls._INITIALIZERS:
            if key in config:
                config[key] = initializer_from(config[key])
        return super().from_config(config)


class Conv2D(_Conv):
    """``Conv2D(filters, kernel_size, strides=(1, 1), padding='valid', data_format=None,
    dilation_rate=(1, 1), groups=1, activation=None, use_bias=True, ...)``."""

    _INITIALIZERS = ("kernel_initializer", "bias_initializer")
    _NONE_KEYS = ("kernel_regularizer", "bias_regularizer", "activity_regularizer",
                  "kernel_constraint", "bias_constraint")

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = (1, 1), groups: int = 1, activation: Any = None,
                 use_bias: bool = True, kernel_initializer: Any = "glorot_uniform",
                 bias_initializer: Any = "zeros", kernel_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 kernel_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        if int(groups) != 1:
            raise NotImplementedError(f"Conv2D: groups={groups} is not supported by dt.keras "
                                      "(grouped convolution); use groups=1")
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         activation, use_bias,
                         {"kernel_initializer": kernel_initializer,
                          "bias_initializer": bias_initializer},
                         {"kernel_regularizer": kernel_regularizer,
                          "bias_regularizer": bias_regularizer,
                          "activity_regularizer": activity_regularizer,
                          "kernel_constraint": kernel_constraint,
                          "bias_constraint": bias_constraint}, **kwargs)
        self.groups = 1
        self.kernel: Any = None

    def build(self, input_shape: Any) -> None:
        channels = self._input_channels(input_shape)
        self.compute_output_shape(input_shape)   # Keras checks the output is not empty
        self.kernel = self.add_weight("kernel", (*self.kernel_size, channels, self.filters),
                                      initializer=self.kernel_initializer)
        self._add_bias(self.filters)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        self._input_channels(inputs.shape)
        y = nn.conv2d(inputs, self.kernel, strides=conv_utils.four(self.strides, self.data_format),
                      padding=self.padding.upper(), data_format=self._fmt,
                      dilations=conv_utils.four(self.dilation_rate, self.data_format))
        return self._finish(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return conv_utils.conv_output_shape(shape_tuple(input_shape), self.filters,
                                            self.kernel_size, self.strides, self.padding,
                                            self.data_format, self.dilation_rate)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "filters": self.filters, **self._common_config(),
                "groups": self.groups, **self._tail_config()}


class Conv2DTranspose(_Conv):
    """``Conv2DTranspose(filters, kernel_size, strides=(1, 1), padding='valid',
    output_padding=None, data_format=None, dilation_rate=(1, 1), ...)``: the
    gradient of a convolution with respect to its input, as a layer."""

    _INITIALIZERS = ("kernel_initializer", "bias_initializer")
    _NONE_KEYS = ("kernel_regularizer", "bias_regularizer", "activity_regularizer",
                  "kernel_constraint", "bias_constraint")

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", output_padding: Any = None,
                 data_format: str | None = None, dilation_rate: Any = (1, 1),
                 activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         activation, use_bias,
                         {"kernel_initializer": kernel_initializer,
                          "bias_initializer": bias_initializer},
                         {"kernel_regularizer": kernel_regularizer,
                          "bias_regularizer": bias_regularizer,
                          "activity_regularizer": activity_regularizer,
                          "kernel_constraint": kernel_constraint,
                          "bias_constraint": bias_constraint}, **kwargs)
        self.output_padding = None if output_padding is None else \
            conv_utils.standardize_tuple(output_padding, 2, "output_padding", allow_zero=True)
        if self.output_padding is not None and any(
                p >= s for p, s in zip(self.output_padding, self.strides)):
            raise ValueError(f"Strides must be greater than output padding. Received strides="
                             f"{self.strides}, output_padding={self.output_padding}.")
        self.kernel: Any = None

    def build(self, input_shape: Any) -> None:
        channels = self._input_channels(input_shape)
        self.kernel = self.add_weight("kernel", (*self.kernel_size, self.filters, channels),
                                      initializer=self.kernel_initializer)
        self._add_bias(self.filters)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        self._input_channels(inputs.shape)
        shape = self.compute_output_shape(inputs.shape)
        if any(d is None for d in shape[1:]):
            raise ValueError(f"Conv2DTranspose needs the input's spatial dimensions known; got "
                             f"{shape_tuple(inputs.shape)}")
        if shape[0] is None:   # the batch at run time, the rest known now
            output_shape = concat([slice_rows(ops.shape(inputs), 0, 1),
                                   ops.constant(list(shape[1:]), dtype="int32")], 0)
        else:
            output_shape = list(shape)
        y = nn.conv2d_transpose(inputs, self.kernel, output_shape,
                                strides=conv_utils.four(self.strides, self.data_format),
                                padding=self.padding.upper(), data_format=self._fmt,
                                dilations=conv_utils.four(self.dilation_rate, self.data_format))
        return self._finish(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return conv_utils.conv_transpose_output_shape(
            shape_tuple(input_shape), self.filters, self.kernel_size, self.strides,
            self.padding, self.output_padding, self.data_format, self.dilation_rate)

    def get_config(self) -> dict[str, Any]:
        common = self._common_config()
        return {**super().get_config(), "filters": self.filters,
                "kernel_size": common.pop("kernel_size"), "strides": common.pop("strides"),
                "padding": common.pop("padding"), "output_padding": self.output_padding,
                **common, **self._tail_config()}


class DepthwiseConv2D(_Conv):
    """``DepthwiseConv2D(kernel_size, strides=(1, 1), padding='valid',
    depth_multiplier=1, data_format=None, dilation_rate=(1, 1), ...)``: each
    input channel convolved by its own ``depth_multiplier`` filters (Keras 3
    names the weight ``kernel``)."""

    _INITIALIZERS = ("depthwise_initializer", "bias_initializer")
    _NONE_KEYS = ("depthwise_regularizer", "bias_regularizer", "activity_regularizer",
                  "depthwise_constraint", "bias_constraint")

    def __init__(self, kernel_size: Any, strides: Any = (1, 1), padding: str = "valid",
                 depth_multiplier: int = 1, data_format: str | None = None,
                 dilation_rate: Any = (1, 1), activation: Any = None, use_bias: bool = True,
                 depthwise_initializer: Any = "glorot_uniform",
                 bias_initializer: Any = "zeros", depthwise_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 depthwise_constraint: Any = None, bias_constraint: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(None, kernel_size, strides, padding, data_format, dilation_rate,
                         activation, use_bias,
                         {"depthwise_initializer": depthwise_initializer,
                          "bias_initializer": bias_initializer},
                         {"depthwise_regularizer": depthwise_regularizer,
                          "bias_regularizer": bias_regularizer,
                          "activity_regularizer": activity_regularizer,
                          "depthwise_constraint": depthwise_constraint,
                          "bias_constraint": bias_constraint}, **kwargs)
        self.depth_multiplier = int(depth_multiplier)
        if self.depth_multiplier <= 0:
            raise ValueError(f"Invalid value for argument `depth_multiplier`. Expected a "
                             f"strictly positive value. Received "
                             f"depth_multiplier={depth_multiplier}.")
        self.kernel: Any = None

    def build(self, input_shape: Any) -> None:
        channels = self._input_channels(input_shape)
        self.compute_output_shape(input_shape)
        self.kernel = self.add_weight("kernel",
                                      (*self.kernel_size, channels, self.depth_multiplier),
                                      initializer=self.depthwise_initializer)
        self._add_bias(channels * self.depth_multiplier)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        self._input_channels(inputs.shape)
        y = nn.depthwise_conv2d(inputs, self.kernel,
                                strides=conv_utils.four(self.strides, self.data_format),
                                padding=self.padding.upper(), data_format=self._fmt,
                                dilations=list(self.dilation_rate))
        return self._finish(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        channels = self._input_channels(input_shape)
        return conv_utils.conv_output_shape(shape_tuple(input_shape),
                                            channels * self.depth_multiplier, self.kernel_size,
                                            self.strides, self.padding, self.data_format,
                                            self.dilation_rate)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "depth_multiplier": self.depth_multiplier,
                **self._common_config(), **self._tail_config()}


class SeparableConv2D(_Conv):
    """``SeparableConv2D(filters, kernel_size, strides=(1, 1), padding='valid',
    data_format=None, dilation_rate=(1, 1), depth_multiplier=1, ...)``: a depthwise
    convolution, then a 1x1 convolution to ``filters`` channels."""

    _INITIALIZERS = ("depthwise_initializer", "pointwise_initializer", "bias_initializer")
    _NONE_KEYS = ("depthwise_regularizer", "pointwise_regularizer", "bias_regularizer",
                  "activity_regularizer", "depthwise_constraint", "pointwise_constraint",
                  "bias_constraint")

    def __init__(self, filters: int, kernel_size: Any, strides: Any = (1, 1),
                 padding: str = "valid", data_format: str | None = None,
                 dilation_rate: Any = (1, 1), depth_multiplier: int = 1,
                 activation: Any = None, use_bias: bool = True,
                 depthwise_initializer: Any = "glorot_uniform",
                 pointwise_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 depthwise_regularizer: Any = None, pointwise_regularizer: Any = None,
                 bias_regularizer: Any = None, activity_regularizer: Any = None,
                 depthwise_constraint: Any = None, pointwise_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         activation, use_bias,
                         {"depthwise_initializer": depthwise_initializer,
                          "pointwise_initializer": pointwise_initializer,
                          "bias_initializer": bias_initializer},
                         {"depthwise_regularizer": depthwise_regularizer,
                          "pointwise_regularizer": pointwise_regularizer,
                          "bias_regularizer": bias_regularizer,
                          "activity_regularizer": activity_regularizer,
                          "depthwise_constraint": depthwise_constraint,
                          "pointwise_constraint": pointwise_constraint,
                          "bias_constraint": bias_constraint}, **kwargs)
        self.depth_multiplier = int(depth_multiplier)
        self.depthwise_kernel: Any = None
        self.pointwise_kernel: Any = None

    def build(self, input_shape: Any) -> None:
        channels = self._input_channels(input_shape)
        self.compute_output_shape(input_shape)
        self.depthwise_kernel = self.add_weight(
            "depthwise_kernel", (*self.kernel_size, channels, self.depth_multiplier),
            initializer=self.depthwise_initializer)
        self.pointwise_kernel = self.add_weight(
            "pointwise_kernel", (1, 1, channels * self.depth_multiplier, self.filters),
            initializer=self.pointwise_initializer)
        self._add_bias(self.filters)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        self._input_channels(inputs.shape)
        y = nn.separable_conv2d(inputs, self.depthwise_kernel, self.pointwise_kernel,
                                strides=conv_utils.four(self.strides, self.data_format),
                                padding=self.padding.upper(), data_format=self._fmt,
                                dilations=list(self.dilation_rate))
        return self._finish(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return conv_utils.conv_output_shape(shape_tuple(input_shape), self.filters,
                                            self.kernel_size, self.strides, self.padding,
                                            self.data_format, self.dilation_rate)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "depth_multiplier": self.depth_multiplier,
                "filters": self.filters, **self._common_config(), **self._tail_config()}


# Keras' other names for the same layers
Convolution2D = Conv2D
Convolution2DTranspose = Conv2DTranspose
