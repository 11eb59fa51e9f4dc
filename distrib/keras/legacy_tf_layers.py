"""``dt.layers``: TF1's functional layers (``tf.compat.v1.layers``: ``dense``,
``conv2d``, ``max_pooling2d``, ``average_pooling2d``, ``dropout``,
``batch_normalization``, ``flatten``) and their classes, built on the Keras
layers, as TF 1.15's ``legacy_tf_layers`` are.

Each function makes the Keras layer with TF1's arguments and calls it once
on ``inputs``. What TF1 adds on top is kept: a regularizer's penalty goes to
``GraphKeys.REGULARIZATION_LOSSES`` (``dt.losses.get_regularization_loss``
sums it), and ``batch_normalization(training=True)``'s moving-average
updates are *not* run by the layer's output but collected in
``GraphKeys.UPDATE_OPS``, so a TF1 program runs them with its train op
(``with dt.control_dependencies(dt.get_collection(dt.GraphKeys.UPDATE_OPS))``).
``training`` is a Python bool here (TF1 also takes a bool tensor: build the
two graphs and choose with the bool instead).
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import GraphKeys, add_to_collection, get_default_graph, name_scope
from distrib.framework.op_def import find_op_def
from distrib.keras.conv_layers import Conv2D
from distrib.keras.layers import Dense, Dropout
from distrib.keras.normalization_layers import BatchNormalization
from distrib.keras.pooling_layers import AveragePooling2D, MaxPooling2D
from distrib.keras.reshaping_layers import Flatten
from distrib.ops import nn
from distrib.ops.variable_sharing import REGULARIZATION_LOSSES

__all__ = ["dense", "conv2d", "max_pooling2d", "average_pooling2d", "dropout",
           "batch_normalization", "flatten", "Dense", "Conv2D", "MaxPooling2D",
           "AveragePooling2D", "Dropout", "BatchNormalization", "Flatten"]


def _given(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def _named(name: str | None, base: str) -> dict[str, Any]:
    """The layer's name: the given one, else ``base`` made unique in the default
    graph (``dense``, ``dense_1`` ...: TF1's layers number per graph, Keras' per process)."""
    if name is None:
        name = get_default_graph().unique_name(base, mark_as_used=False).rsplit("/", 1)[-1]
    return {"name": name}


def _python_bool(training: Any, fn: str) -> bool:
    if isinstance(training, bool) or training is None:
        return bool(training)
    if hasattr(training, "dtype") and not hasattr(training, "numpy"):
        raise InvalidArgumentError(f"dt.layers.{fn}: training must be a Python bool here, got a "
                                   "tensor; build the training and inference graphs separately")
    return bool(training)


def _call(layer: Any, inputs: Any, regularizers: dict[str, Any] | None = None,
          activity_regularizer: Any = None, **kwargs: Any) -> Any:
    """``layer(inputs)``; the penalties of ``regularizers`` (weight attribute ->
    function) and ``activity_regularizer`` collected as TF1 does."""
    out = layer(inputs, **kwargs)
    for attr, fn in (regularizers or {}).items():
        weight = getattr(layer, attr, None)
        if fn is not None and weight is not None:
            add_to_collection(REGULARIZATION_LOSSES, fn(weight))
    if activity_regularizer is not None:
        add_to_collection(REGULARIZATION_LOSSES, activity_regularizer(out))
    return out


def dense(inputs: Any, units: int, activation: Any = None, use_bias: bool = True,
          kernel_initializer: Any = None, bias_initializer: Any = "zeros",
          kernel_regularizer: Any = None, bias_regularizer: Any = None,
          activity_regularizer: Any = None, kernel_constraint: Any = None,
          bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
          reuse: Any = None) -> Any:
    """A fully connected layer on ``inputs`` (TF1's ``tf.layers.dense``)."""
    layer = Dense(units, activation=activation, use_bias=use_bias,
                  **_given(kernel_initializer=kernel_initializer,
                           bias_initializer=bias_initializer,
                           kernel_constraint=kernel_constraint, bias_constraint=bias_constraint),
                  trainable=trainable, **_named(name, "dense"))
    return _call(layer, inputs, {"kernel": kernel_regularizer, "bias": bias_regularizer},
                 activity_regularizer)


def conv2d(inputs: Any, filters: int, kernel_size: Any, strides: Any = (1, 1),
           padding: str = "valid", data_format: str = "channels_last",
           dilation_rate: Any = (1, 1), activation: Any = None, use_bias: bool = True,
           kernel_initializer: Any = None, bias_initializer: Any = "zeros",
           kernel_regularizer: Any = None, bias_regularizer: Any = None,
           activity_regularizer: Any = None, kernel_constraint: Any = None,
           bias_constraint: Any = None, trainable: bool = True, name: str | None = None,
           reuse: Any = None) -> Any:
    """A 2-D convolution on ``inputs`` (TF1's ``tf.layers.conv2d``)."""
    layer = Conv2D(filters, kernel_size, strides=strides, padding=padding,
                   data_format=data_format, dilation_rate=dilation_rate, activation=activation,
                   use_bias=use_bias, trainable=trainable,
                   **_given(kernel_initializer=kernel_initializer,
                            bias_initializer=bias_initializer,
                            kernel_constraint=kernel_constraint,
                            bias_constraint=bias_constraint), **_named(name, "conv2d"))
    return _call(layer, inputs, {"kernel": kernel_regularizer, "bias": bias_regularizer},
                 activity_regularizer)


def max_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                  data_format: str = "channels_last", name: str | None = None) -> Any:
    """2-D max pooling (TF1's ``tf.layers.max_pooling2d``: ``strides`` required)."""
    return _call(MaxPooling2D(pool_size, strides=strides, padding=padding,
                              data_format=data_format, **_named(name, "max_pooling2d")), inputs)


def average_pooling2d(inputs: Any, pool_size: Any, strides: Any, padding: str = "valid",
                      data_format: str = "channels_last", name: str | None = None) -> Any:
    """2-D average pooling (TF1's ``tf.layers.average_pooling2d``)."""
    return _call(AveragePooling2D(pool_size, strides=strides, padding=padding,
                                  data_format=data_format, **_named(name, "max_pooling2d")), inputs)


def dropout(inputs: Any, rate: float = 0.5, noise_shape: Any = None, seed: int | None = None,
            training: Any = False, name: str | None = None) -> Any:
    """``inputs`` with a fraction ``rate`` zeroed and the rest scaled by
    ``1 / (1 - rate)`` when ``training`` (default False, TF1's), else unchanged."""
    if not _python_bool(training, "dropout") or rate == 0:
        return inputs
    # TF1's layer runs nn.dropout, which draws a batch of rows known only at run time
    with name_scope(name, "dropout", [inputs]):
        return nn.dropout(inputs, rate=rate, noise_shape=noise_shape, seed=seed)


def batch_normalization(inputs: Any, axis: int = -1, momentum: float = 0.99,
                        epsilon: float = 1e-3, center: bool = True, scale: bool = True,
                        beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                        moving_mean_initializer: Any = "zeros",
                        moving_variance_initializer: Any = "ones", beta_regularizer: Any = None,
                        gamma_regularizer: Any = None, beta_constraint: Any = None,
                        gamma_constraint: Any = None, training: Any = False,
                        trainable: bool = True, name: str | None = None, reuse: Any = None,
                        renorm: bool = False, renorm_clipping: Any = None,
                        renorm_momentum: float = 0.99, fused: Any = None,
                        virtual_batch_size: Any = None, adjustment: Any = None) -> Any:
    """Batch normalization (TF1's ``tf.layers.batch_normalization``): with
    ``training=True`` the batch's statistics, and the moving averages' updates
    put in ``GraphKeys.UPDATE_OPS`` (run them with the train op)."""
    if renorm or virtual_batch_size is not None or adjustment is not None:
        raise InvalidArgumentError("dt.layers.batch_normalization: renorm, virtual_batch_size "
                                   "and adjustment are not supported here")
    layer = BatchNormalization(axis=axis, momentum=momentum, epsilon=epsilon, center=center,
                               scale=scale, beta_initializer=beta_initializer,
                               gamma_initializer=gamma_initializer,
                               moving_mean_initializer=moving_mean_initializer,
                               moving_variance_initializer=moving_variance_initializer,
                               trainable=trainable, **_named(name, "batch_normalization"))
    graph = get_default_graph()
    before = len(graph.get_operations())
    out = _call(layer, inputs, {"beta": beta_regularizer, "gamma": gamma_regularizer},
                training=_python_bool(training, "batch_normalization"))
    initializers = {getattr(v, "initializer", None) for v in layer.weights}
    for op in graph.get_operations()[before:]:
        entry = find_op_def(op.type)
        if entry is not None and entry.is_update and op not in initializers:
            add_to_collection(GraphKeys.UPDATE_OPS, op)   # the moving averages' assigns
    return out


def flatten(inputs: Any, name: str | None = None, data_format: str = "channels_last") -> Any:
    """``inputs`` as ``[batch, everything else]`` (TF1's ``tf.layers.flatten``)."""
    return _call(Flatten(data_format=data_format, **_named(name, "flatten")), inputs)
