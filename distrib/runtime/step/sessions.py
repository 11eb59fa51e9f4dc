"""A master's sessions: what it keeps for each, and the checks on what a
client sends before anything changes.

A session (``SessionState``) holds its client's graph indexed by node name,
the plans made for it (``StepPlan``: one per distinct fetches, targets and
fed tensors, pruned, placed, partitioned and optimized once), the steps and
runs in flight (so that closing it ends them) and, for a remote client, who
opened it (so that it is freed once that client has been gone too long).
``TaskState`` is the master's view of one task: its incarnation and the
plans registered there.

A client's GraphDef (``index_graph``), config (``check_options``) and a
run's fetches, targets, feeds and options (``check_run``) are checked here, in full,
before the master changes anything: a malformed one is
``InvalidArgumentError`` (or ``NotFoundError`` for a tensor the graph does
not have) naming what is wrong, and the session is as it was.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from distrib.client.fetches import check_feed
from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.runtime.actors.system import caller_key
from distrib.runtime.step.plan import Partition, tensor_op

__all__ = ["StepPlan", "SessionState", "TaskState", "check_options", "check_run", "find_session",
           "index_graph", "split_task"]


@dataclass
class StepPlan:
    key: str
    parts: dict[str, Partition]
    fetches: list[str]
    peers: dict[str, str] = field(default_factory=dict)   # task -> address
    # how long the other tasks took to answer after this one's part ended, last
    # step (see kernel_pool.spin_until)
    tail_s: float | None = None

    @property
    def tasks(self) -> list[str]:
        return list(self.parts)


@dataclass
class SessionState:
    handle: str
    nodes: dict[str, dict[str, Any]]
    version: int
    config: dict[str, Any]
    plans: dict[tuple, StepPlan] = field(default_factory=dict)
    owner: tuple[str, int] | None = None        # the remote client that opened it
    collect: asyncio.TimerHandle | None = None  # set while that client is gone
    # steps in flight (step id -> their tasks) and runs in flight, so that
    # closing the session ends them instead of leaving them waiting forever
    steps: dict[int, list[str]] = field(default_factory=dict)
    runs: int = 0
    closed: bool = False
    drained: asyncio.Event | None = None


@dataclass
class TaskState:
    incarnation: int
    registered: set[str] = field(default_factory=set)


def find_session(sessions: dict[str, SessionState], handle: Any, task: str) -> SessionState:
    """The open session ``handle`` of a master (``task``); a client that
    comes back within the grace period keeps its sessions (their collection
    is called off)."""
    if not isinstance(handle, str):
        raise InvalidArgumentError(f"session handle must be a string, not {type(handle).__name__}")
    s = sessions.get(handle)
    if s is None:
        raise NotFoundError(f"session {handle} is not open on {task} (closed, its "
                            "client was gone too long, or the server restarted): open a "
                            "new Session", task=task)
    if s.collect is not None and s.owner == caller_key():
        s.collect.cancel()   # its client is back
        s.collect = None
    return s


def check_options(options: Any, what: str) -> None:
    """A session's config or a run's options: None, or a dict of known types."""
    if options is None:
        return
    if not isinstance(options, dict):
        raise InvalidArgumentError(f"{what} must be a dict (see dt.ConfigProto), "
                                   f"not {type(options).__name__}")
    timeout = options.get("operation_timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise InvalidArgumentError(f"{what}: operation_timeout_s must be a positive number of "
                                   f"seconds or None, not {timeout!r}")
    term = options.get("fencing_term")
    if term is not None and (isinstance(term, bool) or not isinstance(term, int) or term < 0):
        raise InvalidArgumentError(f"{what}: fencing_term must be a chief term (an int >= 0) "
                                   f"or None, not {term!r}")


def index_graph(graph_def: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A client's GraphDef checked and indexed by node name (nothing of the
    runtime's own ops, whose names start with ``_``)."""
    if not isinstance(graph_def, dict):
        raise InvalidArgumentError(f"a GraphDef must be a dict with a 'nodes' list, "
                                   f"not {type(graph_def).__name__}")
    nodes = graph_def.get("nodes")
    if not isinstance(nodes, list):
        raise InvalidArgumentError("malformed GraphDef: 'nodes' must be a list")
    out = {}
    for n in nodes:
        if not isinstance(n, dict) or not isinstance(n.get("name"), str) or "op" not in n:
            raise InvalidArgumentError(f"malformed GraphDef node: {str(n)[:200]}")
        if isinstance(n["op"], str) and n["op"].startswith("_"):
            # the runtime's own ops (sends, receives, fused kernels) are written
            # by the master and the optimizer, never taken from a client
            raise InvalidArgumentError(f"op {n['name']!r}: op type {n['op']!r} is internal to "
                                       "the runtime; a client graph cannot use it")
        n.setdefault("inputs", [])
        n.setdefault("attrs", {})
        out[n["name"]] = n
    return out


def check_run(nodes: dict[str, dict[str, Any]], fetches: Any, targets: Any, feeds: Any,
              options: Any) -> dict[str, Any]:
    """A run's arguments checked; its feeds keyed ``op:index``, each checked
    against its tensor's declared dtype and shape (``client.fetches.check_feed``)."""
    for what, names in (("fetches", fetches), ("targets", targets)):
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidArgumentError(f"run: {what} must be a list of tensor or op names")
    if not isinstance(feeds, dict) or not all(isinstance(k, str) for k in feeds):
        raise InvalidArgumentError("run: feeds must map tensor names ('x:0') to values")
    check_options(options, "options")
    out = {}
    for name, value in feeds.items():
        op, idx = tensor_op(name)
        node = nodes.get(op)
        if node is None:
            raise NotFoundError(f"cannot feed {name!r}: the graph has no such tensor")
        dts, shapes = node.get("output_dtypes") or [], node.get("output_shapes") or []
        out[f"{op}:{idx}"] = check_feed(name, value, dts[idx] if idx < len(dts) else None,
                                        shapes[idx] if idx < len(shapes) else None)
    return out


def split_task(task: str) -> tuple[str, int]:
    """``/job:J/task:T`` -> (J, T)."""
    parts = dict(p.split(":", 1) for p in task.strip("/").split("/"))
    return parts["job"], int(parts["task"])
