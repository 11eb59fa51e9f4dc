"""``dt.collective``: TensorFlow's collective ops as graph ops.

Each builder adds one op (TF's op types and attrs: ``CollectiveReduce``,
``CollectiveGather``, ``CollectiveBcastSend``, ``CollectiveBcastRecv``) that
runs on the device it is placed on; every participant of a group is one such
op, on its own device, in one graph (in-graph) or in each task's own graph
(between-graph). The engine that runs them is ``distrib.runtime.collective.engine``.

``timeout`` is TF's ``timeout_seconds``: 0 waits as long as it takes (with a
warning naming the late participants every 60 s); a positive value warns at
half of it and fails with ``DeadlineExceededError`` at it.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, get_default_graph
from distrib.framework.tensor_shape import TensorShape
from distrib.ops.math_ops import convert_to_tensor

__all__ = ["all_reduce", "all_gather", "broadcast_send", "broadcast_recv"]

_MERGE_OPS = ("Add", "Mul", "Min", "Max")
_FINAL_OPS = ("Id", "Div")
_HINTS = ("auto", "ring", "nccl")


def _common(group_size: int, group_key: int, instance_key: int, hint: str,
            timeout: float) -> dict[str, Any]:
    for name, v in (("group_size", group_size), ("group_key", group_key),
                    ("instance_key", instance_key)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidArgumentError(f"{name} must be an int, not {v!r}")
    if group_size < 1:
        raise InvalidArgumentError(f"group_size must be >= 1, not {group_size}")
    if hint.lower() not in _HINTS:
        raise InvalidArgumentError(f"communication_hint must be one of {_HINTS}, not {hint!r}")
    if timeout < 0:
        raise InvalidArgumentError(f"timeout must be >= 0 seconds, not {timeout}")
    return {"group_size": group_size, "group_key": group_key, "instance_key": instance_key,
            "communication_hint": hint.lower(), "timeout_seconds": float(timeout)}


def _shape_list(shape: Any) -> list[int]:
    s = TensorShape(shape)
    if s.dims is None or any(d is None for d in s.as_list()):
        raise InvalidArgumentError(f"a broadcast needs a fully known shape, not {shape!r}")
    return [int(d) for d in s.as_list()]


def _op(op_type: str, inputs: Sequence[Tensor], attrs: dict[str, Any], name: str,
        dtype: dtypes.DType, shape: TensorShape) -> Tensor:
    graph = inputs[0].graph if inputs else get_default_graph()
    return graph.create_op(op_type, inputs, attrs, name,
                           output_specs=[(dtype, shape)]).outputs[0]


def all_reduce(t: Any, group_size: int, group_key: int, instance_key: int,
               merge_op: str = "Add", final_op: str = "Id", subdiv_offsets: Sequence[int] = (0,),
               communication_hint: str = "auto", timeout: float = 0,
               name: str | None = None) -> Tensor:
    """The ``merge_op`` (Add, Mul, Min, Max) of ``t`` over the group, then
    ``final_op`` (Id, or Div by the group size); every participant gets it."""
    if merge_op not in _MERGE_OPS:
        raise InvalidArgumentError(f"merge_op must be one of {_MERGE_OPS}, not {merge_op!r}")
    if final_op not in _FINAL_OPS:
        raise InvalidArgumentError(f"final_op must be one of {_FINAL_OPS}, not {final_op!r}")
    t = convert_to_tensor(t)
    attrs = {**_common(group_size, group_key, instance_key, communication_hint, timeout),
             "merge_op": merge_op, "final_op": final_op, "T": t.dtype,
             "subdiv_offsets": list(subdiv_offsets)}
    return _op("CollectiveReduce", [t], attrs, name or "CollectiveReduce", t.dtype, t.shape)


def all_gather(t: Any, group_size: int, group_key: int, instance_key: int,
               communication_hint: str = "auto", timeout: float = 0,
               name: str | None = None) -> Tensor:
    """Every participant's ``t`` concatenated along axis 0, in group rank order
    (every participant passes the same shape)."""
    t = convert_to_tensor(t)
    attrs = {**_common(group_size, group_key, instance_key, communication_hint, timeout),
             "T": t.dtype}
    if t.shape.dims is None:
        out = TensorShape(None)
    elif not t.shape.as_list():
        out = TensorShape([group_size])
    else:
        dims = t.shape.as_list()
        out = TensorShape([None if dims[0] is None else dims[0] * group_size, *dims[1:]])
    return _op("CollectiveGather", [t], attrs, name or "CollectiveGather", t.dtype, out)


def broadcast_send(t: Any, shape: Any, dtype: Any, group_size: int, group_key: int,
                   instance_key: int, communication_hint: str = "auto", timeout: float = 0,
                   name: str | None = None) -> Tensor:
    """Send ``t`` to the group's ``broadcast_recv`` ops; returns ``t``."""
    t = convert_to_tensor(t)
    dtype = dtypes.as_dtype(dtype)
    shape_l = _shape_list(shape)
    if t.dtype != dtype:
        raise InvalidArgumentError(f"broadcast_send: t has dtype {t.dtype.name}, but dtype "
                                   f"says {dtype.name}")
    if not t.shape.is_compatible_with(TensorShape(shape_l)):
        raise InvalidArgumentError(f"broadcast_send: t has shape {t.shape}, but shape says "
                                   f"{shape_l}")
    attrs = {**_common(group_size, group_key, instance_key, communication_hint, timeout),
             "T": dtype, "shape": shape_l}
    return _op("CollectiveBcastSend", [t], attrs, name or "CollectiveBcastSend", dtype,
               TensorShape(shape_l))


def broadcast_recv(shape: Any, dtype: Any, group_size: int, group_key: int,
                   instance_key: int, communication_hint: str = "auto", timeout: float = 0,
                   name: str | None = None) -> Tensor:
    """The tensor the group's ``broadcast_send`` sends."""
    dtype = dtypes.as_dtype(dtype)
    shape_l = _shape_list(shape)
    attrs = {**_common(group_size, group_key, instance_key, communication_hint, timeout),
             "T": dtype, "shape": shape_l}
    return _op("CollectiveBcastRecv", [], attrs, name or "CollectiveBcastRecv", dtype,
               TensorShape(shape_l))
