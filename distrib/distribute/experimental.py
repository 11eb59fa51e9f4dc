"""``dt.distribute.experimental``: the names TF keeps under ``experimental``."""
from __future__ import annotations

from distrib.distribute import coordinator, partitioners
from distrib.distribute.collective_strategy import (
    CommunicationImplementation,
    CommunicationOptions,
    MultiWorkerMirroredStrategy,
)
from distrib.distribute.mirrored_strategy import CentralStorageStrategy
from distrib.distribute.parameter_server_strategy import ParameterServerStrategy
from distrib.distribute.preemption import PreemptionCheckpointHandler, TerminationConfig

CollectiveCommunication = CommunicationImplementation

__all__ = ["coordinator", "partitioners", "ParameterServerStrategy", "CommunicationImplementation", "CommunicationOptions", "CollectiveCommunication",
           "MultiWorkerMirroredStrategy", "CentralStorageStrategy", "PreemptionCheckpointHandler",
           "TerminationConfig"]
