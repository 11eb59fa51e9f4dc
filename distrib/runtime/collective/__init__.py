"""Collectives between tasks: group membership, one instance per collective
op, the ring for big tensors and one round for small ones. Imports ``core``
and ``actors``."""
