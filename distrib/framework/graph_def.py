"""GraphDef: the plain-data form of a graph that crosses the wire (docs/ops.md).

``Graph.as_graph_def`` writes every node with its requested device, attrs (dtypes as
names) and the static output dtypes and shapes, so a reader needs no op
registry to rebuild tensors: the master and workers can import graphs whose
ops (``_Send``/``_Recv``) this client never builds. Import sorts nodes by
their dependencies, so a GraphDef written in any order reads back.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.graph import Graph, Operation, Tensor, get_default_graph

__all__ = ["graph_from_def", "import_graph_def"]


def graph_from_def(graph_def: dict[str, Any]) -> Graph:
    """A new graph with exactly these nodes; its version is the GraphDef's."""
    graph = Graph()
    _import_nodes(graph, graph_def, prefix="", input_map={})
    graph.adopt_version(graph_def.get("version", graph.version))
    return graph


def import_graph_def(graph_def: dict[str, Any], input_map: dict[str, Tensor] | None = None,
                     return_elements: Sequence[str] | None = None,
                     name: str | None = None) -> list[Any] | None:
    """Import into the default graph under the scope ``name`` (default ``"import"``, as TF).

    ``input_map`` replaces imported tensors (by their GraphDef name, ``"x:0"``) with
    existing tensors; ``return_elements`` names ops or tensors to return.
    """
    graph = get_default_graph()
    with graph.name_scope(name if name is not None else "import") as scope:
        created = _import_nodes(graph, graph_def, prefix=scope, input_map=dict(input_map or {}))
    if return_elements is None:
        return None
    out = []
    for element in return_elements:
        op_name, _, index = element.partition(":")
        op = created.get(op_name)
        if op is None:
            raise NotFoundError(f"return element {element!r} is not in the imported GraphDef")
        out.append(op.outputs[int(index)] if index else op)
    return out


def _import_nodes(graph: Graph, graph_def: dict[str, Any], prefix: str,
                  input_map: dict[str, Tensor]) -> dict[str, Operation]:
    nodes = _checked_nodes(graph_def)
    created: dict[str, Operation] = {}
    for node in _topological(nodes):
        data, control = _split_inputs(node)
        inputs = [input_map[n] if n in input_map else _resolve(created, n, node["name"])
                  for n in data]
        specs = [(dtypes.as_dtype(d), s) for d, s in zip(node.get("output_dtypes", ()),
                                                        node.get("output_shapes", ()))]
        # an exact name ("name/"): imports bypass name uniquifying and the building scopes
        with graph.control_dependencies(None), graph.device(None):
            op = graph.create_op(node["op"], inputs, dict(node.get("attrs") or {}),
                                 name=prefix + node["name"] + "/", output_specs=specs,
                                 device=node.get("device") or "",
                                 control_inputs=[_resolve_op(created, c, node["name"])
                                                 for c in control])
        created[node["name"]] = op
    return created


def _checked_nodes(graph_def: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(graph_def, dict) or not isinstance(graph_def.get("nodes"), list):
        raise InvalidArgumentError("a GraphDef is a dict {'version': int, 'nodes': [...]}; "
                                   f"got {type(graph_def).__name__}")
    for node in graph_def["nodes"]:
        if not isinstance(node, dict) or "name" not in node or "op" not in node:
            raise InvalidArgumentError(f"GraphDef node {node!r} lacks 'name' or 'op'")
        if len(node.get("output_dtypes", ())) != len(node.get("output_shapes", ())):
            raise InvalidArgumentError(f"GraphDef node {node['name']!r}: output_dtypes and "
                                       "output_shapes differ in length")
    return graph_def["nodes"]


def _split_inputs(node: dict[str, Any]) -> tuple[list[str], list[str]]:
    inputs = list(node.get("inputs", ()))
    data = [i for i in inputs if not i.startswith("^")]
    control = [i[1:] for i in inputs if i.startswith("^")]
    return data, control


def _topological(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes ordered so that every node comes after its data and control inputs."""
    by_name = {n["name"]: n for n in nodes}
    order: list[dict[str, Any]] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done
    for root in nodes:
        stack = [(root["name"], False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                state[name] = 2
                order.append(by_name[name])
                continue
            if state.get(name) == 2:
                continue
            if state.get(name) == 1:
                raise InvalidArgumentError(f"GraphDef has a cycle through node {name!r}")
            state[name] = 1
            stack.append((name, True))
            for dep in _deps(by_name[name]):
                if dep in by_name and state.get(dep) != 2:
                    if state.get(dep) == 1:
                        raise InvalidArgumentError(f"GraphDef has a cycle through node {dep!r}")
                    stack.append((dep, False))
    return order


def _deps(node: dict[str, Any]) -> list[str]:
    return [i.lstrip("^").rsplit(":", 1)[0] if not i.startswith("^") else i[1:]
            for i in node.get("inputs", ())]


def _resolve(created: dict[str, Operation], name: str, consumer: str) -> Tensor:
    op_name, _, index = name.rpartition(":")
    op = _resolve_op(created, op_name, consumer)
    if not index.isdigit() or int(index) >= len(op.outputs):
        raise InvalidArgumentError(f"GraphDef node {consumer!r}: input {name!r} names an "
                                   f"output that {op_name!r} does not have")
    return op.outputs[int(index)]


def _resolve_op(created: dict[str, Operation], name: str, consumer: str) -> Operation:
    op = created.get(name)
    if op is None:
        raise InvalidArgumentError(f"GraphDef node {consumer!r} has input {name!r}, which is "
                                   "not a node of the GraphDef")
    return op
