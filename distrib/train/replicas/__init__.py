"""Between-graph replication, TF1's parameter-server tools: where a replica's
variables go (``replica_device_setter``) and how replicas' gradients meet
(``SyncReplicasOptimizer``: accumulators, a token queue, and a chief queue
runner that is a session hook). The top wing: it imports ``optimizers`` and
``sessions``.

Import the modules themselves; ``distrib.train`` re-exports the public names.
"""
