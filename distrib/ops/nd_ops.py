"""``dt.gather_nd``, ``dt.scatter_nd`` and ``dt.tensor_scatter_nd_update`` /
``_add`` / ``_sub``: TF's n-dimensional index ops (``GatherNd``,
``ScatterNd``, ``TensorScatterUpdate``/``Add``/``Sub``; kernels in
kernels/cpu/gather_nd.py), with TF's gradients (array_grad.py): a gather's
gradient scatters, a scatter's gathers, an update's tensor gradient is zero
at the rows it overwrote. An index row outside the shape is TF's error
naming it.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor, name_scope
from distrib.ops import math_ops as ops

__all__ = ["gather_nd", "scatter_nd", "tensor_scatter_nd_update", "tensor_scatter_nd_add",
           "tensor_scatter_nd_sub", "GRADIENTS", "NOT_DIFFERENTIABLE"]


def _indices(indices: Any) -> Tensor:
    t = ops.convert_to_tensor(indices) if ops.is_tensor(indices) else \
        ops.convert_to_tensor(indices, dtype=dtypes.int32)
    if t.dtype not in (dtypes.int32, dtypes.int64):
        raise InvalidArgumentError(f"indices must be int32 or int64, got {t.dtype.name}")
    return t


def gather_nd(params: Any, indices: Any, batch_dims: int = 0, name: str | None = None
              ) -> Tensor:
    """The slices of ``params`` that the rows of ``indices`` (its last dimension)
    name: ``indices.shape[:-1] + params.shape[indices.shape[-1]:]`` (TF's)."""
    if batch_dims:
        raise InvalidArgumentError("dt.gather_nd here takes batch_dims=0 (fold the batch into "
                                   "the indices)")
    with name_scope(name, "GatherNd", [params, indices]) as scope:
        return ops.op_output("GatherNd", [ops.convert_operand(params), _indices(indices)], None,
                             scope)


def scatter_nd(indices: Any, updates: Any, shape: Any, name: str | None = None) -> Tensor:
    """Zeros of ``shape`` with ``updates`` added at the rows of ``indices`` (a
    repeated row sums), TF's ``tf.scatter_nd``."""
    with name_scope(name, "ScatterNd", [indices, updates, shape]) as scope:
        idx = _indices(indices)
        shp = ops.cast(shape, idx.dtype) if ops.is_tensor(shape) else \
            ops.convert_to_tensor(shape, dtype=idx.dtype)
        return ops.op_output("ScatterNd", [idx, ops.convert_to_tensor(updates), shp], None,
                             scope)


def _tensor_scatter(op_type: str, tensor: Any, indices: Any, updates: Any,
                    name: str | None) -> Tensor:
    with name_scope(name, op_type, [tensor, indices, updates]) as scope:
        t = ops.convert_operand(tensor)
        u = ops.convert_to_tensor(updates, dtype=t.dtype) if not ops.is_tensor(updates) \
            else updates
        return ops.op_output(op_type, [t, _indices(indices), u], None, scope)


def tensor_scatter_nd_update(tensor: Any, indices: Any, updates: Any,
                             name: str | None = None) -> Tensor:
    """A copy of ``tensor`` with the rows of ``indices`` replaced by ``updates``."""
    return _tensor_scatter("TensorScatterUpdate", tensor, indices, updates, name)


def tensor_scatter_nd_add(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """A copy of ``tensor`` with ``updates`` added at the rows of ``indices``."""
    return _tensor_scatter("TensorScatterAdd", tensor, indices, updates, name)


def tensor_scatter_nd_sub(tensor: Any, indices: Any, updates: Any,
                          name: str | None = None) -> Tensor:
    """A copy of ``tensor`` with ``updates`` subtracted at the rows of ``indices``."""
    return _tensor_scatter("TensorScatterSub", tensor, indices, updates, name)


# -- gradients (TF's array_grad) ------------------------------------------------------------
def _gather_nd_grad(op: Operation, grad: Tensor) -> list:
    params, indices = op.inputs
    shape = ops.cast(ops.shape(params), indices.dtype)
    return [ops.op_output("ScatterNd", [indices, grad, shape], None, "ScatterNd"), None]


def _rows(grad: Tensor, indices: Tensor) -> Tensor:
    return ops.op_output("GatherNd", [grad, indices], None, "GatherNd")


def _scatter_nd_grad(op: Operation, grad: Tensor) -> list:
    return [None, _rows(grad, op.inputs[0]), None]


def _update_grad(op: Operation, grad: Tensor) -> list:
    indices, updates = op.inputs[1], op.inputs[2]
    cleared = ops.op_output("TensorScatterUpdate", [grad, indices, ops.zeros_like(updates)],
                            None, "TensorScatterUpdate")
    return [cleared, None, _rows(grad, indices)]


def _add_grad(op: Operation, grad: Tensor) -> list:
    return [grad, None, _rows(grad, op.inputs[1])]


def _sub_grad(op: Operation, grad: Tensor) -> list:
    return [grad, None, ops.negative(_rows(grad, op.inputs[1]))]


GRADIENTS: dict[str, Any] = {"GatherNd": _gather_nd_grad, "ScatterNd": _scatter_nd_grad,
                             "TensorScatterUpdate": _update_grad,
                             "TensorScatterAdd": _add_grad, "TensorScatterSub": _sub_grad}
NOT_DIFFERENTIABLE: tuple[str, ...] = ()
