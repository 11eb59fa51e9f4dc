"""``dt.image``'s resizing, colour and dtype functions (TF's ``image_ops``):
``resize`` (TF2: ``bilinear``/``nearest`` with half-pixel centres, ``area``),
TF1's ``resize_images`` (``ResizeMethodV1``, ``align_corners``) and
``resize_bilinear`` / ``resize_nearest_neighbor`` / ``resize_area``,
``adjust_saturation`` / ``random_saturation``, ``adjust_hue`` /
``random_hue``, ``central_crop`` and ``convert_image_dtype``.

In a graph each adds TF's ops (``ResizeBilinear`` ..., ``AdjustHue``,
``AdjustSaturation``, a ``Cast`` and ``Mul`` for dtypes); in a dataset
function (:mod:`distrib.ops.value_mode`) it computes the value at once
(:mod:`distrib.ops.image_values`). ``image_ops`` re-exports these, so
``dt.image`` is one namespace.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError, UnimplementedError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import array_ops, slicing_ops, value_mode
from distrib.ops import image_values as values
from distrib.ops import math_ops as ops
from distrib.ops.data_flow_ops import op_seed

__all__ = ["ResizeMethod", "ResizeMethodV1", "resize", "resize_images", "resize_bilinear",
           "resize_nearest_neighbor", "resize_area", "adjust_saturation", "random_saturation",
           "adjust_hue", "random_hue", "central_crop", "convert_image_dtype"]


class ResizeMethod:
    """TF2's ``tf.image.ResizeMethod`` names."""

    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    GAUSSIAN = "gaussian"
    MITCHELLCUBIC = "mitchellcubic"


class ResizeMethodV1:
    """TF1's ``tf.image.ResizeMethod`` values."""

    BILINEAR = 0
    NEAREST_NEIGHBOR = 1
    BICUBIC = 2
    AREA = 3


_V1 = {0: "bilinear", 1: "nearest", 2: "bicubic", 3: "area"}
_OPS = {"bilinear": "ResizeBilinear", "nearest": "ResizeNearestNeighbor", "area": "ResizeArea"}


def _size(size: Any) -> list[int]:
    dims = [int(s) for s in np.asarray(size).reshape(-1)]
    if len(dims) != 2 or min(dims) <= 0:
        raise InvalidArgumentError(f"size must be 2 positive ints [new_height, new_width], got "
                                   f"{size!r}")
    return dims


def _aspect(shape: list[Any], size: list[int]) -> list[int]:
    h, w = shape[-3], shape[-2]
    if h is None or w is None:
        raise InvalidArgumentError("preserve_aspect_ratio needs the image's height and width")
    scale = min(size[0] / h, size[1] / w)
    return [max(int(round(h * scale)), 1), max(int(round(w * scale)), 1)]


def _resize(images: Any, size: Any, method: str, align_corners: bool, half: bool,
            preserve_aspect_ratio: bool, skip_same: bool, name: str | None) -> Any:
    if method not in _OPS:
        raise UnimplementedError(f"resize method {method!r} is not implemented here; use "
                                 "bilinear, nearest or area")
    dims = _size(size)
    if value_mode.values_now(images):
        x = np.asarray(images)
        if preserve_aspect_ratio:
            dims = _aspect(list(x.shape), dims)
        if skip_same and list(x.shape[-3:-1]) == dims:
            return x
        return values.resize(x, dims, method, align_corners, half)
    with name_scope(name, "resize", [images]):
        x = ops.convert_operand(images)
        shape = x.shape.as_list()
        if shape is None or len(shape) not in (3, 4):
            raise InvalidArgumentError(f"resize takes images [h, w, c] or [batch, h, w, c] of "
                                       f"known rank, got shape {x.shape}")
        if preserve_aspect_ratio:
            dims = _aspect(shape, dims)
        if skip_same and shape[-3:-1] == dims:
            return x
        batched = array_ops.expand_dims(x, 0) if len(shape) == 3 else x
        attrs: dict[str, Any] = {"size": dims, "align_corners": bool(align_corners)}
        if method != "area":
            attrs["half_pixel_centers"] = bool(half)
        out = ops.op_output(_OPS[method], [batched], attrs, _OPS[method])
        if len(shape) == 3:
            out = ops.reshape(out, [*dims, -1 if shape[-1] is None else shape[-1]])
        return out


def resize(images: Any, size: Any, method: str = ResizeMethod.BILINEAR,
           preserve_aspect_ratio: bool = False, antialias: bool = False,
           name: str | None = None) -> Any:
    """TF2's ``tf.image.resize``: half-pixel centres; float32 out except nearest."""
    if antialias and method != "nearest":
        raise UnimplementedError("resize(antialias=True) is not implemented here")
    return _resize(images, size, str(method), False, True, preserve_aspect_ratio, False, name)


def resize_images(images: Any, size: Any, method: int = ResizeMethodV1.BILINEAR,
                  align_corners: bool = False, preserve_aspect_ratio: bool = False,
                  name: str | None = None) -> Any:
    """TF1's ``tf.image.resize_images``: the legacy corners (no half-pixel
    centres), ``align_corners``, the image as it is when the size is its own."""
    how = _V1.get(method, method) if not isinstance(method, str) else method
    return _resize(images, size, str(how), align_corners, False, preserve_aspect_ratio, True,
                   name)


def resize_bilinear(images: Any, size: Any, align_corners: bool = False,
                    name: str | None = None, half_pixel_centers: bool = False) -> Any:
    """TF1's ``tf.image.resize_bilinear`` (the op itself)."""
    return _resize(images, size, "bilinear", align_corners, half_pixel_centers, False, False,
                   name)


def resize_nearest_neighbor(images: Any, size: Any, align_corners: bool = False,
                            name: str | None = None, half_pixel_centers: bool = False) -> Any:
    """TF1's ``tf.image.resize_nearest_neighbor`` (the op itself)."""
    return _resize(images, size, "nearest", align_corners, half_pixel_centers, False, False,
                   name)


def resize_area(images: Any, size: Any, align_corners: bool = False,
                name: str | None = None) -> Any:
    """TF1's ``tf.image.resize_area`` (the op itself)."""
    return _resize(images, size, "area", align_corners, False, False, False, name)


def convert_image_dtype(image: Any, dtype: Any, saturate: bool = False,
                        name: str | None = None) -> Any:
    """TF's ``convert_image_dtype``: integers span [0, MAX], floats [0, 1]."""
    want = dtypes.as_dtype(dtype)
    if value_mode.values_now(image):
        return values.convert_image_dtype_value(image, want.as_numpy_dtype, saturate)
    with name_scope(name, "convert_image", [image]) as scope:
        x = ops.convert_operand(image)
        if x.dtype == want:
            return ops.identity(x, name=scope)
        src, dst = x.dtype.as_numpy_dtype, want.as_numpy_dtype
        if x.dtype.is_integer and want.is_integer:
            max_in, max_out = np.iinfo(src).max, np.iinfo(dst).max
            if max_in > max_out:
                raise UnimplementedError("convert_image_dtype to a narrower integer type is "
                                         "not built as graph ops here; go through float32")
            return ops.multiply(ops.cast(x, want), np.asarray((max_out + 1) // (max_in + 1), dst),
                                name=scope)
        if x.dtype.is_floating and want.is_floating:
            return ops.cast(x, want, name=scope)
        if x.dtype.is_integer:
            return ops.multiply(ops.cast(x, want), np.asarray(1.0 / np.iinfo(src).max, dst),
                                name=scope)
        info = np.iinfo(dst)
        scaled = ops.multiply(x, np.asarray(info.max + 0.5, src))
        if saturate:
            scaled = ops.minimum(ops.maximum(scaled, np.asarray(info.min, src)),
                                 np.asarray(info.max, src))
        return ops.cast(scaled, want, name=scope)


def _hsv_op(op_type: str, image: Any, amount: Any, scope: str) -> Tensor:
    x = ops.convert_operand(image)
    orig = x.dtype
    flt = x if orig in (dtypes.float32, dtypes.float16, dtypes.float64) \
        else convert_image_dtype(x, dtypes.float32)
    out = ops.op_output(op_type, [flt, ops.convert_to_tensor(amount, dtype=dtypes.float32)],
                        None, op_type)
    return convert_image_dtype(out, orig, saturate=True, name=scope) if orig != flt.dtype \
        else ops.identity(out, name=scope)


def adjust_saturation(image: Any, saturation_factor: Any, name: str | None = None) -> Any:
    """Saturation scaled by ``saturation_factor`` in HSV, clamped to [0, 1] (TF's)."""
    if value_mode.values_now(image, saturation_factor):
        return values.adjust_hsv(image, 0.0, float(saturation_factor), "adjust_saturation")
    with name_scope(name, "adjust_saturation", [image]) as scope:
        return _hsv_op("AdjustSaturation", image, saturation_factor, scope)


def random_saturation(image: Any, lower: float, upper: float, seed: int | None = None) -> Any:
    """``adjust_saturation`` by a factor drawn from ``[lower, upper)`` (TF's)."""
    if upper <= lower:
        raise InvalidArgumentError("upper must be > lower.")
    if lower < 0:
        raise InvalidArgumentError("lower must be non-negative.")
    if value_mode.values_now(image):
        return adjust_saturation(image, value_mode.rng().uniform(lower, upper))
    factor = ops.random_uniform([], lower, upper, seed=op_seed(seed))
    return adjust_saturation(image, factor)


def adjust_hue(image: Any, delta: Any, name: str | None = None) -> Any:
    """Hue shifted by ``delta`` (in [-1, 1]) around the colour wheel (TF's)."""
    if value_mode.values_now(image, delta):
        return values.adjust_hsv(image, float(delta), 1.0, "adjust_hue")
    with name_scope(name, "adjust_hue", [image]) as scope:
        return _hsv_op("AdjustHue", image, delta, scope)


def random_hue(image: Any, max_delta: float, seed: int | None = None) -> Any:
    """``adjust_hue`` by a delta drawn from ``[-max_delta, max_delta)`` (TF's)."""
    if max_delta > 0.5:
        raise InvalidArgumentError("max_delta must be <= 0.5.")
    if max_delta < 0:
        raise InvalidArgumentError("max_delta must be non-negative.")
    if value_mode.values_now(image):
        return adjust_hue(image, value_mode.rng().uniform(-max_delta, max_delta))
    delta = ops.random_uniform([], -max_delta, max_delta, seed=op_seed(seed))
    return adjust_hue(image, delta)


def central_crop(image: Any, central_fraction: float) -> Any:
    """The central ``central_fraction`` of the image, per side (TF's)."""
    if central_fraction <= 0.0 or central_fraction > 1.0:
        raise InvalidArgumentError("central_fraction must be within (0, 1]")
    if value_mode.values_now(image):
        return values.central_crop(image, central_fraction)
    with name_scope(None, "central_crop", [image]):
        x = ops.convert_operand(image)
        shape = x.shape.as_list()
        if shape is None or len(shape) not in (3, 4) or None in shape[-3:]:
            raise InvalidArgumentError(f"central_crop needs an image of known height, width "
                                       f"and channels, got {x.shape}")
        if central_fraction == 1.0:
            return x
        h, w = shape[-3], shape[-2]
        top, left = int((h - h * central_fraction) / 2), int((w - w * central_fraction) / 2)
        begin = [0] * (len(shape) - 3) + [top, left, 0]
        size = [-1] * (len(shape) - 3) + [h - 2 * top, w - 2 * left, shape[-1]]
        return slicing_ops.slice(x, begin, size)
