"""In-process evaluation: run a graph like ``sess.run`` without any server.

Meant for tests of the graph layer and of gradients; real programs use a
Session. It compiles the pruned graph as one partition and runs it with the
same executor a worker uses.
"""
from __future__ import annotations

import asyncio
from typing import Any

from distrib.errors import NotFoundError
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from distrib.runtime.step.plan import tensor_op

__all__ = ["evaluate"]


_LOCAL_VARIABLES = VariableStore("/job:local/task:0")


def evaluate(fetches: Any, feed_dict: dict | None = None, graph: Any = None, *,
             variables: VariableStore | None = None) -> Any:
    """Run ``fetches`` in this process, without a server, like ``sess.run``.

    Every op runs on this process's CPU whatever its device pin (soft
    placement); variables persist across calls in a module-level store (or
    ``variables``). Meant for tests of the graph layer and gradients; real
    programs use a Session.
    """
    from distrib.client.fetches import FetchPlan, check_feed, feed_name
    from distrib.runtime.step.plan import prune
    if graph is None:
        from distrib.framework.graph import get_default_graph
        graph = get_default_graph()
    gd = graph.as_graph_def()
    nodes = {n["name"]: n for n in gd["nodes"]}
    plan = FetchPlan(fetches)
    feeds: dict[str, Any] = {}
    for key, value in (feed_dict or {}).items():
        name = feed_name(key)
        op, idx = tensor_op(name)
        if op not in nodes:
            raise NotFoundError(f"cannot feed {name!r}: the graph has no such tensor")
        n = nodes[op]
        dts, shapes = n.get("output_dtypes") or [], n.get("output_shapes") or []
        feeds[name] = check_feed(name, value, dts[idx] if idx < len(dts) else None,
                                 shapes[idx] if idx < len(shapes) else None)
    order = prune(nodes, plan.tensors, plan.targets, feeds)
    part_nodes = [dict(nodes[n], device="") for n in order]
    fetch_names = [f"{tensor_op(t)[0]}:{tensor_op(t)[1]}" for t in plan.tensors]
    computed = [t for t in fetch_names if t not in feeds]
    compiled = CompiledPartition(part_nodes, computed, soft_placement=True, feeds=list(feeds))
    store = variables if variables is not None else _LOCAL_VARIABLES

    async def go() -> list[Any]:
        return await compiled.run(feeds, store)

    results = _run_coro(go())
    by_name = dict(zip(computed, results))
    return plan.build([feeds[t] if t in feeds else by_name[t] for t in fetch_names])


def _run_coro(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
