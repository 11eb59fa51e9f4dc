"""Small pieces the session managers share: whether a model is ready (its
variables initialized), a ``sess.run`` that takes an async Session or a
blocking one, and closing a session without hiding the real outcome."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from distrib.framework.graph import Graph
from distrib.ops.variables import Variable, is_variable_initialized

logger = logging.getLogger(__name__)

__all__ = ["ReadyCheck", "run_fetches", "close_quietly"]


class ReadyCheck:
    """Whether a set of variables is initialized: one ``IsVariableInitialized`` per variable.

    TF1's default ready op is ``report_uninitialized_variables()`` (a string
    vector of names); a user-supplied op of that kind works here too (ready
    when it returns an empty vector), as does a bool tensor (ready when all true).
    """

    def __init__(self, fetch: Any, names: Sequence[str] | None = None) -> None:
        self.fetch = fetch
        self._names = list(names) if names is not None else None

    @classmethod
    def of_variables(cls, graph: Graph, variables: Sequence[Variable]) -> ReadyCheck:
        with graph.as_default():
            flags = [is_variable_initialized(v) for v in variables]
        return cls(flags, [v.op.name for v in variables])

    async def not_ready(self, sess: Any) -> list[str]:
        """Names (or a description) of what is not ready; empty when ready."""
        if self.fetch is None or (isinstance(self.fetch, list) and not self.fetch):
            return []
        value = await run_fetches(sess, self.fetch)
        if self._names is not None:
            return [name for name, ok in zip(self._names, value) if not bool(ok)]
        array = np.asarray(value)
        if array.dtype.kind == "b":
            return [] if bool(array.all()) else ["(ready_op returned False)"]
        return [str(x) for x in array.reshape(-1)]


async def run_fetches(sess: Any, fetches: Any, feed_dict: dict | None = None,
                      options: dict | None = None) -> Any:
    """``sess.run`` of an async Session (awaited) or a SyncSession (a value)."""
    result = (sess.run(fetches, feed_dict=feed_dict) if options is None
              else sess.run(fetches, feed_dict=feed_dict, options=options))
    if inspect.isawaitable(result):
        result = await result
    return result


async def close_quietly(sess: Any) -> None:
    try:
        result = sess.close()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # closing must not hide the real outcome
        logger.debug("closing the session failed: %s", exc)

