"""The ``ClusterCoordinator``'s recovery of a restarted ps
(``distrib.distribute.coordinator.cluster_coordinator``): its variables brought back from the
newest good checkpoint of the coordinator's ``checkpoint_dir``, else from
their initial values."""
from __future__ import annotations

import logging
from typing import Any

from distrib.distribute.functions.def_function import session_for
from distrib.errors import OpError
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.ops.variables import is_variable_initialized
from distrib.train.checkpoints import state_file
from distrib.train.checkpoints.saver import Saver

logger = logging.getLogger(__name__)

__all__ = ["restore_ps"]


async def restore_ps(strategy: Any, task: str, checkpoint_dir: str | None) -> None:
    """Bring back the variables of a restarted ps: the newest good checkpoint,
    else their initial values. Nothing to do when they are initialized."""
    graph = get_default_graph()
    on_task = [v for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES)
               if task in (v.device or "")]
    if not on_task:
        return
    session = await session_for(graph, strategy.target)
    with graph.as_default():
        flags = [is_variable_initialized(v) for v in on_task]
    if all(bool(f) for f in await session.run(flags)):
        return
    if checkpoint_dir:
        with graph.as_default():
            saver = Saver(var_list=on_task)
        for path in state_file.checkpoint_candidates(checkpoint_dir):
            try:
                await saver.restore(session, path, only_task=task)
                logger.warning("restored %s from %s", task, path)
                return
            except OpError as exc:
                logger.warning("checkpoint %s unusable for %s: %s", path, task, exc)
    await session.run([v.initializer for v in on_task])
    logger.warning("no checkpoint for %s: its variables start again from their initial "
                   "values", task)
