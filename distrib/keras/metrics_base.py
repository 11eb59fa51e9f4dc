"""The metric classes of ``dt.keras.metrics`` that are means or sums (Keras 2's
``Metric``, ``Mean``, ``Sum``, ``MeanMetricWrapper`` and the accuracies and
cross-entropies built on it), and the per-example functions they wrap.

A metric is a few summed statistics and a formula for its result. Used
through ``update_state``/``result``/``reset_state`` (a custom loop, in a
``dt.function`` or, once ops run eagerly, at once), the statistics are
float32 variables made on the first ``update_state`` in the strategy scope
open then (``ON_READ``, summed over replicas when read, as Keras 2's);
``update_state`` returns its update op. Used by ``compile``, the traced step
returns them beside the loss (a mean metric adds one op per step: the sum
of its values; the rows are the loss's) and the client adds them up
(``merge_statistics``): no variable, no extra op run, no extra round trip;
``result()`` then gives the compiled totals' value. One formula serves both
(``metric_math``), so the compiled step's metrics are the metric objects'.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from distrib.framework.graph import Tensor, get_default_graph
from distrib.keras import backend, serialization
from distrib.keras import losses as losses_mod
from distrib.keras.eager_calls import placed, run_placed
from distrib.keras.losses_utils import squeeze_or_expand_dimensions
from distrib.keras.metric_math import GRAPH, NUMPY
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable, VariableAggregation, VariableSynchronization

__all__ = ["Metric", "Mean", "Sum", "MeanMetricWrapper", "Accuracy", "BinaryAccuracy",
           "CategoricalAccuracy", "SparseCategoricalAccuracy", "MeanSquaredError",
           "MeanAbsoluteError", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "CompiledAccuracy", "accuracy", "binary_accuracy",
           "categorical_accuracy", "sparse_categorical_accuracy", "FUNCTIONS"]

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
    """Keras 2's stateful metric (module header): a few summed statistics, kept as
    variables by ``update_state`` or as numbers by ``compile``'s step."""

    def __init__(self, name: str | None = None, dtype: Any = None) -> None:
        self.name = name or backend.snake_case(type(self).__name__)
        self.dtype = "float32"
        self._variables: list[Any] | None = None   # made by the first update_state
        self._host: list[np.ndarray] | None = None  # the compiled step's totals

    # -- what a metric defines --------------------------------------------------------------
    def state_shapes(self) -> list[tuple[int, ...]]:
        """The shapes of the summed statistics (``[total, count]`` for a mean)."""
        return [(), ()]

    def batch_statistics(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                         ) -> list[Tensor]:
        """One batch's statistics (float32 graph tensors of ``state_shapes``)."""
        raise NotImplementedError

    def result_of(self, m: Any, stats: list[Any]) -> Any:
        """The metric from its statistics, with ``m``'s math (numpy or graph ops)."""
        return m.div_no_nan(stats[0], stats[1])

    # -- compile's step: statistics summed in the client (no variables) ---------------------
    def step_statistics(self, y_true: Any, y_pred: Any) -> list[Tensor]:
        """What the compiled step returns for this metric (``rows`` is added by the loop)."""
        return self.batch_statistics(y_true, y_pred)

    @property
    def num_statistics(self) -> int:
        return sum(int(np.prod(s)) for s in self.state_shapes())

    def merge_statistics(self, flat: np.ndarray, rows: float) -> None:
        """Add the compiled step's totals (``flat``: ``step_statistics`` raveled)."""
        stats, at = [], 0
        for shape in self.state_shapes():
            size = int(np.prod(shape))
            stats.append(np.asarray(flat[at:at + size], np.float64).reshape(shape))
            at += size
        if self._host is None:
            self._host = [np.zeros(s, np.float64) for s in self.state_shapes()]
        self._host = [h + v for h, v in zip(self._host, stats)]

    def result_value(self) -> float | np.ndarray:
        """The compiled step's result as a number."""
        stats = self._host or [np.zeros(s, np.float64) for s in self.state_shapes()]
        value = np.asarray(self.result_of(NUMPY, stats))
        return float(value) if value.ndim == 0 else value

    # -- Keras' stateful API ----------------------------------------------------------------
    @property
    def variables(self) -> list[Any]:
        return list(self._variables or [])

    def _state(self) -> list[Any]:
        if self._variables is None:
            graph = get_default_graph()
            with graph.name_scope(None), graph.control_dependencies(None), \
                    graph.name_scope(self.name + "/"):
                self._variables = [
                    Variable(np.zeros(shape, np.float32), trainable=False, name=f"state_{i}",
                             dtype="float32", synchronization=VariableSynchronization.ON_READ,
                             aggregation=VariableAggregation.SUM)
                    for i, shape in enumerate(self.state_shapes())]
        return self._variables

    def update_state(self, y_true: Any, y_pred: Any = None, sample_weight: Any = None) -> Any:
        """Add a batch to the state variables (made on first use, in the strategy scope
        open then); returns the update op (run at once when ops run eagerly)."""
        if self._variables is not None and placed(self._variables):   # eager_calls
            run_placed(self, "update_state", lambda *a: self.update_state(*a),
                       y_true, y_pred, sample_weight)
            return None
        stats = self.batch_statistics(y_true, y_pred, sample_weight)
        return ops.group(*[v.assign_add(s) for v, s in zip(self._state(), stats)])

    def result(self) -> Any:
        """The metric: from the state variables when ``update_state`` made them, else
        the compiled step's totals (a constant)."""
        if self._variables is None:
            return ops.constant(self.result_value(), dtype="float32")
        if placed(self._variables):   # eager code reading a placed metric (eager_calls)
            return run_placed(self, "result", self.result)
        return self.result_of(GRAPH, [ops.convert_to_tensor(v) for v in self._variables])

    def reset_state(self) -> Any:
        """Zero the state: the compiled totals at once; the variables by the returned op."""
        self._host = None
        if self._variables is None:
            return None
        if placed(self._variables):   # eager code resetting a placed metric (eager_calls)
            run_placed(self, "reset_state", self.reset_state)
            return None
        return ops.group(*[v.assign(np.zeros(v.shape.as_list(), np.float32))
                           for v in self._variables])

    reset_states = reset_state   # Keras 2's older name

    def __call__(self, y_true: Any, y_pred: Any = None, sample_weight: Any = None) -> Any:
        """``update_state`` then ``result`` (Keras')."""
        with get_default_graph().control_dependencies(
                [self.update_state(y_true, y_pred, sample_weight)]):
            return ops.identity(self.result())

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": "float32"}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"


class Mean(Metric):
    """``Mean(name='mean')``: the weighted mean of the values given to ``update_state``."""

    def __init__(self, name: str = "mean", dtype: Any = None) -> None:
        super().__init__(name, dtype)

    def batch_statistics(self, values: Any, y_pred: Any = None, sample_weight: Any = None
                         ) -> list[Tensor]:
        v = _float(ops.convert_to_tensor(values))
        if sample_weight is None:
            return [ops.reduce_sum(v), ops.reduce_sum(ops.ones_like(v))]
        w = _float(ops.convert_to_tensor(sample_weight))
        v, _, w = squeeze_or_expand_dimensions(v, None, w)
        w = w * ops.ones_like(v)
        return [ops.reduce_sum(v * w), ops.reduce_sum(w)]

    def update_state(self, values: Any, sample_weight: Any = None) -> Any:  # type: ignore[override]
        return super().update_state(values, None, sample_weight)


class Sum(Mean):
    """``Sum(name='sum')``: the (weighted) sum of the values."""

    def __init__(self, name: str = "sum", dtype: Any = None) -> None:
        super().__init__(name, dtype)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [()]

    def batch_statistics(self, values: Any, y_pred: Any = None, sample_weight: Any = None
                         ) -> list[Tensor]:
        return super().batch_statistics(values, None, sample_weight)[:1]

    def result_of(self, m: Any, stats: list[Any]) -> Any:
        return stats[0]


class MeanMetricWrapper(Metric):
    """``fn(y_true, y_pred, **kwargs)`` (per example) as a metric: the weighted mean."""

    def __init__(self, fn: Callable[..., Tensor], name: str | None = None, dtype: Any = None,
                 **kwargs: Any) -> None:
        self._fn = fn
        self._fn_kwargs = kwargs
        super().__init__(name or getattr(fn, "__name__", "metric"), dtype)

    def values(self, y_true: Any, y_pred: Any) -> Tensor:
        """Keras 2's ``update_state``: both cast to the metric's float32, brought to
        matching ranks (``losses_utils``), then the function."""
        return _float(self._fn(*_matched(y_true, y_pred), **self._fn_kwargs))

    def batch_statistics(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                         ) -> list[Tensor]:
        values = self.values(y_true, y_pred)
        if sample_weight is None:
            return [ops.reduce_sum(values), ops.reduce_sum(ops.ones_like(values))]
        w = _float(ops.convert_to_tensor(sample_weight))
        values, _, w = squeeze_or_expand_dimensions(values, None, w)
        w = w * ops.ones_like(values)
        return [ops.reduce_sum(values * w), ops.reduce_sum(w)]

    def step_statistics(self, y_true: Any, y_pred: Any) -> list[Tensor]:
        """The sum of the values only: the count is the step's rows, shared."""
        return [ops.reduce_sum(self.values(y_true, y_pred))]

    @property
    def num_statistics(self) -> int:
        return 1

    def merge_statistics(self, flat: np.ndarray, rows: float) -> None:
        super().merge_statistics(np.array([flat[0], rows]), rows)

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


class SparseCategoricalCrossentropy(MeanMetricWrapper):
    """``SparseCategoricalCrossentropy(name='sparse_categorical_crossentropy',
    from_logits=False, axis=-1)``: the mean cross-entropy of integer labels."""

    def __init__(self, name: str = "sparse_categorical_crossentropy", dtype: Any = None,
                 from_logits: bool = False, ignore_class: Any = None, axis: int = -1) -> None:
        if ignore_class is not None:
            raise NotImplementedError("SparseCategoricalCrossentropy(ignore_class=...) is not "
                                      "supported by dt.keras")
        super().__init__(losses_mod.sparse_categorical_crossentropy, name, dtype,
                         from_logits=from_logits, axis=axis)


class CategoricalCrossentropy(MeanMetricWrapper):
    """``CategoricalCrossentropy(name='categorical_crossentropy', from_logits=False,
    label_smoothing=0)``."""

    def __init__(self, name: str = "categorical_crossentropy", dtype: Any = None,
                 from_logits: bool = False, label_smoothing: float = 0.0) -> None:
        super().__init__(losses_mod.categorical_crossentropy, name, dtype,
                         from_logits=from_logits, label_smoothing=label_smoothing)


class BinaryCrossentropy(MeanMetricWrapper):
    """``BinaryCrossentropy(name='binary_crossentropy', from_logits=False,
    label_smoothing=0)``."""

    def __init__(self, name: str = "binary_crossentropy", dtype: Any = None,
                 from_logits: bool = False, label_smoothing: float = 0.0) -> None:
        super().__init__(losses_mod.binary_crossentropy, name, dtype,
                         from_logits=from_logits, label_smoothing=label_smoothing)


class CompiledAccuracy(MeanMetricWrapper):
    """``'accuracy'`` in ``compile``: the kind is picked by shapes at trace time."""

    def __init__(self, name: str, loss: Any) -> None:
        self._loss = loss
        super().__init__(accuracy, name)

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


FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    "accuracy": accuracy, "binary_accuracy": binary_accuracy,
    "categorical_accuracy": categorical_accuracy,
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "mean_squared_error": losses_mod.mean_squared_error,
    "mean_absolute_error": losses_mod.mean_absolute_error}


def _function(name: Any) -> Callable[..., Tensor]:
    if isinstance(name, str) and name in FUNCTIONS:
        return FUNCTIONS[name]
    if callable(name):
        return name
    raise ValueError(f"Unknown metric function: {name!r}")
