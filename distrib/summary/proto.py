"""TensorBoard's event-file messages, made at run time from a descriptor
written here in Python: no ``.proto`` file, no protoc step, no tensorboard
import.

The field numbers and types are TensorFlow's (``tensorboard/compat/proto/
event.proto``, ``summary.proto``, ``tensor.proto``, ``tensor_shape.proto``),
so the bytes are the ones TF writes and any TensorBoard reads; only the
messages an event file of ours holds are here, ``TensorProto`` with the
fields a summary uses. The messages live in a descriptor pool of their own
under the package ``distrib.tensorboard``: a process that also imports
TensorBoard's generated classes (a test that reads our files back) sees no
clash of names.

:func:`messages` builds the classes once, on first use (importing protobuf
costs a little: a process that writes no summary never pays it).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

__all__ = ["messages", "DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_INT64", "DT_STRING", "DT_BOOL",
           "DATA_CLASS_SCALAR", "DATA_CLASS_TENSOR", "DATA_CLASS_BLOB_SEQUENCE"]

# tensorflow/core/framework/types.proto's DataType values a summary uses
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_STRING, DT_INT64, DT_BOOL = 1, 2, 3, 7, 9, 10
# summary.proto's DataClass
DATA_CLASS_SCALAR, DATA_CLASS_TENSOR, DATA_CLASS_BLOB_SEQUENCE = 1, 2, 3

_PACKAGE = "distrib.tensorboard"

# field types and labels (google/protobuf/descriptor.proto)
_DOUBLE, _FLOAT, _INT64, _INT32, _BOOL, _STRING, _MESSAGE, _BYTES, _ENUM = 1, 2, 3, 5, 8, 9, 11, 12, 14
_OPTIONAL, _REPEATED = 1, 3

# message -> [(field, number, type, label, message or enum type, oneof)]
_MESSAGES: dict[str, list[tuple]] = {
    "TensorShapeProto.Dim": [("size", 1, _INT64, _OPTIONAL, None, None),
                             ("name", 2, _STRING, _OPTIONAL, None, None)],
    "TensorShapeProto": [("dim", 2, _MESSAGE, _REPEATED, "TensorShapeProto.Dim", None),
                         ("unknown_rank", 3, _BOOL, _OPTIONAL, None, None)],
    "TensorProto": [("dtype", 1, _INT32, _OPTIONAL, None, None),   # an enum on the wire alike
                    ("tensor_shape", 2, _MESSAGE, _OPTIONAL, "TensorShapeProto", None),
                    ("version_number", 3, _INT32, _OPTIONAL, None, None),
                    ("tensor_content", 4, _BYTES, _OPTIONAL, None, None),
                    ("float_val", 5, _FLOAT, _REPEATED, None, None),
                    ("double_val", 6, _DOUBLE, _REPEATED, None, None),
                    ("int_val", 7, _INT32, _REPEATED, None, None),
                    ("string_val", 8, _BYTES, _REPEATED, None, None),
                    ("int64_val", 10, _INT64, _REPEATED, None, None),
                    ("bool_val", 11, _BOOL, _REPEATED, None, None)],
    "HistogramProto": [("min", 1, _DOUBLE, _OPTIONAL, None, None),
                       ("max", 2, _DOUBLE, _OPTIONAL, None, None),
                       ("num", 3, _DOUBLE, _OPTIONAL, None, None),
                       ("sum", 4, _DOUBLE, _OPTIONAL, None, None),
                       ("sum_squares", 5, _DOUBLE, _OPTIONAL, None, None),
                       ("bucket_limit", 6, _DOUBLE, _REPEATED, None, None),
                       ("bucket", 7, _DOUBLE, _REPEATED, None, None)],
    "SummaryMetadata.PluginData": [("plugin_name", 1, _STRING, _OPTIONAL, None, None),
                                   ("content", 2, _BYTES, _OPTIONAL, None, None)],
    "SummaryMetadata": [("plugin_data", 1, _MESSAGE, _OPTIONAL, "SummaryMetadata.PluginData", None),
                        ("display_name", 2, _STRING, _OPTIONAL, None, None),
                        ("summary_description", 3, _STRING, _OPTIONAL, None, None),
                        ("data_class", 4, _INT32, _OPTIONAL, None, None)],
    "Summary.Image": [("height", 1, _INT32, _OPTIONAL, None, None),
                      ("width", 2, _INT32, _OPTIONAL, None, None),
                      ("colorspace", 3, _INT32, _OPTIONAL, None, None),
                      ("encoded_image_string", 4, _BYTES, _OPTIONAL, None, None)],
    "Summary.Value": [("tag", 1, _STRING, _OPTIONAL, None, None),
                      ("simple_value", 2, _FLOAT, _OPTIONAL, None, "value"),
                      ("image", 4, _MESSAGE, _OPTIONAL, "Summary.Image", "value"),
                      ("histo", 5, _MESSAGE, _OPTIONAL, "HistogramProto", "value"),
                      ("node_name", 7, _STRING, _OPTIONAL, None, None),
                      ("tensor", 8, _MESSAGE, _OPTIONAL, "TensorProto", "value"),
                      ("metadata", 9, _MESSAGE, _OPTIONAL, "SummaryMetadata", None)],
    "Summary": [("value", 1, _MESSAGE, _REPEATED, "Summary.Value", None)],
    "LogMessage": [("level", 1, _INT32, _OPTIONAL, None, None),
                   ("message", 2, _STRING, _OPTIONAL, None, None)],
    "SessionLog": [("status", 1, _INT32, _OPTIONAL, None, None),
                   ("checkpoint_path", 2, _STRING, _OPTIONAL, None, None),
                   ("msg", 3, _STRING, _OPTIONAL, None, None)],
    "Event": [("wall_time", 1, _DOUBLE, _OPTIONAL, None, None),
              ("step", 2, _INT64, _OPTIONAL, None, None),
              ("file_version", 3, _STRING, _OPTIONAL, None, "what"),
              ("graph_def", 4, _BYTES, _OPTIONAL, None, "what"),
              ("summary", 5, _MESSAGE, _OPTIONAL, "Summary", "what"),
              ("log_message", 6, _MESSAGE, _OPTIONAL, "LogMessage", "what"),
              ("session_log", 7, _MESSAGE, _OPTIONAL, "SessionLog", "what")],
}


@functools.cache
def messages() -> SimpleNamespace:
    """The message classes: ``.Event``, ``.Summary`` (``.Summary.Value``,
    ``.Summary.Image``), ``.SummaryMetadata``, ``.HistogramProto``,
    ``.TensorProto``, ``.TensorShapeProto``, ``.LogMessage``, ``.SessionLog``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="distrib/summary/event.proto",
                                              package=_PACKAGE, syntax="proto3")
    made: dict[str, descriptor_pb2.DescriptorProto] = {}
    for full, fields in sorted(_MESSAGES.items(), key=lambda kv: "." in kv[0]):   # outer first
        outer, _, inner = full.partition(".")
        if inner:
            msg = made[outer].nested_type.add(name=inner)
        else:
            msg = made[full] = file.message_type.add(name=full)
        oneofs: list[str] = []
        for name, number, ftype, label, type_name, oneof in fields:
            field = msg.field.add(name=name, number=number, type=ftype, label=label)
            if type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if oneof is not None:
                if oneof not in oneofs:
                    oneofs.append(oneof)
                    msg.oneof_decl.add(name=oneof)
                field.oneof_index = oneofs.index(oneof)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    classes = {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
               for name in _MESSAGES if "." not in name}
    return SimpleNamespace(**classes)
