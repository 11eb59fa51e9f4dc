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
is accepted too. Device strings are parsed by a small private
:class:`_DeviceSpec` so this module depends on nothing but the string form
``/job:J/replica:R/task:T/device:TYPE:I`` (and the short ``/cpu:0``,
``/gpu:1``).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distrib.cluster import ClusterSpec

logger = logging.getLogger(__name__)

__all__ = ["replica_device_setter", "GreedyLoadBalancingStrategy", "byte_size_load_fn", "STANDARD_PS_OPS"]

# TF's STANDARD_PS_OPS: the op types that own state a replica must share.
STANDARD_PS_OPS: tuple[str, ...] = (
    "Variable", "VariableV2", "AutoReloadVariable", "MutableHashTable",
    "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2",
    "MutableDenseHashTable", "MutableDenseHashTableV2", "VarHandleOp",
)

# The device types a bare "/cpu:0" may name; "/device:TYPE:I" takes any type.
_SHORT_DEVICE_TYPES = frozenset({"CPU", "GPU", "TPU"})

PsStrategy = Callable[[Any], int]
DeviceFunction = Callable[[Any], str]


# -- device strings -------------------------------------------------------------

@dataclass(frozen=True)
class _DeviceSpec:
    """A parsed device string; ``None`` fields are unset (they merge away)."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def parse(cls, spec: str) -> _DeviceSpec:
        fields: dict[str, Any] = {}
        for part in spec.split("/"):
            if part:
                _parse_part(spec, part.split(":"), fields)
        return cls(**fields)

    def merged_with(self, other: _DeviceSpec) -> _DeviceSpec:
        """This spec with every field that ``other`` sets taken from ``other``."""
        return _DeviceSpec(
            job=other.job if other.job is not None else self.job,
            replica=other.replica if other.replica is not None else self.replica,
            task=other.task if other.task is not None else self.task,
            device_type=other.device_type if other.device_type is not None else self.device_type,
            device_index=other.device_index if other.device_index is not None else self.device_index,
        )

    def __str__(self) -> str:
        out = []
        if self.job is not None:
            out.append(f"/job:{self.job}")
        if self.replica is not None:
            out.append(f"/replica:{self.replica}")
        if self.task is not None:
            out.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else str(self.device_index)
            out.append(f"/device:{self.device_type}:{index}")
        return "".join(out)


def _parse_int(spec: str, what: str, text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"Bad {what} {text!r} in device string {spec!r}: write an int, e.g. '/job:ps/task:0'")
    return int(text)


def _set_device(spec: str, fields: dict[str, Any], device_type: str, index: str | None) -> None:
    if "device_type" in fields:
        raise ValueError(f"Device string {spec!r} names more than one device type")
    # TF upper-cases the short form ("/gpu:0"); upper-casing "/device:gpu:0" too
    # keeps one spelling per device so merged strings compare equal.
    fields["device_type"] = device_type.upper()
    if index is not None and index != "*":
        fields["device_index"] = _parse_int(spec, "device index", index)


def _parse_part(spec: str, pieces: list[str], fields: dict[str, Any]) -> None:
    key = pieces[0]
    if len(pieces) == 2 and key == "job":
        fields["job"] = pieces[1]
    elif len(pieces) == 2 and key in ("replica", "task"):
        fields[key] = _parse_int(spec, key, pieces[1])
    elif len(pieces) in (1, 2) and key.upper() in _SHORT_DEVICE_TYPES:
        _set_device(spec, fields, key, pieces[1] if len(pieces) == 2 else None)
    elif len(pieces) == 3 and key == "device":
        _set_device(spec, fields, pieces[1], pieces[2])
    else:
        raise ValueError(
            f"Unknown part {'/' + ':'.join(pieces)!r} in device string {spec!r}: "
            "write /job:J/replica:R/task:T/device:TYPE:I (any part may be left out)")


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
        current = _DeviceSpec.parse(op.device or "")
        if self.ps_tasks and self.ps_device and _op_type(op) in self.ps_ops:
            ps = _DeviceSpec.parse(self.ps_device)
            # The strategy picks a task only when the ps job survives the merge:
            # an op pinned to another job keeps its own task, and the strategy's
            # turn is not spent on it.
            if ps.job and (not current.job or current.job == ps.job):
                ps = replace(ps, task=self.ps_strategy(op))
            return str(ps.merged_with(current))
        return str(_DeviceSpec.parse(self.worker_device or "").merged_with(current))


def _ps_tasks_from_cluster(cluster: ClusterSpec | Mapping[str, Any], ps_device: str) -> int:
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster)
    ps_job = _DeviceSpec.parse(ps_device).job
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
