"""``dt.image`` on numpy values: what each function computes in a dataset
function (see :mod:`distrib.ops.value_mode`), by TF's rules and numbers.

The graph builders (``image_ops``, ``image_adjust``) hand their values here
when they compute at once; the math is the same as their ops' kernels
(resizing and colour call those kernels' code directly). Random choices
draw from :func:`value_mode.rng`. Images are ``[h, w, c]`` or
``[batch, h, w, c]``; where TF converts an integer image to float to adjust
it and back (brightness, contrast, hue, saturation), so does this.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.ops import value_mode
from kernels.cpu.jit_loader import BackgroundJit

__all__ = ["random_crop", "flip", "random_flip", "adjust_brightness", "adjust_contrast",
           "per_image_standardization", "crop_to_bounding_box", "pad_to_bounding_box",
           "resize_with_crop_or_pad", "central_crop", "convert_image_dtype_value", "resize",
           "adjust_hsv"]


# numba loops for one image's standardization and contrast (the numpy path
# below until they are compiled, off the caller's thread: see jit_loader)
_JIT = BackgroundJit("kernels.cpu.image_jit")


def _img(image: Any, what: str) -> np.ndarray:
    x = np.asarray(image)
    if x.ndim not in (3, 4):
        raise InvalidArgumentError(f"{what} takes an image [height, width, channels] or a batch "
                                   f"[batch, height, width, channels], got shape {list(x.shape)}")
    return x


def random_crop(value: Any, size: Sequence[int]) -> np.ndarray:
    x = np.asarray(value)
    size = [int(s) for s in size] if isinstance(size, (list, tuple)) else \
        [int(s) for s in np.asarray(size).reshape(-1)]
    if len(size) != x.ndim or any(s > d for s, d in zip(size, x.shape)):
        raise InvalidArgumentError(f"random_crop: need value.shape >= size and the same rank, "
                                   f"got {list(x.shape)} and {size}")
    draw = value_mode.rng().integers
    return x[tuple(slice(b, b + s) for b, s in
                   ((draw(0, d - s + 1) if d > s else 0, s) for d, s in zip(x.shape, size)))]


def _mirrored(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` reversed along ``axis``; a large image as a contiguous array made
    fast: numpy copies a width-reversed [h, w, 3] uint8 view byte by byte (310
    us for 224x224x3), and every later step pays that again on the view; a
    copy per channel is 55 us, and what follows reads contiguous memory. A
    small image (CIFAR's) stays a view: its copies cost less than three."""
    if axis == x.ndim - 2 and x.shape[-1] <= 4 and x.size >= 1 << 14:   # small: a view
        out = np.empty(x.shape, x.dtype)
        for k in range(x.shape[-1]):
            out[..., k] = x[..., ::-1, k]
        return out
    flipped = np.flip(x, axis=axis)
    return flipped if x.size < 1 << 14 else np.ascontiguousarray(flipped)


def flip(image: Any, axis_from_end: int, what: str) -> np.ndarray:
    x = _img(image, what)
    return _mirrored(x, x.ndim - axis_from_end)


def random_flip(image: Any, axis_from_end: int, what: str) -> np.ndarray:
    x = _img(image, what)
    rng = value_mode.rng()
    axis = x.ndim - axis_from_end
    if x.ndim == 3:
        return _mirrored(x, axis) if rng.random() < 0.5 else x
    mirror = rng.random(x.shape[0]) < 0.5
    return np.where(mirror[:, None, None, None], np.flip(x, axis=axis), x)


def _as_float(x: np.ndarray) -> tuple[np.ndarray, Any]:
    if x.dtype.kind == "f":
        return x, None
    return convert_image_dtype_value(x, np.float32), x.dtype


def _back(x: np.ndarray, dtype: Any) -> np.ndarray:
    return x if dtype is None else convert_image_dtype_value(x, dtype, saturate=True)


def adjust_brightness(image: Any, delta: float) -> np.ndarray:
    x, orig = _as_float(np.asarray(image))
    return _back(x + np.asarray(delta, x.dtype), orig)


def adjust_contrast(images: Any, factor: float) -> np.ndarray:
    x, orig = _as_float(np.asarray(images))
    if x.ndim < 3:
        raise InvalidArgumentError(f"adjust_contrast takes images of rank >= 3, got shape "
                                   f"{list(x.shape)}")
    jit = _JIT.ready(x.dtype) if x.ndim == 3 and x.size else None
    if jit is not None:   # one image, compiled: one pass per channel to sum, one to write
        flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = np.empty(flat.shape, x.dtype)
        jit.contrast(flat, x.dtype.type(factor), out)
        return _back(out.reshape(x.shape), orig)
    if x.ndim == 3:   # one image: the channels' means as one reduction (the common case)
        h, w, c = x.shape
        mean = np.add.reduce(x.reshape(h * w, c), axis=0, dtype=x.dtype) / x.dtype.type(h * w)
    else:
        mean = x.mean(axis=(-3, -2), keepdims=True, dtype=x.dtype)
    f = x.dtype.type(factor)
    return _back(x * f + mean * (1 - f), orig)


def adjust_hsv(image: Any, hue_delta: float = 0.0, saturation: float = 1.0,
               what: str = "adjust_hue") -> np.ndarray:
    from kernels.cpu.image_color import adjust_hsv as kernel
    from kernels.registry import KernelError
    x, orig = _as_float(np.asarray(image))
    try:
        out = kernel(x, hue_delta, saturation, what)
    except KernelError as e:
        raise InvalidArgumentError(str(e)) from None
    return _back(out, orig)


def per_image_standardization(image: Any) -> np.ndarray:
    x = _img(image, "per_image_standardization")
    if x.dtype.kind != "f":
        x = x.astype(np.float32)
    pixels = x.shape[-3] * x.shape[-2] * x.shape[-1]
    jit = _JIT.ready(x.dtype) if x.ndim == 3 and pixels else None
    if jit is not None:   # one image, compiled (kernels.cpu.image_jit)
        out = np.empty(x.shape, x.dtype)
        jit.standardize(np.ascontiguousarray(x).reshape(-1), out.reshape(-1))
        return out
    floor = x.dtype.type(1.0 / np.sqrt(pixels))
    if x.ndim == 3:   # one image: whole-array reductions (a fifth of the axis-wise cost)
        flat = x.reshape(-1)
        centered = x - np.add.reduce(flat, dtype=x.dtype) / x.dtype.type(pixels)
        c = centered.reshape(-1)
        stddev = np.sqrt(np.dot(c, c) / x.dtype.type(pixels))
        return centered / max(x.dtype.type(stddev), floor)
    axes = (-3, -2, -1)
    centered = x - x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    stddev = np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True, dtype=x.dtype))
    return centered / np.maximum(stddev, floor)


def crop_to_bounding_box(image: Any, oh: int, ow: int, th: int, tw: int) -> np.ndarray:
    x = _img(image, "crop_to_bounding_box")
    h, w = x.shape[-3], x.shape[-2]
    if oh < 0 or ow < 0 or th <= 0 or tw <= 0 or oh + th > h or ow + tw > w:
        raise InvalidArgumentError(f"crop_to_bounding_box: the box ({oh}, {ow}) + ({th}, {tw}) "
                                   f"is not inside the {h}x{w} image")
    return x[..., oh:oh + th, ow:ow + tw, :]


def pad_to_bounding_box(image: Any, oh: int, ow: int, th: int, tw: int) -> np.ndarray:
    x = _img(image, "pad_to_bounding_box")
    after_h, after_w = th - oh - x.shape[-3], tw - ow - x.shape[-2]
    if min(oh, ow, after_h, after_w) < 0:
        raise InvalidArgumentError(f"pad_to_bounding_box: a {x.shape[-3]}x{x.shape[-2]} image "
                                   f"at ({oh}, {ow}) does not fit in {th}x{tw}")
    pads = [(0, 0)] * (x.ndim - 3) + [(oh, after_h), (ow, after_w), (0, 0)]
    return np.pad(x, pads)


def resize_with_crop_or_pad(image: Any, th: int, tw: int) -> np.ndarray:
    x = _img(image, "resize_with_crop_or_pad")
    if th <= 0 or tw <= 0:
        raise InvalidArgumentError("target_height and target_width must be > 0")
    h, w = x.shape[-3], x.shape[-2]
    dh, dw = th - h, tw - w
    if dh < 0 or dw < 0:
        x = crop_to_bounding_box(x, max(-dh // 2, 0), max(-dw // 2, 0), min(th, h), min(tw, w))
    if dh > 0 or dw > 0:
        x = pad_to_bounding_box(x, max(dh // 2, 0), max(dw // 2, 0), th, tw)
    return x


def central_crop(image: Any, central_fraction: float) -> np.ndarray:
    x = _img(image, "central_crop")
    if central_fraction == 1.0:
        return x
    h, w = x.shape[-3], x.shape[-2]
    # TF's arithmetic: the start is int(dim - dim * fraction) / 2, in doubles
    top = int((h - h * central_fraction) / 2)
    left = int((w - w * central_fraction) / 2)
    return x[..., top:h - top, left:w - left, :]


def convert_image_dtype_value(image: Any, dtype: Any, saturate: bool = False) -> np.ndarray:
    """TF's ``convert_image_dtype``: integers span [0, MAX], floats [0, 1)."""
    x = np.asarray(image)
    want = np.dtype(dtype)
    if x.dtype == want:
        return x
    if x.dtype.kind in "iu" and want.kind in "iu":
        max_in, max_out = np.iinfo(x.dtype).max, np.iinfo(want).max
        if max_in > max_out:
            scaled = x // ((max_in + 1) // (max_out + 1))
            if saturate:
                scaled = np.clip(scaled, np.iinfo(want).min, max_out)
            return scaled.astype(want)
        return x.astype(want) * want.type((max_out + 1) // (max_in + 1))
    if x.dtype.kind == "f" and want.kind == "f":
        return x.astype(want)
    if x.dtype.kind in "iu":   # one pass: the product made in the wanted type
        return np.multiply(x, want.type(1.0 / np.iinfo(x.dtype).max), dtype=want)
    scaled = x * x.dtype.type(np.iinfo(want).max + 0.5)
    if saturate:
        info = np.iinfo(want)
        scaled = np.clip(scaled, info.min, info.max)
    return scaled.astype(want)


def resize(images: Any, size: Sequence[int], method: str, align_corners: bool,
           half_pixel_centers: bool) -> np.ndarray:
    from kernels.cpu.image_resize import resize_value
    from kernels.registry import KernelError
    x = _img(images, "resize")
    batched = x[None] if x.ndim == 3 else x
    try:
        out = resize_value(batched, size, method, align_corners, half_pixel_centers)
    except KernelError as e:
        raise InvalidArgumentError(str(e)) from None
    return out[0] if x.ndim == 3 else out
