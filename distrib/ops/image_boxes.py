"""``dt.image.sample_distorted_bounding_box``, ``extract_jpeg_shape`` and
``decode_and_crop_jpeg`` (also ``dt.io``'s two codecs, as TF has them in
both): the bounding-box crop ImageNet trainers make of each JPEG (TF's
Inception and ResNet preprocessing), with TF's arguments and defaults.

In a graph each adds its op (kernels in kernels/cpu/image_boxes.py, entries
in distrib.framework.image_box_shapes); in a dataset function (see
:mod:`distrib.ops.value_mode`) it computes on the value at once with the
same code, the sampler drawing from the element's generator, so a map with
a seed crops the same way in every run and a new epoch differently; the
results there are ``EagerTensor``s (:func:`tensor_result`).

The sampler is TF2's ``sample_distorted_bounding_box`` (one ``seed``) here
and TF1's (``seed``, ``seed2``) in ``dt.compat.v1.image``; both emit
``SampleDistortedBoundingBoxV2``, as TF's do.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.eager.tensor import wrap
from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import name_scope
from distrib.ops import math_ops as ops
from distrib.ops import value_mode
from distrib.ops.constant_op import make_op
from distrib.ops.image_codec import call_kernel, string_bytes

__all__ = ["extract_jpeg_shape", "decode_and_crop_jpeg", "sample_distorted_bounding_box",
           "sample_distorted_bounding_box_v1", "tensor_result", "GRADIENTS",
           "NOT_DIFFERENTIABLE"]


def tensor_result(value: Any) -> Any:
    """A value computed in a dataset function as an ``EagerTensor``, as the
    other ops built there on values give (see :mod:`value_mode`): it has
    ``set_shape``, ``get_shape`` and the operators, as the tensors of TF's
    traced map (ResNet's preprocessing calls ``set_shape`` on a resized crop)."""
    return wrap(value)


def extract_jpeg_shape(contents: Any, output_type: Any = dtypes.int32,
                       name: str | None = None) -> Any:
    """``[height, width, channels]`` of a JPEG, read from its header (TF's)."""
    out = dtypes.as_dtype(output_type)
    if out not in (dtypes.int32, dtypes.int64):
        raise InvalidArgumentError(f"output_type must be int32 or int64, got {out.name}")
    if value_mode.values_now(contents):
        from kernels.cpu.image_boxes import extract_jpeg_shape_value
        return tensor_result(np.array(call_kernel(extract_jpeg_shape_value, string_bytes(contents)),
                                      out.as_numpy_dtype))
    x = ops.convert_to_tensor(contents, dtype=dtypes.string)
    return ops.op_output("ExtractJpegShape", [x], {"output_type": out},
                         name or "ExtractJpegShape")


def decode_and_crop_jpeg(contents: Any, crop_window: Any, channels: int = 0, ratio: int = 1,
                         fancy_upscaling: bool = True, try_recover_truncated: bool = False,
                         acceptable_fraction: float = 1, dct_method: str = "",
                         name: str | None = None) -> Any:
    """The ``crop_window`` ``[crop_y, crop_x, crop_height, crop_width]`` of a
    JPEG's pixels, uint8 (TF's): equal to ``decode_jpeg`` then the crop."""
    if value_mode.values_now(contents, crop_window):
        from kernels.cpu.image_boxes import decode_and_crop_jpeg_value
        return tensor_result(call_kernel(decode_and_crop_jpeg_value, string_bytes(contents),
                                   np.asarray(value_mode.as_value(crop_window)), int(channels),
                                   int(ratio), bool(fancy_upscaling), str(dct_method)))
    attrs = {"channels": int(channels), "ratio": int(ratio),
             "fancy_upscaling": bool(fancy_upscaling), "dct_method": str(dct_method),
             "try_recover_truncated": bool(try_recover_truncated),
             "acceptable_fraction": float(acceptable_fraction)}
    x = ops.convert_to_tensor(contents, dtype=dtypes.string)
    window = ops.convert_to_tensor(crop_window, dtype=dtypes.int32)
    return ops.op_output("DecodeAndCropJpeg", [x, window], attrs, name or "DecodeAndCropJpeg")


def _sampler(image_size: Any, bounding_boxes: Any, seed: int | None,
             min_object_covered: Any, aspect_ratio_range: Any, area_range: Any,
             max_attempts: Any, use_image_if_no_bounding_boxes: Any, name: str | None) -> Any:
    ratio = [float(r) for r in (aspect_ratio_range if aspect_ratio_range is not None
                                else (0.75, 1.33))]
    area = [float(a) for a in (area_range if area_range is not None else (0.05, 1.0))]
    attempts = 100 if max_attempts is None else int(max_attempts)
    use_image = bool(use_image_if_no_bounding_boxes)
    from kernels.cpu.image_boxes import check_box_attrs, sample_box
    call_kernel(check_box_attrs, ratio, area, attempts)
    if value_mode.values_now(image_size, bounding_boxes, min_object_covered):
        size = np.asarray(value_mode.as_value(image_size))
        outs = call_kernel(sample_box, size, np.asarray(value_mode.as_value(bounding_boxes)),
                     np.asarray(value_mode.as_value(min_object_covered), np.float32),
                     ratio, area, attempts, use_image, value_mode.rng())
        return tuple(tensor_result(v) for v in outs)
    with name_scope(name, "sample_distorted_bounding_box", [image_size, bounding_boxes]):
        size = ops.convert_to_tensor(image_size)
        if not size.dtype.is_integer:
            raise InvalidArgumentError(f"image_size must be an integer vector [height, width, "
                                       f"channels], got {size.dtype.name}")
        boxes = ops.convert_to_tensor(bounding_boxes, dtype=dtypes.float32)
        covered = ops.convert_to_tensor(min_object_covered, dtype=dtypes.float32)
        attrs: dict[str, Any] = {"aspect_ratio_range": ratio, "area_range": area,
                                 "max_attempts": attempts,
                                 "use_image_if_no_bounding_boxes": use_image}
        if seed is not None:
            attrs["seed"] = int(seed)
        op = make_op("SampleDistortedBoundingBoxV2", [size, boxes, covered], attrs,
                     "SampleDistortedBoundingBoxV2")
        return tuple(op.outputs)


def sample_distorted_bounding_box(image_size: Any, bounding_boxes: Any, seed: int = 0,
                                  min_object_covered: Any = 0.1, aspect_ratio_range: Any = None,
                                  area_range: Any = None, max_attempts: Any = None,
                                  use_image_if_no_bounding_boxes: Any = None,
                                  name: str | None = None) -> tuple:
    """``(begin, size, bboxes)`` of a random crop of an image of ``image_size``
    that covers at least ``min_object_covered`` of one of ``bounding_boxes``
    (``[batch, N, 4]`` of ``[ymin, xmin, ymax, xmax]`` in [0, 1]), its aspect
    ratio and area fraction in the ranges (defaults [0.75, 1.33], [0.05, 1]);
    the whole image after ``max_attempts`` (100) failed tries (TF2's: a
    ``seed`` of 0 draws fresh numbers, the graph's seed aside)."""
    return _sampler(image_size, bounding_boxes, int(seed) if seed else None, min_object_covered,
                    aspect_ratio_range, area_range, max_attempts,
                    use_image_if_no_bounding_boxes, name)


def sample_distorted_bounding_box_v1(image_size: Any, bounding_boxes: Any,
                                     seed: int | None = None, seed2: int | None = None,
                                     min_object_covered: Any = 0.1,
                                     aspect_ratio_range: Any = None, area_range: Any = None,
                                     max_attempts: Any = None,
                                     use_image_if_no_bounding_boxes: Any = None,
                                     name: str | None = None) -> tuple:
    """TF1's ``sample_distorted_bounding_box`` (``seed`` and ``seed2``)."""
    first = int(seed) if seed else None
    if seed2:   # one seed of the two, as numpy's generators take one
        first = (int(first or 0) * 1_000_003 + int(seed2)) % (2**31 - 1)
    return _sampler(image_size, bounding_boxes, first, min_object_covered, aspect_ratio_range,
                    area_range, max_attempts, use_image_if_no_bounding_boxes, name)


# none of these has a gradient (TF's: strings in, or random integers out)
GRADIENTS: dict[str, Any] = {}
NOT_DIFFERENTIABLE: tuple[str, ...] = ("ExtractJpegShape", "DecodeAndCropJpeg",
                                       "SampleDistortedBoundingBoxV2")
