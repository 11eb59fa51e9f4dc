"""The op builders ``dt.io`` holds beside its own file helpers (TF's ``tf.io``
names): parsing (``parse_single_example``, ``parse_example``, the feature
specs, ``read_file``), ``decode_raw`` and the image codecs. The io layer sits
below the ops, so the ``dt`` namespace installs these there (:func:`names`).
"""
from __future__ import annotations

from typing import Any

from distrib.ops import image_boxes, image_codec, io_ops, parsing_ops

__all__ = ["names"]


def names() -> dict[str, Any]:
    """``{name: builder}`` of every op builder ``dt.io`` offers."""
    out: dict[str, Any] = {"decode_raw": io_ops.decode_raw}
    for module in (parsing_ops, image_codec):
        out.update({name: getattr(module, name) for name in module.__all__})
    out.update(extract_jpeg_shape=image_boxes.extract_jpeg_shape,
               decode_and_crop_jpeg=image_boxes.decode_and_crop_jpeg)
    return out
