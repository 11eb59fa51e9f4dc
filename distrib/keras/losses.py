"""``dt.keras.losses``: loss objects and functions (Keras' names, arguments, defaults).

A ``Loss`` computes one value per example (``call``: the mean over the last
axis for MSE/MAE/binary cross-entropy, the sum over classes for the
categorical ones) and reduces them by its ``reduction``:
``SUM_OVER_BATCH_SIZE`` (and ``AUTO``) the mean, ``SUM`` the sum, ``NONE``
the per-example values. ``Model.fit`` takes the per-example values and
reduces them itself, dividing by the *global* batch under a strategy, as
Keras' ``scale_loss_for_distribution`` does (see ``distrib.keras.engine``).

Labels, predictions and sample weights are brought to matching ranks by
Keras 2's rules before the function (``losses_utils``: a ``[batch]`` label
against ``[batch, 1]`` predictions; ``compile`` also makes ``[batch]``
labels one per row against ``[batch, k]`` outputs), and labels are cast to
the predictions' dtype. With
``from_logits=False`` a prediction made by a ``softmax``/``sigmoid``
activation is traced back to its logits and the fused cross-entropy op is used
(Keras' ``_keras_logits``): the same values, stable for saturated outputs;
other probabilities are clipped to ``[epsilon, 1 - epsilon]`` before the log.

A loss object has Keras' ``get_config``/``from_config``; ``serialize`` keeps a
name as it was given (``'mse'``), ``deserialize`` takes a name, a user's
function by name (``custom_objects``) or Keras' ``{"class_name", "config"}``
dict: how ``model.save`` keeps ``compile``'s loss.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from distrib.framework.graph import Tensor, name_scope
from distrib.keras import activations, backend, serialization
from distrib.keras.losses_utils import squeeze_or_expand_dimensions
from distrib.ops import math_ops as ops
from distrib.ops import nn

__all__ = ["Reduction", "Loss", "LossFunctionWrapper", "MeanSquaredError",
           "MeanAbsoluteError", "BinaryCrossentropy", "CategoricalCrossentropy",
           "SparseCategoricalCrossentropy", "mean_squared_error", "mse",
           "mean_absolute_error", "mae", "binary_crossentropy", "categorical_crossentropy",
           "sparse_categorical_crossentropy", "get", "match_labels", "serialize", "deserialize"]


class Reduction:
    """How a loss reduces its per-example values (``tf.keras.losses.Reduction``)."""
    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key: Any) -> str:
        if key not in cls.all():
            raise ValueError(f'Invalid Reduction Key: {key!r}. Expected keys are '
                             f'"{cls.all()}"')
        return key


def _rank(t: Tensor) -> int | None:
    return t.shape.rank


def _last_dim(t: Tensor) -> int | None:
    dims = t.shape.dims
    return None if not dims else dims[-1]


def match_labels(y_true: Any, y_pred: Tensor, cast: bool = True) -> Tensor:
    """``y_true`` as a tensor of ``y_pred``'s rank (a trailing 1 added or dropped,
    as Keras' squeeze_or_expand_dimensions) and, with ``cast``, dtype."""
    y_true = ops.convert_to_tensor(y_true)
    rt, rp = _rank(y_true), _rank(y_pred)
    if rt is not None and rp is not None:
        if rt == rp - 1 and _last_dim(y_pred) == 1:
            y_true = ops.reshape(y_true, [-1, *[d if d is not None else -1
                                                for d in y_pred.shape.dims[1:]]])
        elif rt == rp + 1 and _last_dim(y_true) == 1:
            y_true = ops.reshape(y_true, [-1, *y_true.shape.dims[1:-1]] if rt > 2 else [-1])
    if cast and y_true.dtype != y_pred.dtype:
        y_true = ops.cast(y_true, y_pred.dtype)
    return y_true


def _clip(p: Tensor) -> Tensor:
    eps = backend.epsilon()
    return ops.minimum(ops.maximum(p, eps), 1.0 - eps)


def _mean_last(t: Tensor) -> Tensor:
    return ops.reduce_mean(t, axis=-1) if (_rank(t) or 0) >= 1 else t


# -- the per-example functions -------------------------------------------------------------
def mean_squared_error(y_true: Any, y_pred: Any) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    return _mean_last(ops.square(y_pred - match_labels(y_true, y_pred)))


def mean_absolute_error(y_true: Any, y_pred: Any) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    return _mean_last(ops.abs(y_pred - match_labels(y_true, y_pred)))


def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                        label_smoothing: float = 0.0) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    z = match_labels(y_true, y_pred)
    if label_smoothing:
        z = z * (1.0 - label_smoothing) + 0.5 * label_smoothing
    logits = y_pred if from_logits else activations.logits_of(y_pred, "sigmoid")
    if logits is not None:   # max(x, 0) - x z + log(1 + exp(-|x|)): TF's stable form
        per = ops.maximum(logits, 0.0) - logits * z + \
            ops.log(1.0 + ops.exp(ops.negative(ops.abs(logits))))
    else:
        p = _clip(y_pred)
        per = ops.negative(z * ops.log(p) + (1.0 - z) * ops.log(1.0 - p))
    return _mean_last(per)


def categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                             label_smoothing: float = 0.0) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    z = match_labels(y_true, y_pred)
    classes = _last_dim(y_pred)
    if label_smoothing and classes:
        z = z * (1.0 - label_smoothing) + label_smoothing / float(classes)
    logits = y_pred if from_logits else activations.logits_of(y_pred, "softmax")
    if logits is not None:
        return nn.softmax_cross_entropy_with_logits(labels=z, logits=logits)
    p = _clip(y_pred / ops.reduce_sum(y_pred, axis=-1, keepdims=True))
    return ops.negative(ops.reduce_sum(z * ops.log(p), axis=-1))


def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                                    axis: int = -1) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    labels = ops.convert_to_tensor(y_true)
    if labels.dtype.is_floating or labels.dtype.name not in ("int32", "int64"):
        labels = ops.cast(labels, "int64")
    if (_rank(labels) or 0) != 1:
        labels = ops.reshape(labels, [-1])
    logits = y_pred if from_logits else activations.logits_of(y_pred, "softmax")
    if logits is not None:
        return nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    classes = _last_dim(y_pred)
    if classes is None:
        raise ValueError("sparse_categorical_crossentropy needs the number of classes (the "
                         f"predictions' last dimension) known; got {y_pred.shape}")
    one_hot = ops.cast(ops.equal(ops.reshape(ops.cast(labels, y_pred.dtype), [-1, 1]),
                                 ops.constant(np.arange(classes), dtype=y_pred.dtype)),
                       y_pred.dtype)
    p = _clip(y_pred / ops.reduce_sum(y_pred, axis=-1, keepdims=True))
    return ops.negative(ops.reduce_sum(one_hot * ops.log(p), axis=-1))


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error


# -- loss objects ----------------------------------------------------------------------------
class Loss:
    """``Loss(reduction='auto', name=None)``: subclasses implement ``call(y_true,
    y_pred)`` giving one value per example."""

    def __init__(self, reduction: str = Reduction.AUTO, name: str | None = None) -> None:
        self.reduction = Reduction.validate(reduction)
        self.name = name or backend.snake_case(type(self).__name__)

    def call(self, y_true: Any, y_pred: Any) -> Tensor:
        raise NotImplementedError

    def per_example(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        """The per-example values, weighted by ``sample_weight`` when given (brought
        to the values' rank and dtype as Keras' ``compute_weighted_loss`` does)."""
        values = self.call(y_true, y_pred)
        if sample_weight is not None:
            weight = ops.convert_to_tensor(sample_weight)
            if weight.dtype != values.dtype:
                weight = ops.cast(weight, values.dtype)
            values, _, weight = squeeze_or_expand_dimensions(values, None, weight)
            values = values * weight
        return values

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Tensor:
        with name_scope(self.name):
            values = self.per_example(y_true, y_pred, sample_weight)
            if self.reduction == Reduction.NONE:
                return values
            total = ops.reduce_sum(values)
            if self.reduction == Reduction.SUM:
                return total
            # Keras' safe mean: an empty batch (a replica's share of a short one) gives 0
            count = ops.reduce_sum(ops.ones_like(values))
            return total / ops.maximum(count, 1.0)

    def get_config(self) -> dict[str, Any]:
        return {"reduction": self.reduction, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        return cls(**config)


class LossFunctionWrapper(Loss):
    """A function ``fn(y_true, y_pred, **kwargs)`` as a Loss."""

    def __init__(self, fn: Callable[..., Tensor], reduction: str = Reduction.AUTO,
                 name: str | None = None, **kwargs: Any) -> None:
        super().__init__(reduction, name or getattr(fn, "__name__", "loss"))
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true: Any, y_pred: Any) -> Tensor:
        """Keras 2's: labels and predictions brought to matching ranks
        (``losses_utils.squeeze_or_expand_dimensions``), then the function."""
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        y_pred, y_true, _ = squeeze_or_expand_dimensions(y_pred, y_true)
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self) -> dict[str, Any]:
        """Keras': the function's keyword arguments, and the function itself (by name)
        when this is a plain wrapper, not one of the named losses."""
        plain = type(self) is LossFunctionWrapper
        return serialization.wrapper_config(super().get_config(), self._fn_kwargs,
                                            self.fn if plain else None)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Loss:
        return cls(**serialization.wrapper_kwargs(config, _function, "loss"))


class MeanSquaredError(LossFunctionWrapper):
    def __init__(self, reduction: str = Reduction.AUTO, name: str = "mean_squared_error"
                 ) -> None:
        super().__init__(mean_squared_error, reduction, name)


class MeanAbsoluteError(LossFunctionWrapper):
    def __init__(self, reduction: str = Reduction.AUTO, name: str = "mean_absolute_error"
                 ) -> None:
        super().__init__(mean_absolute_error, reduction, name)


class BinaryCrossentropy(LossFunctionWrapper):
    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0,
                 axis: int = -1, reduction: str = Reduction.AUTO,
                 name: str = "binary_crossentropy") -> None:
        super().__init__(binary_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)
        self.from_logits = bool(from_logits)


class CategoricalCrossentropy(LossFunctionWrapper):
    def __init__(self, from_logits: bool = False, label_smoothing: float = 0.0,
                 axis: int = -1, reduction: str = Reduction.AUTO,
                 name: str = "categorical_crossentropy") -> None:
        super().__init__(categorical_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)
        self.from_logits = bool(from_logits)


class SparseCategoricalCrossentropy(LossFunctionWrapper):
    def __init__(self, from_logits: bool = False, ignore_class: int | None = None,
                 reduction: str = Reduction.AUTO,
                 name: str = "sparse_categorical_crossentropy") -> None:
        if ignore_class is not None:
            raise NotImplementedError("SparseCategoricalCrossentropy(ignore_class=...) is not "
                                      "supported by dt.keras; leave it None")
        super().__init__(sparse_categorical_crossentropy, reduction, name,
                         from_logits=from_logits)
        self.from_logits = bool(from_logits)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "ignore_class": None}


_BY_NAME: dict[str, type[Loss]] = {
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError, "MSE": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
    "MAE": MeanAbsoluteError, "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy}


def get(identifier: Any) -> Loss:
    """A Loss for a name (``'mse'``, ``'sparse_categorical_crossentropy'`` ...), a
    Loss, a Loss class, or a function ``(y_true, y_pred) -> per-example values``."""
    found = serialization.by_identifier(
        identifier, Loss, _BY_NAME,
        lambda name: name if name in _BY_NAME else backend.snake_case(name))
    if found is not None:
        return found
    if callable(identifier) and not isinstance(identifier, (str, type)):
        return LossFunctionWrapper(identifier)
    raise ValueError(f"Could not interpret loss identifier: {identifier!r}; use one of "
                     f"{sorted(k for k in _BY_NAME if k.islower())}, a dt.keras.losses.Loss, "
                     "or a function (y_true, y_pred) -> per-example losses")


_FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    "mean_squared_error": mean_squared_error, "mse": mean_squared_error,
    "mean_absolute_error": mean_absolute_error, "mae": mean_absolute_error,
    "binary_crossentropy": binary_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy}


def _function(name: Any) -> Callable[..., Tensor]:
    if isinstance(name, str) and name in _FUNCTIONS:
        return _FUNCTIONS[name]
    if callable(name):
        return name
    raise ValueError(f"Unknown loss function: {name!r}")


def serialize(loss: Any) -> Any:
    """``compile``'s loss as saved: a name as given, a function by name, a Loss as
    Keras' ``{"class_name", "config"}`` dict."""
    return serialization.serialize_compile_arg(loss, Loss)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """What ``serialize`` saved, for ``compile`` (a user's function or class is found in
    ``custom_objects`` or the registry)."""
    known = {cls.__name__: cls for cls in (Loss, LossFunctionWrapper, *set(_BY_NAME.values()))}
    return serialization.deserialize_compile_arg(config, "loss", get, known, custom_objects)
