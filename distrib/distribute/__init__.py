"""``dt.distribute``: distribution strategies on the graph runtime (TF's
``tf.distribute``): MirroredStrategy, MultiWorkerMirroredStrategy,
CentralStorageStrategy, their values and contexts, distributed datasets,
and ``dt.function``; ``Server`` is ``dt.Server`` itself (TF2's
``tf.distribute.Server``). Re-exports only."""
from __future__ import annotations

from distrib.cluster import resolvers as cluster_resolver
from distrib.distribute import coordinator, experimental
from distrib.distribute.core.cross_device_ops import (
    CrossDeviceOps,
    HierarchicalCopyAllReduce,
    NcclAllReduce,
    ReduceOp,
    ReductionToOneDevice,
)
from distrib.distribute.core.distribute_lib import (
    ReplicaContext,
    Strategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from distrib.distribute.core.input_lib import DistributedIterator, InputContext
from distrib.distribute.core.values import DistributedValues, Mirrored, MirroredVariable, PerReplica
from distrib.distribute.functions import checkpoint_steps
from distrib.distribute.functions.def_function import Function, function
from distrib.distribute.strategies.collective import (
    CommunicationImplementation,
    CommunicationOptions,
    MultiWorkerMirroredStrategy,
)
from distrib.distribute.strategies.mirrored import CentralStorageStrategy, MirroredStrategy
from distrib.distribute.strategies.parameter_server import ParameterServerStrategy, ShardedVariable
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
