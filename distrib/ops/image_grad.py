"""The gradients of the resize ops (TF's ``image_grad.py``), written into
the op catalogue by ``distrib.ops.gradients`` with the other families.

``ResizeBilinear``'s gradient is ``ResizeBilinearGrad`` of the output's
gradient and the original image (the weights each output read with, spread
back), ``ResizeNearestNeighbor``'s is ``ResizeNearestNeighborGrad`` (each
output's gradient added to the pixel it copied); both keep the forward op's
``align_corners`` and ``half_pixel_centers``. ``ResizeArea``,
``AdjustHue`` and ``AdjustSaturation`` have no gradient, as in TF (taking
one is an error); the parsing, file and codec ops are not differentiable.
"""
from __future__ import annotations

from typing import Callable

from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops

__all__ = ["GRADIENTS", "NOT_DIFFERENTIABLE"]


def _corner_attrs(op: Operation) -> dict:
    return {"align_corners": bool(op.get_attr("align_corners")),
            "half_pixel_centers": bool(op.get_attr("half_pixel_centers"))}


def _resize_bilinear_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.op_output("ResizeBilinearGrad", [g, x], _corner_attrs(op), "ResizeBilinearGrad")]


def _resize_nearest_grad(op: Operation, g: Tensor) -> list:
    x = op.inputs[0]
    return [ops.op_output("ResizeNearestNeighborGrad", [g, x], _corner_attrs(op),
                          "ResizeNearestNeighborGrad")]


GRADIENTS: dict[str, Callable[..., list]] = {
    "ResizeBilinear": _resize_bilinear_grad,
    "ResizeNearestNeighbor": _resize_nearest_grad,
}

NOT_DIFFERENTIABLE: tuple[str, ...] = (
    "ParseExampleV2", "ReadFile", "DecodeJpeg", "DecodePng", "DecodeImage", "EncodeJpeg",
    "EncodePng",
)
