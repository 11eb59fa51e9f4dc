"""The strategies: ``MirroredStrategy`` and ``CentralStorageStrategy``
(``mirrored``), ``MultiWorkerMirroredStrategy`` (``collective``; elastic
under an elastic launch), and ``ParameterServerStrategy`` with
``ShardedVariable`` and the partitioners (``parameter_server``). Imports
``core``, ``elastic``, ``functions`` and ``preemption`` (the agreement's
group key).

Import the modules themselves; ``distrib.distribute`` re-exports the public names.
"""
