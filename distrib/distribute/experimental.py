"""``dt.distribute.experimental``: the names TF keeps under ``experimental``."""
from __future__ import annotations

from distrib.distribute.collective_strategy import (CommunicationImplementation,
                                                    CommunicationOptions,
                                                    MultiWorkerMirroredStrategy)
from distrib.distribute.mirrored_strategy import CentralStorageStrategy

CollectiveCommunication = CommunicationImplementation

__all__ = ["CommunicationImplementation", "CommunicationOptions", "CollectiveCommunication",
           "MultiWorkerMirroredStrategy", "CentralStorageStrategy"]
