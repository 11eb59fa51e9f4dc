"""``strategy.run`` for the mirrored strategies: the replica function built
once per local replica, with ``merge_call`` meeting points.

Each replica's call builds its ops under its device (and, after the first,
a ``replica_<i>`` name scope). ``merge_call(fn, args)`` is where the
replicas meet: every replica runs up to it, then ``fn`` runs once, in the
cross-replica context, with the replicas' arguments gathered into
``PerReplica`` values, and each replica goes on with its own part of the
result. TF builds each replica in its own thread for this and so do we: a
replica thread that reaches ``merge_call`` parks; when all have, the
caller's thread runs the merge function and wakes them again, one at a
time. Only one thread builds at any moment (the graph is not thread-safe
and need not be), and the order is fixed (replica 0, 1, ...), so every
worker of a multi-worker strategy builds the same graph with the same
collective keys.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from distrib.distribute.core.values import DistributedValues, PerReplica
from distrib.framework import distribution_context
from distrib.framework.graph import get_default_graph, name_scope

__all__ = ["run_replicas"]


class _Abandoned(Exception):
    """Raised in a replica parked at merge_call when another replica failed."""


class _Replica(threading.Thread):
    """One replica's build, run step by step from the caller's thread."""

    def __init__(self, context: Any, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 graph: Any, device: str, scope: str | None) -> None:
        super().__init__(name=f"replica-{context.local_index}", daemon=True)
        self.context = context
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.graph, self.device, self.scope = graph, device, scope
        self.state = graph.building_state()   # made in the caller's thread: its scopes
        self.go = threading.Event()        # the caller lets this replica build
        self.parked = threading.Event()    # the replica stopped: at merge_call, or done
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.merge: tuple[Callable, tuple, dict] | None = None   # what it waits to merge
        self.merge_result: Any = None
        self.abandoned = False            # another replica failed: stop building

    def run(self) -> None:
        self.go.wait()
        self.go.clear()
        try:
            # the caller's scopes (a coordinator's worker device, a name scope) hold here
            # too, as TF's replica threads copy them; then the replica's own device
            self.graph.adopt_building_state(self.state)
            with self.graph.as_default(), self.graph.device(self.device), \
                    distribution_context.enter(self.context.strategy, self.context):
                if self.scope:
                    with name_scope(self.scope):
                        self.result = self.fn(*self.args, **self.kwargs)
                else:
                    self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
        finally:
            self.done = True
            self.parked.set()

    def step(self) -> None:
        """Let the replica build until its next merge_call or its end."""
        self.parked.clear()
        self.go.set()
        self.parked.wait()

    def merge_call(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """In the replica's thread: park until the merge ran; its result for us."""
        self.merge = (fn, args, kwargs)
        self.parked.set()
        self.go.wait()
        self.go.clear()
        self.merge = None
        if self.abandoned:
            raise _Abandoned()
        return self.merge_result


def run_replicas(strategy: Any, contexts: list[Any], fn: Callable[..., Any],
                 args_per_replica: list[tuple], kwargs_per_replica: list[dict],
                 devices: list[str]) -> list[Any]:
    """Build ``fn`` once per replica; the replicas' results, in order."""
    graph = get_default_graph()
    threads = [_Replica(ctx, fn, a, k, graph, dev, None if i == 0 else f"replica_{i}")
               for i, (ctx, a, k, dev) in enumerate(zip(contexts, args_per_replica,
                                                          kwargs_per_replica, devices))]
    for ctx, t in zip(contexts, threads):
        ctx.replica_thread = t
        t.start()
    try:
        for t in threads:
            t.step()
        while True:
            errors = [t.error for t in threads if t.error is not None]
            if errors:
                raise errors[0]
            if all(t.done for t in threads):
                return [t.result for t in threads]
            waiting = [t for t in threads if t.merge is not None]
            if len(waiting) != len(threads):
                raise RuntimeError(
                    "some replicas called merge_call (or all_reduce, or apply_gradients) and "
                    "others ended without it: every replica must run the same code path")
            merge_fn, _, _ = waiting[0].merge
            per_args = _gather([t.merge[1] for t in threads], PerReplica)
            per_kwargs = _gather([t.merge[2] for t in threads], PerReplica)
            with graph.as_default(), distribution_context.enter(strategy, None):
                merged = merge_fn(strategy, *per_args, **per_kwargs)
            for i, t in enumerate(threads):
                t.merge_result = _pick(merged, i)
                t.step()
    finally:
        for t in threads:
            if not t.done:   # a failure elsewhere: its merge_call raises, it ends
                t.abandoned = True
                t.step()
        for ctx in contexts:
            ctx.replica_thread = None


def _gather(values: list[Any], per_replica: type) -> Any:
    """The replicas' arguments, position by position: one value where all are the
    same object, else a PerReplica of them."""
    first = values[0]
    if isinstance(first, tuple):
        return tuple(_gather([v[i] for v in values], per_replica) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _gather([v[k] for v in values], per_replica) for k in first}
    if all(v is first for v in values):
        return first
    return per_replica(values)


def _pick(merged: Any, index: int) -> Any:
    """Replica ``index``'s part of a merge function's result."""
    if isinstance(merged, DistributedValues):
        return merged.values[index]
    if isinstance(merged, tuple):
        return tuple(_pick(m, index) for m in merged)
    if isinstance(merged, list):
        return [_pick(m, index) for m in merged]
    if isinstance(merged, dict):
        return {k: _pick(v, index) for k, v in merged.items()}
    return merged
