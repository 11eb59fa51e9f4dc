"""``dt.enable_eager_execution()``: install the eager runner, once.

Its own module because it joins the two halves: the context's flag
(:mod:`distrib.eager.context`) and the runner (:mod:`distrib.eager.execute`),
which reads that context.
"""
from __future__ import annotations

from distrib.eager import context
from distrib.eager.execute import EagerRunner
from distrib.framework.graph import set_eager_runner

__all__ = ["enable_eager_execution"]


def enable_eager_execution(config: object = None, device_policy: object = None,
                           execution_mode: object = None) -> None:
    """``dt.enable_eager_execution()`` (TF 1.x's ``tf.enable_eager_execution``).

    Graphs stay the default until this runs; from then on ops outside a
    graph the program entered, a ``dt.function``'s trace and a strategy's
    scope run at once (:mod:`distrib.eager.context`). TF's arguments are
    taken and ignored (one device policy: an op runs where its inputs or
    its device scope say, inputs copied there). A second call does nothing,
    as in TF."""
    if context.eager_enabled():
        return
    runner = EagerRunner()
    set_eager_runner(runner)
    context.mark_enabled(runner)
