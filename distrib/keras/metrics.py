"""``dt.keras.metrics``: what ``compile(metrics=[...])`` reports (Keras' names).

Every metric here is a mean over examples (Keras' ``MeanMetricWrapper``):
``values(y_true, y_pred)`` builds one value per example, the traced step
returns their sum beside the loss's (one fetch, summed over the replicas
with the loss in one reduce), and the metric keeps the running total and
count in the client (``update_totals``/``result``/``reset_state``). So a
metric costs no variable, no extra op run and no extra round trip.

``'accuracy'`` (or ``'acc'``) becomes binary, sparse categorical or
categorical accuracy by the shapes of labels and predictions, as Keras 3
decides it: one output unit is binary; labels of lower rank (or a last
dimension of 1) against several units are sparse. Binary accuracy compares
with 0.5, or with 0.0 when the loss takes logits (Keras compares logits with
0.5, which is a known slip; see the README).

Shapes follow Keras 2 (``losses_utils``): labels and predictions are cast to
float32 and brought to matching ranks before the function, after
``compile``'s ``match_dtype_and_rank``.

A metric object has Keras' ``get_config``/``from_config`` (nothing else to
save: its totals live for one epoch); ``serialize``/``deserialize`` keep
``compile``'s metrics as given (names as names, a user's function by name).
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.framework.graph import Tensor
from distrib.keras import backend, serialization
from distrib.keras import losses as losses_mod
from distrib.keras.losses_utils import squeeze_or_expand_dimensions
from distrib.ops import math_ops as ops

__all__ = ["Metric", "MeanMetricWrapper", "Accuracy", "BinaryAccuracy",
           "CategoricalAccuracy", "SparseCategoricalAccuracy", "MeanSquaredError",
           "MeanAbsoluteError", "binary_accuracy", "categorical_accuracy",
           "sparse_categorical_accuracy", "get", "serialize", "deserialize"]


def _float(t: Tensor) -> Tensor:
    return ops.cast(t, "float32")


def _mean_last(t: Tensor) -> Tensor:
    return ops.reduce_mean(t, axis=-1) if (t.shape.rank or 0) >= 2 else t


def binary_accuracy(y_true: Any, y_pred: Any, threshold: float = 0.5) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    y_true = losses_mod.match_labels(y_true, y_pred)
    hit = ops.equal(ops.cast(ops.greater(y_pred, threshold), y_pred.dtype), y_true)
    return _mean_last(_float(hit))


def categorical_accuracy(y_true: Any, y_pred: Any) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    y_true = ops.convert_to_tensor(y_true)
    return _float(ops.equal(ops.argmax(y_true, axis=-1), ops.argmax(y_pred, axis=-1)))


def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    labels = ops.convert_to_tensor(y_true)
    if (labels.shape.rank or 0) != 1:
        labels = ops.reshape(labels, [-1])
    predicted = ops.argmax(y_pred, axis=-1)
    if labels.dtype != predicted.dtype:
        labels = ops.cast(labels, predicted.dtype)
    return _float(ops.equal(labels, predicted))


def accuracy(y_true: Any, y_pred: Any) -> Tensor:
    y_pred = ops.convert_to_tensor(y_pred)
    return _mean_last(_float(ops.equal(losses_mod.match_labels(y_true, y_pred), y_pred)))


def _matched(y_true: Any, y_pred: Any) -> tuple[Tensor, Tensor]:
    y_true, y_pred = _float(ops.convert_to_tensor(y_true)), _float(ops.convert_to_tensor(y_pred))
    y_pred, y_true, _ = squeeze_or_expand_dimensions(y_pred, y_true)
    return y_true, y_pred


class Metric:
    """A mean over examples, kept as a running total and count in the client."""

    def __init__(self, name: str | None = None, dtype: Any = None) -> None:
        self.name = name or backend.snake_case(type(self).__name__)
        self.reset_state()

    def values(self, y_true: Any, y_pred: Any) -> Tensor:
        """One value per example (graph ops; traced into the step)."""
        raise NotImplementedError

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def update_totals(self, total: float, count: float) -> None:
        self.total += float(total)
        self.count += float(count)

    def result(self) -> float:
        return self.total / self.count if self.count else 0.0

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": "float32"}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"


class MeanMetricWrapper(Metric):
    """``fn(y_true, y_pred, **kwargs)`` (per example) as a metric."""

    def __init__(self, fn: Callable[..., Tensor], name: str | None = None, dtype: Any = None,
                 **kwargs: Any) -> None:
        self._fn = fn
        self._fn_kwargs = kwargs
        super().__init__(name or getattr(fn, "__name__", "metric"), dtype)

    def values(self, y_true: Any, y_pred: Any) -> Tensor:
        """Keras 2's ``update_state``: both cast to the metric's float32, brought to
        matching ranks (``losses_utils``), then the function."""
        return _float(self._fn(*_matched(y_true, y_pred), **self._fn_kwargs))

    def get_config(self) -> dict[str, Any]:
        """Keras': the function's keyword arguments, and the function (by name) when
        this is a plain wrapper."""
        plain = type(self) is MeanMetricWrapper
        return serialization.wrapper_config(super().get_config(), self._fn_kwargs,
                                            self._fn if plain else None)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Metric:
        return cls(**serialization.wrapper_kwargs(config, _function, "metric"))


class Accuracy(MeanMetricWrapper):
    def __init__(self, name: str = "accuracy", dtype: Any = None) -> None:
        super().__init__(accuracy, name, dtype)


class BinaryAccuracy(MeanMetricWrapper):
    def __init__(self, name: str = "binary_accuracy", dtype: Any = None,
                 threshold: float = 0.5) -> None:
        super().__init__(binary_accuracy, name, dtype, threshold=threshold)


class CategoricalAccuracy(MeanMetricWrapper):
    def __init__(self, name: str = "categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(categorical_accuracy, name, dtype)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    def __init__(self, name: str = "sparse_categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(sparse_categorical_accuracy, name, dtype)


class MeanSquaredError(MeanMetricWrapper):
    def __init__(self, name: str = "mean_squared_error", dtype: Any = None) -> None:
        super().__init__(losses_mod.mean_squared_error, name, dtype)


class MeanAbsoluteError(MeanMetricWrapper):
    def __init__(self, name: str = "mean_absolute_error", dtype: Any = None) -> None:
        super().__init__(losses_mod.mean_absolute_error, name, dtype)


class _CompiledAccuracy(Metric):
    """``'accuracy'`` in ``compile``: the kind is picked by shapes at trace time."""

    def __init__(self, name: str, loss: Any) -> None:
        self._loss = loss
        super().__init__(name)

    def values(self, y_true: Any, y_pred: Any) -> Tensor:
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        units = y_pred.shape.dims[-1] if y_pred.shape.rank else None
        if units == 1 or y_pred.shape.rank in (0, 1):
            threshold = 0.0 if getattr(self._loss, "from_logits", False) else 0.5
            return binary_accuracy(*_matched(y_true, y_pred), threshold)
        sparse = (y_true.shape.rank is not None and y_pred.shape.rank is not None and
                  (y_true.shape.rank < y_pred.shape.rank or
                   (y_true.shape.dims and y_true.shape.dims[-1] == 1)))
        if sparse or isinstance(self._loss, losses_mod.SparseCategoricalCrossentropy):
            return sparse_categorical_accuracy(*_matched(y_true, y_pred))
        return categorical_accuracy(*_matched(y_true, y_pred))


_BY_NAME: dict[str, Callable[[], Metric]] = {
    "binary_accuracy": BinaryAccuracy, "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError, "mse": lambda: MeanSquaredError(name="mse"),
    "mean_absolute_error": MeanAbsoluteError, "mae": lambda: MeanAbsoluteError(name="mae")}


def get(identifier: Any, loss: Any = None) -> Metric:
    """A metric for a name (``'accuracy'``, ``'mse'`` ...), a Metric, a Metric
    class, or a function ``(y_true, y_pred) -> per-example values``; ``loss``
    (the compiled loss) picks the kind of ``'accuracy'``."""
    if isinstance(identifier, str) and identifier in ("accuracy", "acc"):
        return _CompiledAccuracy(identifier, loss)
    found = serialization.by_identifier(identifier, Metric, _BY_NAME)
    if found is not None:
        return found
    if callable(identifier) and not isinstance(identifier, (str, type)):
        return MeanMetricWrapper(identifier)
    raise ValueError(f"Could not interpret metric identifier: {identifier!r}; use 'accuracy', "
                     f"one of {sorted(_BY_NAME)}, a dt.keras.metrics.Metric, or a function "
                     "(y_true, y_pred) -> per-example values")


_FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    "accuracy": accuracy, "binary_accuracy": binary_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "mean_squared_error": losses_mod.mean_squared_error,
    "mean_absolute_error": losses_mod.mean_absolute_error}


def _function(name: Any) -> Callable[..., Tensor]:
    if isinstance(name, str) and name in _FUNCTIONS:
        return _FUNCTIONS[name]
    if callable(name):
        return name
    raise ValueError(f"Unknown metric function: {name!r}")


def serialize(metric: Any) -> Any:
    """One of ``compile``'s metrics as saved: a name as given, a function by name, a
    Metric as Keras' ``{"class_name", "config"}`` dict."""
    return serialization.serialize_compile_arg(metric, Metric)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """What ``serialize`` saved, for ``compile`` (a user's function or class is found in
    ``custom_objects`` or the registry)."""
    known = {cls.__name__: cls for cls in (Metric, MeanMetricWrapper, Accuracy, BinaryAccuracy,
                                           CategoricalAccuracy, SparseCategoricalAccuracy,
                                           MeanSquaredError, MeanAbsoluteError)}
    return serialization.deserialize_compile_arg(config, "metric", get, known, custom_objects)
