"""TF1's summary ops: graph ops whose value is a serialized ``Summary`` (a
string scalar), their CPU kernels, and ``merge`` / ``merge_all``.

``scalar_op(name, tensor)`` adds a ``ScalarSummary`` op colocated with the
op that makes ``tensor``: the summary is computed on the task that owns its
input, and only the serialized bytes travel to whoever fetches it (the
chief's Supervisor, a ``SummarySaverHook``). The op joins the graph's
``GraphKeys.SUMMARIES`` collection (or ``collections``), which
``merge_all`` merges into one ``MergeSummary``. ``dt.summary.scalar`` and
its siblings call these when no default writer is set (see
``distrib.summary.writer``).

The kernels go into the CPU kernel registry by :func:`register_kernels`,
which the process runtime (``distrib.process``) calls in every process; their
``form`` attr picks TF1's value forms (``v1``) or TF2's tensor forms
(``v2``, what a traced ``dt.function`` writes through a writer), see
``distrib.summary.values``.
"""
from __future__ import annotations

import logging
import re
from typing import Any, Sequence

import numpy as np

import kernels
from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import GraphKeys, Tensor, get_default_graph
from distrib.ops import math_ops
from distrib.ops.gradients import no_gradient
from distrib.summary import proto, values

logger = logging.getLogger(__name__)

# TF's summary_op_util: what a tag (an op name) may not hold
_INVALID_TAG_CHARACTERS = re.compile(r"[^-/\w\.]")

__all__ = ["scalar_op", "histogram_op", "image_op", "text_op", "merge", "merge_all",
           "summary_bytes", "SUMMARY_OP_TYPES", "KERNELS", "register_kernels"]

SUMMARY_OP_TYPES = ("ScalarSummary", "HistogramSummary", "ImageSummary", "TextSummary", "MergeSummary")


# -- kernels --------------------------------------------------------------------------------
def summary_bytes(value: Any) -> bytes:
    """A fetched or kernel-input serialized Summary as bytes (a 0-d string array, bytes)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "S":
            return value.tobytes()   # all of it: .item() would drop trailing NULs
        return summary_bytes(value.reshape(-1)[0] if value.size else b"")
    if isinstance(value, str):
        return value.encode("latin-1")
    raise InvalidArgumentError(f"a serialized Summary is bytes; got {type(value).__name__}")


def _out(data: bytes) -> list:
    return [np.array(data, dtype=np.bytes_)]


def _scalar_kernel(inputs: list, attrs: dict) -> list:
    return _out(values.serialize([values.scalar_value(attrs["tag"], inputs[0], attrs.get("form", "v1"))]))


def _histogram_kernel(inputs: list, attrs: dict) -> list:
    return _out(values.serialize([values.histogram_value(attrs["tag"], inputs[0], attrs.get("form", "v1"),
                                                         attrs.get("buckets"))]))


def _image_kernel(inputs: list, attrs: dict) -> list:
    return _out(values.serialize(values.image_values(attrs["tag"], inputs[0], attrs.get("form", "v1"),
                                                     int(attrs.get("max_images", 3)))))


def _text_kernel(inputs: list, attrs: dict) -> list:
    return _out(values.serialize([values.text_value(attrs["tag"], inputs[0])]))


def _merge_kernel(inputs: list, attrs: dict) -> list:
    m = proto.messages()
    merged = m.Summary()
    seen: set[str] = set()
    for part in inputs:
        summary = m.Summary.FromString(summary_bytes(part))
        for v in summary.value:
            if v.tag in seen:   # TF's MergeSummary refuses a tag twice
                raise kernels.KernelError(f"MergeSummary: duplicate tag {v.tag!r} in the summaries")
            seen.add(v.tag)
        merged.value.extend(summary.value)
    return _out(merged.SerializeToString())


KERNELS = {"ScalarSummary": _scalar_kernel, "HistogramSummary": _histogram_kernel,
           "ImageSummary": _image_kernel, "TextSummary": _text_kernel, "MergeSummary": _merge_kernel}


def register_kernels() -> None:
    """Register the summary ops' CPU kernels and declare the ops not
    differentiable (the process runtime calls it, so every task's process
    has them; the kernels package cannot import distrib)."""
    for op_type, kernel in KERNELS.items():
        kernels.register(op_type, kernels.CPU)(kernel)
    for op_type in SUMMARY_OP_TYPES:
        no_gradient(op_type)


# -- builders -------------------------------------------------------------------------------
def _summary_op(op_type: str, name: str, data: Any, attrs: dict,
                collections: Sequence[str] | None, family: str | None = None) -> Tensor:
    x = math_ops.convert_operand(data)
    graph = x.graph
    name = clean_tag(name)
    tag = _tag(graph, name, family)
    with graph.colocate_with(x.op):   # computed where its input lives (TF's summary ops too)
        op = graph.create_op(op_type, [x], {"tag": tag, **attrs}, name or op_type,
                             output_specs=[(dtypes.string, [])])
    out = op.outputs[0]
    for key in (GraphKeys.SUMMARIES,) if collections is None else collections:
        graph.add_to_collection(key, out)
    return out


def clean_tag(name: str) -> str:
    """TF's ``summary_op_util.clean_tag``: characters an op name cannot hold become
    ``_`` (``"loss (raw)"`` -> ``"loss__raw_"``) and a leading ``/`` goes, with a log line."""
    cleaned = _INVALID_TAG_CHARACTERS.sub("_", name).lstrip("/") if name else name
    if cleaned != name:
        logger.info("Summary name %s is illegal; using %s instead.", name, cleaned)
    return cleaned


def _tag(graph: Any, name: str, family: str | None) -> str:
    """TF1's tag: the name under the current name scope (and ``family``'s prefix)."""
    scope = graph.get_name_scope()
    tag = f"{scope}/{name}" if scope else name
    return f"{family}/{tag}" if family else tag


def scalar_op(name: str, tensor: Any, collections: Sequence[str] | None = None,
              family: str | None = None, form: str = "v1") -> Tensor:
    """A ``ScalarSummary`` of ``tensor`` (one value)."""
    return _summary_op("ScalarSummary", name, tensor, {"form": form}, collections, family)


def histogram_op(name: str, values_: Any, collections: Sequence[str] | None = None,
                 family: str | None = None, form: str = "v1", buckets: int | None = None) -> Tensor:
    """A ``HistogramSummary`` of ``values_`` (any shape)."""
    return _summary_op("HistogramSummary", name, values_, {"form": form, "buckets": buckets},
                       collections, family)


def image_op(name: str, tensor: Any, max_outputs: int = 3, collections: Sequence[str] | None = None,
             family: str | None = None, form: str = "v1") -> Tensor:
    """An ``ImageSummary`` of ``tensor`` ([k, h, w, c]; uint8, or floats in [0, 1])."""
    return _summary_op("ImageSummary", name, tensor, {"form": form, "max_images": int(max_outputs)},
                       collections, family)


def text_op(name: str, tensor: Any, collections: Sequence[str] | None = None) -> Tensor:
    """A ``TextSummary`` of a string tensor (the text plugin's form)."""
    return _summary_op("TextSummary", name, tensor, {}, collections)


def merge(inputs: Sequence[Any], collections: Sequence[str] | None = None,
          name: str | None = None) -> Tensor:
    """One ``MergeSummary`` of serialized-Summary tensors (TF's ``tf.summary.merge``)."""
    tensors = [math_ops.convert_operand(t) for t in inputs]
    if not tensors:
        raise InvalidArgumentError("merge needs at least one summary tensor")
    graph = tensors[0].graph
    out = graph.create_op("MergeSummary", tensors, {}, name or "Merge/MergeSummary",
                          output_specs=[(dtypes.string, [])]).outputs[0]
    for key in collections or ():
        graph.add_to_collection(key, out)
    return out


def merge_all(key: str = GraphKeys.SUMMARIES, scope: str | None = None,
              name: str | None = None) -> Tensor | None:
    """The merge of every summary in collection ``key`` of the default graph;
    None when it holds none (TF's ``tf.summary.merge_all``)."""
    found = get_default_graph().get_collection(key, scope)
    return merge(found, name=name) if found else None
