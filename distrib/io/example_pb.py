"""``tf.train.Example`` and its parts as protobuf messages, made at run time
from a descriptor written here (no ``.proto`` file, no protoc step), as
``distrib/summary/proto.py`` makes the event-file messages.

Field numbers, types and packing are TensorFlow's
(``tensorflow/core/example/example.proto`` and ``feature.proto``, proto3:
repeated numbers packed), so a serialized ``Example`` is the bytes TF writes
and reads: files of Examples are interchangeable with TF's. The messages
live in a descriptor pool of their own, under TF's package name
``tensorflow`` (so a type URL or text dump names them as TF does), which
cannot clash with TensorBoard's or TF's generated classes in one process.

``dt.train.Example``, ``Features``, ``Feature``, ``BytesList``,
``FloatList``, ``Int64List``, ``FeatureList``, ``FeatureLists`` and
``SequenceExample`` are the classes of :func:`messages` (built once, on
first use: a process that never touches an Example never imports protobuf).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

__all__ = ["messages", "NAMES"]

_PACKAGE = "tensorflow"
_FLOAT, _INT64, _STRING, _MESSAGE, _BYTES = 2, 3, 9, 11, 12
_OPTIONAL, _REPEATED = 1, 3

# message -> [(field, number, type, label, message type, oneof)]; "map:" marks a map field
_MESSAGES: dict[str, list[tuple]] = {
    "BytesList": [("value", 1, _BYTES, _REPEATED, None, None)],
    "FloatList": [("value", 1, _FLOAT, _REPEATED, None, None)],
    "Int64List": [("value", 1, _INT64, _REPEATED, None, None)],
    "Feature": [("bytes_list", 1, _MESSAGE, _OPTIONAL, "BytesList", "kind"),
                ("float_list", 2, _MESSAGE, _OPTIONAL, "FloatList", "kind"),
                ("int64_list", 3, _MESSAGE, _OPTIONAL, "Int64List", "kind")],
    "Features": [("feature", 1, _MESSAGE, _REPEATED, "map:Feature", None)],
    "FeatureList": [("feature", 1, _MESSAGE, _REPEATED, "Feature", None)],
    "FeatureLists": [("feature_list", 1, _MESSAGE, _REPEATED, "map:FeatureList", None)],
    "Example": [("features", 1, _MESSAGE, _OPTIONAL, "Features", None)],
    "SequenceExample": [("context", 1, _MESSAGE, _OPTIONAL, "Features", None),
                        ("feature_lists", 2, _MESSAGE, _OPTIONAL, "FeatureLists", None)],
}
NAMES = tuple(_MESSAGES)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


@functools.cache
def messages() -> SimpleNamespace:
    """The message classes, by name (``.Example``, ``.Feature`` ...)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="distrib/io/example.proto",
                                              package=_PACKAGE, syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = file.message_type.add(name=msg_name)
        oneofs: list[str] = []
        for name, number, ftype, label, type_name, oneof in fields:
            field = msg.field.add(name=name, number=number, type=ftype, label=label)
            if type_name is not None and type_name.startswith("map:"):
                entry_name = f"{_camel(name)}Entry"   # protoc's name for a map's entry type
                entry = msg.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=_STRING, label=_OPTIONAL)
                entry.field.add(name="value", number=2, type=_MESSAGE, label=_OPTIONAL,
                                type_name=f".{_PACKAGE}.{type_name[4:]}")
                field.type_name = f".{_PACKAGE}.{msg_name}.{entry_name}"
            elif type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if oneof is not None:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{_PACKAGE}.{name}")) for name in _MESSAGES}
    return SimpleNamespace(**classes)


def __getattr__(name: str) -> Any:
    if name in _MESSAGES:
        return getattr(messages(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
