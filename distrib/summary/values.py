"""One summary value from numpy data: the ``Summary.Value`` messages TF's
summary ops and TF2's summary functions write, built in Python.

Two forms, as TF has them:

* ``v1`` (the TF1 graph ops: ``ScalarSummary``, ``HistogramSummary``,
  ``ImageSummary``): ``simple_value``, a ``HistogramProto`` with TF's
  default exponential buckets, one ``Summary.Image`` (PNG) per image;
* ``v2`` (``dt.summary.scalar`` etc. through a writer): a ``TensorProto``
  with the plugin's metadata: a float scalar (``scalars``), a ``[k, 3]``
  tensor of (left edge, right edge, count) (``histograms``), a string
  vector ``[width, height, png...]`` (``images``).

Text is a string tensor with the ``text`` plugin's metadata in both forms.
Every value carries ``SummaryMetadata`` with its plugin's name and
``data_class`` (TF2 sets them; TensorBoard reads a TF1 form by its field), so a serialized Summary never ends in a NUL byte: a fetched
0-d string tensor comes back through numpy, which drops trailing NULs.
"""
from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

import numpy as np

from distrib.summary import proto

__all__ = ["scalar_value", "histogram_value", "image_values", "text_value", "serialize",
           "default_bucket_limits", "encode_png"]

DEFAULT_BUCKETS = 30   # TF2's histogram bucket count


def _metadata(plugin: str, data_class: int, description: str | None = None) -> Any:
    m = proto.messages()
    meta = m.SummaryMetadata(data_class=data_class)
    meta.plugin_data.plugin_name = plugin
    if description:
        meta.summary_description = description
    return meta


def scalar_value(tag: str, data: Any, form: str = "v2", description: str | None = None) -> Any:
    """A scalar: ``simple_value`` (v1) or a float tensor of the scalars plugin (v2)."""
    m = proto.messages()
    arr = np.asarray(data)
    if arr.size != 1:
        raise ValueError(f"summary scalar {tag!r} needs one value, got shape {list(arr.shape)}")
    value = float(arr.reshape(()))
    if form == "v1":
        return m.Summary.Value(tag=tag, simple_value=value,
                               metadata=_metadata("scalars", proto.DATA_CLASS_SCALAR, description))
    tensor = m.TensorProto(dtype=proto.DT_FLOAT, float_val=[value])
    tensor.tensor_shape.SetInParent()
    return m.Summary.Value(tag=tag, tensor=tensor,
                           metadata=_metadata("scalars", proto.DATA_CLASS_SCALAR, description))


@functools.cache
def default_bucket_limits() -> np.ndarray:
    """TF's default histogram bucket limits: +-1e-12 * 1.1**k up to 1e20, 0, +-DBL_MAX."""
    pos = []
    v = 1.0e-12
    while v < 1.0e20:
        pos.append(v)
        v *= 1.1
    pos.append(np.finfo(np.float64).max)
    neg = [-x for x in reversed(pos)]
    return np.array(neg + [0.0] + pos, dtype=np.float64)


def histogram_value(tag: str, data: Any, form: str = "v2", buckets: int | None = None,
                    description: str | None = None) -> Any:
    """A histogram of ``data``'s values (any shape)."""
    m = proto.messages()
    values = np.asarray(data, dtype=np.float64).reshape(-1)
    if form == "v1":
        limits = default_bucket_limits()
        counts = np.bincount(np.searchsorted(limits, values, side="right"),
                             minlength=len(limits))[:len(limits)].astype(np.float64)
        # TF's EncodeToProto: a bucket is kept when it, or the next one, counts something
        keep = (counts > 0) | np.append(counts[1:] > 0, True)
        histo = m.HistogramProto(
            min=float(values.min()) if values.size else 0.0,
            max=float(values.max()) if values.size else 0.0,
            num=float(values.size), sum=float(values.sum()),
            sum_squares=float(np.dot(values, values)),
            bucket_limit=limits[keep].tolist(), bucket=counts[keep].tolist())
        return m.Summary.Value(tag=tag, histo=histo,
                               metadata=_metadata("histograms", proto.DATA_CLASS_TENSOR, description))
    k = buckets or DEFAULT_BUCKETS
    if values.size == 0:
        table = np.zeros((0, 3))
    else:
        lo, hi = float(values.min()), float(values.max())
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(values, bins=k, range=(lo, hi))
        table = np.stack([edges[:-1], edges[1:], counts.astype(np.float64)], axis=1)
    tensor = m.TensorProto(dtype=proto.DT_DOUBLE, double_val=table.reshape(-1).tolist())
    for d in table.shape:
        tensor.tensor_shape.dim.add(size=d)
    return m.Summary.Value(tag=tag, tensor=tensor,
                           metadata=_metadata("histograms", proto.DATA_CLASS_TENSOR, description))


_BAD_COLOR = np.array([255, 0, 0, 255], np.uint8)   # TF1 ImageSummary's default bad_color


def _as_uint8_images(data: Any, form: str = "v2") -> np.ndarray:
    """uint8 images as given; float images converted as TF converts them.

    * v2 (TF2's ``tf.summary.image``): ``convert_image_dtype(saturate=True)``,
      values in [0, 1]: ``x * 255.5`` clamped to [0, 255], then truncated.
    * v1 (TF1's ``ImageSummary`` op): each image normalized on its own (finite
      pixels): all >= 0: the largest becomes 255; any < 0: 0 goes to 128 and
      the largest magnitude to 127 from it; truncated; a pixel with a
      non-finite channel gets ``bad_color`` (red).
    """
    arr = np.asarray(data)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] not in (1, 3, 4):
        raise ValueError(f"an image summary takes [k, h, w, c] with c in 1, 3, 4; got {list(arr.shape)}")
    if arr.dtype == np.uint8:
        return arr
    x = np.asarray(arr, dtype=np.float64 if arr.dtype == np.float64 else np.float32)
    if form != "v1":
        with np.errstate(invalid="ignore"):
            return np.nan_to_num(np.clip(x * 255.5, 0.0, 255.0), nan=0.0).astype(np.uint8)
    out = np.empty(x.shape, np.uint8)
    for i, image in enumerate(x):
        finite = np.isfinite(image).all(axis=-1)   # [h, w]: every channel finite
        good = image[finite]
        lo = np.float32(good.min()) if good.size else np.float32(np.inf)   # TF: float32
        hi = np.float32(good.max()) if good.size else np.float32(-np.inf)
        if lo < 0:
            top = max(abs(lo), abs(hi))
            scale, offset = (0.0 if top < 1e-6 else np.float32(127.0) / top), 128.0
        else:
            scale, offset = (0.0 if hi < 1e-6 else np.float32(255.0) / hi), 0.0
        scale, offset = x.dtype.type(scale), x.dtype.type(offset)
        with np.errstate(invalid="ignore"):
            out[i] = np.where(finite[..., None], image * scale + offset, 0).astype(np.uint8)
        out[i][~finite] = _BAD_COLOR[:image.shape[-1]]
    return out


def encode_png(image: np.ndarray) -> bytes:
    """One [h, w, c] uint8 image as PNG (grey, RGB or RGBA; no filter)."""
    h, w, c = image.shape
    color = {1: 0, 3: 2, 4: 6}[c]
    rows = np.concatenate([np.zeros((h, 1), np.uint8), image.reshape(h, w * c)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b""))


def image_values(tag: str, data: Any, form: str = "v2", max_outputs: int = 3,
                 description: str | None = None) -> list:
    """Images ``[k, h, w, c]`` (uint8, or floats: see ``_as_uint8_images``): v1 one value per
    image (``tag/image/i``, or ``tag/image`` for one), v2 one string tensor."""
    m = proto.messages()
    arr = np.asarray(data)
    images = _as_uint8_images(arr[:max_outputs] if arr.ndim == 4 else arr, form)
    pngs = [encode_png(img) for img in images]
    if form == "v1":
        out = []
        for i, (img, png) in enumerate(zip(images, pngs)):
            name = f"{tag}/image/{i}" if max_outputs > 1 else f"{tag}/image"
            out.append(m.Summary.Value(
                tag=name, image=m.Summary.Image(height=img.shape[0], width=img.shape[1],
                                                colorspace=img.shape[2], encoded_image_string=png),
                metadata=_metadata("images", proto.DATA_CLASS_BLOB_SEQUENCE, description)))
        return out
    h, w = images.shape[1:3]
    tensor = m.TensorProto(dtype=proto.DT_STRING, string_val=[str(w).encode(), str(h).encode(), *pngs])
    tensor.tensor_shape.dim.add(size=2 + len(pngs))
    return [m.Summary.Value(tag=tag, tensor=tensor,
                            metadata=_metadata("images", proto.DATA_CLASS_BLOB_SEQUENCE, description))]


def text_value(tag: str, data: Any, description: str | None = None) -> Any:
    """A string tensor (any shape) of the text plugin."""
    m = proto.messages()
    arr = np.asarray(data, dtype=object)
    strings = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in arr.reshape(-1)]
    tensor = m.TensorProto(dtype=proto.DT_STRING, string_val=strings)
    tensor.tensor_shape.SetInParent()
    for d in arr.shape:
        tensor.tensor_shape.dim.add(size=d)
    return m.Summary.Value(tag=tag, tensor=tensor,
                           metadata=_metadata("text", proto.DATA_CLASS_TENSOR, description))


def serialize(values: list) -> bytes:
    """The serialized ``Summary`` of ``values``."""
    return proto.messages().Summary(value=values).SerializeToString()
