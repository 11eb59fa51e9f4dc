"""``dt.image``: the image functions an input pipeline calls (TF's
``image_ops``): ``random_crop``, ``random_flip_left_right`` /
``random_flip_up_down``, ``flip_left_right`` / ``flip_up_down``,
``random_brightness`` / ``adjust_brightness``, ``random_contrast`` /
``adjust_contrast``, ``per_image_standardization``,
``resize_with_crop_or_pad`` (TF1: ``resize_image_with_crop_or_pad``),
``crop_to_bounding_box`` and ``pad_to_bounding_box``.

Built as TF builds them, of general ops: a crop is a ``Slice`` at an offset
drawn by ``RandomUniform``, a flip a ``ReverseV2`` chosen by ``SelectV2``,
brightness an ``Add``, contrast TF's ``AdjustContrastv2``, standardization
``(x - mean) / max(stddev, 1/sqrt(pixels))`` of reductions. Images are
``[height, width, channels]`` or ``[batch, height, width, channels]``
with shapes known when the graph is built; brightness and contrast adjust
an integer image as TF's do: converted to float32 (``convert_image_dtype``),
adjusted, and converted back saturating.

In a dataset function (``ds.map(fn)``, see :mod:`distrib.ops.value_mode`)
each function computes on the numpy value at once (``image_values``).
Resizing, hue, saturation, ``central_crop`` and ``convert_image_dtype``
live in ``image_adjust``, the codecs in ``image_codec``; both are
re-exported here, so ``dt.image`` is this module.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, name_scope
from distrib.ops import image_values as values
from distrib.ops import math_ops as ops
from distrib.ops import slicing_ops, value_mode
from distrib.ops.data_flow_ops import op_seed
from distrib.ops.image_adjust import (  # re-exported: dt.image is this module
    ResizeMethod,
    ResizeMethodV1,
    adjust_hue,
    adjust_saturation,
    central_crop,
    convert_image_dtype,
    random_hue,
    random_saturation,
    resize,
    resize_area,
    resize_bilinear,
    resize_images,
    resize_nearest_neighbor,
)
from distrib.ops.image_codec import (  # re-exported: TF has them in tf.image too
    decode_image,
    decode_jpeg,
    decode_png,
    encode_jpeg,
    encode_png,
    is_jpeg,
)

__all__ = [
    "random_crop", "flip_left_right", "flip_up_down", "random_flip_left_right",
    "random_flip_up_down", "adjust_brightness", "random_brightness", "adjust_contrast",
    "random_contrast", "per_image_standardization", "crop_to_bounding_box",
    "pad_to_bounding_box", "resize_with_crop_or_pad", "resize_image_with_crop_or_pad",
    "ResizeMethod", "ResizeMethodV1", "adjust_hue", "adjust_saturation", "central_crop",
    "convert_image_dtype", "random_hue", "random_saturation", "resize", "resize_area",
    "resize_bilinear", "resize_images", "resize_nearest_neighbor", "decode_image",
    "decode_jpeg", "decode_png", "encode_jpeg", "encode_png", "is_jpeg",
]


def _image(image: Any, what: str) -> tuple[Tensor, list[int]]:
    x = ops.convert_operand(image)
    dims = x.shape.as_list()
    if dims is None or len(dims) not in (3, 4) or None in dims[-3:]:
        raise InvalidArgumentError(f"{what} takes an image [height, width, channels] or a batch "
                                   f"[batch, height, width, channels] with known height, width "
                                   f"and channels, got shape {x.shape}")
    return x, dims


def random_crop(value: Any, size: Sequence[int], seed: int | None = None,
                name: str | None = None) -> Tensor:
    """A ``size`` piece of ``value`` at a uniformly random offset (TF's)."""
    if value_mode.values_now(value):
        return values.random_crop(value, size)
    with name_scope(name, "random_crop", [value]) as scope:
        x = ops.convert_operand(value)
        dims = x.shape.as_list()
        size = [int(s) for s in np.asarray(size).reshape(-1)]
        if dims is None or None in dims or len(dims) != len(size):
            raise InvalidArgumentError(f"random_crop: size {size} needs a value of known shape "
                                       f"and the same rank, got {x.shape}")
        if any(s > d for s, d in zip(size, dims)):
            raise InvalidArgumentError(f"random_crop: need value.shape >= size, got {dims} and "
                                       f"{size}")
        limit = np.array([d - s + 1 for d, s in zip(dims, size)], np.float64)
        u = ops.random_uniform([len(size)], dtype=dtypes.float64, seed=op_seed(seed))
        offset = ops.cast(ops.op_output("Floor", [ops.multiply(u, limit)], None, "Floor"),
                          dtypes.int32)
        return slicing_ops.slice(x, offset, size, name=scope)


def flip_left_right(image: Any) -> Tensor:
    if value_mode.values_now(image):
        return values.flip(image, 2, "flip_left_right")
    x, dims = _image(image, "flip_left_right")
    return slicing_ops.reverse(x, [len(dims) - 2], name="flip_left_right")


def flip_up_down(image: Any) -> Tensor:
    if value_mode.values_now(image):
        return values.flip(image, 3, "flip_up_down")
    x, dims = _image(image, "flip_up_down")
    return slicing_ops.reverse(x, [len(dims) - 3], name="flip_up_down")


def _random_flip(image: Any, axis_from_end: int, seed: int | None, scope_name: str) -> Tensor:
    if value_mode.values_now(image):
        return values.random_flip(image, axis_from_end, scope_name)
    with name_scope(None, scope_name, [image]) as scope:
        x, dims = _image(image, scope_name)
        batched = len(dims) == 4
        u = ops.random_uniform([dims[0]] if batched else [], seed=op_seed(seed))
        mirror = ops.less(u, 0.5)
        if batched:
            mirror = ops.reshape(mirror, [dims[0], 1, 1, 1])
        flipped = slicing_ops.reverse(x, [len(dims) - axis_from_end])
        return slicing_ops.where(mirror, flipped, x, name=scope)


def random_flip_left_right(image: Any, seed: int | None = None) -> Tensor:
    """Each image mirrored left to right with probability 1/2 (TF's)."""
    return _random_flip(image, 2, seed, "random_flip_left_right")


def random_flip_up_down(image: Any, seed: int | None = None) -> Tensor:
    """Each image mirrored top to bottom with probability 1/2 (TF's)."""
    return _random_flip(image, 3, seed, "random_flip_up_down")


def _via_float(image: Any, scope: str, adjust: Any) -> Tensor:
    """``adjust`` of a float image, named ``scope``; an integer image is converted
    to float32 and back (saturating) around it, as TF's adjust_* do (TF also
    takes float64 through float32; here it keeps its precision)."""
    x = ops.convert_operand(image)
    if x.dtype.is_floating:
        return adjust(x, scope)
    out = adjust(convert_image_dtype(x, dtypes.float32), None)
    return convert_image_dtype(out, x.dtype, saturate=True, name=scope)


def adjust_brightness(image: Any, delta: Any) -> Tensor:
    """``image + delta`` (TF's; an integer image through float32 and back)."""
    if value_mode.values_now(image, delta):
        return values.adjust_brightness(image, delta)
    with name_scope(None, "adjust_brightness", [image, delta]) as scope:
        return _via_float(image, scope, lambda x, name: ops.add(
            x, ops.cast(ops.convert_to_tensor(delta), x.dtype), name=name))


def random_brightness(image: Any, max_delta: float, seed: int | None = None) -> Tensor:
    """``image`` plus one delta drawn from ``[-max_delta, max_delta)`` (TF's)."""
    if max_delta < 0:
        raise InvalidArgumentError("max_delta must be non-negative.")
    if value_mode.values_now(image):
        return values.adjust_brightness(image, value_mode.rng().uniform(-max_delta, max_delta))
    delta = ops.random_uniform([], -max_delta, max_delta, seed=op_seed(seed))
    return adjust_brightness(image, delta)


def adjust_contrast(images: Any, contrast_factor: Any) -> Tensor:
    """``(x - mean) * contrast_factor + mean``, the mean of each channel of
    each image (TF's ``AdjustContrastv2``; an integer image through float32)."""
    if value_mode.values_now(images, contrast_factor):
        return values.adjust_contrast(images, contrast_factor)
    with name_scope(None, "adjust_contrast", [images, contrast_factor]) as scope:
        factor = ops.convert_to_tensor(contrast_factor, dtype=dtypes.float32)
        return _via_float(images, scope, lambda x, name: ops.op_output(
            "AdjustContrastv2", [x, factor], None, name or "AdjustContrastv2"))


def random_contrast(image: Any, lower: float, upper: float, seed: int | None = None) -> Tensor:
    """``adjust_contrast`` by a factor drawn from ``[lower, upper)`` (TF's)."""
    if upper <= lower:
        raise InvalidArgumentError("upper must be > lower.")
    if lower < 0:
        raise InvalidArgumentError("lower must be non-negative.")
    if value_mode.values_now(image):
        return values.adjust_contrast(image, value_mode.rng().uniform(lower, upper))
    factor = ops.random_uniform([], lower, upper, seed=op_seed(seed))
    return adjust_contrast(image, factor)


def per_image_standardization(image: Any) -> Tensor:
    """``(x - mean) / max(stddev, 1 / sqrt(pixels))`` per image, over its
    height, width and channels (TF's; integer images are cast to float32)."""
    if value_mode.values_now(image):
        return values.per_image_standardization(image)
    with name_scope(None, "per_image_standardization", [image]) as scope:
        x, dims = _image(image, "per_image_standardization")
        if not x.dtype.is_floating:
            x = ops.cast(x, dtypes.float32)
        axes = [len(dims) - 3, len(dims) - 2, len(dims) - 1]
        pixels = dims[-3] * dims[-2] * dims[-1]
        centered = ops.subtract(x, ops.reduce_mean(x, axis=axes, keepdims=True))
        stddev = ops.sqrt(ops.reduce_mean(ops.square(centered), axis=axes, keepdims=True))
        floor = np.asarray(1.0 / np.sqrt(pixels), x.dtype.as_numpy_dtype)
        return ops.divide(centered, ops.maximum(stddev, floor), name=scope)


def crop_to_bounding_box(image: Any, offset_height: int, offset_width: int,
                         target_height: int, target_width: int) -> Tensor:
    """The ``target_height x target_width`` box at the offsets (TF's)."""
    if value_mode.values_now(image):
        return values.crop_to_bounding_box(image, offset_height, offset_width, target_height,
                                           target_width)
    x, dims = _image(image, "crop_to_bounding_box")
    h, w = dims[-3], dims[-2]
    if offset_height < 0 or offset_width < 0 or offset_height + target_height > h \
            or offset_width + target_width > w or target_height <= 0 or target_width <= 0:
        raise InvalidArgumentError(f"crop_to_bounding_box: the box ({offset_height}, "
                                   f"{offset_width}) + ({target_height}, {target_width}) is not "
                                   f"inside the {h}x{w} image")
    begin = [0] * (len(dims) - 3) + [offset_height, offset_width, 0]
    size = dims[:-3] + [target_height, target_width, dims[-1]]
    return slicing_ops.slice(x, begin, size, name="crop_to_bounding_box")


def pad_to_bounding_box(image: Any, offset_height: int, offset_width: int,
                        target_height: int, target_width: int) -> Tensor:
    """The image placed at the offsets on zeros of the target size (TF's)."""
    if value_mode.values_now(image):
        return values.pad_to_bounding_box(image, offset_height, offset_width, target_height,
                                          target_width)
    x, dims = _image(image, "pad_to_bounding_box")
    after_h = target_height - offset_height - dims[-3]
    after_w = target_width - offset_width - dims[-2]
    if min(offset_height, offset_width, after_h, after_w) < 0:
        raise InvalidArgumentError(f"pad_to_bounding_box: a {dims[-3]}x{dims[-2]} image at "
                                   f"({offset_height}, {offset_width}) does not fit in "
                                   f"{target_height}x{target_width}")
    pads = [[0, 0]] * (len(dims) - 3) + [[offset_height, after_h], [offset_width, after_w],
                                         [0, 0]]
    return slicing_ops.pad(x, pads, name="pad_to_bounding_box")


def resize_with_crop_or_pad(image: Any, target_height: int, target_width: int) -> Tensor:
    """Crop the centre or pad evenly with zeros to the target size (TF's rule:
    a crop's odd pixel comes off the end, a pad's odd row goes after)."""
    if value_mode.values_now(image):
        return values.resize_with_crop_or_pad(image, target_height, target_width)
    with name_scope(None, "resize_image_with_crop_or_pad", [image]):
        x, dims = _image(image, "resize_with_crop_or_pad")
        if target_height <= 0 or target_width <= 0:
            raise InvalidArgumentError("target_height and target_width must be > 0")
        h, w = dims[-3], dims[-2]
        dh, dw = target_height - h, target_width - w
        crop_h, crop_w = max(-dh // 2, 0), max(-dw // 2, 0)
        pad_h, pad_w = max(dh // 2, 0), max(dw // 2, 0)
        out = x
        if dh < 0 or dw < 0:
            out = crop_to_bounding_box(out, crop_h, crop_w, min(target_height, h),
                                       min(target_width, w))
        if dh > 0 or dw > 0:
            out = pad_to_bounding_box(out, pad_h, pad_w, target_height, target_width)
        return out if out is not x else ops.identity(x)


resize_image_with_crop_or_pad = resize_with_crop_or_pad

# the bounding-box crop of ImageNet preprocessing (issue 40): re-exported, dt.image is this
from distrib.ops.image_boxes import decode_and_crop_jpeg, extract_jpeg_shape, sample_distorted_bounding_box  # noqa: E402

__all__ += ["decode_and_crop_jpeg", "extract_jpeg_shape", "sample_distorted_bounding_box"]
