"""``MultiWorkerMirroredStrategy``: synchronous training across worker
processes with all-reduce (TF's ``collective_all_reduce_strategy.py``).

Each worker runs the same program. The strategy reads the cluster and this
task from the resolver (``TF_CONFIG`` by default), starts this task's server
in the process, and mirrors every variable over this worker's replica
devices (its GPUs, else its logical CPUs: one unless
``dt.config.set_logical_device_configuration`` made more). A step built with
``strategy.run`` runs on this worker's own server; gradients are summed over
the local replicas, then over the workers with the collective engine
(``dt.collective.all_reduce``, one participant per worker, the ring for big
tensors: see ``cross_device_ops.CollectiveAllReduce``), so every copy of every
variable stays equal without a parameter server. The chief (the ``chief``
task, else worker 0) initializes the variables and broadcasts their values
on first use. Workers may start in any order: a group waits for one not
started yet within ``DISTRIB_REGISTER_TIMEOUT_S`` (10 minutes); one that
never comes, or dies before its first collective, fails that broadcast with
``UnavailableError`` naming it (the group leader watches the workers that
have not joined). So does every group of the workers' own
(``WORKER_GROUP_KEYS``: the all-reduces, the preemption agreement, a save's
agreement): a chief that saves after a worker exited fails naming it instead
of waiting for ever. Collective keys follow build order, so every worker
must build the same steps in the same order, as in TF.

``CommunicationOptions``: ``implementation`` RING forces the ring, NCCL is
accepted and means the default here (no NCCL on this runtime), AUTO lets the
engine choose by size; ``timeout_seconds`` bounds each collective
(``DeadlineExceededError`` naming the late worker; a warning at half);
``bytes_per_pack`` sizes the packs a step's gradients are all-reduced in,
last layer first, so that each pack's all-reduce starts while the backward
pass goes on (0: about 1 MiB; see ``cross_device_ops``).

Under an elastic launch (``--workers MIN:MAX``: ``DISTRIB_ELASTIC=1``) the
group follows the launch's membership record and changes at a step
boundary: see ``distrib.distribute.elastic`` (``controller``: agreement, regroup,
leaving, a lost member; ``datasets``: the global batch, cut for the group of
the moment: ``experimental_distribute_dataset`` keeps the global batch;
``distribute_datasets_from_function`` keeps the per-worker batch, calling
``dataset_fn`` again for the new group's (n, i) at a regroup).
"""
from __future__ import annotations

import enum
import logging
from typing import Any

from distrib.cluster import task_string
from distrib.cluster.resolvers import ClusterResolver, TFConfigClusterResolver
from distrib.distribute.core.cross_device_ops import CollectiveAllReduce, CollectiveKeys
from distrib.distribute.core.values import MirroredVariable
from distrib.distribute.elastic.controller import Agreement, ElasticController
from distrib.distribute.elastic.datasets import ElasticDatasetsFromFunction, ElasticDistributedDataset
from distrib.distribute.elastic.group import elastic_group_key, group_tasks, wait_for_record
from distrib.distribute.functions.checkpoint_steps import SAVE_AGREEMENT_GROUP_KEY
from distrib.distribute.functions.local_target import local_server, set_default_target
from distrib.distribute.preemption.signals import AGREEMENT_GROUP_KEY
from distrib.distribute.strategies.mirrored import MirroringStrategy, local_devices
from distrib.eager.context import graph_mode
from distrib.framework.graph import get_default_graph
from distrib.ops import collective_ops
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat
from distrib.server.server_lib import Server
from distrib.settings import ELASTIC

logger = logging.getLogger(__name__)

__all__ = ["MultiWorkerMirroredStrategy", "CommunicationOptions",
           "CommunicationImplementation", "WORKER_GROUP_KEYS"]

_GROUP_KEY = 7   # the same on every worker; one MWMS per program, as TF allows
# every fixed group key whose group is the strategy's worker tasks, one device
# each: its own all-reduces, the preemption handler's agreement, a save's
WORKER_GROUP_KEYS = (_GROUP_KEY, AGREEMENT_GROUP_KEY, SAVE_AGREEMENT_GROUP_KEY)


class CommunicationImplementation(enum.Enum):
    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


class CommunicationOptions:
    """``dt.distribute.experimental.CommunicationOptions`` (TF's arguments)."""

    def __init__(self, bytes_per_pack: int = 0, timeout_seconds: float | None = None,
                 implementation: CommunicationImplementation = CommunicationImplementation.AUTO
                 ) -> None:
        if bytes_per_pack < 0:
            raise ValueError(f"bytes_per_pack must be non-negative, got {bytes_per_pack}")
        if isinstance(implementation, str):
            implementation = CommunicationImplementation(implementation.upper())
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = implementation


def _worker_jobs(cluster: Any) -> list[tuple[str, int]]:
    """The tasks that train, in TF's order: the chief, then the workers."""
    out: list[tuple[str, int]] = []
    for job in ("chief", "worker"):
        if job in cluster.jobs:
            out += [(job, i) for i in cluster.task_indices(job)]
    return out


class MultiWorkerMirroredStrategy(MirroringStrategy):
    """``dt.distribute.MultiWorkerMirroredStrategy(cluster_resolver=None,
    communication_options=None)``: see the module header."""

    def __init__(self, cluster_resolver: ClusterResolver | None = None,
                 communication_options: CommunicationOptions | None = None) -> None:
        resolver = cluster_resolver or TFConfigClusterResolver()
        options = communication_options or CommunicationOptions()
        self._resolver = resolver
        self._options = options
        cluster = resolver.cluster_spec()
        self._server: Server | None = None
        self._elastic: ElasticController | None = None
        self.trace_epoch: int | None = None   # elastic: the group's membership version
        record = None
        if not cluster or not _worker_jobs(cluster):
            # no cluster: one worker on this process's devices, as TF's local mode
            devices, num_workers, index = local_devices(), 1, 0
        else:
            task_type, task_id = resolver.task_type, resolver.task_id
            workers = _worker_jobs(cluster)
            if (task_type, task_id) not in workers:
                raise ValueError(f"MultiWorkerMirroredStrategy runs on the chief and worker "
                                 f"tasks; this task is {task_type}:{task_id} (TF_CONFIG's "
                                 "task)")
            self._server = Server(cluster, job_name=task_type, task_index=task_id)
            set_default_target(self._server)
            # this worker's GPUs, else its logical CPUs, named on this task
            prefix = f"/job:{task_type}/replica:0/task:{task_id}"
            devices = [prefix + d for d in local_devices()]
            num_workers, index = len(workers), workers.index((task_type, task_id))
            if ELASTIC.get():   # the group is the membership record's, not TF_CONFIG's
                me = task_string(task_type, task_id)
                record = wait_for_record(self._server, me)
                tasks = group_tasks(record)
                if record.has_left(me):
                    logger.info("%s left the cluster before it started", me)
                    raise SystemExit(0)
                num_workers, index = len(tasks), tasks.index(me)
        super().__init__(devices, num_workers, index)
        if self._server is not None and record is None:
            # the groups' tasks are TF_CONFIG's: their leader watches those not yet
            # joined, so one that is lost, or never starts, fails the collective
            # that waits for it (naming it) instead of a hang
            self._server.expect_collective_tasks(
                WORKER_GROUP_KEYS, [task_string(*t) for t in _worker_jobs(cluster)])
        self._hint = "ring" if options.implementation == CommunicationImplementation.RING \
            else "auto"
        self._keys = CollectiveKeys(_GROUP_KEY)
        if record is not None:
            assert self._server is not None
            self._elastic = ElasticController(self, self._server,
                                              task_string(resolver.task_type, resolver.task_id),
                                              record)
            self.trace_epoch = record.version
            self._keys = CollectiveKeys(elastic_group_key(_GROUP_KEY, record.version))
        self._cross_device = CollectiveAllReduce(devices, num_workers, self._keys, self._hint,
                                                 options.timeout_seconds,
                                                 options.bytes_per_pack,
                                                 wait_all=record is not None)
        logger.info("MultiWorkerMirroredStrategy: worker %d of %d, devices %s", index,
                    num_workers, devices)

    @property
    def target(self) -> str:
        return self._server.target if self._server is not None else local_server().target

    @property
    def cluster_resolver(self) -> ClusterResolver:
        return self._resolver

    @property
    def server(self) -> Server | None:
        """This worker's own server (None in local mode: no cluster)."""
        return self._server

    def peer_tasks(self) -> list[tuple[str, int]]:
        """The other workers of the group, as (job, index); [] in local mode. The
        group of TF_CONFIG's cluster (an elastic group's tasks may not be in it)."""
        if self._server is None or self._elastic is not None:
            return []
        me = (self._resolver.task_type, self._resolver.task_id)
        return [t for t in _worker_jobs(self._resolver.cluster_spec()) if t != me]

    @property
    def is_chief(self) -> bool:
        return self._worker_index == 0

    @property
    def base_group_key(self) -> int:
        """The group key an elastic group's key is derived from."""
        return _GROUP_KEY

    @property
    def collective_keys(self) -> CollectiveKeys:
        """The keys of this strategy's (current) group."""
        return self._keys

    @property
    def elastic(self) -> ElasticController | None:
        """The elastic side (an elastic launch), else None."""
        return self._elastic

    def elastic_step(self, graph: Any) -> Agreement | None:
        """A traced step's membership agreement (elastic mode), else None:
        ``dt.function`` calls it once per trace that ran this strategy."""
        return None if self._elastic is None else self._elastic.agreement(graph)

    def regroup(self, index: int, num_workers: int, version: int) -> None:
        """Become worker ``index`` of ``num_workers`` of the group formed from
        membership ``version``: fresh collective keys, a fresh all-reduce, and
        a new trace epoch (``dt.function`` traces again)."""
        self._worker_index, self._num_workers = index, num_workers
        self._keys = CollectiveKeys(elastic_group_key(_GROUP_KEY, version))
        self._cross_device = CollectiveAllReduce(self._devices, num_workers, self._keys,
                                                 self._hint, self._options.timeout_seconds,
                                                 self._options.bytes_per_pack, wait_all=True)
        self.trace_epoch = version
        logger.info("MultiWorkerMirroredStrategy: worker %d of %d (membership version %d)",
                    index, num_workers, version)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        if self._elastic is None:
            return super().experimental_distribute_dataset(dataset, options)
        return ElasticDistributedDataset(self, dataset, self._elastic.use_iterator)

    def distribute_datasets_from_function(self, dataset_fn: Any, options: Any = None) -> Any:
        if self._elastic is not None:   # the per-worker batch kept: dataset_fn per group
            return ElasticDatasetsFromFunction(self, dataset_fn, self._elastic.use_iterator)
        return super().distribute_datasets_from_function(dataset_fn, options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def gather_all(self, values: list[Any], axis: int) -> Any:
        graph = get_default_graph()
        with graph.device(self._devices[0]):
            local = concat(values, axis)
            rank = local.shape.rank
            if axis != 0 and rank is None:
                raise ValueError("gather along an axis other than 0 needs the rank known")
            perm = None
            if axis % max(rank or 1, 1) != 0:
                perm = list(range(rank))
                perm[0], perm[axis % rank] = perm[axis % rank], perm[0]
                local = ops.transpose(local, perm)
        joined = self._cross_device.all_gather_across_workers(local)
        if perm is None:
            return joined
        with graph.device(self._devices[0]):
            return ops.transpose(joined, perm)

    async def initialize_variables(self, session: Any, missing: list[Any]) -> None:
        """First use: the chief initializes, every other worker receives its values."""
        containers: list[MirroredVariable] = []
        plain = []
        for v in missing:
            container = getattr(v, "distributed_container", None)
            if isinstance(container, MirroredVariable):
                if container not in containers:
                    containers.append(container)
            else:
                plain.append(v)
        if plain:
            await session.run([v.initializer for v in plain])
        if not containers:
            return
        if self._elastic is not None:   # the regroup broadcast, as a newcomer meets it
            await self._elastic.first_use(session, containers)
            return
        if self._num_workers == 1:
            await session.run([c.initializer for c in containers])
            return
        graph = session.graph
        ops_to_run = []
        if self.is_chief:
            await session.run([c.initializer for c in containers])
        # graph ops, also with eager values on (first use is outside any trace)
        with graph_mode(), graph.as_default(), graph.device(self._devices[0]):
            for c in containers:
                key = self._keys.instance_key(graph)
                if self.is_chief:
                    ops_to_run.append(collective_ops.broadcast_send(
                        c.primary.value(), c.shape, c.dtype, self._num_workers,
                        self._keys.group_key, key))
                else:
                    got = collective_ops.broadcast_recv(c.shape, c.dtype, self._num_workers,
                                                        self._keys.group_key, key)
                    ops_to_run += [comp.assign(got, read_value=False) for comp in c.values]
        await session.run(ops_to_run)
