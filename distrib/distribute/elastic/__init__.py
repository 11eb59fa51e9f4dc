"""Elastic ``MultiWorkerMirroredStrategy``: the group of workers changes at a
step boundary while training runs. The group and its membership records
(``group``), a regroup's collectives (``broadcast``), the agreement, the
regroup and a lost member's recovery (``controller``), and the elastic input
(``datasets``: the global batch cut for the group of the moment). Imports
``core`` only: the strategy (in ``strategies``) and ``dt.function`` (in
``functions``) are handed to it.

Import the modules themselves; ``distrib.distribute`` re-exports the public names.
"""
