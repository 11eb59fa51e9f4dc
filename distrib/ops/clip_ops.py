"""TF's clipping: ``dt.clip_by_value`` (in :mod:`distrib.ops.array_extra_ops`),
``dt.clip_by_norm``, ``dt.global_norm``, ``dt.clip_by_global_norm``,
``dt.clip_by_average_norm`` (TF's ``clip_ops.py``, formula for formula).

``clip_by_norm`` divides by ``max(l2norm, clip_norm)`` with a zero norm kept
out of the square root, so a zero tensor has a zero gradient rather than a
NaN. ``clip_by_global_norm`` scales every tensor of the list by
``clip_norm * min(1 / norm, 1 / clip_norm)``; an infinite or NaN norm makes
every entry NaN, as TF's. ``None`` entries pass through. An ``IndexedSlices``
entry (a gather's gradient) has its ``values`` scaled and stays sparse:
any object with ``values``, ``indices`` and ``dense_shape`` is rebuilt as
``type(t)(values, indices, dense_shape)``.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["clip_by_norm", "global_norm", "clip_by_global_norm", "clip_by_average_norm"]


def _is_sliced(t: Any) -> bool:
    # (an IndexedSlices converts to a tensor, densified: it is still sliced here)
    return all(hasattr(t, a) for a in ("values", "indices", "dense_shape")) and \
        not isinstance(t, Tensor)


def _values(t: Any) -> Tensor:
    return t.values if _is_sliced(t) else ops.convert_to_tensor(t)


def _rebuild(t: Any, values: Tensor) -> Any:
    return type(t)(values, t.indices, t.dense_shape) if _is_sliced(t) else values


def _select(cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return ops.op_output("SelectV2", [cond, a, b], None, "Select")


def clip_by_norm(t: Any, clip_norm: Any, axes: Any = None, name: str | None = None) -> Any:
    """``t * clip_norm / max(l2norm(t, axes), clip_norm)``."""
    with name_scope(name, "clip_by_norm", [t, clip_norm]) as scope:
        values = _values(t)
        l2sum = ops.reduce_sum(ops.multiply(values, values), axis=axes, keepdims=True)
        pred = ops.greater(l2sum, ops.zeros_like(l2sum))
        l2sum_safe = _select(pred, l2sum, ops.ones_like(l2sum))
        l2norm = _select(pred, ops.sqrt(l2sum_safe), l2sum)
        cn = ops.cast(clip_norm, values.dtype)
        clipped = ops.divide(ops.multiply(values, cn), ops.maximum(l2norm, cn))
        return _rebuild(t, ops.identity(clipped, name=scope))


def global_norm(t_list: Sequence[Any], name: str | None = None) -> Tensor:
    """``sqrt(sum of every tensor's squared l2 norm)``; ``None`` entries are skipped."""
    items = [t for t in t_list if t is not None]
    if not isinstance(t_list, (list, tuple)):
        raise InvalidArgumentError("dt.global_norm: t_list must be a list or tuple")
    with name_scope(name, "global_norm", items) as scope:
        if not items:
            raise InvalidArgumentError("dt.global_norm needs at least one tensor")
        squares = [ops.reduce_sum(ops.square(_values(t))) for t in items]
        dtype = squares[0].dtype
        total = ops.add_n([ops.cast(s, dtype) for s in squares])
        return ops.sqrt(total, name=scope)


def clip_by_global_norm(t_list: Sequence[Any], clip_norm: Any, use_norm: Any = None,
                        name: str | None = None) -> tuple[list[Any], Tensor]:
    """``(the tensors scaled by clip_norm / max(global_norm, clip_norm), global_norm)``."""
    if not isinstance(t_list, (list, tuple)):
        raise InvalidArgumentError("dt.clip_by_global_norm: t_list must be a list or tuple "
                                   "(TF's TypeError); wrap a single tensor in a list")
    norm = global_norm(t_list) if use_norm is None else ops.convert_to_tensor(use_norm)
    with name_scope(name, "clip_by_global_norm", [norm]):
        cn = ops.cast(clip_norm, norm.dtype)
        one = ops.ones_like(norm)
        scale = ops.multiply(cn, ops.minimum(ops.divide(one, norm), ops.divide(one, cn)))
        # an infinite or NaN norm: every entry NaN, as TF's (its norm - norm is NaN then)
        finite = ops.unary_op("IsFinite", norm, None)
        scale = _select(finite, scale, ops.multiply(ops.ones_like(norm), float("nan")))
        out = []
        for i, t in enumerate(t_list):
            if t is None:
                out.append(None)
                continue
            values = _values(t)
            scaled = ops.multiply(values, ops.cast(scale, values.dtype), name=f"_clipped_{i}")
            out.append(_rebuild(t, scaled))
        return out, norm


def clip_by_average_norm(t: Any, clip_norm: Any, name: str | None = None) -> Tensor:
    """TF1's: ``t * clip_norm / max(l2norm(t) / n_elements, clip_norm)``."""
    with name_scope(name, "clip_by_average_norm", [t, clip_norm]) as scope:
        x = ops.convert_to_tensor(t)
        n = ops.cast(ops.reduce_prod(ops.shape(x)), x.dtype)
        l2norm_inv = ops.divide(1.0, ops.sqrt(ops.reduce_sum(ops.square(x))))
        cn = ops.cast(clip_norm, x.dtype)
        scale = ops.minimum(ops.multiply(l2norm_inv, n), ops.divide(1.0, cn))
        return ops.identity(ops.multiply(ops.multiply(x, cn), scale), name=scope)
