"""Keras 2's confusion-matrix metrics: ``Precision``, ``Recall`` and ``AUC``.

Their statistics are the true/false positive/negative counts at each
threshold (a prediction above the threshold is positive; a label is positive
when it is not 0, as Keras casts it to bool), weighted by ``sample_weight``:
``Precision`` keeps ``[tp, fp]``, ``Recall`` ``[tp, fn]``, ``AUC`` all four,
each a vector over the thresholds, summed over batches and replicas like any
metric's (``metrics_base``).

``AUC(num_thresholds=200, curve='ROC', summation_method='interpolation')``
uses Keras' thresholds: ``num_thresholds - 2`` evenly spaced in (0, 1) and
``-epsilon`` and ``1 + epsilon`` at the ends, and Keras' Riemann sums: for ROC
the false positive rate against recall; for PR with ``interpolation``,
Davis & Goadrich's interpolation (``interpolate_pr_auc``), else precision
against recall; ``minoring``/``majoring`` take the lower/higher end of each
step. ``from_logits=True`` passes the predictions through a sigmoid first.
``multi_label`` and ``num_labels`` are not supported (a flattened,
single-label AUC, Keras' default).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.framework.graph import Tensor
from distrib.keras.losses_utils import squeeze_or_expand_dimensions
from distrib.keras.metrics_base import Metric
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import slice_rows

__all__ = ["Precision", "Recall", "AUC"]

EPSILON = 1e-7


def _confusion(y_true: Any, y_pred: Any, sample_weight: Any, thresholds: Sequence[float],
               which: Sequence[str], top_k: int | None = None, class_id: int | None = None
               ) -> list[Tensor]:
    """``which`` of ``tp``/``fp``/``tn``/``fn`` at each threshold, as [T] float32 tensors."""
    y_pred = ops.cast(ops.convert_to_tensor(y_pred), "float32")
    y_true = ops.cast(ops.convert_to_tensor(y_true), "float32")
    y_pred, y_true, _ = squeeze_or_expand_dimensions(y_pred, y_true)
    if class_id is not None:
        y_true = ops.reshape(_column(y_true, class_id), [-1])
        y_pred = ops.reshape(_column(y_pred, class_id), [-1])
    elif top_k is not None:
        raise NotImplementedError("Precision/Recall(top_k=...) is not supported by dt.keras")
    pred = ops.reshape(y_pred, [-1, 1])
    label = ops.cast(ops.not_equal(ops.reshape(y_true, [-1, 1]), 0.0), "float32")
    weight = ops.ones_like(label)
    if sample_weight is not None:
        w = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
        weight = ops.reshape(w * ops.ones_like(y_pred), [-1, 1])
    bounds = ops.constant(np.asarray(thresholds, np.float32).reshape(1, -1))
    positive = ops.cast(ops.greater(pred, bounds), "float32")     # [N, T]
    negative = 1.0 - positive
    parts = {"tp": label * positive, "fp": (1.0 - label) * positive,
             "tn": (1.0 - label) * negative, "fn": label * negative}
    return [ops.reduce_sum(parts[k] * weight, axis=0) for k in which]


def _column(t: Tensor, index: int) -> Tensor:
    return slice_rows(t, index, 1, axis=t.shape.rank - 1)


def _thresholds(thresholds: Any, default: float) -> tuple[list[float], bool]:
    if thresholds is None:
        return [default], True
    if isinstance(thresholds, (int, float)):
        return [float(thresholds)], True
    values = [float(t) for t in thresholds]
    if any(not 0.0 <= t <= 1.0 for t in values):
        raise ValueError(f"Threshold values must be in [0, 1]. Received: {thresholds}")
    return values, False


class _ThresholdMetric(Metric):
    """Counts at thresholds; the result is per threshold (one value for one)."""

    _counts: tuple[str, ...] = ()

    def __init__(self, thresholds: Any = None, top_k: int | None = None,
                 class_id: int | None = None, name: str | None = None,
                 dtype: Any = None) -> None:
        super().__init__(name, dtype)
        self.init_thresholds = thresholds
        self.top_k = top_k
        self.class_id = class_id
        self.thresholds, self._single = _thresholds(thresholds, 0.5)

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(len(self.thresholds),)] * len(self._counts)

    def batch_statistics(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                         ) -> list[Tensor]:
        return _confusion(y_true, y_pred, sample_weight, self.thresholds, self._counts,
                          self.top_k, self.class_id)

    def result_of(self, m: Any, stats: list[Any]) -> Any:
        value = m.div_no_nan(stats[0], stats[0] + stats[1])
        return _first(m, value) if self._single else value

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "thresholds": self.init_thresholds,
                "top_k": self.top_k, "class_id": self.class_id}


def _first(m: Any, v: Any) -> Any:
    """The single threshold's value as a scalar."""
    if isinstance(v, np.ndarray):
        return v[0]
    return ops.reshape(m.head(v, 1), [])


class Precision(_ThresholdMetric):
    """``Precision(thresholds=None, top_k=None, class_id=None, name=None)``:
    ``tp / (tp + fp)`` at each threshold (0.5 by default)."""

    _counts = ("tp", "fp")


class Recall(_ThresholdMetric):
    """``Recall(thresholds=None, top_k=None, class_id=None, name=None)``:
    ``tp / (tp + fn)`` at each threshold (0.5 by default)."""

    _counts = ("tp", "fn")


class AUC(Metric):
    """``AUC(num_thresholds=200, curve='ROC', summation_method='interpolation', name=None,
    thresholds=None, multi_label=False, num_labels=None, label_weights=None,
    from_logits=False)``: see the module header."""

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC",
                 summation_method: str = "interpolation", name: str | None = None,
                 dtype: Any = None, thresholds: Sequence[float] | None = None,
                 multi_label: bool = False, num_labels: int | None = None,
                 label_weights: Any = None, from_logits: bool = False) -> None:
        if multi_label or num_labels is not None or label_weights is not None:
            raise NotImplementedError("AUC(multi_label=True / num_labels / label_weights) is "
                                      "not supported by dt.keras")
        curve, summation_method = str(curve).upper(), str(summation_method).lower()
        if curve not in ("ROC", "PR"):
            raise ValueError(f'Invalid `curve` argument value "{curve}". Expected one of: '
                             "['ROC', 'PR']")
        if summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError(f'Invalid `summation_method` argument value '
                             f'"{summation_method}". Expected one of: [\'interpolation\', '
                             "'minoring', 'majoring']")
        super().__init__(name, dtype)
        self.curve, self.summation_method = curve, summation_method
        self.from_logits = bool(from_logits)
        self.multi_label = False
        if thresholds is not None:
            inner = sorted(float(t) for t in thresholds)
            self.num_thresholds = len(inner) + 2
            self._init_from_thresholds = True
        else:
            if num_thresholds <= 1:
                raise ValueError(f"Argument `num_thresholds` must be an integer > 1. "
                                 f"Received: num_thresholds={num_thresholds}")
            self.num_thresholds = int(num_thresholds)
            inner = [(i + 1) * 1.0 / (self.num_thresholds - 1)
                     for i in range(self.num_thresholds - 2)]
            self._init_from_thresholds = False
        self.thresholds = [0.0 - EPSILON, *inner, 1.0 + EPSILON]

    def state_shapes(self) -> list[tuple[int, ...]]:
        return [(self.num_thresholds,)] * 4

    def batch_statistics(self, y_true: Any, y_pred: Any, sample_weight: Any = None
                         ) -> list[Tensor]:
        if self.from_logits:
            y_pred = ops.sigmoid(ops.cast(ops.convert_to_tensor(y_pred), "float32"))
        return _confusion(y_true, y_pred, sample_weight, self.thresholds,
                          ("tp", "fp", "tn", "fn"))

    def result_of(self, m: Any, stats: list[Any]) -> Any:
        tp, fp, tn, fn = stats
        n = self.num_thresholds - 1
        if self.curve == "PR" and self.summation_method == "interpolation":
            return _interpolate_pr_auc(m, tp, fp, fn, n)
        recall = m.div_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = m.div_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, m.div_no_nan(tp, tp + fp)
        lo, hi = m.head(y, n), m.tail(y, n)
        if self.summation_method == "interpolation":
            heights = (lo + hi) / 2.0
        elif self.summation_method == "minoring":
            heights = m.minimum(lo, hi)
        else:
            heights = m.maximum(lo, hi)
        return m.total((m.head(x, n) - m.tail(x, n)) * heights)

    def get_config(self) -> dict[str, Any]:
        config = {**super().get_config(), "num_thresholds": self.num_thresholds,
                  "curve": self.curve, "summation_method": self.summation_method,
                  "multi_label": False, "num_labels": None, "label_weights": None,
                  "from_logits": self.from_logits}
        if self._init_from_thresholds:
            config["thresholds"] = self.thresholds[1:-1]
        return config


def _interpolate_pr_auc(m: Any, tp: Any, fp: Any, fn: Any, n: int) -> Any:
    """Keras' ``interpolate_pr_auc`` (Davis & Goadrich 2006), with ``m``'s math."""
    dtp = m.head(tp, n) - m.tail(tp, n)
    p = tp + fp
    dp = m.head(p, n) - m.tail(p, n)
    slope = m.div_no_nan(dtp, m.maximum(dp, 0.0))
    intercept = m.tail(tp, n) - slope * m.tail(p, n)
    p_lo, p_hi = m.head(p, n), m.tail(p, n)
    ratio = m.where_positive(p_lo, p_hi, m.div_no_nan(p_lo, m.maximum(p_hi, 0.0)),
                             p_hi * 0.0 + 1.0)
    increments = m.div_no_nan(slope * (dtp + intercept * m.log(ratio)),
                              m.maximum(m.tail(tp, n) + m.tail(fn, n), 0.0))
    return m.total(increments)
