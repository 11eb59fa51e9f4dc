"""``dt.distribute.experimental``: the names TF keeps under ``experimental``,
the top wing of ``dt.distribute``: re-exports only, from every wing below
(``partitioners``: ``dt.distribute.experimental.partitioners``)."""
from __future__ import annotations

from distrib.distribute import coordinator
from distrib.distribute.experimental import partitioners
from distrib.distribute.preemption.handler import PreemptionCheckpointHandler, TerminationConfig
from distrib.distribute.strategies.collective import (
    CommunicationImplementation,
    CommunicationOptions,
    MultiWorkerMirroredStrategy,
)
from distrib.distribute.strategies.mirrored import CentralStorageStrategy
from distrib.distribute.strategies.parameter_server import ParameterServerStrategy

CollectiveCommunication = CommunicationImplementation

__all__ = ["coordinator", "partitioners", "ParameterServerStrategy", "CommunicationImplementation",
           "CommunicationOptions", "CollectiveCommunication", "MultiWorkerMirroredStrategy",
           "CentralStorageStrategy", "PreemptionCheckpointHandler", "TerminationConfig"]
