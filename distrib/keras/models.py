"""``dt.keras.Sequential``: a plain stack of layers, each feeding the next.

``Sequential([Dense(1, input_shape=(1,))])`` builds its weights at once when
the first layer gives an input shape (in the strategy scope open then, as
Keras does); otherwise on the first call, ``fit``, ``evaluate`` or
``predict``, from the data's shape. Every layer is owned by the model: it
takes the model's graph and strategy, and a layer name appears once per model.

``get_config()`` is Keras': the model's name, its layers' configs in order and
the shape it was built with (``build_input_shape``), so ``from_config``
makes (and builds) the same stack; ``dt.keras.models.load_model`` and
``save_model`` (``model_saving.py``) are re-exported here, where Keras has them.
"""
from __future__ import annotations

from typing import Any, Sequence

from distrib.keras import layers as layers_mod
from distrib.keras import node
from distrib.keras.layers import Layer
from distrib.keras.model_saving import load_model, model_from_config, model_from_json, save_model
from distrib.keras.training import Model

__all__ = ["Sequential", "Model", "load_model", "save_model", "model_from_config",
           "model_from_json"]


class Sequential(Model):
    """``Sequential(layers=None, name=None)``."""

    def __init__(self, layers: Sequence[Layer] | None = None, name: str | None = None,
                 trainable: bool = True) -> None:
        super().__init__(name=name, trainable=trainable)
        self._stack: list[Layer] = []
        self._build_input_shape: tuple[int | None, ...] | None = None
        for layer in layers or []:
            self.add(layer)

    @property
    def layers(self) -> list[Layer]:
        return list(self._stack)

    def add(self, layer: Layer) -> None:
        """Append ``layer`` (built at once when the input shape is known); a
        ``keras.Input`` tensor adds its ``InputLayer``, as Keras 2's ``add`` does."""
        origin = node.history(layer)
        if origin is not None and getattr(origin[0], "is_input_layer", False):
            layer = origin[0]
        if not isinstance(layer, Layer):
            raise TypeError(f"The added layer must be an instance of class Layer. Received: "
                            f"layer={layer!r} of type {type(layer)}.")
        if any(other.name == layer.name for other in self._stack):
            raise ValueError(f"All layers added to a Sequential model should have unique "
                             f"names. Name {layer.name!r} is already the name of a layer in "
                             "this model. Update the `name` argument to pass a unique name.")
        self._adopt(layer)
        self._stack.append(layer)
        first = self._stack[0].batch_input_shape
        if first is not None:
            self.build(first)

    def pop(self) -> Layer:
        if not self._stack:
            raise TypeError("There are no layers in the model.")
        return self._stack.pop()

    def build(self, input_shape: Any = None) -> None:
        """Build every layer, each from the previous one's output shape."""
        shape = input_shape or (self._stack[0].batch_input_shape if self._stack else None)
        if shape is None:
            raise ValueError("You must provide an `input_shape` argument (or give the first "
                             "layer input_shape=...) to build a Sequential model")
        self._build_input_shape = tuple(shape)
        with self.function_scope():
            for layer in self._stack:
                self._adopt(layer)
                layer._maybe_build(shape)  # noqa: SLF001 - a Layer's step, called by a Layer
                shape = layer.compute_output_shape(shape)
        self.built = True

    def get_config(self) -> dict[str, Any]:
        """``{"name", "trainable", "layers": [each layer's Keras dict], "build_input_shape"}``."""
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable,
                                  "layers": [layers_mod.serialize(layer) for layer in self._stack]}
        if self._build_input_shape is not None:
            config["build_input_shape"] = tuple(self._build_input_shape)
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> Sequential:
        """The stack ``get_config`` describes, built when it was (in the strategy scope
        open now)."""
        model = cls(name=config.get("name"), trainable=config.get("trainable", True))
        for layer_config in config.get("layers", []):
            model.add(layers_mod.deserialize(layer_config, custom_objects))
        shape = config.get("build_input_shape")
        if not model.built and shape is not None:
            model.build(tuple(shape))
        return model

    def call(self, inputs: Any, training: Any = None) -> Any:
        x = inputs
        for layer in self._stack:
            x = layer(x, training=training)
        return x

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = tuple(input_shape)
        for layer in self._stack:
            shape = layer.compute_output_shape(shape)
        return shape
