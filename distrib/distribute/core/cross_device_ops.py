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

Packs (``batch_reduce`` of ``CollectiveAllReduce``: a step's gradients).
The gradients are taken in reverse order, the order backpropagation computes
them (the last layer's first), and cut into packs of about
``bytes_per_pack`` (``CommunicationOptions(bytes_per_pack=N)``; 0: 1 MiB, as
DDP's first bucket and Horovod's small-tensor fusion): a gradient of at
least that size is a pack of its own (all-reduced as it is, no copy), the
smaller ones are joined (flattened, concatenated) as long as the pack
stays within it (a pack never goes past ``bytes_per_pack``: with more than
two workers the limit is the one-round size, and a bigger pack would go to
the ring), then all-reduced as one tensor and cut back. Each pack's all-reduce
depends on its own gradients only, so the executor starts it as soon as they
exist, while the rest of the backward pass runs, and the step waits only for
the last pack; several small gradients cost one collective (with
``wait_all``, an elastic strategy's, every result waits for every pack
instead, so a step that fails in one pack updates nothing). The sums are
those of the unpacked path bit for bit: each element is summed over the same
participants in the same order (one-round reduces in rank order; with two
workers a ring adds the same two values, and addition of two floats
commutes).

Collective keys (``CollectiveKeys``) are handed out in build order, so every
worker that builds the same step gets the same keys, as TF's are.
"""
from __future__ import annotations

import itertools
import math
import threading
import weakref
from typing import Any, Sequence

import numpy as np

from distrib.framework.graph import get_default_graph
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat, slice_rows
from distrib.settings import COLLECTIVE_DIRECT_BYTES

__all__ = ["ReduceOp", "CrossDeviceOps", "ReductionToOneDevice", "NcclAllReduce",
           "HierarchicalCopyAllReduce", "CollectiveAllReduce", "CollectiveKeys", "pack_by_size",
           "AUTO_BYTES_PER_PACK"]

# bytes_per_pack=0 (TF's "automatic"): packs of about 1 MiB
AUTO_BYTES_PER_PACK = 1 << 20


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
        # by the graph itself, weakly: keyed by id(), a new graph given a freed one's
        # id on one worker only would go on counting there, and the workers' keys
        # would part (a collective that never completes)
        self._instances: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def instance_key(self, graph: Any = None) -> int:
        """The next instance key for ``graph`` (each graph counts from the start,
        so the same build on every worker gets the same keys)."""
        graph = graph if graph is not None else get_default_graph()
        with self._lock:
            counter = self._instances.setdefault(graph, itertools.count(1))
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
                 timeout: float | None = None, bytes_per_pack: int = 0,
                 wait_all: bool = False) -> None:
        self.worker_devices = list(worker_devices)   # this worker's replica devices
        # elastic mode: every result of a batch_reduce waits for all its packs, so a
        # step that fails in one pack updates nothing (it may run again)
        self.wait_all = wait_all
        self.num_workers = int(num_workers)
        self.keys = keys or CollectiveKeys()
        self.hint = hint
        self.timeout = timeout or 0
        self.bytes_per_pack = int(bytes_per_pack) or AUTO_BYTES_PER_PACK

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
        return self._spread(total, reduce_op, num_replicas_in_sync or len(values) * self.num_workers,
                            destinations)

    def _spread(self, total: Any, reduce_op: str, count: int,
                destinations: Sequence[str]) -> list[Any]:
        graph = get_default_graph()
        with graph.device(self.worker_devices[0]):
            total = _finish(total, reduce_op, count)
        out = []
        for dest in destinations:
            with graph.device(dest):
                out.append(ops.identity(total))
        return out

    def batch_reduce(self, reduce_op: str, value_lists: Sequence[Sequence[Any]],
                     destinations: Sequence[str], num_replicas_in_sync: int | None = None
                     ) -> list[list[Any]]:
        """``reduce`` for each position, the positions' all-reduces in packs
        (see the module header)."""
        if self.num_workers == 1 or len(value_lists) < 2:
            return super().batch_reduce(reduce_op, value_lists, destinations,
                                        num_replicas_in_sync)
        graph = get_default_graph()
        locals_ = []
        with graph.device(self.worker_devices[0]):
            for values in value_lists:
                values = [ops.convert_to_tensor(v) for v in values]
                locals_.append(values[0] if len(values) == 1 else ops.add_n(values))
        totals: list[Any] = [None] * len(locals_)
        collectives: list[Any] = []
        for pack in pack_by_size(locals_, self._pack_limit()):
            if len(pack) == 1:
                totals[pack[0]] = self.all_reduce_across_workers(locals_[pack[0]])
                collectives.append(totals[pack[0]])
                continue
            with graph.device(self.worker_devices[0]):
                flat = concat([ops.reshape(locals_[k], [-1]) for k in pack], 0)
            summed = self.all_reduce_across_workers(flat)
            collectives.append(summed)
            with graph.device(self.worker_devices[0]):
                at = 0
                for k in pack:
                    shape = locals_[k].shape.as_list()
                    size = math.prod(shape)
                    totals[k] = ops.reshape(slice_rows(summed, at, size), shape)
                    at += size
        if self.wait_all and len(collectives) > 1:
            with graph.device(self.worker_devices[0]), graph.control_dependencies(collectives):
                totals = [ops.identity(t) for t in totals]
        return [self._spread(total, reduce_op,
                             num_replicas_in_sync or len(values) * self.num_workers, destinations)
                for total, values in zip(totals, value_lists)]


    def _pack_limit(self) -> int:
        """``bytes_per_pack``, within what keeps the sums bit for bit those of
        the unpacked path: with more than two workers a ring's order of
        addition follows an element's place in the tensor, so packs there
        stay within the one-round size (summed in rank order either way)."""
        if self.num_workers <= 2:
            return self.bytes_per_pack
        if self.hint == "ring":
            return 0
        return min(self.bytes_per_pack, COLLECTIVE_DIRECT_BYTES.get())


def pack_by_size(tensors: Sequence[Any], bytes_per_pack: int) -> list[list[int]]:
    """The positions of ``tensors`` in packs, last position first (see the
    module header): a tensor of at least ``bytes_per_pack`` bytes, or of a
    shape not fully known, alone; smaller neighbours of one dtype together,
    a pack closed before a tensor would take it past ``bytes_per_pack`` (so
    no pack is bigger than that; 0: no packs)."""
    packs: list[list[int]] = []
    open_pack: list[int] = []
    size = 0
    dtype = None

    def close() -> None:
        nonlocal open_pack, size
        if open_pack:
            packs.append(open_pack)
        open_pack, size = [], 0

    for k in reversed(range(len(tensors))):
        t = tensors[k]
        n = t.shape.num_elements() if t.shape.is_fully_defined() else None
        nbytes = None if n is None else n * np.dtype(t.dtype.as_numpy_dtype).itemsize
        if nbytes is None or nbytes >= bytes_per_pack:
            close()   # a pack holds neighbours only: it waits for nothing computed later
            packs.append([k])
            continue
        if open_pack and (t.dtype != dtype or size + nbytes > bytes_per_pack):
            close()
        open_pack.append(k)
        dtype = t.dtype
        size += nbytes
        if size >= bytes_per_pack:
            close()
    close()
    return packs
