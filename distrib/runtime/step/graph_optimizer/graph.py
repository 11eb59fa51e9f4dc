"""A partition's nodes as the passes see them: who reads whom, which nodes
must stay (fetched, targets, anything with an effect), what a tensor's
declared dtype and shape are, and the value of a constant.

The passes work on the partition's node dicts (plain GraphDef nodes, see
``docs/ops.md``) in their topological order; a pass that changes a node
puts a new dict in its place (the session's graph keeps its own), and the
attrs dicts are never written.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

import kernels
from distrib.framework.op_def import find_op_def
from distrib.runtime.step.plan import Node, tensor_op
from kernels.cpu.math import RANDOM_OPS

__all__ = ["View", "is_pure", "on_cpu", "attrs_key", "dtype_name", "MAX_CONSTANT_BYTES"]

# TF's limit on a folded constant (constant_folding.cc): bigger results are
# computed at run time rather than shipped in the graph
MAX_CONSTANT_BYTES = 10 << 20


def is_pure(node: Node) -> bool:
    """Whether ``node`` is a function of its inputs alone: the registry runs
    it, it touches no state and draws no random numbers."""
    d = find_op_def(node["op"])
    return (d is not None and d.runs_kernel and not d.has_side_effects and not d.is_stateful
            and not d.is_collective and node["op"] not in RANDOM_OPS
            and not node["op"].startswith("_"))


def on_cpu(node: Node) -> bool:
    dev = node.get("device") or ""
    _, sep, local = dev.rpartition("/device:")
    return not sep or local.upper().startswith("CPU")


def attrs_key(value: Any) -> Any:
    """A hashable stand-in for an attrs value, equal only for equal values
    (arrays by dtype, shape and bytes; floats by repr, so 0.0 and -0.0
    differ and NaN equals itself)."""
    if isinstance(value, np.ndarray):
        return ("nd", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        if not value:
            return ("d",)
        return ("d", tuple(sorted((k, attrs_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("l", tuple(attrs_key(v) for v in value))
    if isinstance(value, (float, np.floating)):
        return ("f", type(value).__name__, repr(value))
    if isinstance(value, (np.generic,)):
        return ("g", type(value).__name__, repr(value))
    return (type(value).__name__, repr(value))


class View:
    """Lookups on one partition's nodes (rebuilt by each pass that needs them)."""

    def __init__(self, nodes: list[Node], graph: dict[str, Node], preserve: set[str],
                 fed: Iterable[str] = ()) -> None:
        self.nodes = nodes
        self.graph = graph
        self.preserve = preserve
        # the step's fed tensors ("op:k"): a reader gets the feed even where
        # the producer is in the partition (a target, a control input)
        self.fed = {_key(t) for t in fed}
        self.fed_ops = {tensor_op(t)[0] for t in self.fed}
        self.by_name = {n["name"]: n for n in nodes}
        self._consts: dict[str, np.ndarray | None] = {}
        self._edges: tuple[dict, dict] | None = None

    @property
    def readers(self) -> dict[str, list[str]]:
        """name -> the nodes that read it (data); a name nothing reads is absent."""
        return self._reverse_edges()[0]

    @property
    def waiters(self) -> dict[str, list[str]]:
        """name -> the nodes that wait for it (control inputs)."""
        return self._reverse_edges()[1]

    def _reverse_edges(self) -> tuple[dict, dict]:
        if self._edges is None:
            readers: dict[str, list[str]] = {}
            waiters: dict[str, list[str]] = {}
            for n in self.nodes:
                for inp in n["inputs"]:
                    if inp[0] == "^":
                        waiters.setdefault(inp[1:], []).append(n["name"])
                    else:
                        readers.setdefault(op_of(inp), []).append(n["name"])
            self._edges = readers, waiters
        return self._edges

    def is_fed(self, tensor: str) -> bool:
        return bool(self.fed) and _key(tensor) in self.fed

    def local(self, tensor: str) -> Node | None:
        """The partition's node that makes ``tensor``; None for a feed."""
        if self.is_fed(tensor):
            return None
        return self.by_name.get(tensor_op(tensor)[0])

    def dtype(self, tensor: str) -> str | None:
        op, idx = tensor_op(tensor)
        node = self.by_name.get(op) or self.graph.get(op)
        dts = (node or {}).get("output_dtypes") or []
        return dts[idx] if idx < len(dts) else None

    def shape(self, tensor: str) -> list | None:
        """The declared shape (a list, None entries unknown), or None."""
        op, idx = tensor_op(tensor)
        node = self.by_name.get(op) or self.graph.get(op)
        shapes = (node or {}).get("output_shapes") or []
        return shapes[idx] if idx < len(shapes) else None

    def const_value(self, tensor: str) -> np.ndarray | None:
        """The value of ``tensor`` when a ``Const`` node of this partition
        without control inputs makes it and it is not fed, else None."""
        if self.is_fed(tensor):
            return None
        op, idx = tensor_op(tensor)
        node = self.by_name.get(op)
        if node is None or node["op"] != "Const" or node["inputs"] or idx:
            return None
        key = node["name"]
        if key in self._consts:
            return self._consts[key]
        try:
            out = kernels.get_kernel("Const", kernels.CPU)([], node["attrs"])[0]
        except Exception:   # a bad constant fails in its step, as it would unoptimized
            out = None
        if not isinstance(out, np.ndarray) or out.dtype.kind not in "biuf":
            out = None
        self._consts[key] = out
        return out


_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dt: np.dtype) -> str:
    """``str(dt)``, cached (numpy computes it anew on every call)."""
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt)
    return name


def op_of(tensor: str) -> str:
    """The op of tensor name ``tensor`` ("a:1" -> "a"; a bare "a" is "a")."""
    op, sep, idx = tensor.rpartition(":")
    return op if sep and idx.isdigit() else tensor


def data_inputs(node: Node) -> list[str]:
    return [i for i in node["inputs"] if not i.startswith("^")]


def control_inputs(node: Node) -> list[str]:
    return [i for i in node["inputs"] if i.startswith("^")]


def rewire(nodes: Iterable[Node], data: dict[str, str], control: dict[str, str]) -> list[Node]:
    """``nodes`` with inputs renamed: data tensors by ``data`` ("a:0" ->
    "b:0"), control inputs by ``control`` ("a" -> "b"); duplicates of a
    control input dropped. A node that changes is a new dict."""
    if not data and not control:
        return list(nodes)
    return [rewire_node(n, data, control) for n in nodes]


def rewire_node(n: Node, data: dict[str, str], control: dict[str, str]) -> Node:
    """One node of :func:`rewire`."""
    for inp in n["inputs"]:
        if (inp[1:] in control) if inp[0] == "^" else (_key(inp) in data):
            break
    else:
        return n
    new_inputs = []
    changed = False
    seen_ctrl: set[str] = set()
    for inp in n["inputs"]:
        if inp.startswith("^"):
            src = inp[1:]
            while src in control:
                src = control[src]
            if src in seen_ctrl:
                changed = True
                continue
            seen_ctrl.add(src)
            new = "^" + src
        else:
            op, idx = tensor_op(inp)
            new = inp
            key = f"{op}:{idx}"
            while key in data:
                key = data[key]
                new = key
        changed = changed or new != inp
        new_inputs.append(new)
    return {**n, "inputs": new_inputs} if changed else n


def _key(tensor: str) -> str:
    return tensor if ":" in tensor else tensor + ":0"


def unique_name(base: str, taken: Any) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name
