"""GPU fusion: patterns of a partition's GPU nodes replaced by one fused op
before the partition compiles, so a step launches one kernel where the graph
has two (each launch costs tens of microseconds through numba, more than the
math of a small elementwise op).

Only patterns whose inner result nobody else reads are fused: the inner node
is then dropped, the outer one keeps its name (its consumers, fetches and
traces see the same tensor). Patterns (each fused op's GPU kernel is in
:mod:`kernels.cuda.elementwise`; the other fused chains of the training path are single
kernels already: ``ReluGrad``, ``SparseSoftmaxCrossEntropyWithLogits`` and
``SoftmaxCrossEntropyWithLogits`` (loss and gradient in one pass), each
optimizer's ``Apply*`` update):

- ``Relu(Add(x, b))`` and ``Relu(BiasAdd(x, b))`` -> ``_FusedBiasRelu(x, b)``.

Pure Python on the GraphDef's node dicts; numba is not imported here. The
runtime calls :func:`fuse_gpu_nodes` only for a task that has GPUs.
"""
from __future__ import annotations

from typing import Any

__all__ = ["fuse_gpu_nodes", "FUSED_BIAS_RELU"]

FUSED_BIAS_RELU = "_FusedBiasRelu"
_BIAS_OPS = ("Add", "BiasAdd")


def _gpu_index(node: dict[str, Any]) -> int | None:
    dev = node.get("device") or ""
    _, sep, local = dev.rpartition("/device:")
    kind, _, idx = local.partition(":")
    if not sep or kind.upper() != "GPU":
        return None
    return int(idx) if idx.isdigit() else 0


def _tensor_node(ref: str) -> tuple[str, int]:
    name, _, out = ref.partition(":")
    return name, int(out) if out.isdigit() else 0


def fuse_gpu_nodes(nodes: list[dict[str, Any]], fetches: list[str],
                   gpu_count: int, feeds: Any = ()) -> list[dict[str, Any]]:
    """``nodes`` with the patterns above fused where both nodes run on one of
    the task's ``gpu_count`` GPUs; the same list when nothing is fused. A
    tensor in ``feeds`` (fed: its readers get the feed) joins no fusion."""
    if gpu_count <= 0:
        return nodes
    by_name = {n["name"]: n for n in nodes}
    readers: dict[str, int] = {}   # node name -> data and control references to it
    for n in nodes:
        for ref in n["inputs"]:
            name = ref[1:] if ref.startswith("^") else _tensor_node(ref)[0]
            readers[name] = readers.get(name, 0) + 1
    fetched = {_tensor_node(f)[0] for f in fetches} | {_tensor_node(f)[0] for f in feeds}
    dropped: set[str] = set()
    replaced: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if n["op"] != "Relu" or len(n["inputs"]) != 1 or n["inputs"][0].startswith("^"):
            continue
        gpu = _gpu_index(n)
        if gpu is None or gpu >= gpu_count:
            continue
        src, out = _tensor_node(n["inputs"][0])
        inner = by_name.get(src)
        if (inner is None or out != 0 or inner["op"] not in _BIAS_OPS or src in fetched
                or src in dropped or readers.get(src) != 1 or _gpu_index(inner) != gpu
                or len(inner["inputs"]) != 2
                or any(r.startswith("^") for r in inner["inputs"])
                or inner.get("attrs", {}).get("data_format", "NHWC") != "NHWC"):
            continue
        dropped.add(src)
        replaced[n["name"]] = {**n, "op": FUSED_BIAS_RELU, "inputs": list(inner["inputs"]),
                               "attrs": {**n.get("attrs", {}), "fused": [inner["name"], n["name"]],
                                         "bias_add": inner["op"] == "BiasAdd"}}
    if not replaced:
        return nodes
    return [replaced.get(n["name"], n) for n in nodes if n["name"] not in dropped]
