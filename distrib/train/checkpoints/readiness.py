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

__all__ = ["ReadyCheck", "not_ready", "run_fetches", "close_quietly"]


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
        if self._names is None:
            return await not_ready(sess, self.fetch)
        value = await run_fetches(sess, self.fetch)
        return [name for name, ok in zip(self._names, value) if not bool(ok)]


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


def _describe(t: Any) -> str:
    op = getattr(t, "op", None)
    if op is not None and getattr(op, "type", None) == "IsVariableInitialized":
        try:
            return str(op.get_attr("var"))
        except Exception:  # an attr missing: fall back to the tensor's name
            pass
    return getattr(t, "name", repr(t))


async def not_ready(sess: Any, ready_op: Any) -> list[str]:
    """What ``ready_op`` reports as not ready (variable names); empty when ready."""
    if ready_op is None or (isinstance(ready_op, (list, tuple)) and not ready_op):
        return []
    value = await run_fetches(sess, ready_op)
    parts = zip(ready_op, value) if isinstance(ready_op, (list, tuple)) else [(ready_op, value)]
    missing: list[str] = []
    for t, v in parts:
        if v is None:   # an op: ran, so ready
            continue
        array = np.asarray(v)
        if array.dtype.kind == "b":
            if not bool(array.all()):
                missing.append(_describe(t))
        else:           # TF's kind: the names of what is uninitialized
            missing.extend(x.decode() if isinstance(x, bytes) else str(x)
                           for x in array.reshape(-1))
    return missing
