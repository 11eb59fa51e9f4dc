"""What a ``Supervisor`` finds or makes in its graph when it is built, as TF1's does.

``SupervisorOps.find`` resolves each argument left at ``USE_DEFAULT``: the
ready checks (every global and local variable initialized; the global ones
before the local init op runs), ``init_op`` (the ``INIT_OP`` collection's, else
``global_variables_initializer()``), ``local_init_op`` (the
``LOCAL_INIT_OP`` collection's, else one for the local variables, if any),
the saver (the ``SAVERS`` collection's, else a new ``Saver`` when there are
global variables) and the global step. Then TF's check for replicas: a
non-chief refuses a variable with no device, a private copy that would never
sync (``SupervisorSetupError``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework.graph import Graph, GraphKeys
from distrib.ops.variables import global_variables_initializer, local_variables_initializer
from distrib.train.checkpoints.readiness import ReadyCheck
from distrib.train.checkpoints.saver import Saver
from distrib.train.optimizers.global_step import find_global_step

__all__ = ["USE_DEFAULT", "SupervisorOps", "SupervisorSetupError", "verify_replica_variables"]

USE_DEFAULT = 0   # TF's Supervisor.USE_DEFAULT: "find or make it"


class SupervisorSetupError(InvalidArgumentError, ValueError):
    """A Supervisor built over a graph it cannot supervise. It is also a
    ``ValueError``, which is what TF1 raises, so ported code keeps working."""


@dataclass
class SupervisorOps:
    """The graph's pieces a Supervisor runs (see the module header)."""

    ready: ReadyCheck
    ready_for_local_init: ReadyCheck
    init_op: Any
    local_init_op: Any
    saver: Any
    global_step: Any

    @classmethod
    def find(cls, graph: Graph, *, ready_op: Any, ready_for_local_init_op: Any, init_op: Any,
             local_init_op: Any, saver: Any, global_step: Any) -> SupervisorOps:
        """Resolve each ``USE_DEFAULT`` argument in ``graph`` (made the default by the caller)."""
        global_vars = graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
        all_vars = global_vars + graph.get_collection(GraphKeys.LOCAL_VARIABLES)
        ready = ReadyCheck.of_variables(graph, all_vars) if ready_op is USE_DEFAULT \
            else ReadyCheck(ready_op)
        ready_for_local_init = ReadyCheck.of_variables(graph, global_vars) \
            if ready_for_local_init_op is USE_DEFAULT else ReadyCheck(ready_for_local_init_op)
        if init_op is USE_DEFAULT:
            found = graph.get_collection(GraphKeys.INIT_OP)
            init_op = found[0] if found else global_variables_initializer()
            if not found:
                graph.add_to_collection(GraphKeys.INIT_OP, init_op)
        if local_init_op is USE_DEFAULT:
            found = graph.get_collection(GraphKeys.LOCAL_INIT_OP)
            has_locals = bool(graph.get_collection(GraphKeys.LOCAL_VARIABLES))
            local_init_op = found[0] if found else (local_variables_initializer() if has_locals else None)
        if saver is USE_DEFAULT:
            found = graph.get_collection(GraphKeys.SAVERS)
            saver = found[0] if found else None
            if saver is None and global_vars:
                saver = Saver()
                graph.add_to_collection(GraphKeys.SAVERS, saver)
        # TF's Supervisor: the GLOBAL_STEP collection's first, else an integer
        # "global_step"; a step of shape [1] counts as well as a scalar
        if global_step is USE_DEFAULT:
            global_step = find_global_step(graph)
        return cls(ready, ready_for_local_init, init_op, local_init_op, saver, global_step)


def verify_replica_variables(graph: Graph) -> None:
    """TF's check: a non-chief means replicas, and replicas share a variable only
    when it is pinned to a task (a ps); an unpinned one would be placed on
    each replica's own task, a private copy that silently never syncs."""
    unpinned = list(dict.fromkeys(
        op.attrs.get("var") or op.name for op in graph.get_operations()
        if op.type == "VariableV2" and not op.device))
    if unpinned:
        raise SupervisorSetupError(
            f"When using replicas (is_chief=False), all variables must have their device "
            f"set; these have none: {unpinned}. Build them under "
            "dt.device(dt.train.replica_device_setter(cluster=...)) or dt.device("
            "'/job:ps/task:0') so that every replica shares them")
