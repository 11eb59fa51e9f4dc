"""A checkpoint's object graph: the walk of the Python objects, its keys, and
the copy of it that the file keeps.

The walk is TF's (``graph_view.py``, ``save_util.py``): breadth first from the
root over ``trackable_children()``, so each object's path is its shortest one
(first found); an object reached twice is one node with two edges. Keys are
TF2's:

* a variable: ``<path>/.ATTRIBUTES/VARIABLE_VALUE``, its path's names escaped
  as TF escapes them (``.`` -> ``..``, ``/`` -> ``.S``), e.g.
  ``model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE``;
* an optimizer's slot: ``<variable's path>/.OPTIMIZER_SLOT/<optimizer's
  path>/<slot name>/.ATTRIBUTES/VARIABLE_VALUE``, so a slot follows its
  variable, not the slot variable's name;
* the graph itself: the scalar string tensor ``_CHECKPOINTABLE_OBJECT_GRAPH``
  (JSON here, a proto in TF): per node its children (name, node), its
  attributes (name, key) and an optimizer's slots (variable node, slot name,
  slot node). A restore walks it beside the live objects, which is how a
  value is found for an object whatever its variables are called, and how
  what did not match is named.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distrib.errors import DataLossError
from distrib.train.checkpoints import trackable

__all__ = ["OBJECT_GRAPH_KEY", "VALUE_ATTRIBUTE", "Node", "SavedGraph", "LiveGraph", "walk",
           "escape"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VALUE_ATTRIBUTE = "VARIABLE_VALUE"
_ATTRIBUTES = ".ATTRIBUTES"
_SLOT = ".OPTIMIZER_SLOT"


def escape(name: str) -> str:
    """A local name as a key segment (TF's ``_escape_local_name``)."""
    return name.replace(".", "..").replace("/", ".S")


def _prefix(path: tuple[str, ...]) -> str:
    return "/".join(escape(n) for n in path)


def value_key(path: tuple[str, ...]) -> str:
    prefix = _prefix(path)
    return f"{prefix}/{_ATTRIBUTES}/{VALUE_ATTRIBUTE}" if prefix else \
        f"{_ATTRIBUTES}/{VALUE_ATTRIBUTE}"


def slot_key(variable_path: tuple[str, ...], optimizer_path: tuple[str, ...],
             slot_name: str) -> str:
    return (f"{_prefix(variable_path)}/{_SLOT}/{_prefix(optimizer_path)}/{escape(slot_name)}"
            f"/{_ATTRIBUTES}/{VALUE_ATTRIBUTE}")


@dataclass
class Node:
    """One object: its edges, its saved attributes, an optimizer's slots."""

    children: list[tuple[str, int]] = field(default_factory=list)
    attributes: list[tuple[str, str]] = field(default_factory=list)   # (name, key)
    slots: list[tuple[int, str, int]] = field(default_factory=list)   # (var, slot, slot node)

    @property
    def key(self) -> str | None:
        return self.attributes[0][1] if self.attributes else None


class SavedGraph:
    """The object graph a checkpoint file holds (node 0 is the root)."""

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self._names: dict[int, str] | None = None

    def to_tensor(self) -> np.ndarray:
        doc = {"version": 1, "nodes": [
            {"children": n.children, "attributes": n.attributes, "slots": n.slots}
            for n in self.nodes]}
        array = np.empty((), dtype=object)
        array[()] = json.dumps(doc, separators=(",", ":")).encode("utf-8")
        return array

    @classmethod
    def from_tensor(cls, value: Any, path: str) -> SavedGraph:
        raw = np.asarray(value, dtype=object).reshape(-1)
        try:
            item = raw[0]
            doc = json.loads(item.decode("utf-8") if isinstance(item, bytes) else item)
            nodes = [Node([(str(a), int(b)) for a, b in d["children"]],
                          [(str(a), str(b)) for a, b in d["attributes"]],
                          [(int(a), str(b), int(c)) for a, b, c in d["slots"]])
                     for d in doc["nodes"]]
        except (IndexError, KeyError, TypeError, ValueError, UnicodeDecodeError):
            raise DataLossError(f"Checkpoint file {path!r}: its object graph "
                                f"({OBJECT_GRAPH_KEY}) does not decode") from None
        count = len(nodes)
        if not nodes or any(not 0 <= i < count for n in nodes
                            for i in [c for _, c in n.children] + [s for a, _, b in n.slots
                                                                  for s in (a, b)]):
            raise DataLossError(f"Checkpoint file {path!r}: its object graph names nodes "
                                "it does not have")
        return cls(nodes)

    def node_names(self) -> dict[int, str]:
        """Node -> TF's pretty name: ``(root).model.layer_with_weights-0.kernel``;
        a slot: ``(root).optimizer's state 'm' for (root).model...kernel``."""
        if self._names is not None:
            return self._names
        names = {0: "(root)"}
        queue = deque([0])
        while queue:
            i = queue.popleft()
            for local, child in self.nodes[i].children:
                if child not in names:
                    names[child] = f"{names[i]}.{local}"
                    queue.append(child)
        for i, node in enumerate(self.nodes):
            for var, slot, slot_node in node.slots:
                names[slot_node] = (f"{names.get(i, f'node {i}')}'s state {slot!r} for "
                                    f"{names.get(var, f'node {var}')}")
        self._names = names
        return names

    def name(self, node: int) -> str:
        return self.node_names().get(node, f"node {node}")


class LiveGraph:
    """A walk of the Python objects: node -> object, path, and the graph to save."""

    def __init__(self) -> None:
        self.objects: list[Any] = []
        self.paths: list[tuple[str, ...]] = []
        self.nodes: list[Node] = []
        self._index: dict[tuple[str, int], int] = {}

    def add(self, obj: Any, path: tuple[str, ...]) -> tuple[int, bool]:
        """The node of ``obj`` and whether it is new."""
        ident = trackable.identity(obj)
        found = self._index.get(ident)
        if found is not None:
            return found, False
        self._index[ident] = len(self.objects)
        self.objects.append(obj)
        self.paths.append(path)
        self.nodes.append(Node())
        return len(self.objects) - 1, True

    def values(self) -> list[tuple[str, Any]]:
        """``(key, value object)`` of every saved value, in node order."""
        return [(node.key, obj) for node, obj in zip(self.nodes, self.objects)
                if node.key is not None]

    def name(self, node: int) -> str:
        return ".".join(("(root)", *self.paths[node]))

    def saved(self) -> SavedGraph:
        return SavedGraph(self.nodes)


def walk(root: Any) -> LiveGraph:
    """The object graph reachable from ``root`` (module header)."""
    graph = LiveGraph()
    graph.add(root, ())
    queue = deque([0])
    while queue:
        i = queue.popleft()
        obj = graph.objects[i]
        if trackable.is_value(obj):
            graph.nodes[i].attributes.append((VALUE_ATTRIBUTE, value_key(graph.paths[i])))
        for name, child in trackable.children(obj).items():
            j, new = graph.add(child, graph.paths[i] + (name,))
            graph.nodes[i].children.append((name, j))
            if new:
                queue.append(j)
    _add_slots(graph)
    return graph


def _add_slots(graph: LiveGraph) -> None:
    """Each optimizer's slots of the variables in the graph, as extra nodes."""
    count = len(graph.objects)
    variables = [i for i in range(count) if trackable.is_value(graph.objects[i])]
    for i in range(count):
        optimizer = graph.objects[i]
        names = getattr(optimizer, "checkpoint_slot_names", None)
        if not callable(names):
            continue
        for slot_name in names():
            for v in variables:
                slot = optimizer.checkpoint_slot(graph.objects[v], slot_name)
                if slot is None:
                    continue
                j, new = graph.add(slot, ())
                if new:
                    graph.paths[j] = graph.paths[v] + (_SLOT,) + graph.paths[i] + (slot_name,)
                    graph.nodes[j].attributes.append(
                        (VALUE_ATTRIBUTE, slot_key(graph.paths[v], graph.paths[i], slot_name)))
                graph.nodes[i].slots.append((v, slot_name, j))
