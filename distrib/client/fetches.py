"""Fetches and feeds as the client sees them.

``sess.run`` takes a tensor, an op, a name, or any nesting of list, tuple,
namedtuple and dict of those; the result has the same structure, with numpy
values for tensors and None for ops. :class:`FetchPlan` flattens the structure
into the unique tensor names and target ops the master needs, and rebuilds the
structure from the flat results. :func:`check_feed` validates one fed value
against the placeholder's static dtype and shape, so a wrong feed is an error
in the client that names the tensor, before anything crosses the wire.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from distrib.errors import InvalidArgumentError


def _graph_element(obj: Any) -> Any:
    conv = getattr(obj, "_as_graph_element", None)
    return conv() if callable(conv) else obj


def _kind(obj: Any, graph: Any = None) -> tuple[str, str] | None:
    """("tensor", "op:0") or ("op", "op") for a fetchable leaf; None otherwise.
    With ``graph``, a tensor or op of another graph is an error (by name it
    would find this graph's node of that name, a different value)."""
    obj = _graph_element(obj)
    if graph is not None and not isinstance(obj, str):
        own = getattr(obj, "graph", None)
        if own is not None and own is not graph:
            raise InvalidArgumentError(
                f"{obj!r} is not an element of this graph: it belongs to another dt.Graph "
                "than the session's; build it in the session's graph, or open a Session "
                "with graph= its graph")
    if isinstance(obj, str):
        return ("tensor", obj) if ":" in obj else ("op", obj)
    if hasattr(obj, "value_index") and hasattr(obj, "op"):
        return "tensor", obj.name
    if hasattr(obj, "outputs") and hasattr(obj, "type") and hasattr(obj, "name"):
        return "op", obj.name
    return None


class FetchPlan:
    """Flattened fetches: ``tensors`` to fetch, ``targets`` to run."""

    def __init__(self, fetches: Any, graph: Any = None) -> None:
        self._graph = graph   # the session's: fetches of other graphs are errors
        self.tensors: list[str] = []
        self.targets: list[str] = []
        self._tensor_pos: dict[str, int] = {}
        self._build: Callable[[list[Any]], Any] = self._flatten(fetches)

    def _flatten(self, f: Any) -> Callable[[list[Any]], Any]:
        components = getattr(f, "_fetch_components", None)
        if callable(components):   # an IndexedSlices: its parts, and its value made of them
            parts, rebuild = components()
            built = [self._flatten(p) for p in parts]
            return lambda vals: rebuild([b(vals) for b in built])
        kind = _kind(f, self._graph)
        if kind is not None:
            what, name = kind
            if what == "op":
                if name not in self.targets:
                    self.targets.append(name)
                return lambda _vals: None
            pos = self._tensor_pos.get(name)
            if pos is None:
                pos = self._tensor_pos[name] = len(self.tensors)
                self.tensors.append(name)
            return lambda vals, p=pos: vals[p]
        if isinstance(f, dict):
            builders = {k: self._flatten(v) for k, v in f.items()}
            cls = type(f)
            return lambda vals: cls((k, b(vals)) for k, b in builders.items())
        if isinstance(f, tuple) and hasattr(f, "_fields"):  # namedtuple
            items = [self._flatten(v) for v in f]
            return lambda vals: type(f)(*(b(vals) for b in items))
        if isinstance(f, (list, tuple)):
            items = [self._flatten(v) for v in f]
            cls = type(f)
            return lambda vals: cls(b(vals) for b in items)
        raise TypeError(
            f"cannot fetch {f!r} of type {type(f).__name__}: fetch a Tensor, an Operation, "
            "a Variable, a tensor or op name, or a list/tuple/dict of them")

    def build(self, values: list[Any]) -> Any:
        return self._build(values)


def feed_name(key: Any, graph: Any = None) -> str:
    kind = _kind(key, graph)
    if kind is None or kind[0] != "tensor":
        raise TypeError(f"cannot interpret feed_dict key {key!r} as a tensor: "
                        "use a Tensor (e.g. a placeholder) or a name like 'x:0'")
    return kind[1]


def _to_numpy(value: Any, dtype: str | None, name: str) -> np.ndarray:
    if dtype in (None, "string"):
        return np.asarray(value)
    try:
        arr = np.asarray(value)
    except Exception as e:  # ragged lists and the like
        raise InvalidArgumentError(f"cannot feed {type(value).__name__} to tensor {name!r}: {e}")
    want = np.dtype(dtype)
    if arr.dtype == want:
        return arr
    if arr.dtype.kind in "OUS" or (want.kind == "b" and arr.dtype.kind != "b") \
            or not np.can_cast(arr.dtype, want, casting="same_kind") and not (
                arr.dtype.kind in "iub" and want.kind in "f"):
        # float -> int would silently truncate; strings never become numbers
        if not (arr.dtype.kind in "fiu" and want.kind in "fiu" and np.array_equal(
                arr, arr.astype(want, copy=False))):
            raise InvalidArgumentError(
                f"cannot feed a value of dtype {arr.dtype} to tensor {name!r} of dtype {want}: "
                "convert it first (e.g. np.asarray(v, dtype=...))")
    return arr.astype(want, copy=False)


def check_feed(name: str, value: Any, dtype: str | None, shape: list | None) -> np.ndarray:
    """The fed value as a numpy array of the tensor's dtype, or an
    InvalidArgumentError naming the tensor and both shapes."""
    arr = _to_numpy(value, dtype, name)
    if shape is not None:
        ok = len(shape) == arr.ndim and all(d is None or d == s for d, s in zip(shape, arr.shape))
        if not ok:
            want = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
            raise InvalidArgumentError(
                f"cannot feed value of shape {list(arr.shape)} for tensor {name!r}, "
                f"which has shape {want}")
    return arr
