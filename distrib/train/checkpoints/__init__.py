"""Checkpoints, the bottom wing of ``dt.train``: the trackable protocol and the
object graph, the one-file checkpoint format and the ``checkpoint`` state file,
``Saver`` (TF1), ``Checkpoint`` and ``CheckpointManager`` (TF2), the reader,
who writes a multi-worker save, and ``readiness`` (are the variables
initialized or restored?). Imports no other wing: optimizers are trackable
objects, and every wing above saves or restores through this one.

Import the modules themselves; ``distrib.train`` re-exports the public names.
"""
