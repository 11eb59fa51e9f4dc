"""``dt.keras.metrics``: Keras 2's metrics by name, and what ``compile(metrics=[...])`` takes.

The classes live by family: means, sums, accuracies and cross-entropies in
``metrics_base`` (with the stateful ``Metric`` base and how a metric is
both a set of variables and the compiled step's totals), ``Precision``,
``Recall`` and ``AUC`` in ``metrics_confusion``. Every one has Keras 2's
``update_state``/``result``/``reset_state`` (``reset_states``) and
``get_config``/``from_config``.

``'accuracy'`` (or ``'acc'``) becomes binary, sparse categorical or
categorical accuracy by the shapes of labels and predictions, as Keras 3
decides it: one output unit is binary; labels of lower rank (or a last
dimension of 1) against several units are sparse. Binary accuracy compares
with 0.5, or with 0.0 when the loss takes logits (Keras compares logits with
0.5, which is a known slip; see the README).

Shapes follow Keras 2 (``losses_utils``): labels and predictions are cast to
float32 and brought to matching ranks before the function, after
``compile``'s ``match_dtype_and_rank``. ``serialize``/``deserialize`` keep
``compile``'s metrics as given (names as names, a user's function by name).
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.keras import serialization
from distrib.keras.metrics_base import (
    Accuracy,
    BinaryAccuracy,
    BinaryCrossentropy,
    CategoricalAccuracy,
    CategoricalCrossentropy,
    CompiledAccuracy,
    Mean,
    MeanAbsoluteError,
    MeanMetricWrapper,
    MeanSquaredError,
    Metric,
    SparseCategoricalAccuracy,
    SparseCategoricalCrossentropy,
    Sum,
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
)
from distrib.keras.metrics_confusion import AUC, Precision, Recall

__all__ = ["Metric", "Mean", "Sum", "MeanMetricWrapper", "Accuracy", "BinaryAccuracy",
           "CategoricalAccuracy", "SparseCategoricalAccuracy", "MeanSquaredError",
           "MeanAbsoluteError", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "Precision", "Recall", "AUC", "accuracy", "binary_accuracy",
           "categorical_accuracy", "sparse_categorical_accuracy", "get", "serialize",
           "deserialize"]

_CONFUSION = (Precision, Recall, AUC)

# their public home, as Keras reports it (``keras.metrics.AUC``): what a saved config names
for _cls in (Metric, Mean, Sum, MeanMetricWrapper, Accuracy, BinaryAccuracy, CategoricalAccuracy,
             SparseCategoricalAccuracy, MeanSquaredError, MeanAbsoluteError,
             SparseCategoricalCrossentropy, CategoricalCrossentropy, BinaryCrossentropy,
             *_CONFUSION):
    _cls.__module__ = __name__


_BY_NAME: dict[str, Callable[[], Metric]] = {
    "binary_accuracy": BinaryAccuracy, "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError, "mse": lambda: MeanSquaredError(name="mse"),
    "mean_absolute_error": MeanAbsoluteError, "mae": lambda: MeanAbsoluteError(name="mae"),
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "AUC": AUC, "auc": AUC, "Precision": Precision, "precision": Precision, "Recall": Recall,
    "recall": Recall}


def get(identifier: Any, loss: Any = None) -> Metric:
    """A metric for a name (``'accuracy'``, ``'mse'`` ...), a Metric, a Metric
    class, or a function ``(y_true, y_pred) -> per-example values``; ``loss``
    (the compiled loss) picks the kind of ``'accuracy'``."""
    if isinstance(identifier, str) and identifier in ("accuracy", "acc"):
        return CompiledAccuracy(identifier, loss)
    found = serialization.by_identifier(identifier, Metric, _BY_NAME)
    if found is not None:
        return found
    if callable(identifier) and not isinstance(identifier, (str, type)):
        return MeanMetricWrapper(identifier)
    raise ValueError(f"Could not interpret metric identifier: {identifier!r}; use 'accuracy', "
                     f"one of {sorted(_BY_NAME)}, a dt.keras.metrics.Metric, or a function "
                     "(y_true, y_pred) -> per-example values")


def serialize(metric: Any) -> Any:
    """One of ``compile``'s metrics as saved: a name as given, a function by name, a
    Metric as Keras' ``{"class_name", "config"}`` dict."""
    return serialization.serialize_compile_arg(metric, Metric)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """What ``serialize`` saved, for ``compile`` (a user's function or class is found in
    ``custom_objects`` or the registry)."""
    known = {cls.__name__: cls for cls in (Metric, MeanMetricWrapper, Accuracy, BinaryAccuracy,
                                           CategoricalAccuracy, SparseCategoricalAccuracy,
                                           MeanSquaredError, MeanAbsoluteError, Mean, Sum,
                                           SparseCategoricalCrossentropy,
                                           CategoricalCrossentropy, BinaryCrossentropy,
                                           *_CONFUSION)}
    return serialization.deserialize_compile_arg(config, "metric", get, known, custom_objects)
