"""``dt.nn.scale_regularization_loss``: a regularization loss as one replica's share.

Inside ``strategy.run`` every replica adds the model's penalties to its loss
and the strategy sums the replicas' gradients, so each replica adds
``sum(penalties) / num_replicas_in_sync`` and the summed gradient holds the
penalty once (TF's ``tf.nn.scale_regularization_loss``, the twin of
``compute_average_loss``). Outside any strategy the divisor is 1; in a
strategy's cross-replica context (its scope, outside ``run``) it is TF's
``RuntimeError``, since no replica's share can be meant there.
"""
from __future__ import annotations

from typing import Any

from distrib.framework import distribution_context
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["scale_regularization_loss"]


def scale_regularization_loss(regularization_loss: Any) -> Tensor:
    """``reduce_sum(regularization_loss) / num_replicas_in_sync`` (a scalar, or a list
    of scalars such as ``model.losses``, summed first)."""
    if distribution_context.strategy() is not None and \
            distribution_context.replica_context() is None:
        raise RuntimeError("You are calling `scale_regularization_loss` in cross replica "
                           "context, while it was expected to be called in replica context.")
    with name_scope(None, "scale_regularization_loss"):
        if isinstance(regularization_loss, (list, tuple)):
            if not regularization_loss:
                return ops.constant(0.0)
            parts = [ops.convert_to_tensor(p) for p in regularization_loss]
            total = parts[0] if len(parts) == 1 else ops.add_n(parts)
        else:
            total = ops.reduce_sum(ops.convert_to_tensor(regularization_loss))
        replicas = distribution_context.num_replicas_in_sync()
        return total if replicas == 1 else total * (1.0 / replicas)
