"""Keras' object serialization: a class or function by name, an object as JSON.

A Keras object (a layer, a model, an optimizer, a loss, a metric, an
initializer) is saved as its *config*, never pickled: ``serialize_keras_object``
gives Keras' dict ``{"module", "class_name", "config", "registered_name"}``
(``config`` is the object's ``get_config()``), and ``deserialize_keras_object``
makes the object again with the class's ``from_config``. A function (a user's
loss or activation) is saved as its name.

A name is looked up as Keras does (``object_registration.get_registered_object``):
first in the open ``custom_object_scope``\\ s (``load_model(custom_objects=...)``
opens one for the whole load, so a layer's ``from_config`` finds a user's
activation by name too), then among the classes registered with
``@register_keras_serializable(package)`` (``"package>Name"``, as Keras keys
them), then among distrib's own (the module's table given by the caller: for a
layer or model, ``distrib.keras.layers``' table and distrib's model classes). A name found
nowhere is Keras' ``ValueError("Unknown layer: 'Name'. ...")``, naming
``custom_objects`` as the way to give it.

These rules exist so that a saved model is plain JSON a person can read and
a program of another version can load, with no code in the file: what is
not one of distrib's classes must be handed to the loader by the user.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["register_keras_serializable", "get_registered_object",
           "get_registered_name", "custom_object_scope", "CustomObjectScope",
           "serialize_keras_object", "deserialize_keras_object", "serialize_function",
           "resolve_function", "constructor_config", "to_json_value", "unknown_error"]

_GLOBAL: dict[str, Any] = {}          # "package>Name" -> class or function (the user's)
_NAMES: dict[Any, str] = {}           # class or function -> its registered name
_local = threading.local()            # the stack of open custom object scopes


def register_keras_serializable(package: str = "Custom", name: str | None = None
                                ) -> Callable[[Any], Any]:
    """``@register_keras_serializable(package='Custom', name=None)``: a class (with
    ``get_config``) or a function, found by ``load_model`` with no ``custom_objects``
    (Keras' decorator; the key is ``'package>name'``)."""
    def decorator(arg: Any) -> Any:
        key = f"{package}>{name or arg.__name__}"
        if inspect.isclass(arg) and not callable(getattr(arg, "get_config", None)):
            raise ValueError("Cannot register a class that does not have a get_config() "
                             "method.")
        _GLOBAL[key] = arg
        _NAMES[arg] = key
        return arg
    return decorator


def get_registered_name(obj: Any) -> str:
    """The name ``obj`` (a class or function) is saved under: its registered key, or
    its own name."""
    return _NAMES.get(obj, getattr(obj, "__name__", type(obj).__name__))


def _scopes() -> list[dict[str, Any]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


class CustomObjectScope:
    """``with CustomObjectScope({'MyLayer': MyLayer}):``: names deserialization finds."""

    def __init__(self, *objects: Mapping[str, Any] | None) -> None:
        self._objects: dict[str, Any] = {}
        for mapping in objects:
            self._objects.update(mapping or {})

    def __enter__(self) -> CustomObjectScope:
        _scopes().append(self._objects)
        return self

    def __exit__(self, *exc: Any) -> None:
        _scopes().pop()


custom_object_scope = CustomObjectScope


def get_registered_object(name: str, custom_objects: Mapping[str, Any] | None = None,
                          module_objects: Mapping[str, Any] | None = None) -> Any:
    """The class or function saved as ``name``, or None (see the module header)."""
    for table in reversed(_scopes()):
        if name in table:
            return table[name]
    if custom_objects and name in custom_objects:
        return custom_objects[name]
    if name in _GLOBAL:
        return _GLOBAL[name]
    if module_objects and name in module_objects:
        return module_objects[name]
    return None


def unknown_error(kind: str, name: str) -> ValueError:
    """Keras' error for a name found nowhere, saying how to give it."""
    return ValueError(
        f"Unknown {kind}: {name!r}. Please ensure you are using a "
        "`dt.keras.utils.custom_object_scope` and that this object is included in the scope: "
        f"pass it to load_model(..., custom_objects={{{name!r}: ...}}) or decorate it with "
        "@dt.keras.utils.register_keras_serializable()")


# -- objects -----------------------------------------------------------------------------

def serialize_keras_object(obj: Any) -> Any:
    """Keras' dict for an object with ``get_config`` (None stays None; a function or a
    string is its name)."""
    if obj is None or isinstance(obj, str):
        return obj
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return serialize_function(obj)
    get_config = getattr(obj, "get_config", None)
    if not callable(get_config):
        raise ValueError(f"Cannot serialize {obj!r}: it has no get_config() method; give "
                         "its class get_config() (and from_config()) to save it")
    cls = type(obj)
    return {"module": cls.__module__, "class_name": cls.__name__,
            "config": to_json_value(get_config(), f"{cls.__name__}.get_config()"),
            "registered_name": get_registered_name(cls)}


def deserialize_keras_object(config: Any, module_objects: Mapping[str, Any] | None = None,
                             custom_objects: Mapping[str, Any] | None = None,
                             printable_module_name: str = "object") -> Any:
    """The object for Keras' dict (``{"class_name", "config"}``, TF 2.x's, or with
    ``registered_name``); a string is looked up and, if a class, made with no arguments."""
    if config is None:
        return None
    if isinstance(config, str):
        found = get_registered_object(config, custom_objects, module_objects)
        if found is None:
            raise unknown_error(printable_module_name, config)
        return found() if inspect.isclass(found) else found
    if not isinstance(config, Mapping) or "class_name" not in config or "config" not in config:
        raise ValueError(f"Improper config format for {config!r}. Expecting python dict "
                         "contains `class_name` and `config` as keys")
    names = [n for n in (config.get("registered_name"), config["class_name"]) if n]
    cls = None
    for name in names:
        cls = get_registered_object(name, custom_objects, module_objects)
        if cls is not None:
            break
    if cls is None:
        raise unknown_error(printable_module_name, names[0])
    inner = dict(config["config"] or {})
    from_config = getattr(cls, "from_config", None)
    with CustomObjectScope(custom_objects):
        if callable(from_config):
            if "custom_objects" in inspect.signature(from_config).parameters:
                return from_config(inner, custom_objects=custom_objects)
            return from_config(inner)
        return cls(**inner)


# -- functions ---------------------------------------------------------------------------

def serialize_compile_arg(obj: Any, base: type) -> Any:
    """One of ``compile``'s losses or metrics as saved: a name as given, a class by
    its registered name, an instance (or a function) as Keras' dict or name."""
    if obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, type) and issubclass(obj, base):
        return get_registered_name(obj)
    return serialize_keras_object(obj)


def deserialize_compile_arg(config: Any, kind: str, get: Callable[[Any], Any],
                            known: Mapping[str, Any],
                            custom_objects: Mapping[str, Any] | None = None) -> Any:
    """What :func:`serialize_compile_arg` saved, for ``compile``: a user's function or
    class from ``custom_objects`` or the registry, a name ``get`` takes as it is,
    else a ``{"class_name", "config"}`` dict of one of ``known``; ``kind`` ("loss",
    "metric") names what was not found."""
    if isinstance(config, str):
        found = get_registered_object(config, custom_objects)
        if found is not None:
            return found
        try:
            get(config)   # a name compile takes
        except ValueError:
            raise unknown_error(kind, config) from None
        return config
    return deserialize_keras_object(config, known, custom_objects, printable_module_name=kind)


def wrapper_config(base: Mapping[str, Any], fn_kwargs: Mapping[str, Any],
                   fn: Callable[..., Any] | None) -> dict[str, Any]:
    """A loss's or metric's function wrapper as Keras saves it: its base config,
    the function's keyword arguments, and the function itself (by name) when
    ``fn`` is given (a plain wrapper, not one of the named subclasses)."""
    config = {**base, **fn_kwargs}
    if fn is not None:
        config["fn"] = serialize_function(fn)
    return config


def wrapper_kwargs(config: Mapping[str, Any], builtin: Callable[[Any], Any],
                   kind: str) -> dict[str, Any]:
    """The constructor arguments of a wrapper saved by :func:`wrapper_config`."""
    kwargs = dict(config)
    if "fn" in kwargs:
        kwargs["fn"] = resolve_function(kwargs["fn"], builtin, kind)
    return kwargs


def serialize_function(fn: Any) -> str:
    """A function as the name it is saved under."""
    return get_registered_name(fn)


def resolve_function(identifier: Any, builtin: Callable[[Any], Any],
                     kind: str = "function") -> Any:
    """A function given by name: the scopes' and registry's first, then ``builtin(name)``
    (the module's own ``get``); anything else goes to ``builtin`` as it is."""
    if isinstance(identifier, Mapping) and "class_name" in identifier:   # Keras 3's form
        identifier = identifier.get("registered_name") or identifier.get("config")
    if isinstance(identifier, str):
        found = get_registered_object(identifier)
        if found is not None:
            return found
        try:
            return builtin(identifier)
        except ValueError:
            raise unknown_error(kind, identifier) from None
    return builtin(identifier)


# -- configs -----------------------------------------------------------------------------

def constructor_config(obj: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` cut to the arguments ``type(obj).__init__`` takes (a subclass that
    fixes some of its base's, ``GlorotUniform(seed)``, saves only its own)."""
    params = inspect.signature(type(obj).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(config)
    return {k: v for k, v in config.items() if k in params}


def to_json_value(value: Any, where: str) -> Any:
    """``value`` as plain JSON (tuples as lists, numpy scalars as numbers); anything
    else is a ``TypeError`` naming ``where`` it came from."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [to_json_value(v, where) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v, where) for k, v in value.items()}
    if inspect.isfunction(value):
        return serialize_function(value)
    if callable(getattr(value, "get_config", None)):
        return serialize_keras_object(value)
    raise TypeError(f"{where} holds {value!r} ({type(value).__name__}), which is not "
                    "JSON serializable: make get_config() return plain values (numbers, "
                    "strings, lists, dicts) or objects with get_config()")


def by_identifier(identifier: Any, base: type, by_name: Mapping[str, Callable[[], Any]],
                  key: Callable[[str], str] = lambda name: name) -> Any | None:
    """The object a Keras ``get(identifier)`` gives for the cases every kind shares:
    an instance of ``base`` as it is, a subclass of ``base`` made with its defaults,
    a name (``key(name)`` in ``by_name``) made; None for anything else (the caller's
    own cases, a function say, then its error)."""
    if isinstance(identifier, base):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, base):
        return identifier()
    if isinstance(identifier, str):
        made = by_name.get(key(identifier))
        if made is not None:
            return made()
    return None

