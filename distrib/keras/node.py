"""The functional API's graph of layer calls (Keras' ``Node``), and Keras' nests.

A symbolic tensor here is a plain graph ``Tensor`` of the model's graph that
depends on a ``keras.Input`` placeholder (TF1 Keras' design: a Keras tensor
is a graph tensor, so every ``dt.*`` op takes one). Calling a layer on one
records a ``Node`` (the layer, the call's inputs as given, its non-tensor
arguments and its outputs) and stamps each output with ``_keras_history``
``(layer, node_index, tensor_index)``, as Keras does. Any other op applied to
a symbolic tensor (``dt.reduce_mean(x, axis=1)`` between two layers, Keras 2's
``TFOpLambda``) is simply an op of the graph: ``replay`` makes it again on the
new inputs from its type and attributes.

``replay(outputs, inputs, values, training)`` runs the recorded calls on new
tensors (the model's ``call``): each layer is called again on what its inputs
became, each plain op depending on an input is made again, anything else (a
constant, a variable's read) is the same tensor; one pass, memoized per call.

Whether a tensor is symbolic is found by walking its ancestry once and
caching the answer on the tensor, so the check costs one visit per op of a
graph, however many layers are called.
"""
from __future__ import annotations

from typing import Any, Callable

from distrib.framework.graph import Tensor
from distrib.ops import math_ops as ops
from distrib.ops.constant_op import make_op

__all__ = ["Node", "flatten", "pack_like", "map_nest", "is_symbolic", "mark_input",
           "record", "replay", "history"]


# -- Keras' nests: lists, tuples and dicts (sorted keys) of leaves ---------------------------
def flatten(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for k in sorted(value) for leaf in flatten(value[k])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in flatten(item)]
    return [value]


def pack_like(structure: Any, leaves: list[Any]) -> Any:
    it = iter(leaves)

    def pack(s: Any) -> Any:
        if isinstance(s, dict):
            done = {k: pack(s[k]) for k in sorted(s)}
            return {k: done[k] for k in s}
        if isinstance(s, (list, tuple)):
            items = [pack(v) for v in s]
            return items if isinstance(s, list) else tuple(items)
        return next(it)
    return pack(structure)


def map_nest(fn: Callable[[Any], Any], value: Any) -> Any:
    return pack_like(value, [fn(v) for v in flatten(value)])


# -- symbolic tensors -----------------------------------------------------------------------
_SYMBOLIC = "_keras_symbolic"


def mark_input(tensor: Tensor, layer: Any) -> None:
    """``tensor`` is ``keras.Input``'s placeholder, made by ``layer`` (an InputLayer)."""
    tensor.__dict__[_SYMBOLIC] = True
    tensor.__dict__["_keras_history"] = (layer, 0, 0)


def _symbolic_tensor(tensor: Tensor) -> bool:
    known = tensor.__dict__.get(_SYMBOLIC)
    if known is not None:
        return known
    todo, order = [tensor], []
    while todo:   # iterative: a deep graph never reaches Python's recursion limit
        t = todo.pop()
        if _SYMBOLIC in t.__dict__:
            continue
        order.append(t)
        todo.extend(i for i in t.op.inputs if _SYMBOLIC not in i.__dict__)
    for t in reversed(order):   # inputs before the tensors made from them
        t.__dict__[_SYMBOLIC] = any(i.__dict__.get(_SYMBOLIC, False) for i in t.op.inputs)
    return tensor.__dict__[_SYMBOLIC]


def is_symbolic(value: Any) -> bool:
    """Whether any leaf of ``value`` is a graph tensor made from a ``keras.Input``."""
    return any(isinstance(leaf, Tensor) and _symbolic_tensor(leaf) for leaf in flatten(value))


def history(tensor: Any) -> tuple[Any, int, int] | None:
    """``(layer, node_index, tensor_index)`` of the layer call that made ``tensor``."""
    return tensor.__dict__.get("_keras_history") if isinstance(tensor, Tensor) else None


# -- nodes ----------------------------------------------------------------------------------
class Node:
    """One call of ``layer``: ``inputs`` as given, its other arguments, its outputs."""

    def __init__(self, layer: Any, inputs: Any, kwargs: dict[str, Any], outputs: Any,
                 training: Any) -> None:
        self.layer = layer
        self.inputs = inputs
        self.kwargs = kwargs
        self.outputs = outputs
        self.training = training   # None: the model's own ``training`` on replay

    @property
    def input_tensors(self) -> list[Tensor]:
        return [t for t in flatten(self.inputs) if isinstance(t, Tensor)]

    @property
    def parent_nodes(self) -> list[Node]:
        out = []
        for t in self.input_tensors:
            h = history(t)
            if h is not None:
                out.append(h[0].inbound_nodes[h[1]])
        return out


def record(layer: Any, inputs: Any, outputs: Any, training: Any,
           kwargs: dict[str, Any]) -> Any:
    """Record the call of ``layer`` on symbolic ``inputs``; returns ``outputs`` with
    each leaf stamped (a leaf that is one of the inputs, or already another call's
    output, is first passed through an identity, as Keras does)."""
    taken = {id(t) for t in flatten(inputs) if isinstance(t, Tensor)}
    leaves = []
    for leaf in flatten(outputs):
        if isinstance(leaf, Tensor) and (id(leaf) in taken or history(leaf) is not None):
            leaf = ops.identity(leaf)
        leaves.append(leaf)
    outputs = pack_like(outputs, leaves)
    nodes = layer.__dict__.setdefault("inbound_nodes", [])
    nodes.append(Node(layer, inputs, dict(kwargs), outputs, training))
    for i, leaf in enumerate(flatten(outputs)):
        if isinstance(leaf, Tensor):
            leaf.__dict__["_keras_history"] = (layer, len(nodes) - 1, i)
            leaf.__dict__[_SYMBOLIC] = True
    return outputs


def replay(outputs: Any, inputs: list[Tensor], values: list[Any], training: Any) -> Any:
    """``outputs`` computed again with ``inputs[i]`` replaced by ``values[i]`` (module
    header): the layers' calls made again, plain ops depending on an input remade."""
    done: dict[int, Any] = {id(t): v for t, v in zip(inputs, values)}
    called: dict[int, list[Any]] = {}

    def node_outputs(node: Node) -> list[Any]:
        key = id(node)
        if key not in called:
            args = map_nest(lambda v: value(v) if isinstance(v, Tensor) else v, node.inputs)
            mode = training if node.training is None else node.training
            called[key] = flatten(node.layer(args, training=mode, **node.kwargs))
        return called[key]

    def value(t: Tensor) -> Any:
        key = id(t)
        if key in done:
            return done[key]
        if not _symbolic_tensor(t):
            done[key] = t
            return t
        h = history(t)
        if h is not None:
            layer, index, position = h
            if getattr(layer, "is_input_layer", False):
                raise ValueError(f"Graph disconnected: cannot obtain value for tensor {t.name} "
                                 f"at layer {layer.name!r}: that input is not among the "
                                 "model's inputs")
            result = node_outputs(layer.inbound_nodes[index])[position]
        else:   # a plain op between layers (Keras 2's TFOpLambda): made again
            op = t.op
            new_inputs = [value(i) for i in op.inputs]
            result = make_op(op.type, new_inputs, dict(op.attrs), op.name.rsplit("/", 1)[-1]
                             ).outputs[t.value_index]
        done[key] = result
        return result

    return map_nest(lambda t: value(t) if isinstance(t, Tensor) else t, outputs)
