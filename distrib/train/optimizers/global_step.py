"""The global step: one int64 scalar variable named ``global_step`` that counts training steps.

TF1 semantics: it lives in the ``GLOBAL_STEP`` collection (and
``GLOBAL_VARIABLES``), is not trainable, and is created at the root name
scope but under the caller's device scope, so inside
``dt.device(replica_device_setter(...))`` it lands on a ps task like every
other variable. Every replica's ``minimize(..., global_step=gs)`` then
increments the one shared counter.
"""
from __future__ import annotations

import logging
from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import Graph, GraphKeys, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.variables import Variable
from distrib.train.optimizers.optimizer import OptimizerArgumentError

logger = logging.getLogger(__name__)

__all__ = ["get_global_step", "create_global_step", "get_or_create_global_step",
           "find_global_step", "GLOBAL_STEP_NAME"]

GLOBAL_STEP_NAME = "global_step"


def _graph(graph: Graph | None) -> Graph:
    return graph if graph is not None else get_default_graph()


def get_global_step(graph: Graph | None = None) -> Any:
    """The graph's global step variable, or None.

    Looks in the ``GLOBAL_STEP`` collection first, then for a variable (else a
    tensor) named ``global_step:0`` (TF1's fallback). An ambiguous or non-integer global
    step is an error, as in TF.
    """
    graph = _graph(graph)
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        raise OptimizerArgumentError(
            f"Multiple tensors in global_step collection: {[getattr(v, 'name', v) for v in found]}; "
            "keep one global step per graph")
    if found:
        step = found[0]
    else:
        step = _by_name(graph)
        if step is None:
            return None
    _assert_integer(step)
    return step


def find_global_step(graph: Graph | None = None) -> Any:
    """The global step as TF's Supervisor finds it, or None: the first of the
    ``GLOBAL_STEP`` collection, else ``global_step`` by name when it is an
    integer. Unlike :func:`get_global_step` it does not insist on a scalar: TF's
    Supervisor counts with a global step of shape ``[1]`` too (Saver names the
    checkpoints by its one value)."""
    graph = _graph(graph)
    found = graph.get_collection(GraphKeys.GLOBAL_STEP)
    if len(found) > 1:
        logger.info("%d tensors in the global_step collection; using the first, %s",
                    len(found), getattr(found[0], "name", found[0]))
    step = found[0] if found else _by_name(graph)
    if step is None:
        return None
    dtype = getattr(step, "dtype", None)
    if dtype is None or not dtype.is_integer:
        logger.warning("found global step %s, but it is not an integer (%s); not counting with it",
                       getattr(step, "name", step), getattr(dtype, "name", dtype))
        return None
    return step


def _by_name(graph: Graph) -> Any:
    # the TF1 idiom Variable(0, name="global_step", trainable=False) puts it in
    # no GLOBAL_STEP collection: the variable itself, so optimizers can count
    for var in graph.get_collection(GraphKeys.GLOBAL_VARIABLES):
        if isinstance(var, Variable) and var.op.name == GLOBAL_STEP_NAME:
            return var
    try:
        return graph.get_tensor_by_name(GLOBAL_STEP_NAME + ":0")
    except Exception:  # NotFoundError: no op of that name
        return None


def _assert_integer(step: Any) -> None:
    dtype = getattr(step, "dtype", None)
    shape = getattr(step, "shape", None)
    if dtype is None or not dtype.is_integer:
        raise TypeError(f"Existing {getattr(step, 'name', step)} does not have integer type: "
                        f"{getattr(dtype, 'name', dtype)}; the global step must be an integer scalar")
    # TF's rule, shape [1] included: get_global_step wants a scalar, although
    # Saver.save and the Supervisor count with a one-element step too
    if shape is not None and shape.rank not in (None, 0) and shape.is_fully_defined():
        raise TypeError(f"Existing {step.name} is not a scalar: {shape}; the global step of "
                        "get_global_step() must be an integer scalar (TF's rule). Pass a step "
                        "of shape [1] to Saver.save / Supervisor(global_step=...) directly")


def create_global_step(graph: Graph | None = None) -> Variable:
    """Create the global step (int64 scalar, 0) in ``graph``; error if it already exists."""
    graph = _graph(graph)
    if get_global_step(graph) is not None:
        raise OptimizerArgumentError('"global_step" already exists; use get_or_create_global_step()')
    with graph.as_default(), graph.name_scope(None):
        step = Variable(lambda: ops.zeros([], dtype=dtypes.int64), trainable=False,
                        collections=[GraphKeys.GLOBAL_VARIABLES, GraphKeys.GLOBAL_STEP],
                        name=GLOBAL_STEP_NAME, dtype=dtypes.int64)
    logger.debug("created global step %s on %r", step.name, step.device)
    return step


def get_or_create_global_step(graph: Graph | None = None) -> Any:
    """The global step of ``graph``, created first if there is none."""
    graph = _graph(graph)
    step = get_global_step(graph)
    return step if step is not None else create_global_step(graph)
