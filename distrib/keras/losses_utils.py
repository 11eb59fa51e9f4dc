"""How labels, predictions and sample weights are brought to matching shapes
before a loss or a metric: Keras 2's rules (``tf_keras``, which the TF
tutorials were written for), on the shapes known when the step is traced.

* ``match_dtype_and_rank`` is what ``compile``'s loss and metric containers
  do first (``compile_utils.match_dtype_and_rank``): labels (and sample
  weights) of rank 1 against predictions of rank 2 get a trailing axis, so
  ``[N]`` labels against ``[N, k]`` outputs are one label per row, broadcast
  over the row's ``k`` outputs (not ``N`` labels laid along the ``k`` axis,
  which a plain broadcast does, silently when ``N == k``); labels are cast
  to the predictions' dtype when both are floating or both integer, weights
  always.
* ``squeeze_or_expand_dimensions`` is what every built-in loss
  (``LossFunctionWrapper.call``) and mean metric (``MeanMetricWrapper``) does
  with what it is given (``losses_utils.squeeze_or_expand_dimensions``): a
  trailing axis of size 1 is dropped from whichever of labels and
  predictions has one more axis than the other, except that labels of one
  rank less than predictions whose last axis is not 1 stay as they are (class
  ids against per-class scores); a sample weight of one rank more or less than
  the values loses or gains a trailing axis.

Ranks unknown at trace time leave everything as it is (Keras decides those
at run time; every shape here is known when the step is traced).
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Tensor
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat, slice_rows

__all__ = ["match_dtype_and_rank", "squeeze_or_expand_dimensions", "squeeze_last",
           "expand_last"]


def _reshaped(t: Tensor, dims: list[int | None], rank: int, extra: list[int]) -> Tensor:
    """``t`` reshaped to ``dims``; with more than one unknown dimension, to its
    own run-time shape's first ``rank`` entries followed by ``extra``."""
    if sum(d is None for d in dims) <= 1:
        return ops.reshape(t, [-1 if d is None else d for d in dims])
    shape = slice_rows(ops.shape(t), 0, rank)
    if extra:
        shape = concat([shape, ops.constant(extra, dtype=shape.dtype)], 0)
    return ops.reshape(t, shape)


def squeeze_last(t: Tensor) -> Tensor:
    """``t`` without its last axis (which is of size 1): ``tf.squeeze(t, [-1])``."""
    dims = t.shape.as_list()
    return _reshaped(t, dims[:-1], len(dims) - 1, [])


def expand_last(t: Tensor) -> Tensor:
    """``t`` with a trailing axis of size 1: ``tf.expand_dims(t, -1)``."""
    dims = t.shape.as_list()
    return _reshaped(t, [*dims, 1], len(dims), [1])


def _last_may_be_one(t: Tensor) -> bool:
    dims = t.shape.dims
    return bool(dims) and dims[-1] in (None, 1)


def _remove_squeezable(labels: Tensor, predictions: Tensor) -> tuple[Tensor, Tensor]:
    """Keras' ``remove_squeezable_dimensions`` (expected rank difference 0)."""
    diff = predictions.shape.rank - labels.shape.rank
    if diff == 1 and _last_may_be_one(predictions):
        predictions = squeeze_last(predictions)
    elif diff == -1 and _last_may_be_one(labels):
        labels = squeeze_last(labels)
    return labels, predictions


def squeeze_or_expand_dimensions(y_pred: Tensor, y_true: Tensor | None = None,
                                 sample_weight: Tensor | None = None
                                 ) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """``(y_pred, y_true, sample_weight)`` brought to matching ranks (module header)."""
    rp = y_pred.shape.rank
    if y_true is not None and rp is not None and y_true.shape.rank is not None:
        if rp - y_true.shape.rank != 1 or y_pred.shape.dims[-1] == 1:
            y_true, y_pred = _remove_squeezable(y_true, y_pred)
            rp = y_pred.shape.rank
    if sample_weight is None or rp is None:
        return y_pred, y_true, sample_weight
    rw = sample_weight.shape.rank
    if rw is None or rw == 0:
        return y_pred, y_true, sample_weight
    if rw - rp == 1:
        sample_weight = squeeze_last(sample_weight)
    elif rp - rw == 1:
        sample_weight = expand_last(sample_weight)
    return y_pred, y_true, sample_weight


def match_dtype_and_rank(y_true: Any, y_pred: Tensor, sample_weight: Any = None
                         ) -> tuple[Tensor, Tensor, Tensor | None]:
    """``compile``'s first step for a loss or a metric (module header)."""
    y_true = ops.convert_to_tensor(y_true)
    if y_true.shape.rank == 1 and y_pred.shape.rank == 2:
        y_true = expand_last(y_true)
    if sample_weight is not None:
        sample_weight = ops.convert_to_tensor(sample_weight)
        if sample_weight.shape.rank == 1 and y_pred.shape.rank == 2:
            sample_weight = expand_last(sample_weight)
        if sample_weight.dtype != y_pred.dtype:
            sample_weight = ops.cast(sample_weight, y_pred.dtype)
    both_float = y_true.dtype.is_floating and y_pred.dtype.is_floating
    both_int = y_true.dtype.is_integer and y_pred.dtype.is_integer
    if (both_float or both_int) and y_true.dtype != y_pred.dtype:
        y_true = ops.cast(y_true, y_pred.dtype)
    return y_true, y_pred, sample_weight
