"""Keras' configs of what a layer holds: an activation by name, an initializer as
``{"module", "class_name", "config", "registered_name"}``, and back
(``layers.Dense``, the convolutions and batch normalization share them).

A built-in activation is saved by its Keras name; a user's function (or
initializer function) by the name it is registered or defined under, found
again through ``custom_objects`` or ``register_keras_serializable``
(``serialization.py``).
"""
from __future__ import annotations

import inspect
from typing import Any

from distrib.keras import activations, initializers, serialization

__all__ = ["activation_name", "activation_from", "initializer_config", "initializer_from"]


def activation_name(fn: Any) -> str:
    """A built-in activation's Keras name, or the name a user's function is saved under."""
    name = activations.serialize(fn)
    try:
        if activations.get(name) is fn:
            return name
    except ValueError:
        pass
    return serialization.serialize_function(fn)


def activation_from(identifier: Any) -> Any:
    return serialization.resolve_function(identifier, activations.get, "activation")


INITIALIZERS = {name: getattr(initializers, name) for name in initializers.__all__
                if inspect.isclass(getattr(initializers, name))}


def initializer_config(init: Any) -> Any:
    """Keras' ``{"class_name", "config"}`` of an initializer (its constructor's
    arguments only), or a user's function by name."""
    if not isinstance(init, initializers.Initializer):
        return serialization.serialize_function(init)
    return {"module": type(init).__module__, "class_name": type(init).__name__,
            "config": serialization.constructor_config(init, init.get_config()),
            "registered_name": serialization.get_registered_name(type(init))}


def initializer_from(config: Any) -> Any:
    if isinstance(config, dict):
        return serialization.deserialize_keras_object(config, INITIALIZERS,
                                                      printable_module_name="initializer")
    return serialization.resolve_function(config, initializers.get, "initializer")
