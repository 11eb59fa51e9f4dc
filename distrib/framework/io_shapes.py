"""Shape functions of the op catalogue for reading input: parsing Examples,
reading files, decoding and encoding images, resizing and colour changes
(see :mod:`distrib.framework.op_shapes` for the rules every shape function
keeps), and :data:`OPS`, the catalogue entries of those ops, which
``op_def`` registers (one place lists each op's inputs and shape function).
"""
from __future__ import annotations

from typing import Any

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.op_shapes import Spec, unchanged
from distrib.framework.tensor_shape import TensorShape

__all__ = ["OPS", "parse_example", "string_scalar", "decode_image", "resize"]


def parse_example(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    serialized = inputs[0]
    if serialized.dtype != dtypes.string:
        raise InvalidArgumentError(f"{op_type} parses strings, got {serialized.dtype.name}",
                                   op=name)
    outer = serialized.shape.as_list()
    rank = None if outer is None else len(outer)
    n = len(attrs.get("sparse_keys") or [])
    sparse_types = [dtypes.as_dtype(t) for t in attrs.get("sparse_types") or []]
    cols = None if rank is None else rank + 1
    out: list[Spec] = [(dtypes.int64, TensorShape([None, cols])) for _ in range(n)]
    out += [(t, TensorShape([None])) for t in sparse_types]
    out += [(dtypes.int64, TensorShape([cols])) for _ in range(n)]
    for t, shape in zip(attrs.get("Tdense") or [], attrs.get("dense_shapes") or []):
        dims = None if outer is None else [*outer, *[int(d) for d in shape]]
        out.append((dtypes.as_dtype(t), TensorShape(dims)))
    return out


def string_scalar(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return [(dtypes.string, TensorShape([]))]


def decode_image(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    contents = inputs[0]
    if contents.dtype != dtypes.string:
        raise InvalidArgumentError(f"{op_type} decodes a string, got {contents.dtype.name}",
                                   op=name)
    channels = int(attrs.get("channels") or 0) or None
    dtype = dtypes.as_dtype(attrs.get("dtype") or "uint8")
    if op_type == "DecodeImage" and attrs.get("expand_animations", True):
        return [(dtype, TensorShape(None))]
    return [(dtype, TensorShape([None, None, channels]))]


def resize(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    images = inputs[0]
    size = [int(s) for s in attrs["size"]]
    dims = images.shape.as_list()
    if dims is not None and len(dims) != 4:
        raise InvalidArgumentError(f"{op_type}: images must be 4-D [batch, height, width, "
                                   f"channels], got {images.shape}", op=name)
    out = dtypes.float32 if op_type != "ResizeNearestNeighbor" else images.dtype
    return [(out, TensorShape([dims[0] if dims else None, *size, dims[3] if dims else None]))]


def resize_grad(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    original = inputs[1]
    return [(original.dtype, original.shape)]


def _unchanged(op_type: str, name: str, inputs: list, attrs: dict) -> list[Spec]:
    return unchanged(op_type, name, inputs, attrs)


# op type -> register_op's keywords (op_def registers these)
OPS: dict[str, dict[str, Any]] = {
    "ParseExampleV2": {"inputs": ("serialized", "dense_defaults*"), "shape_fn": parse_example},
    "ReadFile": {"inputs": ("filename",), "shape_fn": string_scalar},
    "DecodeJpeg": {"inputs": ("contents",), "shape_fn": decode_image},
    "DecodePng": {"inputs": ("contents",), "shape_fn": decode_image},
    "DecodeImage": {"inputs": ("contents",), "shape_fn": decode_image},
    "EncodeJpeg": {"inputs": ("image",), "shape_fn": string_scalar},
    "EncodePng": {"inputs": ("image",), "shape_fn": string_scalar},
    "ResizeBilinear": {"inputs": ("images",), "shape_fn": resize},
    "ResizeNearestNeighbor": {"inputs": ("images",), "shape_fn": resize},
    "ResizeArea": {"inputs": ("images",), "shape_fn": resize},
    "ResizeBilinearGrad": {"inputs": ("grads", "original_image"), "shape_fn": resize_grad},
    "ResizeNearestNeighborGrad": {"inputs": ("grads", "original_image"),
                                  "shape_fn": resize_grad, "shape_only_inputs": (1,)},
    "AdjustSaturation": {"inputs": ("images", "scale"), "shape_fn": _unchanged},
    "AdjustHue": {"inputs": ("images", "delta"), "shape_fn": _unchanged},
}
