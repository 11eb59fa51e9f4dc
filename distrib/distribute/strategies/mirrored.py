"""``MirroredStrategy`` and ``CentralStorageStrategy``: synchronous training
on the devices of one process (TF's ``mirrored_strategy.py`` and
``central_storage_strategy.py``).

* ``MirroredStrategy(devices=None, cross_device_ops=None)``: one replica per
  device (every local GPU, else every logical CPU that
  ``dt.config.set_logical_device_configuration`` made). A variable made in
  its scope is a ``MirroredVariable``: one copy per device, all initialized
  from the first copy's initial value. ``strategy.run`` builds the step once
  per device; an optimizer's ``apply_gradients`` inside it sums each
  gradient over the replicas (``cross_device_ops``, default
  ``ReductionToOneDevice``) and each replica applies the sum to its own
  copy, so the copies stay equal without ever being sent anywhere.
* ``CentralStorageStrategy(compute_devices=None, parameter_device=None)``:
  the same replicas, but each variable is one plain variable on the
  parameter device (the CPU); the replicas' gradients are summed there and
  applied once.

Steps run on this process's local server (``distrib.distribute.functions.local_target``).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from distrib.distribute.core.cross_device_ops import CrossDeviceOps, ReduceOp, ReductionToOneDevice
from distrib.distribute.core.distribute_lib import ReplicaContext, Strategy
from distrib.distribute.core.sparse_reduce import reduce_indexed_slices
from distrib.distribute.core.values import DistributedValues, Mirrored, MirroredVariable
from distrib.distribute.functions.local_target import local_server
from distrib.framework import config, distribution_context
from distrib.framework.device import DeviceSpec
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable

logger = logging.getLogger(__name__)

__all__ = ["MirroredStrategy", "CentralStorageStrategy", "local_devices", "make_variable"]


def local_devices() -> list[str]:
    """This process's replica devices: its GPUs, else its logical CPUs."""
    gpus = config.list_logical_devices("GPU")
    if gpus:
        return [d.name for d in gpus]
    return [f"/device:CPU:{i}" for i in range(config.logical_cpu_count())]


def _canonical(device: str) -> str:
    spec = DeviceSpec.from_string(device)
    if spec.device_type is None:
        raise ValueError(f"device {device!r} names no device type (e.g. /device:CPU:0)")
    return spec.to_string()


def variable_args(args: tuple, kwargs: dict) -> dict[str, Any]:
    """``dt.Variable(*args, **kwargs)``'s arguments by name, less the two (synchronization,
    aggregation) that the strategies decide themselves."""
    names = ("initial_value", "trainable", "collections", "validate_shape", "caching_device",
             "name", "dtype", "expected_shape", "shape")
    out = dict(zip(names, args))
    out.update(kwargs)
    out.pop("synchronization", None)
    out.pop("aggregation", None)
    return out


def make_variable(devices: Sequence[str], args: tuple, kwargs: dict) -> MirroredVariable:
    """A MirroredVariable with one copy per device of ``devices`` (the first
    copy's initial value initializes every copy)."""
    spec = variable_args(args, kwargs)
    graph = get_default_graph()
    components: list[Variable] = []
    with distribution_context.variable_creation_paused():
        for i, device in enumerate(devices):
            kw = dict(spec)
            if i > 0:
                primary = components[0]
                kw["initial_value"] = lambda p=primary: ops.identity(p.initial_value)
                kw["name"] = f"{primary.op.name}/replica_{i}"
                kw["collections"] = [GraphKeys.GLOBAL_VARIABLES]   # trainable: the first copy
            with graph.device(device):
                components.append(Variable(**kw))
    mirrored = MirroredVariable(components, aggregation=kwargs.get("aggregation"))
    for c in components:
        c.distributed_container = mirrored
    for c in components[1:]:
        c.mirror_primary = components[0]   # a Saver saves the first copy, restores every one
    graph.add_to_collection("mirrored_variables", mirrored)
    return mirrored


class MirroringStrategy(Strategy):
    """What MirroredStrategy and MultiWorkerMirroredStrategy share: mirrored
    variables and the cross-replica application of gradients."""

    _cross_device: CrossDeviceOps

    def create_variable(self, *args: Any, **kwargs: Any) -> Any:
        replica = distribution_context.replica_context()
        if replica is None:
            return make_variable(self._devices, args, kwargs)
        # inside run: the first replica makes it, the others take the same one
        made = self._made_in_run.setdefault(replica.local_index, [])
        if replica.local_index == 0:
            var = make_variable(self._devices, args, kwargs)
            made.append(var)
            return var
        first = self._made_in_run.get(0, [])
        if len(made) >= len(first):
            raise ValueError("replicas of strategy.run made different variables: make "
                             "variables in the strategy's scope, before run")
        var = first[len(made)]
        made.append(var)
        return var

    def run(self, fn: Any, args: tuple = (), kwargs: dict | None = None, options: Any = None
            ) -> Any:
        self._made_in_run: dict[int, list] = {}
        try:
            return super().run(fn, args, kwargs, options)
        finally:
            self._made_in_run = {}

    def reduce_to_replicas(self, reduce_op: str, values: list[Any]) -> list[Any]:
        return self._cross_device.reduce(reduce_op, values, self._devices,
                                         self.num_replicas_in_sync)

    def apply_gradients_across_replicas(self, optimizer: Any, grads_and_vars: Any,
                                        global_step: Any, name: str | None) -> Mirrored:
        """Sum every gradient over the replicas; each replica applies the sum to its copy."""
        lists = [list(x) for x in _per_replica(grads_and_vars)]
        steps = _per_replica(global_step) if isinstance(global_step, DistributedValues) \
            else [global_step] + [None] * (len(lists) - 1)
        positions = [k for k, (g, _) in enumerate(lists[0]) if g is not None]
        dense = [k for k in positions if not isinstance(lists[0][k][0], IndexedSlices)]
        grads = [[ops.convert_to_tensor(lists[r][k][0]) for r in range(len(lists))]
                 for k in dense]
        by_position = dict(zip(dense, self._cross_device.batch_reduce(
            ReduceOp.SUM, grads, self._devices, self.num_replicas_in_sync) if grads else []))
        for k in positions:   # sparse gradients: the replicas' rows gathered (sparse_reduce)
            if k not in by_position:
                by_position[k] = reduce_indexed_slices(
                    self._cross_device, ReduceOp.SUM, [x[k][0] for x in lists], self._devices,
                    self.num_replicas_in_sync)
        reduced = [by_position[k] for k in positions]
        graph = get_default_graph()
        train_ops = []
        with distribution_context.variable_creation_paused():
            for r, device in enumerate(self._devices):
                pairs = [(reduced[j][r], lists[r][k][1]) for j, k in enumerate(positions)]
                ctx = ReplicaContext(self, r, self._worker_index * len(self._devices) + r)
                with graph.device(device), distribution_context.enter(self, ctx):
                    train_ops.append(optimizer.apply_gradients_here(pairs, steps[r], name))
        return Mirrored(train_ops)


def _per_replica(value: Any) -> list[Any]:
    return list(value.values) if isinstance(value, DistributedValues) else [value]


class MirroredStrategy(MirroringStrategy):
    """``dt.distribute.MirroredStrategy(devices=None, cross_device_ops=None)``."""

    def __init__(self, devices: Sequence[str] | None = None,
                 cross_device_ops: CrossDeviceOps | None = None) -> None:
        devices = [_canonical(d) for d in devices] if devices else local_devices()
        if len(set(devices)) != len(devices):
            raise ValueError(f"No duplicates allowed in `devices` argument: {devices}")
        super().__init__(devices)
        self._cross_device = cross_device_ops or ReductionToOneDevice()
        logger.info("Using MirroredStrategy with devices %s", tuple(devices))

    @property
    def target(self) -> str:
        return local_server().target


class CentralStorageStrategy(Strategy):
    """``dt.distribute.experimental.CentralStorageStrategy(compute_devices=None,
    parameter_device=None)``: see the module header."""

    def __init__(self, compute_devices: Sequence[str] | None = None,
                 parameter_device: str | None = None) -> None:
        devices = [_canonical(d) for d in compute_devices] if compute_devices \
            else local_devices()
        super().__init__(devices)
        self._parameter_device = _canonical(parameter_device) if parameter_device \
            else "/device:CPU:0"
        self._cross_device = ReductionToOneDevice(self._parameter_device)

    @property
    def target(self) -> str:
        return local_server().target

    def create_variable(self, *args: Any, **kwargs: Any) -> Any:
        graph = get_default_graph()
        with distribution_context.variable_creation_paused(), \
                graph.device(self._parameter_device):
            return Variable(**variable_args(args, kwargs))

    def reduce_to_replicas(self, reduce_op: str, values: list[Any]) -> list[Any]:
        return self._cross_device.reduce(reduce_op, values, self._devices,
                                         self.num_replicas_in_sync)

    def apply_gradients_across_replicas(self, optimizer: Any, grads_and_vars: Any,
                                        global_step: Any, name: str | None) -> Any:
        """Sum each gradient on the parameter device and apply it once."""
        lists = [list(x) for x in _per_replica(grads_and_vars)]
        pairs = []
        graph = get_default_graph()
        for k, (g, var) in enumerate(lists[0]):
            if g is None:
                continue
            if isinstance(g, IndexedSlices):   # rows joined on the parameter device, not densified
                pairs.append((reduce_indexed_slices(
                    self._cross_device, ReduceOp.SUM, [x[k][0] for x in lists],
                    [self._parameter_device], self.num_replicas_in_sync)[0], var))
                continue
            grads = [ops.convert_to_tensor(lists[r][k][0]) for r in range(len(lists))]
            with graph.device(self._parameter_device):
                pairs.append((grads[0] if len(grads) == 1 else ops.add_n(grads), var))
        step = global_step.values[0] if isinstance(global_step, DistributedValues) \
            else global_step
        with distribution_context.variable_creation_paused(), \
                graph.device(self._parameter_device):
            return optimizer.apply_gradients_here(pairs, step, name)
