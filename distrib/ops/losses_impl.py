"""``dt.losses``: TF1's ``tf.compat.v1.losses`` (``losses_impl.py``): the loss
functions with ``weights``, ``scope``, ``loss_collection`` and ``reduction``,
the ``Reduction`` names, and the collection helpers (``add_loss``,
``get_losses``, ``get_regularization_loss(es)``, ``get_total_loss``).

TF1's weighting, formula for formula (``compute_weighted_loss``): the
per-element losses are multiplied by ``weights`` (broadcast to them), then
reduced by ``reduction``: ``NONE`` keeps them, ``SUM`` adds them, ``MEAN``
divides the sum by the sum of the (broadcast) weights,
``SUM_OVER_BATCH_SIZE`` by the number of elements, and
``SUM_BY_NONZERO_WEIGHTS`` (the default) by the number of elements whose
weight is not zero, 0 where that count is 0. The loss is added to
``loss_collection`` (``GraphKeys.LOSSES``) unless that is None, and has the
losses' dtype. ``get_regularization_loss`` sums the collection that
``get_variable(regularizer=...)`` and the TF1 layers fill.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import GraphKeys, Tensor, add_to_collection, get_collection, name_scope
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.variable_sharing import REGULARIZATION_LOSSES

__all__ = ["Reduction", "compute_weighted_loss", "absolute_difference", "mean_squared_error",
           "hinge_loss", "huber_loss", "log_loss", "sigmoid_cross_entropy",
           "softmax_cross_entropy", "sparse_softmax_cross_entropy", "cosine_distance",
           "add_loss", "get_losses", "get_regularization_losses", "get_regularization_loss",
           "get_total_loss"]


class Reduction:
    """How a weighted loss is reduced (TF1's ``tf.losses.Reduction``)."""

    NONE = "none"
    SUM = "weighted_sum"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    MEAN = "weighted_mean"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS

    @classmethod
    def all(cls) -> tuple[str, ...]:
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE,
                cls.SUM_OVER_NONZERO_WEIGHTS, cls.SUM_BY_NONZERO_WEIGHTS)

    @classmethod
    def validate(cls, key: str) -> None:
        if key not in cls.all():
            raise InvalidArgumentError(f"invalid reduction {key!r}; use one of "
                                       f"dt.losses.Reduction's: {sorted(set(cls.all()))}")


def _div_no_nan(a: Tensor, b: Tensor) -> Tensor:
    return ops.op_output("DivNoNan", [a, b], None, "value")


def _num_present(losses: Tensor, weights: Tensor) -> Tensor:
    """How many elements of ``losses`` have a non-zero (broadcast) weight."""
    present = ops.cast(ops.not_equal(weights, ops.zeros_like(weights)), losses.dtype)
    broadcast = ops.multiply(present, ops.ones_like(losses))
    return ops.reduce_sum(broadcast, name="num_present")


def compute_weighted_loss(losses: Any, weights: Any = 1.0, scope: str | None = None,
                          loss_collection: str | None = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``losses * weights`` reduced by ``reduction`` (see the module header)."""
    Reduction.validate(reduction)
    with name_scope(scope, "weighted_loss", [losses, weights]):
        losses = ops.convert_to_tensor(losses)
        input_dtype = losses.dtype
        if not input_dtype.is_floating:
            raise InvalidArgumentError(f"losses must be floating-point, got {input_dtype.name}")
        losses = ops.cast(losses, dtypes.float32) if input_dtype == dtypes.float16 else losses
        weights = ops.cast(ops.convert_to_tensor(weights, dtype=losses.dtype)
                           if not ops.is_tensor(weights) else weights, losses.dtype)
        weighted = ops.multiply(losses, weights)
        if reduction == Reduction.NONE:
            loss = weighted
        else:
            loss = ops.reduce_sum(weighted)
            if reduction == Reduction.MEAN:
                loss = _div_no_nan(loss, ops.reduce_sum(ops.multiply(ops.ones_like(losses),
                                                                     weights)))
            elif reduction == Reduction.SUM_BY_NONZERO_WEIGHTS:
                loss = _div_no_nan(loss, _num_present(losses, weights))
            elif reduction == Reduction.SUM_OVER_BATCH_SIZE:
                loss = _div_no_nan(loss, ops.reduce_sum(ops.ones_like(losses)))
        loss = ops.cast(loss, input_dtype)
        if loss_collection is not None:
            add_loss(loss, loss_collection)
        return loss


def _pair(labels: Any, predictions: Any, op: str) -> tuple[Tensor, Tensor]:
    if labels is None or predictions is None:
        raise InvalidArgumentError(f"{op}: labels and predictions must not be None")
    p = ops.convert_to_tensor(predictions)
    lab = ops.cast(ops.convert_to_tensor(labels), p.dtype)
    if not p.shape.is_compatible_with(lab.shape):
        raise InvalidArgumentError(f"{op}: predictions {p.shape} and labels {lab.shape} differ")
    return lab, p


def absolute_difference(labels: Any, predictions: Any, weights: Any = 1.0,
                        scope: str | None = None, loss_collection: str | None = GraphKeys.LOSSES,
                        reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``|predictions - labels|``, weighted and reduced."""
    with name_scope(scope, "absolute_difference", [predictions, labels, weights]) as sc:
        lab, p = _pair(labels, predictions, "absolute_difference")
        return compute_weighted_loss(ops.abs(ops.subtract(p, lab)), weights, sc,
                                     loss_collection, reduction)


def mean_squared_error(labels: Any, predictions: Any, weights: Any = 1.0,
                       scope: str | None = None, loss_collection: str | None = GraphKeys.LOSSES,
                       reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``(predictions - labels)**2``, weighted and reduced."""
    with name_scope(scope, "mean_squared_error", [predictions, labels, weights]) as sc:
        lab, p = _pair(labels, predictions, "mean_squared_error")
        sq = ops.op_output("SquaredDifference", [p, lab], None, "SquaredDifference")
        return compute_weighted_loss(sq, weights, sc, loss_collection, reduction)


def hinge_loss(labels: Any, logits: Any, weights: Any = 1.0, scope: str | None = None,
               loss_collection: str | None = GraphKeys.LOSSES,
               reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``max(0, 1 - (2 labels - 1) * logits)`` for labels in {0, 1}."""
    with name_scope(scope, "hinge_loss", [logits, labels, weights]) as sc:
        lab, lg = _pair(labels, logits, "hinge_loss")
        signed = ops.subtract(ops.multiply(2.0, lab), 1.0)
        losses = ops.unary_op("Relu", ops.subtract(1.0, ops.multiply(signed, lg)), None)
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def huber_loss(labels: Any, predictions: Any, weights: Any = 1.0, delta: float = 1.0,
               scope: str | None = None, loss_collection: str | None = GraphKeys.LOSSES,
               reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """Quadratic within ``delta`` of the label, linear beyond: ``0.5 q**2 + delta (|e| - q)``."""
    with name_scope(scope, "huber_loss", [predictions, labels, weights]) as sc:
        lab, p = _pair(labels, predictions, "huber_loss")
        abs_error = ops.abs(ops.subtract(p, lab))
        quadratic = ops.minimum(abs_error, delta)
        linear = ops.subtract(abs_error, quadratic)
        losses = ops.add(ops.multiply(0.5, ops.multiply(quadratic, quadratic)),
                         ops.multiply(delta, linear))
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def log_loss(labels: Any, predictions: Any, weights: Any = 1.0, epsilon: float = 1e-7,
             scope: str | None = None, loss_collection: str | None = GraphKeys.LOSSES,
             reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """``-labels log(p + eps) - (1 - labels) log(1 - p + eps)``."""
    with name_scope(scope, "log_loss", [predictions, labels, weights]) as sc:
        lab, p = _pair(labels, predictions, "log_loss")
        losses = ops.subtract(
            ops.negative(ops.multiply(lab, ops.log(ops.add(p, epsilon)))),
            ops.multiply(ops.subtract(1.0, lab), ops.log(ops.add(ops.subtract(1.0, p), epsilon))))
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def sigmoid_cross_entropy(multi_class_labels: Any, logits: Any, weights: Any = 1.0,
                          label_smoothing: float = 0, scope: str | None = None,
                          loss_collection: str | None = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """The sigmoid cross entropy of each logit; labels smoothed towards 1/2."""
    with name_scope(scope, "sigmoid_cross_entropy_loss",
                    [logits, multi_class_labels, weights]) as sc:
        lab, lg = _pair(multi_class_labels, logits, "sigmoid_cross_entropy")
        if label_smoothing > 0:
            lab = ops.add(ops.multiply(lab, 1 - label_smoothing), 0.5 * label_smoothing)
        losses = nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=lg)
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def softmax_cross_entropy(onehot_labels: Any, logits: Any, weights: Any = 1.0,
                          label_smoothing: float = 0, scope: str | None = None,
                          loss_collection: str | None = GraphKeys.LOSSES,
                          reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """The softmax cross entropy of each row; labels smoothed towards uniform."""
    with name_scope(scope, "softmax_cross_entropy_loss", [logits, onehot_labels, weights]) as sc:
        lab, lg = _pair(onehot_labels, logits, "softmax_cross_entropy")
        if label_smoothing > 0:
            classes = lg.shape.as_list()[-1] if lg.shape.rank else None
            if classes is None:
                raise InvalidArgumentError("softmax_cross_entropy: label_smoothing needs the "
                                           "number of classes known")
            lab = ops.add(ops.multiply(lab, 1 - label_smoothing), label_smoothing / classes)
        losses = nn.softmax_cross_entropy_with_logits_v2(labels=ops.stop_gradient(lab),
                                                         logits=lg)
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def sparse_softmax_cross_entropy(labels: Any, logits: Any, weights: Any = 1.0,
                                 scope: str | None = None,
                                 loss_collection: str | None = GraphKeys.LOSSES,
                                 reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS) -> Tensor:
    """The softmax cross entropy of each row against an integer label."""
    with name_scope(scope, "sparse_softmax_cross_entropy_loss", [logits, labels, weights]) as sc:
        lg, lab = ops.convert_to_tensor(logits), ops.convert_to_tensor(labels)
        # TF's remove_squeezable_dimensions: labels (and weights) of [batch, 1] lose the 1
        if lab.shape.rank is not None and lab.shape.rank == lg.shape.rank:
            lab = ops.reshape(lab, [-1])
        if ops.is_tensor(weights) or not isinstance(weights, (int, float)):
            w = ops.convert_to_tensor(weights)
            if w.shape.rank == 2 and w.shape.as_list()[-1] == 1:
                weights = ops.reshape(w, [-1])
        losses = nn.sparse_softmax_cross_entropy_with_logits(labels=lab, logits=lg)
        return compute_weighted_loss(losses, weights, sc, loss_collection, reduction)


def cosine_distance(labels: Any, predictions: Any, axis: int | None = None, weights: Any = 1.0,
                    scope: str | None = None, loss_collection: str | None = GraphKeys.LOSSES,
                    reduction: str = Reduction.SUM_BY_NONZERO_WEIGHTS, dim: int | None = None
                    ) -> Tensor:
    """``1 - sum(labels * predictions, axis)`` of unit-normalized inputs."""
    axis = dim if axis is None else axis
    if axis is None:
        raise InvalidArgumentError("cosine_distance: you must specify axis")
    with name_scope(scope, "cosine_distance_loss", [predictions, labels, weights]) as sc:
        lab, p = _pair(labels, predictions, "cosine_distance")
        radial = ops.reduce_sum(ops.multiply(p, lab), axis=axis, keepdims=True)
        return compute_weighted_loss(ops.subtract(1.0, radial), weights, sc, loss_collection,
                                     reduction)


def add_loss(loss: Any, loss_collection: str = GraphKeys.LOSSES) -> None:
    """Add ``loss`` to ``loss_collection`` (nothing when that is None)."""
    if loss_collection:
        add_to_collection(loss_collection, loss)


def get_losses(scope: str | None = None, loss_collection: str = GraphKeys.LOSSES) -> list[Any]:
    """The losses of ``loss_collection`` (those under ``scope``)."""
    return get_collection(loss_collection, scope)


def get_regularization_losses(scope: str | None = None) -> list[Any]:
    """The regularization losses (``GraphKeys.REGULARIZATION_LOSSES``) under ``scope``."""
    return get_collection(REGULARIZATION_LOSSES, scope)


def get_regularization_loss(scope: str | None = None,
                            name: str = "total_regularization_loss") -> Tensor:
    """The sum of the regularization losses, or a 0.0 constant when there are none."""
    losses = get_regularization_losses(scope)
    if losses:
        return ops.add_n(losses, name=name)
    return ops.constant(0.0, name=name)


def get_total_loss(add_regularization_losses: bool = True, name: str = "total_loss",
                   scope: str | None = None) -> Tensor:
    """The sum of the collected losses (and the regularization losses)."""
    losses = list(get_losses(scope))
    if add_regularization_losses:
        losses += get_regularization_losses(scope)
    if not losses:
        raise InvalidArgumentError("get_total_loss: no losses have been collected "
                                   "(dt.losses.* functions add theirs to GraphKeys.LOSSES)")
    return ops.add_n(losses, name=name)
