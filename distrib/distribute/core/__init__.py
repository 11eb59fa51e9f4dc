"""The bottom wing of ``dt.distribute``: what every strategy shares. Its
values (``PerReplica``, ``Mirrored``, ``MirroredVariable``), distributed
datasets and their iterators (``input_lib``), how replicas' values are
combined (``cross_device_ops``), ``strategy.run`` for the mirrored
strategies (``mirrored_run``), and the ``Strategy`` API itself with its
replica context (``distribute_lib``). Imports no other wing.

Import the modules themselves; ``distrib.distribute`` re-exports the public names.
"""
