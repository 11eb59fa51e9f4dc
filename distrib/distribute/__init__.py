"""``dt.distribute``: distribution strategies on the graph runtime (TF's
``tf.distribute``): MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, their values and contexts, distributed datasets,
and ``dt.function``; ``Server`` is ``dt.Server`` itself (TF2's
``tf.distribute.Server``). Re-exports only."""
from __future__ import annotations

from distrib.cluster import resolvers as cluster_resolver
from distrib.distribute import checkpoint_steps, coordinator, experimental
from distrib.distribute.collective_strategy import (
    CommunicationImplementation,
    CommunicationOptions,
    MultiWorkerMirroredStrategy,
)
from distrib.distribute.cross_device_ops import (
    CrossDeviceOps,
    HierarchicalCopyAllReduce,
    NcclAllReduce,
    ReduceOp,
    ReductionToOneDevice,
)
from distrib.distribute.def_function import Function, function
from distrib.distribute.distribute_lib import (
    ReplicaContext,
    Strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from distrib.distribute.input_lib import DistributedIterator, InputContext
from distrib.distribute.mirrored_strategy import CentralStorageStrategy, MirroredStrategy
from distrib.distribute.parameter_server_strategy import ParameterServerStrategy, ShardedVariable
from distrib.distribute.values import DistributedValues, Mirrored, MirroredVariable, PerReplica
from distrib.server import Server

__all__ = ["Server", "cluster_resolver", "coordinator", "experimental", "ParameterServerStrategy",
           "ShardedVariable", "CommunicationImplementation",
           "CommunicationOptions", "MultiWorkerMirroredStrategy", "CrossDeviceOps",
           "HierarchicalCopyAllReduce", "NcclAllReduce", "ReduceOp", "ReductionToOneDevice",
           "Function", "function", "ReplicaContext", "Strategy", "get_replica_context",
           "get_strategy", "has_strategy", "in_cross_replica_context", "InputContext",
           "DistributedIterator",
           "CentralStorageStrategy", "MirroredStrategy", "DistributedValues", "Mirrored",
           "MirroredVariable", "PerReplica"]
