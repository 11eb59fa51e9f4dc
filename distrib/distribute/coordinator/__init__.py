"""``dt.distribute.coordinator`` (TF's ``tf.distribute.experimental.coordinator``):
``ClusterCoordinator`` drives parameter-server training from one program
(``cluster_coordinator``; its pool under an elastic launch in
``elastic_pool``), a closure and its ``RemoteValue`` (``closure``), the
per-worker datasets and values (``data``), and a restarted ps's restore
(``ps``). Imports ``core`` and ``functions``; above ``strategies``, whose
``ParameterServerStrategy`` it is handed.

Re-exports the public names of TF's namespace only.
"""
from __future__ import annotations

from distrib.distribute.coordinator.closure import RemoteValue
from distrib.distribute.coordinator.cluster_coordinator import ClusterCoordinator
from distrib.distribute.coordinator.data import PerWorkerValues

__all__ = ["ClusterCoordinator", "RemoteValue", "PerWorkerValues"]
