"""``dt.compat.v1.image``: TF's ``tf.compat.v1.image``, ``dt.image`` with
TF1's spellings where TF2 changed a function: ``resize`` is TF1's
``resize_images`` (``ResizeMethodV1``, ``align_corners``, no half-pixel
centres; ResNet's ImageNet preprocessing calls it so) and
``sample_distorted_bounding_box`` takes ``seed`` and ``seed2``. In a
dataset function ``resize`` gives an ``EagerTensor``, as the samplers and
the general ops do there (ResNet's preprocessing calls ``set_shape`` on
what it gives).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.ops import image_ops, value_mode
from distrib.ops.image_adjust import ResizeMethodV1 as ResizeMethod
from distrib.ops.image_adjust import resize_images
from distrib.ops.image_boxes import sample_distorted_bounding_box_v1 as sample_distorted_bounding_box
from distrib.ops.image_boxes import tensor_result

# TF1's own spellings; every other name is dt.image's (__getattr__)
__all__ = ["resize", "ResizeMethod", "sample_distorted_bounding_box"]


def resize(images: Any, size: Any, method: Any = ResizeMethod.BILINEAR,
           align_corners: bool = False, preserve_aspect_ratio: bool = False,
           name: str | None = None) -> Any:
    """TF1's ``tf.image.resize_images`` (see the header); in a dataset function
    an ``EagerTensor`` (``image_boxes.tensor_result``)."""
    out = resize_images(images, size, method, align_corners, preserve_aspect_ratio, name)
    return tensor_result(out) if value_mode.in_dataset_function() and \
        isinstance(out, np.ndarray) else out


def __getattr__(name: str) -> Any:
    return getattr(image_ops, name)


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(image_ops.__all__))
