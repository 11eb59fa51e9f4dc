"""The graph optimizer: the master rewrites each partition of a step once,
before it registers and caches it (TF's Grappler, run by its master on the
same place in the pipeline).

Passes, in order (each switchable, see :mod:`.options`):

1. common subgraph elimination: pure nodes computing the same thing merge
   (the ten thousand ``Const(1.0001)`` of a chain become one);
2. constant folding: pure CPU nodes whose inputs are all constants become
   constants, evaluated once by their own kernels;
3. arithmetic simplification: ``x * 1``, ``x / 1``, ``x + (-0.0)``,
   ``x - 0.0``, integer ``x + 0`` -> ``x``; integer chains of scalar
   multiplies -> one multiply; with ``AGGRESSIVE``, float ``x + 0.0`` and
   float scalar-multiply chains too (not bit-exact, as in TF);
4. dead-node pruning: pure nodes nothing needs any more go;
5. fusion ("remapping"): trees of exact elementwise float ops on the CPU
   (``+ - * /``, negation, abs, square, sqrt) become one ``_FusedElementwise``
   node run by a compiled kernel; with ``AGGRESSIVE``, exp, log, tanh and
   sigmoid too (a few ulp off numpy's own functions).

Every pass keeps the meaning of fetched, fed, stateful, random, send/receive,
collective and target nodes and every control dependency; all but the
aggressive rewrites give bit-for-bit the unoptimized results.
"""
from __future__ import annotations

import gc
import logging
from typing import Any, Iterable

from distrib.runtime.step.graph_optimizer.fusion import fuse_elementwise
from distrib.runtime.step.graph_optimizer.graph import View
from distrib.runtime.step.graph_optimizer.options import Passes, resolve_passes
from distrib.runtime.step.graph_optimizer.rewrites import (
    eliminate_common_subgraphs,
    fold_constants,
    prune_dead,
    simplify_arithmetic,
)
from distrib.runtime.step.plan import Node, Partition, tensor_op

__all__ = ["Passes", "resolve_passes", "optimize_nodes", "optimize_partitions"]

logger = logging.getLogger(__name__)


def optimize_nodes(nodes: list[Node], graph: dict[str, Node], preserve: set[str],
                   passes: Passes, fed: Iterable[str] = ()) -> list[Node]:
    """``nodes`` (one partition's, in topological order) optimized by
    ``passes``. ``graph`` is the session's whole graph (for the dtypes of fed
    tensors); ``preserve`` names the nodes that must keep name and value;
    ``fed`` the step's fed tensors this partition reads: their readers get
    the feed, so a producer of one still in the partition (a target, a
    control input) is neither their constant nor theirs to rewire."""
    fed = list(fed)
    preserve = preserve | {tensor_op(t)[0] for t in fed}

    def run(fn: Any, *args: Any) -> list[Node]:
        return fn(nodes, View(nodes, graph, preserve, fed), *args)

    if passes.common_subgraph_elimination:
        nodes = run(eliminate_common_subgraphs)
    if passes.constant_folding:
        nodes = run(fold_constants)
    if passes.arithmetic:
        before = nodes
        nodes = run(simplify_arithmetic, passes.aggressive_arithmetic)
        if passes.constant_folding and (len(nodes) != len(before) or any(
                a is not b for a, b in zip(nodes, before))):
            nodes = run(fold_constants)   # what the rewrites made constant
    if passes.pruning:
        nodes = run(prune_dead)
    if passes.fusion:
        nodes = run(fuse_elementwise, passes.aggressive_fusion)
        if passes.pruning:
            nodes = run(prune_dead)
    return nodes


def optimize_partitions(parts: dict[str, Partition], graph: dict[str, Node],
                        targets: Iterable[str], graph_options: Any) -> None:
    """Optimize each partition of a step in place (the master's hook)."""
    passes = resolve_passes(graph_options)
    if not passes.any:
        return
    keep = set(targets)
    # the passes make many small short-lived tuples and dicts beside a big
    # graph: the cyclic collector would rescan the graph for nothing
    collecting = gc.isenabled()
    gc.disable()
    try:
        for part in parts.values():
            preserve = keep | {tensor_op(t)[0] for t in part.fetches}
            before = len(part.nodes)
            part.nodes = optimize_nodes(part.nodes, graph, preserve, passes, part.feeds)
            logger.debug("%s: graph optimizer: %d -> %d nodes", part.task, before,
                         len(part.nodes))
    finally:
        if collecting:
            gc.enable()
