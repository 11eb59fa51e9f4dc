"""``Model.summary()``: the table of a model's layers, in tf_keras' text format.

The format is Keras 2's (``tf_keras.utils.layer_utils.print_summary``), line
for line, so a program's captured summary reads as it did under TF: a
``Model: "<name>"`` line, a rule of ``_``, the header, a rule of ``=``, one row
per layer (text wrapped within its column, a blank line after each), a rule
of ``=``, then ``Total params: 390 (1.52 KB)``, ``Trainable params``,
``Non-trainable params`` (counts without separators, the bytes the weights
take, in Keras' units) and a closing rule.

Two layouts, chosen as Keras chooses them:

* **sequential-like** (a ``Sequential``, a subclassed model, or a functional
  model whose layer calls form one chain): 65 columns by default, the
  columns ``Layer (type)``, ``Output Shape``, ``Param #``;
* **graph** (a functional model with several inputs, outputs, branches or a
  shared layer): 98 columns, and a fourth column ``Connected to`` listing
  each call's inputs as ``['<layer>[<node>][<tensor>]', ...]``.

A layer's output shape is that of its calls (an ``InputLayer``'s as a
one-element list, as Keras 2 prints it; ``multiple`` when its calls differ or
when it was never called on symbolic tensors, as in a subclassed model). In a
``Sequential`` the shapes are worked out from the shape the model was built
with, and its ``InputLayer`` is not listed (Keras 2's ``Sequential.layers``
omits it). ``expand_nested`` draws nested models inside ``|`` borders;
``show_trainable`` adds a ``Trainable`` column (Y/N).

Lines go to ``print_fn`` (default: ``sys.stdout``, one ``write`` per line,
flushed, which is what Keras' ``print_msg`` does with interactive logging on;
library code never calls ``print``).
"""
from __future__ import annotations

import math
import re
import sys
from typing import Any, Callable, Sequence

from distrib.framework import dtypes
from distrib.framework.graph import Tensor
from distrib.keras import node
from distrib.keras.base_layer import shape_tuple

__all__ = ["print_summary", "readable_memory_size"]

_BREAK_AFTER = ("),", "},", "],", "',")   # Keras wraps a long cell after one of these


def print_summary(model: Any, line_length: int | None = None,
                  positions: Sequence[float] | None = None,
                  print_fn: Callable[[str], Any] | None = None,
                  expand_nested: bool = False, show_trainable: bool = False,
                  layer_range: Sequence[str] | None = None) -> None:
    """Write ``model``'s summary (module header) through ``print_fn``."""
    write = print_fn or _stdout_line
    graph_nodes = _model_nodes(model)
    chain = _is_chain(model, graph_nodes)
    if chain:
        line_length = line_length or 65
        cols, header = list(positions or [0.45, 0.85, 1.0]), \
            ["Layer (type)", "Output Shape", "Param #"]
    else:
        line_length = line_length or 98
        cols, header = list(positions or [0.3, 0.6, 0.70, 1.0]), \
            ["Layer (type)", "Output Shape", "Param #", "Connected to"]
    if cols[-1] <= 1:
        cols = [int(line_length * p) for p in cols]
    cols = [int(c) for c in cols]
    if show_trainable:
        line_length += 11
        cols.append(line_length)
        header.append("Trainable")
    table = _Table(write, cols)
    write(f'Model: "{model.name}"')
    write("_" * line_length)
    table.row(header)
    write("=" * line_length)
    shapes = _sequential_shapes(model)
    listed = _listed_layers(model)
    lo, hi = _layer_bounds(listed, layer_range)

    def fields(layer: Any, level: int) -> list[Any]:
        out: list[Any] = [f"{layer.name} ({type(layer).__name__})",
                          shapes.get(id(layer)) or _output_shape(layer)]
        if chain:
            out.append(layer.count_params() if layer.built or _is_model(layer)
                       else "0 (unused)")
        else:
            out += [layer.count_params(),
                    _connections(layer, graph_nodes)]
        if show_trainable:
            out.append("Y" if layer.trainable else "N")
        return out

    def show(layer: Any, level: int, last_of_nested: bool) -> None:
        table.row(fields(layer, level), level)
        inner = _listed_layers(layer) if expand_nested and _is_model(layer) else []
        if inner:
            write("|" * (level + 1) + "¯" * (line_length - 2 * level - 2) + "|" * (level + 1))
            for i, sub in enumerate(inner):
                show(sub, level + 1, i == len(inner) - 1)
            write("|" * level + "¯" * (line_length - 2 * level) + "|" * level)
            return   # Keras adds no blank line after an expanded model
        if not last_of_nested:
            write("|" * level + " " * (line_length - 2 * level) + "|" * level)

    for layer in listed[lo:hi]:
        show(layer, 0, False)
    write("=" * line_length)
    trainable = _unique(model.trainable_weights)
    frozen = _unique(model.non_trainable_weights)
    t_bytes, f_bytes = _bytes(trainable), _bytes(frozen)
    t_count, f_count = _count(trainable), _count(frozen)
    write(f"Total params: {t_count + f_count} ({readable_memory_size(t_bytes + f_bytes)})")
    write(f"Trainable params: {t_count} ({readable_memory_size(t_bytes)})")
    write(f"Non-trainable params: {f_count} ({readable_memory_size(f_bytes)})")
    write("_" * line_length)


def readable_memory_size(size: float) -> str:
    """Bytes as Keras writes them: ``96.00 Byte``, ``1.52 KB``, ``3.05 MB`` ..."""
    for unit in ("Byte", "KB", "MB", "GB", "TB"):
        if size / 1024 < 1:
            return f"{size:.2f} {unit}"
        size /= 1024
    return f"{size:.2f} PB"


class _Table:
    """Rows of cells at fixed column ends, each cell wrapped within its column."""

    def __init__(self, write: Callable[[str], Any], ends: list[int]) -> None:
        self._write = write
        self._ends = ends

    def row(self, cells: Sequence[Any], level: int = 0) -> None:
        left = [str(c) for c in cells]
        last = len(self._ends) - 1
        while any(left):
            line = ""
            for col, text in enumerate(left):
                start = self._ends[col - 1] if col else 0
                end = self._ends[col]
                gap = 0 if col == last else 2
                room = end - start - gap - (0 if col == last else 1) - (level if col == 0
                                                                        else 0)
                piece = text[:room]
                breaks = [piece.find(b) + len(b) for b in _BREAK_AFTER if b in piece]
                if breaks:
                    room = min(breaks)
                    piece = piece[:room]
                if col == 0:
                    line += "|" * level + " "
                line += piece + " " * gap
                left[col] = text[room:]
                pad_to = end - level if (level and col == last) else end
                line += " " * (pad_to - len(line))
            self._write(line + "|" * level)


# -- what the rows show ---------------------------------------------------------------------
def _stdout_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _is_model(layer: Any) -> bool:
    return hasattr(layer, "layers") and callable(getattr(layer, "summary", None))


def _is_sequential(model: Any) -> bool:
    return type(model).__name__ == "Sequential" or hasattr(model, "_stack")


def _listed_layers(model: Any) -> list[Any]:
    """The layers a summary lists: Keras 2's ``model.layers`` (no InputLayer in a
    Sequential)."""
    layers = list(getattr(model, "layers", []))
    if _is_sequential(model):
        layers = [la for la in layers if not getattr(la, "is_input_layer", False)]
    return layers


def _sequential_shapes(model: Any) -> dict[int, Any]:
    """``id(layer) -> output shape`` down a built Sequential's stack."""
    if not _is_sequential(model):
        return {}
    shape = getattr(model, "_build_input_shape", None)
    layers = list(model.layers)
    if shape is None and layers:
        shape = layers[0].batch_input_shape
    out: dict[int, Any] = {}
    if shape is None:
        return out
    for layer in layers:
        try:
            shape = shape_tuple(layer.compute_output_shape(shape))
        except Exception:   # noqa: BLE001 - a shape a layer cannot tell: Keras' "multiple"
            return out
        out[id(layer)] = shape
    return out


def _node_shapes(n: Any) -> Any:
    if getattr(n.layer, "is_input_layer", False):
        return [shape_tuple(t.shape) for t in node.flatten(n.outputs)]
    return node.map_nest(lambda t: shape_tuple(t.shape) if isinstance(t, Tensor) else t,
                         n.outputs)


def _output_shape(layer: Any) -> Any:
    """Keras 2's ``layer.output_shape``: its calls' shapes when they agree, else
    ``multiple`` (also for a layer never called on symbolic tensors)."""
    shapes = [_node_shapes(n) for n in getattr(layer, "inbound_nodes", [])]
    if not shapes or len({str(s) for s in shapes}) != 1:
        return "multiple"
    return shapes[0]


def _model_nodes(model: Any) -> set[int]:
    """``id``\\ s of the functional model's layer calls (empty for other models)."""
    return set(getattr(model, "_node_ids", ()) or ())


def _made_by(t: Any) -> list[tuple[Any, int, int]]:
    """The layer calls whose outputs ``t`` comes from (through plain ops, if any)."""
    h = node.history(t)
    if h is not None:
        return [h]
    if not isinstance(t, Tensor) or not node.is_symbolic(t):
        return []
    return [found for parent in t.op.inputs for found in _made_by(parent)]


def _inbound(n: Any) -> list[tuple[Any, int, int]]:
    return [h for t in n.input_tensors for h in _made_by(t)]


def _connections(layer: Any, nodes: set[int]) -> list[str]:
    return [f"{src.name}[{index}][{position}]"
            for n in layer.inbound_nodes if not nodes or id(n) in nodes
            for src, index, position in _inbound(n)]


def _is_chain(model: Any, nodes: set[int]) -> bool:
    """Keras' test: no depth of the model's graph holds two calls, no call takes two
    tensors, and no layer is called twice."""
    if not nodes:
        return True
    calls = [n for layer in model.layers for n in layer.inbound_nodes if id(n) in nodes]
    if any(len(_inbound(n)) > 1 for n in calls):
        return False
    if any(sum(id(n) in nodes for n in layer.inbound_nodes) > 1 for layer in model.layers):
        return False
    consumers: dict[int, list[Any]] = {id(n): [] for n in calls}
    for n in calls:
        for src, index, _ in _inbound(n):
            parent = src.inbound_nodes[index]
            if id(parent) in consumers:
                consumers[id(parent)].append(n)
    depth: dict[int, int] = {}

    def depth_of(n: Any) -> int:   # the longest path to an output (Keras' node depth)
        if id(n) not in depth:
            depth[id(n)] = max((depth_of(c) + 1 for c in consumers[id(n)]), default=0)
        return depth[id(n)]
    seen = [depth_of(n) for n in calls]
    return len(seen) == len(set(seen))


def _layer_bounds(layers: list[Any], layer_range: Sequence[str] | None) -> tuple[int, int]:
    """Keras' ``layer_range``: from the first layer matching ``[0]`` to the last matching
    ``[1]`` (regular expressions), both included."""
    if layer_range is None:
        return 0, len(layers)
    if len(layer_range) != 2:
        raise ValueError(f"layer_range must be a list or tuple of length 2. Received: "
                         f"layer_range = {layer_range} of length {len(layer_range)}")
    if not all(isinstance(p, str) for p in layer_range):
        raise ValueError(f"layer_range should contain string type only. Received: "
                         f"{layer_range}")
    lower = [i for i, la in enumerate(layers) if re.match(layer_range[0], la.name)]
    upper = [i for i, la in enumerate(layers) if re.match(layer_range[1], la.name)]
    if not lower or not upper:
        raise ValueError(f"Passed layer_names do not match the layer names in the model. "
                         f"Received: {layer_range}")
    if min(lower) > max(upper):
        return min(upper), max(lower) + 1
    return min(lower), max(upper) + 1


# -- the totals -----------------------------------------------------------------------------
def _unique(weights: Sequence[Any]) -> list[Any]:
    return list({id(w): w for w in weights}.values())


def _count(weights: Sequence[Any]) -> int:
    return sum(int(math.prod(w.shape.as_list())) for w in weights)


def _bytes(weights: Sequence[Any]) -> int:
    total = 0
    for w in weights:
        dims = w.shape.as_list()
        if None in dims:
            continue
        total += int(math.prod(dims)) * dtypes.as_dtype(w.dtype).base_dtype.size
    return total
