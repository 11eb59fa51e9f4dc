"""CPU kernels of the bounding-box crop that ImageNet trainers make of each
JPEG (Inception's and ResNet's preprocessing): ``ExtractJpegShape`` (a
JPEG's size read from its header, nothing decoded),
``SampleDistortedBoundingBoxV2`` (where the crop goes) and ``DecodeAndCropJpeg`` (the crop's pixels), plus
``BroadcastTo``; and the same work on Python values (``*_value``), which a
data pipeline's map calls directly.

The sampler keeps TF's kernel's rules (sample_distorted_bounding_box_op.cc),
so a crop obeys what TF's does: up to ``max_attempts`` tries, each an aspect
ratio drawn from ``aspect_ratio_range``, a height drawn between the ones
the area range allows at that ratio (rounded as C's ``lrintf``, nudged by
one row when the rounding leaves the area outside the range), an offset
drawn inside the image, and accepted when it covers at least
``min_object_covered`` of one box (boxes of less than one pixel are
skipped); when no try is accepted, the whole image. The numbers come from
numpy's generators, not TF's Philox, so a seed gives other crops than TF's.

``DecodeAndCropJpeg`` decodes the whole JPEG and copies the window out:
libjpeg-turbo's partial decode is not in simplejpeg or Pillow, and the
result then equals ``DecodeJpeg`` followed by a crop exactly. A window not
inside the image is TF's error ("Invalid JPEG data or crop window").
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from kernels.cpu.image_codec import decode_jpeg_value, image_format, string_bytes
from kernels.cpu.math import rng as random_generator
from kernels.dtypes import as_dtype
from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["extract_jpeg_shape_value", "decode_and_crop_jpeg_value", "sample_box",
           "check_box_attrs"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_F32 = np.float32
_EPS = float(np.float32(1e-7))   # TF's kEps, a float widened to double


# -- a JPEG's shape ------------------------------------------------------------------------

def extract_jpeg_shape_value(data: bytes) -> tuple[int, int, int]:
    """``(height, width, channels)`` of a JPEG from its header (channels: the
    file's components, 1 for grey, 3 for colour, 4 for CMYK)."""
    if image_format(data) != "jpeg":
        raise KernelError(f"Invalid JPEG data, size {len(data)} (not a JPEG: it does not "
                          "start with FF D8 FF)")
    import simplejpeg
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        channels = {"gray": 1, "cmyk": 4, "ycck": 4}.get(str(colorspace).lower(), 3)
        return int(height), int(width), channels
    except (ValueError, OSError):
        pass   # a header libjpeg-turbo refuses: Pillow reads it, decoding nothing
    import io

    from PIL import Image
    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            channels = {"L": 1, "CMYK": 4}.get(im.mode, 3)
    except Exception as e:   # Pillow raises many kinds for bad bytes
        raise KernelError(f"Invalid JPEG data, size {len(data)}: {e}") from None
    return int(height), int(width), channels


@KERNELS("ExtractJpegShape", CPU)
def extract_jpeg_shape(inputs: list, attrs: dict) -> list:
    out_type = as_dtype(attrs.get("output_type", "int32"))
    if out_type not in (np.int32, np.int64):
        raise KernelError(f"ExtractJpegShape: output_type must be int32 or int64, got {out_type}")
    return [np.array(extract_jpeg_shape_value(string_bytes(inputs[0])), out_type)]


# -- decoding a crop -----------------------------------------------------------------------

def decode_and_crop_jpeg_value(data: bytes, crop_window: Any, channels: int = 0, ratio: int = 1,
                               fancy_upscaling: bool = True, dct_method: str = "") -> np.ndarray:
    """The ``[crop_y, crop_x, crop_height, crop_width]`` window of a JPEG's
    pixels, uint8 ``[crop_height, crop_width, channels]`` (a contiguous copy)."""
    window = np.asarray(crop_window)
    if window.shape != (4,) or window.dtype.kind not in "iu":
        raise KernelError(f"crop_window must be an int32 vector of 4 elements [crop_y, crop_x, "
                          f"crop_height, crop_width], got {window.dtype} {list(window.shape)}")
    y, x, h, w = (int(v) for v in window)
    image = decode_jpeg_value(data, channels, ratio, fancy_upscaling, dct_method)
    height, width = image.shape[:2]
    if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > height or x + w > width:
        raise KernelError(f"Invalid JPEG data or crop window, data size {len(data)}: the window "
                          f"(y {y}, x {x}, height {h}, width {w}) is not inside the "
                          f"{height}x{width} image; crop inside it (extract_jpeg_shape gives "
                          "the size)")
    return np.ascontiguousarray(image[y:y + h, x:x + w])


@KERNELS("DecodeAndCropJpeg", CPU)
def decode_and_crop_jpeg(inputs: list, attrs: dict) -> list:
    return [decode_and_crop_jpeg_value(
        string_bytes(inputs[0]), inputs[1], int(attrs.get("channels", 0)), int(attrs.get("ratio", 1)),
        bool(attrs.get("fancy_upscaling", True)), str(attrs.get("dct_method", "")))]


# -- sampling a distorted box --------------------------------------------------------------

def check_box_attrs(aspect_ratio_range: Any, area_range: Any, max_attempts: int) -> None:
    """TF's checks of the sampler's attrs (its kernel's constructor)."""
    if len(aspect_ratio_range) != 2:
        raise KernelError("Aspect ratio range field must specify 2 dimensions")
    if not (aspect_ratio_range[0] > 0 and aspect_ratio_range[1] > 0):
        raise KernelError(f"Aspect ratio range must be non-negative: {list(aspect_ratio_range)}")
    if len(area_range) != 2:
        raise KernelError("Area range field must specify 2 dimensions")
    if not (area_range[0] > 0 and area_range[1] > 0):
        raise KernelError(f"Area range must be non-negative: {list(area_range)}")
    if not (area_range[0] <= 1 and area_range[1] <= 1):
        raise KernelError(f"Area range must be less then or equal to 1.0: {list(area_range)}")
    if max_attempts <= 0:
        raise KernelError(f"Max attempts must be non-negative: {max_attempts}")


def _lrint(v: Any) -> int:
    return int(np.rint(_F32(v)))


def _random_crop(width: int, height: int, min_rel: float, max_rel: float, ratio: Any,
                 rng: Any) -> tuple[int, int, int, int] | None:
    """One try: ``(x, y, w, h)`` of a crop of the given aspect ratio and area
    fraction, or None when the constraints cannot be met (TF's GenerateRandomCrop)."""
    if max_rel <= 0.0 or ratio <= 0.0 or width <= 0 or height <= 0 or min_rel > max_rel:
        return None
    min_area = _F32(min_rel) * _F32(width) * _F32(height)
    max_area = _F32(max_rel) * _F32(width) * _F32(height)
    h = _lrint(np.sqrt(min_area / ratio))
    max_h = _lrint(np.sqrt(max_area / ratio))
    if _lrint(max_h * ratio) > width:   # the tallest crop whose rounded width fits
        # in double, as C's (an int plus 0.5 is a double): numpy 2 would keep a
        # float32 ratio's quotient float32 and round it up to the next row
        max_h = int((width + 0.5 - _EPS) / float(ratio))
        if _lrint(max_h * ratio) > width:
            max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    if h < max_h:
        h += int(rng.integers(0, max_h - h + 1))
    w = _lrint(h * ratio)
    area = _F32(w * h)
    if area < min_area:   # rounding left it too small: one row more
        h += 1
        w = _lrint(h * ratio)
        area = _F32(w * h)
    if area > max_area:   # too big: one row less
        h -= 1
        w = _lrint(h * ratio)
        area = _F32(w * h)
    if area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    y = int(rng.integers(0, height - h)) if h < height else 0
    x = int(rng.integers(0, width - w)) if w < width else 0
    return x, y, w, h


def _covers(crop: tuple[int, int, int, int], min_covered: float,
            boxes: list[tuple[int, int, int, int]]) -> bool:
    """Whether the crop covers ``min_covered`` of one box (boxes as x0, y0, x1, y1)."""
    x, y, w, h = crop
    if w * h < 1:
        return False
    for bx0, by0, bx1, by1 in boxes:
        area = (bx1 - bx0) * (by1 - by0)
        if area < 1:
            continue
        ix0, iy0, ix1, iy1 = max(x, bx0), max(y, by0), min(x + w, bx1), min(y + h, by1)
        inter = (ix1 - ix0) * (iy1 - iy0) if ix0 <= ix1 and iy0 <= iy1 else 0
        if _F32(inter) / _F32(area) >= min_covered:
            return True
    return False


def sample_box(image_size: Any, bounding_boxes: Any, min_object_covered: float,
               aspect_ratio_range: Any, area_range: Any, max_attempts: int,
               use_image_if_no_bounding_boxes: bool, rng: Any) -> list[np.ndarray]:
    """``[begin, size, bboxes]`` of a distorted crop (see the module header);
    ``rng`` has numpy Generator's ``random()`` and ``integers(low, high)``."""
    size = np.asarray(image_size)
    if size.shape != (3,) or size.dtype.kind not in "iu":
        raise KernelError(f"image_size must be an integer vector of 3 elements [height, width, "
                          f"channels], got {size.dtype} {list(size.shape)}")
    boxes = np.asarray(bounding_boxes, dtype=np.float32)
    if boxes.ndim != 3 or boxes.shape[-1] != 4:
        raise KernelError(f"input boxes must be 3-dimensional [batch, num_boxes, coords] with 4 "
                          f"coords, got shape {list(boxes.shape)}")
    min_covered = _F32(np.asarray(min_object_covered))
    if np.ndim(min_object_covered) != 0 or not min_covered >= 0:
        raise KernelError(f"Min object covered must be a non-negative scalar: "
                          f"{min_object_covered}")
    check_box_attrs(aspect_ratio_range, area_range, max_attempts)
    height, width = int(size[0]), int(size[1])
    for what, n in (("height", height), ("width", width)):
        if not 0 <= n < 2**31 - 1:   # TF reads them as unsigned: a negative one is huge
            raise KernelError(f"image {what} cannot be >= int32 max (nor negative): "
                              f"image_size is {size.tolist()}")
    flat = boxes.reshape(-1, 4)
    if flat.size and not ((flat >= 0.0) & (flat <= 1.0)).all():
        raise KernelError(f"All bounding box coordinates must be in [0.0, 1.0]: "
                          f"{flat[~((flat >= 0.0) & (flat <= 1.0))][0]}")
    rects = [(int(b[1] * _F32(width)), int(b[0] * _F32(height)), int(b[3] * _F32(width)),
              int(b[2] * _F32(height))) for b in flat]
    if not rects:
        if not use_image_if_no_bounding_boxes:
            raise KernelError("No bounding boxes provided as input. One must enable "
                              "use_image_if_no_bounding_boxes if you wish to not provide any "
                              "bounding boxes.")
        rects = [(0, 0, width, height)]
    lo_ratio, hi_ratio = _F32(aspect_ratio_range[0]), _F32(aspect_ratio_range[1])
    crop = (0, 0, width, height)
    for _ in range(int(max_attempts)):
        ratio = _F32(rng.random()) * (hi_ratio - lo_ratio) + lo_ratio
        tried = _random_crop(width, height, area_range[0], area_range[1], ratio, rng)
        if tried is not None and _covers(tried, min_covered, rects):
            crop = tried
            break
    x, y, w, h = crop
    begin = np.array([y, x, 0], size.dtype)
    extent = np.array([h, w, -1]).astype(size.dtype)   # T(-1): 255 for uint8, as TF's
    with np.errstate(divide="ignore", invalid="ignore"):   # an empty image: NaN, as TF's
        box = (np.array([y, x, y + h, x + w], np.float32)
               / np.array([height, width, height, width], np.float32)).reshape(1, 1, 4)
    return [begin, extent, box]


# a seeded sampler's generator when the kernel is called without an executor's
# (sessions and eager ops hand it one per op and session through
# kernels.cpu.math.rng_attrs, as this op is in RANDOM_OPS), kept from call to
# call so each draws the next crop of its sequence
_SEEDED: dict[int, np.random.Generator] = {}
_SEEDED_LOCK = threading.Lock()


def _sample(inputs: list, attrs: dict, min_covered: Any) -> list:
    seed = attrs.get("seed")
    if attrs.get("_generator") is not None or seed is None:
        rng = random_generator(attrs)
        return _sample_with(inputs, attrs, min_covered, rng)
    with _SEEDED_LOCK:   # a Generator is not thread-safe
        rng = _SEEDED.get(int(seed))
        if rng is None:
            rng = _SEEDED[int(seed)] = np.random.default_rng(int(seed))
        return _sample_with(inputs, attrs, min_covered, rng)


def _sample_with(inputs: list, attrs: dict, min_covered: Any, rng: Any) -> list:
    return sample_box(inputs[0], inputs[1], min_covered,
                      attrs.get("aspect_ratio_range", (0.75, 1.33)),
                      attrs.get("area_range", (0.05, 1.0)), int(attrs.get("max_attempts", 100)),
                      bool(attrs.get("use_image_if_no_bounding_boxes", False)), rng)


@KERNELS("SampleDistortedBoundingBoxV2", CPU)
def sample_distorted_bounding_box_v2(inputs: list, attrs: dict) -> list:
    """``min_object_covered`` is the third input (TF's V2; TF1's and TF2's
    Python both emit this op, so the V1 op, with it as an attr, is not here)."""
    return _sample(inputs, attrs, inputs[2])


# -- broadcasting --------------------------------------------------------------------------

@KERNELS("BroadcastTo", CPU)
def broadcast_to(inputs: list, attrs: dict) -> list:
    """``input`` broadcast to ``shape`` by numpy's rules, as TF's (a copy: kernels
    never hand out a view that a later in-place kernel could write through)."""
    x, shape = np.asarray(inputs[0]), np.asarray(inputs[1])
    if shape.ndim != 1 or shape.dtype.kind not in "iu":
        raise KernelError(f"BroadcastTo: shape must be an integer vector, got {shape.dtype} "
                          f"{list(shape.shape)}")
    try:
        return [np.array(np.broadcast_to(x, tuple(int(d) for d in shape)))]
    except ValueError:
        raise KernelError(f"Unable to broadcast tensor of shape {list(x.shape)} to tensor of "
                          f"shape {shape.tolist()}") from None
