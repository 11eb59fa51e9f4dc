"""Shape functions and catalogue entries of the bounding-box crop ImageNet
trainers make of each JPEG: ``ExtractJpegShape``, ``DecodeAndCropJpeg``,
``SampleDistortedBoundingBoxV2`` (the op TF1's and TF2's Python both emit)
and ``BroadcastTo``.

TF's build-time checks: the sampler's ``image_size`` is a vector of 3
integers, its boxes ``[batch, num_boxes, 4]`` floats; ``crop_window`` a
vector of 4. The sampler draws random numbers, so its entry has side
effects: the graph optimizer never folds it into a constant, and a traced
function runs it (TF marks it stateful). Kernels: kernels/cpu/image_boxes.py;
builders: distrib.ops.image_boxes.
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.conv_shapes import known_int_values
from distrib.framework.gather_shapes import const_value
from distrib.framework.op_shapes import Spec
from distrib.framework.tensor_shape import TensorShape

__all__ = ["ENTRIES", "extract_jpeg_shape", "decode_and_crop_jpeg", "sample_box",
           "broadcast_to"]


def _fail(op_type: str, name: str, detail: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{op_type} op {name!r}: {detail}")


def _string_scalar(op_type: str, name: str, t: Any) -> None:
    if t.dtype != dtypes.string or t.shape.rank not in (None, 0):
        raise _fail(op_type, name, f"contents must be a string scalar, got {t.dtype.name} "
                    f"{t.shape}")


def _vector(op_type: str, name: str, t: Any, n: int, what: str) -> None:
    dims = t.shape.as_list()
    if not t.dtype.is_integer or (dims is not None and (len(dims) != 1 or dims[0] not in (None, n))):
        raise _fail(op_type, name, f"{what} must be an integer vector of {n} elements, got "
                    f"{t.dtype.name} {t.shape}")


def extract_jpeg_shape(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _string_scalar(op_type, name, inputs[0])
    return [(dtypes.as_dtype(attrs.get("output_type") or "int32"), TensorShape([3]))]


def decode_and_crop_jpeg(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    _string_scalar(op_type, name, inputs[0])
    _vector(op_type, name, inputs[1], 4, "crop_window [crop_y, crop_x, crop_height, crop_width]")
    window = const_value(inputs[1])
    h, w = (None, None) if window is None else (int(window[2]), int(window[3]))
    # a window of no rows or columns: unknown here, TF's error when it runs
    h, w = (None if d is None or d <= 0 else d for d in (h, w))
    return [(dtypes.uint8, TensorShape([h, w, int(attrs.get("channels") or 0) or None]))]


def sample_box(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    size, boxes = inputs[0], inputs[1]
    _vector(op_type, name, size, 3, "image_size [height, width, channels]")
    dims = boxes.shape.as_list()
    if boxes.dtype != dtypes.float32 or (dims is not None and (len(dims) != 3
                                                                or dims[2] not in (None, 4))):
        raise _fail(op_type, name, f"bounding_boxes must be float32 [batch, num_boxes, 4] "
                    f"([ymin, xmin, ymax, xmax] in [0, 1]), got {boxes.dtype.name} {boxes.shape}")
    if len(inputs) > 2 and inputs[2].shape.rank not in (None, 0):
        raise _fail(op_type, name, f"min_object_covered must be 0-D, got {inputs[2].shape}")
    return [(size.dtype, TensorShape([3])), (size.dtype, TensorShape([3])),
            (dtypes.float32, TensorShape([1, 1, 4]))]


def broadcast_to(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    x, shape = inputs
    dims = shape.shape.as_list()
    if not shape.dtype.is_integer or (dims is not None and len(dims) != 1):
        raise _fail(op_type, name, f"shape must be an integer vector, got {shape.dtype.name} "
                    f"{shape.shape}")
    known = known_int_values(shape)   # a constant's values, or the dims of a Shape's input
    if known is None:
        return [(x.dtype, TensorShape(None if dims is None or dims[0] is None
                                      else [None] * dims[0]))]
    out = [None if d is None or d < 0 else d for d in known]
    have = x.shape.as_list()
    if have is not None:   # TF's shape function: right-aligned, a known dim > 1 must match
        if len(have) > len(out):
            raise _fail(op_type, name, f"Cannot broadcast a tensor with shape {x.shape} to "
                        f"shape {out}: the shape has fewer dimensions")
        for i, d in enumerate(have[::-1]):
            j = len(out) - 1 - i
            if d is not None and d > 1:
                if out[j] is not None and out[j] != d:
                    raise _fail(op_type, name, f"Unable to broadcast tensor of shape {x.shape} "
                                f"to tensor of shape {out}: dimension {j} is {out[j]}, not "
                                f"{d} or 1")
                out[j] = d
    return [(x.dtype, TensorShape(out))]


_SAMPLER_ATTRS: dict[str, Any] = {"has_side_effects": True}

# register_op's keywords of each entry (op_def registers these)
ENTRIES: list[dict[str, Any]] = [
    {"name": "ExtractJpegShape", "inputs": ("contents",), "shape_fn": extract_jpeg_shape},
    {"name": "DecodeAndCropJpeg", "inputs": ("contents", "crop_window"),
     "shape_fn": decode_and_crop_jpeg},
    {"name": "SampleDistortedBoundingBoxV2",
     "inputs": ("image_size", "bounding_boxes", "min_object_covered"),
     "shape_fn": sample_box, **_SAMPLER_ATTRS},
    {"name": "BroadcastTo", "inputs": ("input", "shape"), "shape_fn": broadcast_to},
]
