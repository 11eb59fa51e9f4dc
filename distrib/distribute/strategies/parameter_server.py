"""``ParameterServerStrategy``: TF2's parameter-server training, driven by a
coordinator (TF's ``parameter_server_strategy_v2.py``).

The program runs on the coordinator: the cluster's ``chief`` task, or a
client process that is no task of the cluster (the tutorial's in-process
cluster of workers and ps: it joins as ``/job:chief/task:0`` on a free
port, as TF's strategy connects to the cluster); ``ps`` and ``worker``
tasks run bare servers (``python -m distrib.server`` or the launcher). The
strategy starts the coordinator's own server in the process (the master of
every step), and:

* variables made in its scope go round-robin to the ps tasks; with a
  ``variable_partitioner`` a large one is split along its first axis into a
  ``ShardedVariable`` whose shards go to different ps tasks;
* a step is a ``dt.function`` that ``ClusterCoordinator.schedule`` runs on a
  worker: traced once per worker under that worker's device, so its ops run
  there and read and update the variables on the ps, asynchronously with the
  other workers' steps, as TF's strategy does;
* ``strategy.run(fn)`` inside such a step builds ``fn`` once (one replica per
  worker: ``num_replicas_in_sync`` is 1), and an optimizer's
  ``apply_gradients`` in it updates the ps variables directly.
"""
from __future__ import annotations

import concurrent.futures
import logging
import math
import socket
from typing import Any, Sequence

import numpy as np

from distrib.cluster.cluster_spec import ClusterSpec
from distrib.cluster.resolvers import ClusterResolver
from distrib.distribute.core.distribute_lib import Strategy
from distrib.distribute.core.values import DistributedValues, tensor_operator
from distrib.distribute.strategies.mirrored import variable_args
from distrib.eager.context import graph_mode
from distrib.errors import FailedPreconditionError
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import get_default_graph
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat, slice_rows
from distrib.ops.variables import Variable
from distrib.server.bind_address import is_loopback_host
from distrib.server.server_lib import Server

logger = logging.getLogger(__name__)

__all__ = ["ParameterServerStrategy", "ShardedVariable", "FixedShardsPartitioner",
           "MinSizePartitioner", "MaxSizePartitioner"]


# -- partitioners (dt.distribute.experimental.partitioners) -------------------------------
class FixedShardsPartitioner:
    """``num_shards`` shards along axis 0 (fewer when the axis is shorter)."""

    def __init__(self, num_shards: int) -> None:
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        self._num_shards = num_shards

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        dims = list(TensorShape(shape).dims or [])
        out = [1] * len(dims)
        if dims:
            out[axis] = max(1, min(self._num_shards, int(dims[axis] or 1)))
        return out


class MinSizePartitioner:
    """Shards of at least ``min_shard_bytes`` each, at most ``max_shards`` (TF's)."""

    def __init__(self, min_shard_bytes: int = 256 << 10, max_shards: int = 1,
                 bytes_per_string: int = 16) -> None:
        if min_shard_bytes < 1 or max_shards < 1:
            raise ValueError("min_shard_bytes and max_shards must be >= 1")
        self._min_bytes = min_shard_bytes
        self._max_shards = max_shards

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        dims = [int(d) for d in TensorShape(shape).dims or []]
        out = [1] * len(dims)
        if not dims:
            return out
        size = dtypes.as_dtype(dtype).as_numpy_dtype().itemsize
        total = math.prod(dims) * size
        shards = min(self._max_shards, dims[axis], max(1, total // self._min_bytes))
        out[axis] = max(1, shards)
        return out


class MaxSizePartitioner:
    """Shards of at most ``max_shard_bytes`` each (and at most ``max_shards``)."""

    def __init__(self, max_shard_bytes: int, max_shards: int | None = None,
                 bytes_per_string: int = 16) -> None:
        if max_shard_bytes < 1:
            raise ValueError("max_shard_bytes must be >= 1")
        self._max_bytes = max_shard_bytes
        self._max_shards = max_shards

    def __call__(self, shape: Any, dtype: Any, axis: int = 0) -> list[int]:
        dims = [int(d) for d in TensorShape(shape).dims or []]
        out = [1] * len(dims)
        if not dims:
            return out
        size = dtypes.as_dtype(dtype).as_numpy_dtype().itemsize
        shards = max(1, math.ceil(math.prod(dims) * size / self._max_bytes))
        if self._max_shards:
            shards = min(shards, self._max_shards)
        out[axis] = min(shards, dims[axis])
        return out


# -- sharded variables ----------------------------------------------------------------------
class ShardedVariable(DistributedValues):
    """A variable split along axis 0 into shards on different ps tasks. It reads
    as the whole (a ``ConcatV2`` of the shards); ``variables`` are the shards
    (what gradients and optimizers see, as in TF)."""

    def __init__(self, shards: Sequence[Variable], name: str) -> None:
        super().__init__(shards)
        self._name = name

    variables = property(lambda self: list(self._values))
    _shards = property(lambda self: list(self._values))   # what GradientTape differentiates
    name = property(lambda self: self._name)
    dtype = property(lambda self: self._values[0].dtype)
    graph = property(lambda self: self._values[0].graph)
    trainable = property(lambda self: self._values[0].trainable)

    @property
    def shape(self) -> TensorShape:
        rows = sum(int(v.shape.dims[0]) for v in self._values)
        return TensorShape([rows, *self._values[0].shape.dims[1:]])

    def _as_tensor(self) -> Any:
        return concat([v._as_tensor() for v in self._values], axis=0)  # noqa: SLF001 - the hook

    def _as_graph_element(self) -> Any:
        return self._as_tensor()

    def value(self) -> Any:
        return self._as_tensor()

    read_value = value

    @property
    def initializer(self) -> Any:
        with graph_mode():   # a graph op, also when built outside a trace with eager on
            return ops.group(*[v.initializer for v in self._values])

    def assign(self, value: Any, use_locking: bool = False, name: str | None = None,
               read_value: bool = True) -> Any:
        value = ops.convert_to_tensor(value)
        updates, begin = [], 0
        for v in self._values:
            rows = int(v.shape.dims[0])
            updates.append(v.assign(slice_rows(value, begin, rows), read_value=False))
            begin += rows
        return ops.group(*updates)

    # -- dt.train.Checkpoint's value protocol (distrib.train.checkpoints.trackable): saved whole
    # (the shards joined along axis 0), restored by this variable's own shards'
    # rows, so a checkpoint moves between numbers of shards ------------------------------
    def checkpoint_parts(self) -> list[Variable]:
        return list(self._values)

    def checkpoint_join(self, parts: Sequence[Any]) -> Any:
        return np.concatenate([np.asarray(p) for p in parts], axis=0)

    def checkpoint_split(self, value: Any) -> list[tuple[Variable, Any]]:
        array = np.asarray(value)
        out, begin = [], 0
        for shard in self._values:
            rows = int(shard.shape.dims[0])
            out.append((shard, array[begin:begin + rows]))
            begin += rows
        return out

    def __repr__(self) -> str:
        return f"<ShardedVariable {self._name!r} shape={self.shape} shards={len(self._values)}>"


def _single(value: Any) -> Any:
    if isinstance(value, DistributedValues) and not hasattr(value, "_component") \
            and len(value.values) == 1:
        return value.values[0]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_single(v) for v in value)
    if isinstance(value, list):
        return [_single(v) for v in value]
    if isinstance(value, dict):
        return {k: _single(v) for k, v in value.items()}
    return value


# -- the strategy ---------------------------------------------------------------------------
def coordinator_server(cluster: ClusterSpec, task_type: str | None,
                       task_id: int | None) -> Server:
    """The server of the process that makes the strategy: the coordinator,
    ``/job:chief/task:0`` (TF's ``connect_to_cluster(job_name="chief")``), whether
    the resolver names the chief or no task at all (a client: the tutorial's
    in-process cluster). A cluster of workers and ps only gets a ``chief`` job
    of one task on a free port of this host; the workers and ps need not know
    it (it dials them). A resolver naming a worker or ps task serves that task."""
    if task_type in ("worker", "ps"):
        if task_id is None:
            raise ValueError(f"the cluster_resolver names task type {task_type!r} but no "
                             "task_id")
        return Server(cluster, job_name=task_type, task_index=task_id)
    if task_type not in (None, "", "chief"):
        raise ValueError("ParameterServerStrategy runs on the coordinator: the cluster's "
                         f"'chief' task or a client with no task; got task type {task_type!r}")
    if "chief" in cluster.jobs:
        return Server(cluster, job_name="chief", task_index=task_id or 0)
    hosts = [cluster.task_address(job, i).rpartition(":")[0]
             for job in cluster.jobs for i in cluster.task_indices(job)]
    host = "localhost" if all(is_loopback_host(h) for h in hosts) else socket.gethostname()
    jobs = cluster.as_dict()
    jobs["chief"] = [f"{host}:0"]
    return Server(ClusterSpec(jobs), job_name="chief", task_index=0)


class ParameterServerStrategy(Strategy):
    """``dt.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=None)``."""

    def __init__(self, cluster_resolver: ClusterResolver,
                 variable_partitioner: Any = None) -> None:
        cluster = cluster_resolver.cluster_spec()
        if "ps" not in cluster.jobs or "worker" not in cluster.jobs:
            raise ValueError("ParameterServerStrategy needs a cluster with 'ps' and 'worker' "
                             f"jobs (and a 'chief' for the coordinator); got {cluster.jobs}")
        super().__init__([""])
        self.cluster_resolver = cluster_resolver
        self._cluster = cluster
        self._partitioner = variable_partitioner
        self._ps = [f"/job:ps/task:{i}" for i in cluster.task_indices("ps")]
        self._workers = [f"/job:worker/task:{i}" for i in cluster.task_indices("worker")]
        self._next_ps = 0
        self.coordinator: Any = None   # the ClusterCoordinator made for it (it sets itself)
        self._server: Server | None = coordinator_server(
            cluster, cluster_resolver.task_type, cluster_resolver.task_id)
        # its own steps reach it by direct calls; it is not this process's default
        # target: code outside the strategy runs as if it had never been made
        # (def_function), so it outlives neither shutdown() nor the cluster
        self._server.accept_direct_calls()
        logger.info("ParameterServerStrategy: %d ps, %d workers", len(self._ps),
                    len(self._workers))

    @property
    def target(self) -> str:
        if self._server is None:
            raise FailedPreconditionError(
                "this ParameterServerStrategy was shut down (its server stopped): make a new "
                "strategy to run steps on the cluster")
        return self._server.target

    def shutdown(self) -> None:
        """Stop the server this strategy started in the process (a distrib
        extension: TF's lives as long as the process). Its steps fail
        afterwards; code outside the strategy never ran there. Idempotent; the
        process's exit stops it too."""
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    @property
    def num_replicas_in_sync(self) -> int:
        return 1

    @property
    def worker_devices(self) -> list[str]:
        return list(self._workers)

    @property
    def ps_devices(self) -> list[str]:
        """The ps tasks variables are placed on, round robin."""
        return list(self._ps)

    @property
    def cluster(self) -> ClusterSpec:
        """The cluster the strategy runs on (its resolver's, read once)."""
        return self._cluster

    def add_worker(self, device: str, address: str) -> concurrent.futures.Future | None:
        """A worker that joined after the strategy started (an elastic launch;
        its ``ClusterCoordinator`` calls this): the chief's master may run steps
        there once the returned future settles (``Server.add_task``; None: no
        server of its own to tell). ``worker_devices`` stays the workers it
        started with; the coordinator's are the live pool."""
        if self._server is None:
            return None
        return self._server.add_task(device, address)

    def run(self, fn: Any, args: tuple = (), kwargs: dict | None = None, options: Any = None
            ) -> Any:
        """``fn`` built once, on the worker that runs the step (one replica per worker:
        its outputs come back as they are, not as PerReplica values)."""
        out = super().run(fn, args, kwargs, options)
        return _single(out)

    def _place(self) -> str:
        device = self._ps[self._next_ps % len(self._ps)]
        self._next_ps += 1
        return device

    def create_variable(self, *args: Any, **kwargs: Any) -> Any:
        spec = variable_args(args, kwargs)
        graph = get_default_graph()
        with distribution_context.variable_creation_paused():
            if self._partitioner is not None:
                sharded = self._sharded(spec, graph)
                if sharded is not None:
                    return sharded
            with graph.device(self._place()):
                return Variable(**spec)

    def _sharded(self, spec: dict[str, Any], graph: Any) -> ShardedVariable | None:
        init = spec["initial_value"]
        if callable(init):
            init = init()
        init = ops.convert_to_tensor(init, dtype=spec.get("dtype"))
        dims = init.shape.dims
        if not dims or None in dims:
            return None
        parts = self._partitioner(list(dims), init.dtype)
        n = int(parts[0]) if parts else 1
        if n <= 1:
            spec = dict(spec, initial_value=init)
            with graph.device(self._place()):
                return Variable(**spec)
        rows = int(dims[0])
        sizes = [rows // n + (1 if i < rows % n else 0) for i in range(n)]
        name = spec.get("name") or "Variable"
        shards, begin = [], 0
        for i, size in enumerate(sizes):
            kw = dict(spec, initial_value=slice_rows(init, begin, size), name=f"{name}/part_{i}")
            with graph.device(self._place()):
                shards.append(Variable(**kw))
            begin += size
        return ShardedVariable(shards, name)

    def reduce_to_replicas(self, reduce_op: str, values: list[Any]) -> list[Any]:
        return [ops.convert_to_tensor(values[0])]

    def apply_gradients_across_replicas(self, optimizer: Any, grads_and_vars: Any,
                                        global_step: Any, name: str | None) -> Any:
        """One replica per worker: the update goes straight to the ps variables."""
        pairs = list(grads_and_vars.values[0] if isinstance(grads_and_vars, DistributedValues)
                     else grads_and_vars)
        with distribution_context.variable_creation_paused():
            return optimizer.apply_gradients_here(pairs, global_step, name)


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__neg__",
              "__pow__", "__rpow__", "__lt__", "__le__", "__gt__", "__ge__"):
    setattr(ShardedVariable, _name, tensor_operator(_name))
