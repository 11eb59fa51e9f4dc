"""The eager switch: ``dt.enable_eager_execution()`` and ``dt.executing_eagerly()``.

Graphs stay the default, so TF1 programs run as written; one call turns on
eager values for the rest of the process (TF 1.x's spelling; TF offers no
way back either). From then on an op built on the process-wide default
graph runs at once (:mod:`distrib.eager.execute`) and returns an
:class:`~distrib.eager.tensor.EagerTensor`, except where a graph is being
built on purpose:

* inside a graph the program entered (``with g.as_default():``): its ops
  go into ``g`` as in TF1 (``Graph.create_op`` hands only the process-wide
  graph's ops to the eager runner);
* while a ``dt.function`` traces (``auto_deps.tracing()``): its body is a
  graph, run as one step per call;
* inside a distribution strategy's scope or ``run``: the strategy places
  the variables made there on its devices and tasks, so what reads them
  must be graph ops too (TF2 keeps eager ops there; here the scope builds,
  as TF1's would, and ``await v.read_value()`` reads a placed variable);
* inside :func:`graph_mode` (the runtime's own graph building).

:func:`~distrib.eager.switch.enable_eager_execution` installs the runner.
The trace counter is process-wide (a trace's replica threads build on its
behalf), so while one thread traces a ``dt.function`` another thread's
ops build too: trace before starting eager threads, or enter a graph.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from distrib.framework import auto_deps, distribution_context
from distrib.framework.graph import get_default_graph, is_process_graph

__all__ = ["executing_eagerly", "graph_mode", "eager_enabled", "building_graph", "mark_enabled",
           "recording", "count_recording", "runner"]


class _Local(threading.local):
    def __init__(self) -> None:
        self.graph_mode = 0   # >0: this thread builds graph ops (graph_mode())


_local = _Local()
_enabled: list[bool] = [False]
_recording: list[int] = [0]   # tapes recording eager ops, in every thread (distrib.eager.tape)


def recording() -> bool:
    """Whether any tape records eager ops (the operators' fast path then steps aside)."""
    return _recording[0] > 0


def count_recording(delta: int) -> None:
    """A tape started (+1) or stopped (-1) recording."""
    _recording[0] += delta


_runner: list = []


def mark_enabled(runner: object) -> None:
    """Record that eager execution is on, through ``runner`` (installed by
    :mod:`distrib.eager.switch`)."""
    _runner[:] = [runner]
    _enabled[0] = True


def runner() -> object:
    """The eager runner (``distrib.eager.execute.EagerRunner``); RuntimeError before
    ``dt.enable_eager_execution()``."""
    if not _runner:
        raise RuntimeError("eager execution is off: call dt.enable_eager_execution() first")
    return _runner[0]


def eager_enabled() -> bool:
    """Whether ``enable_eager_execution`` ran in this process."""
    return _enabled[0]


def building_graph() -> bool:
    """Whether an op built on the process-wide graph now is a graph op even
    with eager execution on (a trace, a strategy's scope, :func:`graph_mode`)."""
    return (_local.graph_mode > 0 or auto_deps.tracing()
            or distribution_context.current() is not None)


def executing_eagerly() -> bool:
    """``dt.executing_eagerly()``: whether an op built here and now runs at once."""
    return _enabled[0] and not building_graph() and is_process_graph(get_default_graph())


@contextlib.contextmanager
def graph_mode() -> Iterator[None]:
    """Ops built on the process-wide graph inside are graph ops, eager on or off."""
    _local.graph_mode += 1
    try:
        yield
    finally:
        _local.graph_mode -= 1
