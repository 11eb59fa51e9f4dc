"""How the mirrored strategies combine the replicas' values (TF's ``cross_device_ops``).

``reduce(op, values, destinations)`` takes one tensor per local replica and
returns, for each destination device, the combined tensor there:

* ``ReductionToOneDevice`` (the default on CPUs, as in TF): an ``AddN`` on
  one device, then an ``Identity`` per destination. Between logical CPUs of
  one process this moves no bytes at all (an ``Identity`` on the same host
  is a reference), which is why it is the cheapest here.
* ``NcclAllReduce`` / ``HierarchicalCopyAllReduce``: TF's GPU choices. There
  is no NCCL here: ``NcclAllReduce`` runs our collective all-reduce among the
  local replicas (one participant per device), and
  ``HierarchicalCopyAllReduce`` reduces on one device as above.
* ``CollectiveAllReduce`` (``MultiWorkerMirroredStrategy``'s): the local
  replicas are summed on the worker's first device, that sum is all-reduced
  across the workers with one collective participant per worker
  (``dt.collective.all_reduce``, ring or small-message algorithm chosen by
  the engine), and the result is copied to each local replica.

Collective keys (``CollectiveKeys``) are handed out in build order, so every
worker that builds the same step gets the same keys, as TF's are.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Sequence

from distrib.framework.graph import get_default_graph
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops

__all__ = ["ReduceOp", "CrossDeviceOps", "ReductionToOneDevice", "NcclAllReduce",
           "HierarchicalCopyAllReduce", "CollectiveAllReduce", "CollectiveKeys"]


class ReduceOp:
    """``dt.distribute.ReduceOp``: how ``strategy.reduce`` combines the replicas."""
    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def check(op: Any) -> str:
        name = getattr(op, "value", op)
        name = str(name).upper().rsplit(".", 1)[-1]
        if name not in ("SUM", "MEAN"):
            raise ValueError(f"reduce_op must be dt.distribute.ReduceOp.SUM or MEAN, got {op!r}")
        return name


class CollectiveKeys:
    """Group and instance keys for the collectives of one strategy, in build order."""

    _groups = itertools.count(1000)   # a process's strategies never share a group key

    def __init__(self, group_key: int | None = None) -> None:
        self.group_key = group_key if group_key is not None else next(self._groups)
        self._instances: dict[Any, itertools.count] = {}
        self._lock = threading.Lock()

    def instance_key(self, graph: Any = None) -> int:
        """The next instance key for ``graph`` (each graph counts from the start,
        so the same build on every worker gets the same keys)."""
        graph = graph if graph is not None else get_default_graph()
        with self._lock:
            counter = self._instances.setdefault(id(graph), itertools.count(1))
            return next(counter)


class CrossDeviceOps:
    """Base: combine one tensor per local replica into one per destination."""

    def reduce(self, reduce_op: str, values: Sequence[Any], destinations: Sequence[str],
               num_replicas_in_sync: int | None = None) -> list[Any]:
        raise NotImplementedError

    def batch_reduce(self, reduce_op: str, value_lists: Sequence[Sequence[Any]],
                     destinations: Sequence[str], num_replicas_in_sync: int | None = None
                     ) -> list[list[Any]]:
        """``reduce`` for each position; result[k][r]: position k on destination r."""
        return [self.reduce(reduce_op, values, destinations, num_replicas_in_sync)
                for values in value_lists]


def _finish(total: Any, reduce_op: str, count: int) -> Any:
    if reduce_op == ReduceOp.MEAN and count > 1:
        return ops.divide(total, ops.cast(float(count), total.dtype))
    return total


class ReductionToOneDevice(CrossDeviceOps):
    """Sum on ``reduce_to_device`` (default: the first destination), then copy."""

    def __init__(self, reduce_to_device: str | None = None, accumulation_fn: Any = None) -> None:
        self.reduce_to_device = reduce_to_device
        self.accumulation_fn = accumulation_fn or ops.add_n

    def reduce(self, reduce_op: str, values: Sequence[Any], destinations: Sequence[str],
               num_replicas_in_sync: int | None = None) -> list[Any]:
        graph = get_default_graph()
        values = [ops.convert_to_tensor(v) for v in values]
        with graph.device(self.reduce_to_device or destinations[0]):
            total = values[0] if len(values) == 1 else self.accumulation_fn(values)
            total = _finish(total, reduce_op, num_replicas_in_sync or len(values))
        out = []
        for dest in destinations:
            with graph.device(dest):
                out.append(ops.identity(total))
        return out


class HierarchicalCopyAllReduce(ReductionToOneDevice):
    """TF's GPU tree reduction; on this runtime a reduction on one device."""

    def __init__(self, num_packs: int = 1) -> None:
        super().__init__()
        self.num_packs = num_packs


class NcclAllReduce(CrossDeviceOps):
    """An all-reduce among the local replicas with the collective engine (no NCCL here)."""

    def __init__(self, num_packs: int = 1) -> None:
        self.num_packs = num_packs
        self.keys = CollectiveKeys()

    def reduce(self, reduce_op: str, values: Sequence[Any], destinations: Sequence[str],
               num_replicas_in_sync: int | None = None) -> list[Any]:
        graph = get_default_graph()
        n = len(values)
        if n == 1:
            with graph.device(destinations[0]):
                return [_finish(ops.identity(values[0]), reduce_op, num_replicas_in_sync or 1)]
        instance = self.keys.instance_key(graph)
        out = []
        for value, dest in zip(values, destinations):
            with graph.device(dest):
                out.append(collective_ops.all_reduce(
                    value, n, self.keys.group_key, instance, merge_op="Add",
                    final_op="Div" if reduce_op == ReduceOp.MEAN else "Id"))
        return out


class CollectiveAllReduce(CrossDeviceOps):
    """Local sum, an all-reduce across workers (one participant each), local copies."""

    def __init__(self, worker_devices: Sequence[str], num_workers: int,
                 keys: CollectiveKeys | None = None, hint: str = "auto",
                 timeout: float | None = None) -> None:
        self.worker_devices = list(worker_devices)   # this worker's replica devices
        self.num_workers = int(num_workers)
        self.keys = keys or CollectiveKeys()
        self.hint = hint
        self.timeout = timeout or 0

    def all_reduce_across_workers(self, tensor: Any, merge_op: str = "Add") -> Any:
        """``tensor`` (on this worker's first device) summed over the workers."""
        if self.num_workers == 1:
            return tensor
        graph = get_default_graph()
        with graph.device(self.worker_devices[0]):
            return collective_ops.all_reduce(
                tensor, self.num_workers, self.keys.group_key, self.keys.instance_key(graph),
                merge_op=merge_op, final_op="Id", communication_hint=self.hint,
                timeout=self.timeout)

    def all_gather_across_workers(self, tensor: Any) -> Any:
        if self.num_workers == 1:
            return tensor
        graph = get_default_graph()
        with graph.device(self.worker_devices[0]):
            return collective_ops.all_gather(
                tensor, self.num_workers, self.keys.group_key, self.keys.instance_key(graph),
                communication_hint=self.hint, timeout=self.timeout)

    def reduce(self, reduce_op: str, values: Sequence[Any], destinations: Sequence[str],
               num_replicas_in_sync: int | None = None) -> list[Any]:
        graph = get_default_graph()
        values = [ops.convert_to_tensor(v) for v in values]
        with graph.device(self.worker_devices[0]):
            local = values[0] if len(values) == 1 else ops.add_n(values)
        total = self.all_reduce_across_workers(local)
        with graph.device(self.worker_devices[0]):
            total = _finish(total, reduce_op,
                            num_replicas_in_sync or len(values) * self.num_workers)
        out = []
        for dest in destinations:
            with graph.device(dest):
                out.append(ops.identity(total))
        return out
