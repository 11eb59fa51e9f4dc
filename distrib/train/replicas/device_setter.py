"""``replica_device_setter``: place variables on ps tasks, everything else on the worker.

This is TensorFlow 1.x's device function for between-graph replication, with
the same arguments, defaults and placements. Used as
``with dt.device(dt.train.replica_device_setter(cluster=cluster)):``, it is
called once per new op with that op and returns the op's device string:

- an op whose type is a *ps op* (a variable or a mutable table) goes to
  ``ps_device`` plus ``/task:N``, where ``ps_strategy`` picks ``N``
  (round-robin by default, or :class:`GreedyLoadBalancingStrategy`);
- any other op goes to ``worker_device``;
- in both cases the op's own device fields (from an enclosing ``dt.device``)
  win over the setter's where they are set (``merge_devices=True``).

The op is anything with ``.type`` (the op type, e.g. ``"VariableV2"``) and
``.device`` (the device requested so far, maybe ``""``); TF's ``node_def.op``
is accepted too. Device strings are parsed and merged by
:class:`distrib.framework.device.DeviceSpec`, like every device string in distrib.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from distrib.cluster.cluster_spec import ClusterSpec
from distrib.framework.device import DeviceSpec

logger = logging.getLogger(__name__)

__all__ = ["replica_device_setter", "GreedyLoadBalancingStrategy", "byte_size_load_fn", "STANDARD_PS_OPS"]

# TF's STANDARD_PS_OPS: the op types that own state a replica must share.
STANDARD_PS_OPS: tuple[str, ...] = (
    "Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable",
    "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
    "MutableDenseHashTable", "MutableDenseHashTableV2", "VarHandleOp",
)


PsStrategy = Callable[[Any], int]
DeviceFunction = Callable[[Any], str]


def _parse(spec: str) -> DeviceSpec:
    """The one device-string parser of distrib (``distrib.framework.device``)."""
    return DeviceSpec.from_string(spec)


# -- strategies -----------------------------------------------------------------

class _RoundRobinStrategy:
    """TF's default: ps tasks 0, 1, ..., n-1, 0, ... in the order ops are created."""

    def __init__(self, num_tasks: int) -> None:
        self._num_tasks = num_tasks
        self._next_task = 0

    def __call__(self, unused_op: Any) -> int:
        task = self._next_task
        self._next_task = (self._next_task + 1) % self._num_tasks
        return task


class GreedyLoadBalancingStrategy:
    """Puts each ps op on the ps task with the least load so far (ties: lowest index).

    ``load_fn(op)`` says how much load an op adds, e.g. :func:`byte_size_load_fn`.
    As in TF, this balances only the ops placed through one device setter.
    """

    def __init__(self, num_tasks: int, load_fn: Callable[[Any], float]) -> None:
        if num_tasks <= 0:
            raise ValueError(f"GreedyLoadBalancingStrategy needs num_tasks >= 1, got {num_tasks}")
        self._num_tasks = num_tasks
        self._load_fn = load_fn
        self._ps_loads = np.zeros(num_tasks)

    def __call__(self, op: Any) -> int:
        task = int(np.argmin(self._ps_loads))
        self._ps_loads[task] += self._load_fn(op)
        return task


def _dims(shape: Any) -> list[int | None] | None:
    """A shape as a list of dims (None = unknown), or None for an unknown rank."""
    if shape is None:
        return None
    if hasattr(shape, "as_list"):
        try:
            dims = shape.as_list()
        except ValueError:  # TF's TensorShape.as_list() raises for an unknown rank
            return None
        return None if dims is None else list(dims)  # distrib's returns None for it
    if hasattr(shape, "dims") and not isinstance(shape, (list, tuple)):
        return None if shape.dims is None else [getattr(d, "value", d) for d in shape.dims]
    return [None if d is None or d == -1 else int(d) for d in shape]


def _element_size(dtype: Any) -> int:
    size = getattr(dtype, "size", None)
    if isinstance(size, int):  # TF's DType.size (np.float32.size is a descriptor, not an int)
        return size
    if hasattr(dtype, "as_numpy_dtype"):
        return np.dtype(dtype.as_numpy_dtype).itemsize
    return np.dtype(getattr(dtype, "name", dtype)).itemsize


def _attr_shape(op: Any) -> Any:
    attrs = getattr(op, "attrs", None)
    if isinstance(attrs, Mapping) and "shape" in attrs:
        return attrs["shape"]
    if hasattr(op, "get_attr"):
        try:
            return op.get_attr("shape")
        except (KeyError, ValueError):
            return None
    return None


def byte_size_load_fn(op: Any) -> int:
    """Bytes of the single output of ``op``: a load function for :class:`GreedyLoadBalancingStrategy`.

    Needs ``op.outputs`` with exactly one tensor whose ``.shape`` (a list of
    ints, a TensorShape-like with ``as_list()``, or ``get_shape()``) is fully
    known and whose ``.dtype`` has ``.size``, ``.as_numpy_dtype`` or is
    anything ``numpy.dtype`` takes. When the output's shape is not fully
    known, the op's ``shape`` attr is used (a variable's declared shape), as in
    TF. Raises ``ValueError`` for several outputs or an unknown dimension.
    """
    outputs = list(getattr(op, "outputs", []))
    if len(outputs) != 1:
        raise ValueError(
            f"Op {_op_name(op)} must have a single output to measure its size, it has {len(outputs)}")
    output = outputs[0]
    shape = output.get_shape() if hasattr(output, "get_shape") else getattr(output, "shape", None)
    dims = _dims(shape)
    if dims is None or None in dims:
        dims = _dims(_attr_shape(op))
    if dims is None or None in dims:
        raise ValueError(
            f"Op {_op_name(op)} has an output of unknown shape {dims}: byte_size_load_fn needs a "
            "fully defined shape; declare the variable's full shape")
    return int(np.prod(dims, dtype=np.int64)) * _element_size(output.dtype)


def _op_name(op: Any) -> str:
    return repr(getattr(op, "name", op))


# -- the device function --------------------------------------------------------

def _op_type(op: Any) -> str:
    op_type = getattr(op, "type", None)
    if isinstance(op_type, str):
        return op_type
    node_def = getattr(op, "node_def", None)  # TF's NodeDef form, or a GraphDef node dict
    if isinstance(node_def, Mapping):
        return str(node_def.get("op", ""))
    return str(getattr(node_def, "op", ""))


@dataclass(frozen=True)
class _ReplicaDeviceChooser:
    ps_tasks: int
    ps_device: str
    worker_device: str
    merge_devices: bool
    ps_ops: frozenset[str]
    ps_strategy: PsStrategy

    def device_function(self, op: Any) -> str:
        """The device for ``op``; TF's ``_ReplicaDeviceChooser.device_function``."""
        # Without merging, a device the op already has is final.
        if not self.merge_devices and op.device:
            return op.device
        current = _parse(op.device or "")
        if self.ps_tasks and self.ps_device and _op_type(op) in self.ps_ops:
            ps = _parse(self.ps_device)
            # The strategy picks a task only when the ps job survives the merge:
            # an op pinned to another job keeps its own task, and the strategy's
            # turn is not spent on it.
            if ps.job and (not current.job or current.job == ps.job):
                ps = ps.replace(task=self.ps_strategy(op))
            return ps.merge_from(current).to_string()
        return _parse(self.worker_device or "").merge_from(current).to_string()


def _ps_tasks_from_cluster(cluster: ClusterSpec | Mapping[str, Any], ps_device: str) -> int:
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster)
    ps_job = _parse(ps_device).job
    if ps_job not in spec.jobs:
        return 0
    return spec.num_tasks(ps_job)


def replica_device_setter(ps_tasks: int = 0, ps_device: str | None = "/job:ps",
                          worker_device: str | None = "/job:worker", merge_devices: bool = True,
                          cluster: ClusterSpec | Mapping[str, Any] | None = None,
                          ps_ops: Iterable[str] | None = None,
                          ps_strategy: PsStrategy | None = None) -> DeviceFunction | None:
    """A device function for between-graph replication, as ``tf.train.replica_device_setter``.

    With ``cluster`` (a ClusterSpec or dict), ``ps_tasks`` is the number of tasks
    of the job named in ``ps_device`` (the ``ps`` job). Returns ``None`` when
    there are no ps tasks, so ``dt.device(None)`` leaves placement alone.
    ``ps_ops`` are the op types placed on ps tasks (default
    :data:`STANDARD_PS_OPS`); ``ps_strategy(op) -> task index`` picks the ps
    task (default round-robin).
    """
    if cluster is not None:
        ps_tasks = _ps_tasks_from_cluster(cluster, ps_device or "")
    if not ps_tasks:
        return None
    if not merge_devices:
        logger.warning("DEPRECATION: It is recommended to set merge_devices=True in replica_device_setter")
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    if not callable(ps_strategy):
        raise TypeError(f"ps_strategy must be callable (op -> ps task index), got {type(ps_strategy).__name__}")
    ops = frozenset(STANDARD_PS_OPS if ps_ops is None else _as_op_list(ps_ops))
    chooser = _ReplicaDeviceChooser(ps_tasks, ps_device or "", worker_device or "", merge_devices,
                                    ops, ps_strategy)
    return chooser.device_function


def _as_op_list(ps_ops: Iterable[str]) -> Sequence[str]:
    if isinstance(ps_ops, str):  # a lone "VariableV2" would otherwise become its letters
        return [ps_ops]
    return list(ps_ops)
