"""The functional model: ``keras.Model(inputs, outputs)`` (Keras 2's ``Functional``).

``inputs`` are ``keras.Input`` tensors (one, a list, or a dict by name);
``outputs`` the tensors made from them by calling layers (one, a list, or a
dict). The model's layers are those the outputs were made through (its
``InputLayer``\\ s first), each called once per node, so a layer called twice
shares its weights, and a model called on symbolic tensors is one layer of
another (nested models). Calling the model (in ``fit``'s traced step, or
``model(x)``) replays the recorded calls on the new tensors (``keras.node``).

Inputs are matched as Keras matches them: a dict by the input's name (the
model's dict keys, else its input layers' names), a list by position.

``get_config()`` is Keras 2's (``layers`` each with ``inbound_nodes``
``[[layer_name, node_index, tensor_index, kwargs], ...]``, ``input_layers``,
``output_layers``), with node indices counted within the model, so
``from_config`` (and ``dt.keras.models.load_model``) makes the same graph of
the same layers; a node taking a dict keeps its keys. A plain op between
layers (``dt.reduce_mean(x, 1)``) runs but cannot be saved: ``get_config``
says to wrap it in a ``Lambda`` layer.
"""
from __future__ import annotations

from typing import Any

from distrib.framework.graph import Tensor
from distrib.keras import backend, compile_utils, node
from distrib.keras import layers as layers_mod
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.keras.training import Model

__all__ = ["Functional"]


class Functional(Model):
    """``Model(inputs, outputs, name=None, trainable=True)``: see the module header."""

    def __init__(self, inputs: Any, outputs: Any, name: str | None = None,
                 trainable: bool = True, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"Keyword argument(s) not understood: {sorted(kwargs)}")
        self._functional_layers: list[Layer] = []
        if name is None and type(self) is Functional:
            name = backend.unique_name("model")   # Keras 2's name for Model(inputs, outputs)
        super().__init__(name=name, trainable=trainable)
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(outputs, tuple):
            outputs = list(outputs)
        self._nested_inputs = inputs
        self._nested_outputs = outputs
        self.inputs = node.flatten(inputs)
        self.outputs = node.flatten(outputs)
        for t in self.inputs:
            h = node.history(t)
            if h is None or not getattr(h[0], "is_input_layer", False):
                raise ValueError(f"Input tensors to a Functional must come from "
                                 f"`keras.Input`. Received: {t!r} (missing previous layer "
                                 "metadata).")
        for t in self.outputs:
            if not isinstance(t, Tensor) or not node.is_symbolic(t):
                raise ValueError(f"Output tensors of a Functional model must be the output "
                                 f"of a Keras layer (made from the model's inputs). "
                                 f"Received: {t!r}")
        self.input_names = [node.history(t)[0].name for t in self.inputs]
        self.output_names = compile_utils.output_names(self.outputs)
        self._functional_layers, self._node_ids = _layers_of(self.inputs, self.outputs)
        for layer in self._functional_layers:
            self._adopt(layer)
        self.built = True

    # -- structure --------------------------------------------------------------------------
    @property
    def layers(self) -> list[Layer]:
        return list(self._functional_layers)

    def _sublayers(self) -> list[Layer]:
        return self.layers

    @property
    def input(self) -> Any:
        return self._nested_inputs

    @property
    def output(self) -> Any:
        return self._nested_outputs

    @property
    def input_shape(self) -> Any:
        return node.map_nest(lambda t: shape_tuple(t.shape), self._nested_inputs)

    @property
    def output_shape(self) -> Any:
        return node.map_nest(lambda t: shape_tuple(t.shape), self._nested_outputs)

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """A layer by ``name`` or ``index`` (Keras')."""
        if index is not None:
            if len(self.layers) <= index:
                raise ValueError(f"Was asked to retrieve layer at index {index} but model "
                                 f"only has {len(self.layers)} layers.")
            return self.layers[index]
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise ValueError(f"No such layer: {name}. Existing layers are: "
                         f"{[layer.name for layer in self.layers]}.")

    def build(self, input_shape: Any = None) -> None:
        self.built = True

    def compute_output_shape(self, input_shape: Any) -> Any:
        shapes = self.output_shape
        return shapes

    # -- calling ----------------------------------------------------------------------------
    def call(self, inputs: Any, training: Any = None) -> Any:
        return node.replay(self._nested_outputs, self.inputs, self._match(inputs), training)

    def _match(self, inputs: Any) -> list[Any]:
        """The values for ``self.inputs``, in order (a dict by name, a list by position)."""
        if isinstance(inputs, dict):
            names = list(self._nested_inputs) if isinstance(self._nested_inputs, dict) \
                else self.input_names
            if isinstance(self._nested_inputs, dict):
                names = sorted(self._nested_inputs)   # flatten's order
            missing = [n for n in names if n not in inputs]
            if missing:
                raise ValueError(f"Missing data for input(s) {missing} of model "
                                 f"{self.name!r}: expected keys {names}, got "
                                 f"{sorted(inputs)}")
            return [inputs[n] for n in names]
        flat = node.flatten(inputs)
        if len(flat) != len(self.inputs):
            raise ValueError(f"Layer {self.name!r} expects {len(self.inputs)} input(s), but "
                             f"it received {len(flat)} input tensors.")
        return flat

    # -- config -----------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """Keras 2's functional config (module header)."""
        index = _node_indices(self.layers, self._node_ids)
        layer_configs = []
        for layer in self.layers:
            entry = layers_mod.serialize(layer)
            entry["name"] = layer.name
            entry["inbound_nodes"] = [_node_config(n, index, self.name)
                                      for n in layer.inbound_nodes
                                      if id(n) in index and n.inputs != []]
            layer_configs.append(entry)
        return {"name": self.name, "trainable": self.trainable, "layers": layer_configs,
                "input_layers": _tensor_refs(self._nested_inputs, index, self.name),
                "output_layers": _tensor_refs(self._nested_outputs, index, self.name)}

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> Functional:
        """The model ``get_config`` describes: its layers made, then called node by node."""
        made: dict[str, Layer] = {}
        outputs: dict[tuple[str, int], list[Any]] = {}
        pending: list[tuple[Layer, Any]] = []
        for entry in config["layers"]:
            layer = layers_mod.deserialize({k: v for k, v in entry.items()
                                            if k not in ("inbound_nodes", "name")},
                                           custom_objects)
            made[entry["name"]] = layer
            if getattr(layer, "is_input_layer", False):
                outputs[(entry["name"], 0)] = [layer.output]
            pending.extend((layer, spec) for spec in entry.get("inbound_nodes", []))
        counts: dict[str, int] = {}
        while pending:   # call each node once all it takes exists (Keras' queue)
            progressed = []
            for item in pending:
                layer, spec = item
                args = _resolve(spec, outputs)
                if args is None:
                    continue
                result = layer(args[0], **args[1])
                i = counts.get(layer.name, 0)
                counts[layer.name] = i + 1
                outputs[(layer.name, i)] = node.flatten(result)
                progressed.append(item)
            if not progressed:
                raise ValueError(f"the config of model {config.get('name')!r} has layer "
                                 "calls whose inputs no layer makes")
            pending = [p for p in pending if p not in progressed]
        inputs = _from_refs(config["input_layers"], outputs)
        outs = _from_refs(config["output_layers"], outputs)
        return cls(inputs, outs, name=config.get("name"),
                   trainable=config.get("trainable", True))


def _layers_of(inputs: list[Tensor], outputs: list[Tensor]) -> tuple[list[Layer], set[int]]:
    """The layers between ``inputs`` and ``outputs`` (the input layers first, then in
    the order the calls were made: parents before children) and their nodes' ids."""
    order: list[Layer] = [node.history(t)[0] for t in inputs]
    nodes = {id(node.history(t)[0].inbound_nodes[0]) for t in inputs}
    seen_layers = {id(layer) for layer in order}
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(t, False) for t in reversed(outputs)]
    while stack:
        t, expanded = stack.pop()
        h = node.history(t)
        if expanded:
            if h is not None and id(h[0]) not in seen_layers:
                seen_layers.add(id(h[0]))
                order.append(h[0])
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if h is not None:
            if getattr(h[0], "is_input_layer", False):
                continue
            nodes.add(id(h[0].inbound_nodes[h[1]]))
            parents = h[0].inbound_nodes[h[1]].input_tensors
        else:
            parents = list(t.op.inputs)
        stack.extend((p, False) for p in reversed(parents) if node.is_symbolic(p))
    return order, nodes


def _node_indices(layers: list[Layer], nodes: set[int]) -> dict[int, int]:
    """``id(node) -> its index among its layer's nodes in this model``."""
    out: dict[int, int] = {}
    for layer in layers:
        mine = [n for n in layer.inbound_nodes if id(n) in nodes]
        out.update((id(n), i) for i, n in enumerate(mine))
    return out


def _ref(t: Any, index: dict[int, int], model: str) -> list[Any]:
    h = node.history(t)
    if h is None:
        raise NotImplementedError(
            f"model {model!r} applies a plain op ({t.op.type}) between its layers; such an "
            "op runs but cannot be saved by dt.keras: wrap it in a "
            "dt.keras.layers.Lambda layer to save the model")
    layer, node_index, position = h
    return [layer.name, index.get(id(layer.inbound_nodes[node_index]), node_index), position]


def _tensor_refs(nest: Any, index: dict[int, int], model: str) -> Any:
    if isinstance(nest, dict):
        return {k: _ref(v, index, model) for k, v in nest.items()}
    if isinstance(nest, list):
        return [_ref(v, index, model) for v in nest]
    return _ref(nest, index, model)


def _node_config(n: node.Node, index: dict[int, int], model: str) -> Any:
    kwargs = dict(n.kwargs)
    if n.training is not None:
        kwargs["training"] = bool(n.training)
    if isinstance(n.inputs, dict):
        return {"__dict__": {k: _ref(v, index, model) for k, v in n.inputs.items()},
                "kwargs": kwargs}
    flat = node.flatten(n.inputs)
    refs = [[*_ref(t, index, model), kwargs] for t in flat]
    if isinstance(n.inputs, (list, tuple)) and len(flat) == 1:
        return {"__list__": refs}
    return refs


def _lookup(ref: list[Any], outputs: dict[tuple[str, int], list[Any]]) -> Any:
    found = outputs.get((ref[0], int(ref[1])))
    return None if found is None else found[int(ref[2])]


def _resolve(spec: Any, outputs: dict[tuple[str, int], list[Any]]
             ) -> tuple[Any, dict[str, Any]] | None:
    """A node's (inputs, kwargs), or None while one of its inputs is not made yet."""
    if isinstance(spec, dict) and "__dict__" in spec:
        values = {k: _lookup(v, outputs) for k, v in spec["__dict__"].items()}
        if any(v is None for v in values.values()):
            return None
        return values, dict(spec.get("kwargs") or {})
    wrapped = isinstance(spec, dict)
    refs = spec["__list__"] if wrapped else spec
    values = [_lookup(r, outputs) for r in refs]
    if any(v is None for v in values):
        return None
    kwargs = dict(refs[0][3]) if refs and len(refs[0]) > 3 and refs[0][3] else {}
    return (values if (wrapped or len(values) > 1) else values[0]), kwargs


def _from_refs(refs: Any, outputs: dict[tuple[str, int], list[Any]]) -> Any:
    if isinstance(refs, dict):
        return {k: _lookup(v, outputs) for k, v in refs.items()}
    if refs and isinstance(refs[0], list):
        return [_lookup(r, outputs) for r in refs]
    return _lookup(refs, outputs)
