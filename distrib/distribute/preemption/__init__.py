"""Preemption: ``dt.distribute.experimental.PreemptionCheckpointHandler``
(``handler``: restore on start, a save at the run every worker agrees on
after a notice, then exit) and its two halves below it (``signals``: the
termination notice, told to every peer, and the agreement collective).
Imports ``core`` and ``functions`` (the agreement is a ``dt.function``
step); a strategy takes only its group key from here.

Import the modules themselves; ``distrib.distribute`` re-exports the public names.
"""
