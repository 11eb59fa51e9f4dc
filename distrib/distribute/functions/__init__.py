"""``dt.function``: a Python function traced once per input signature and run
as one step (``def_function``), its arguments' walks (``inputs``: the trace
key, the placeholders, a call's feeds; iterators as inputs), where a
function outside every strategy runs (``local_target``), and
``dt.train.Checkpoint``'s reads and assigns as ``dt.function`` steps
(``checkpoint_steps``). Imports ``core`` and ``elastic`` (an elastic
iterator is an input).

Import the modules themselves; ``distrib.distribute`` re-exports the public names.
"""
