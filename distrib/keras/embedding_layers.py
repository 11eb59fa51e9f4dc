"""``dt.keras.layers.Embedding`` and ``GlobalAveragePooling1D`` (Keras 2's
arguments, defaults and configs).

``Embedding`` looks its rows up with ``dt.nn.embedding_lookup``: a weight
made in a ``ParameterServerStrategy`` scope with a variable partitioner is a
``ShardedVariable``, looked up with one gather per shard where each lives,
and the gradient is an ``IndexedSlices`` of the rows (sparse; an optimizer
applies it to those rows on the ps). ``mask_zero=True`` makes id 0 padding:
the output carries Keras' mask (``outputs._keras_mask``, ids != 0), which
``GlobalAveragePooling1D`` honours (the mean over the unmasked steps), as
Keras propagates it between the layers of a model.
"""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.keras import initializers, layer_configs, regularizers
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.ops import array_ops, embedding_ops
from distrib.ops import math_ops as ops

__all__ = ["Embedding", "GlobalAveragePooling1D", "GlobalAvgPool1D"]


class Embedding(Layer):
    """``Embedding(input_dim, output_dim, embeddings_initializer='uniform',
    embeddings_regularizer=None, activity_regularizer=None, embeddings_constraint=None,
    mask_zero=False, input_length=None)``: row ``id`` of a ``[input_dim, output_dim]`` table."""

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer: Any = "uniform",
                 embeddings_regularizer: Any = None, activity_regularizer: Any = None,
                 embeddings_constraint: Any = None, mask_zero: bool = False,
                 input_length: int | None = None, **kwargs: Any) -> None:
        if input_length is not None and "input_shape" not in kwargs:
            kwargs["input_shape"] = (input_length,)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        if int(input_dim) <= 0 or int(output_dim) <= 0:
            raise ValueError(f"Both `input_dim` and `output_dim` should be positive, received "
                             f"input_dim={input_dim} and output_dim={output_dim}")
        if embeddings_constraint is not None:
            raise NotImplementedError("Embedding: embeddings_constraint is not supported by "
                                      "dt.keras; leave it None")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = initializers.RandomUniform(-0.05, 0.05) \
            if embeddings_initializer == "uniform" else initializers.get(embeddings_initializer)
        self.embeddings_regularizer = regularizers.get(embeddings_regularizer)
        self.mask_zero = bool(mask_zero)
        self.input_length = input_length
        self.embeddings: Any = None

    def build(self, input_shape: Any) -> None:
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          initializer=self.embeddings_initializer,
                                          regularizer=self.embeddings_regularizer)
        self.built = True

    def _cast_input(self, inputs: Any) -> Any:   # ids stay integers (Keras casts to int32)
        x = ops.convert_to_tensor(inputs)
        return x if x.dtype.is_integer else ops.cast(x, dtypes.int32)

    def call(self, inputs: Any) -> Any:
        out = embedding_ops.embedding_lookup_v2(self.embeddings, inputs)
        if self.mask_zero:
            out._keras_mask = self.compute_mask(inputs)  # noqa: SLF001 - Keras' attribute
        return out

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, ops.constant(0, dtype=inputs.dtype))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return (*shape_tuple(input_shape), self.output_dim)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "input_dim": self.input_dim,
                "output_dim": self.output_dim,
                "embeddings_initializer": layer_configs.initializer_config(
                    self.embeddings_initializer),
                "embeddings_regularizer": regularizers.serialize(self.embeddings_regularizer),
                "activity_regularizer": regularizers.serialize(self.activity_regularizer),
                "embeddings_constraint": None, "mask_zero": self.mask_zero,
                "input_length": self.input_length}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        if "embeddings_initializer" in config:
            config["embeddings_initializer"] = layer_configs.initializer_from(
                config["embeddings_initializer"])
        for key in ("embeddings_regularizer", "activity_regularizer"):
            config[key] = regularizers.deserialize(config.get(key))
        return super().from_config(config)


class GlobalAveragePooling1D(Layer):
    """``GlobalAveragePooling1D(data_format='channels_last', keepdims=False)``: the mean
    over the steps; with a mask (given, or the inputs' Keras mask) over the unmasked ones."""

    def __init__(self, data_format: str = "channels_last", keepdims: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(f"data_format must be 'channels_last' or 'channels_first', got "
                             f"{data_format!r}")
        self.data_format, self.keepdims = data_format, bool(keepdims)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if "mask" not in kwargs and getattr(inputs, "_keras_mask", None) is not None:
            kwargs["mask"] = inputs._keras_mask  # noqa: SLF001 - Keras' mask propagation
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs: Any, mask: Any = None) -> Any:
        axis = 1 if self.data_format == "channels_last" else 2
        if mask is None:
            return ops.reduce_mean(inputs, axis, keepdims=self.keepdims)
        # (expand_dims: the steps may be unknown, a batch of padded sequences of any length)
        m = array_ops.expand_dims(ops.cast(mask, inputs.dtype), 2 if axis == 1 else 1)
        total = ops.reduce_sum(inputs * m, axis, keepdims=self.keepdims)
        return total / ops.reduce_sum(m, axis, keepdims=self.keepdims)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        if self.data_format == "channels_last":
            return (shape[0], 1, shape[2]) if self.keepdims else (shape[0], shape[2])
        return (shape[0], shape[1], 1) if self.keepdims else (shape[0], shape[1])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "data_format": self.data_format,
                "keepdims": self.keepdims}


GlobalAvgPool1D = GlobalAveragePooling1D
