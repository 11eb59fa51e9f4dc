"""``dt.keras.layers.Lambda``: any function of tensors as a layer (Keras 2's).

``Lambda(function, output_shape=None, mask=None, arguments=None)`` calls
``function(inputs, **arguments)`` (with ``training=`` when the function takes
it). It has no weights: a function that makes variables is refused by Keras
and is not tracked here either (write a ``Layer`` subclass for that).

Its config keeps the function as Keras 2 does: a named function by the name
it is registered or defined under (``function_type: "function"``, found again
through ``custom_objects``), a ``lambda`` as its marshalled code
(``function_type: "lambda"``, Keras 2's ``func_dump``), its names looked up
in the module it was written in (when loaded) and ``custom_objects``. Loading a lambda runs
the code saved with the model, so ``from_config`` refuses it unless
``dt.keras.config.enable_unsafe_deserialization()`` was called or the load
is not in safe mode, as Keras does.
"""
from __future__ import annotations

import base64
import inspect
import marshal
import sys
import types
from typing import Any, Callable

from distrib.keras import serialization
from distrib.keras.base_layer import Layer, shape_tuple

__all__ = ["Lambda", "enable_unsafe_deserialization"]

_UNSAFE = [False]


def enable_unsafe_deserialization() -> None:
    """Let ``Lambda.from_config`` load a lambda's saved code (Keras')."""
    _UNSAFE[0] = True


class Lambda(Layer):
    """``Lambda(function, output_shape=None, mask=None, arguments=None)``."""

    def __init__(self, function: Callable[..., Any], output_shape: Any = None,
                 mask: Any = None, arguments: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not callable(function):
            raise TypeError(f"Lambda needs a callable, got {function!r}")
        if mask is not None:
            raise NotImplementedError("Lambda(mask=...) is not supported by dt.keras: no "
                                      "layer here propagates masks")
        self.function = function
        self.arguments = dict(arguments or {})
        self._output_shape = output_shape
        self._fn_takes_training = "training" in inspect.signature(function).parameters
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        kwargs = dict(self.arguments)
        if self._fn_takes_training:
            kwargs["training"] = training
        return self.function(inputs, **kwargs)

    def compute_output_shape(self, input_shape: Any) -> Any:
        if self._output_shape is None:
            return shape_tuple(input_shape)
        if callable(self._output_shape):
            return self._output_shape(input_shape)
        return (shape_tuple(input_shape)[0], *tuple(self._output_shape))

    def get_config(self) -> dict[str, Any]:
        fn = self.function
        if getattr(fn, "__name__", "") == "<lambda>":
            function: Any = base64.b64encode(marshal.dumps(fn.__code__)).decode("ascii")
            kind = "lambda"
        else:
            function, kind = serialization.serialize_function(fn), "function"
        shape = self._output_shape
        if callable(shape):
            raise NotImplementedError("Lambda(output_shape=<a function>) cannot be saved by "
                                      "dt.keras: give the shape as a tuple")
        return {**super().get_config(), "function": function, "function_type": kind,
                "module": getattr(fn, "__module__", None),
                "output_shape": None if shape is None else list(shape),
                "output_shape_type": "raw", "output_shape_module": None,
                "arguments": self.arguments}

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> Lambda:
        config = dict(config)
        kind = config.pop("function_type", "function")
        source = config.pop("function")
        module = sys.modules.get(config.pop("module", None) or "")
        for key in ("output_shape_type", "output_shape_module"):
            config.pop(key, None)
        if kind == "lambda":
            if not _UNSAFE[0]:
                raise ValueError(
                    "Requested the deserialization of a Lambda layer with a Python `lambda` "
                    "inside it. This carries a potential risk of arbitrary code execution "
                    "and thus it is disallowed by default. If you trust the source of the "
                    "saved model, call dt.keras.config.enable_unsafe_deserialization() "
                    "(dt.keras.layers.lambda_layer.enable_unsafe_deserialization) first.")
            code = marshal.loads(base64.b64decode(source))
            # its names are looked up where it was written, when that module is loaded here
            scope = {**(vars(module) if module is not None else {}), **(custom_objects or {})}
            function = types.FunctionType(code, scope, "<lambda>")
        else:
            function = serialization.resolve_function(source, _no_builtin, "function")
        shape = config.pop("output_shape", None)
        return cls(function, output_shape=None if shape is None else tuple(shape), **config)


def _no_builtin(name: Any) -> Any:
    if callable(name):
        return name
    raise ValueError(f"Unknown function: {name!r}")
