"""A small ImageNet in the form TF's ``build_imagenet_data.py`` writes it
(tensorflow/models, research/inception/inception/data): TFRecord shards
``train-00000-of-0000N`` / ``validation-...`` of ``tf.train.Example``
protos holding a JPEG each, for ``imagenet_preprocessing.input_fn`` when the
real files are not there (this machine is offline).

Each Example has the script's fields: ``image/encoded`` (JPEG bytes),
``image/height``, ``image/width``, ``image/colorspace``, ``image/channels``,
``image/format``, ``image/filename``, ``image/class/label`` (1-based, as the
script's: 0 is the background class), ``image/class/synset``,
``image/class/text``, and ``image/object/bbox/xmin`` .. ``ymax`` and
``image/object/bbox/label``, one float per box (an image may have none:
the script writes empty lists then). Images are of varied sizes; each class
has its own colour, under noise, so a small model can learn the labels.
"""
from __future__ import annotations

import dataclasses
import io
import os
from typing import Any

import numpy as np

import distrib as dt

__all__ = ["Record", "write_shards", "encode_jpeg"]

# a class's colour (RGB) under the noise: class k (label k + 1) is _COLOURS[k % 4]
_COLOURS = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]], np.float32)


@dataclasses.dataclass(frozen=True)
class Record:
    """What one Example holds, for a test to check against."""

    label: int                 # image/class/label (1-based)
    height: int
    width: int
    boxes: tuple               # ((ymin, xmin, ymax, xmax), ...) in [0, 1]
    jpeg: bytes


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def _feature(kind: str, values: list) -> Any:
    if kind == "bytes":
        return dt.train.Feature(bytes_list=dt.train.BytesList(value=values))
    if kind == "int":
        return dt.train.Feature(int64_list=dt.train.Int64List(value=values))
    return dt.train.Feature(float_list=dt.train.FloatList(value=values))


def _example(record: Record, index: int) -> bytes:
    boxes = np.array(record.boxes, np.float32).reshape(-1, 4)
    feature = {
        "image/height": _feature("int", [record.height]),
        "image/width": _feature("int", [record.width]),
        "image/colorspace": _feature("bytes", [b"RGB"]),
        "image/channels": _feature("int", [3]),
        "image/class/label": _feature("int", [record.label]),
        "image/class/synset": _feature("bytes", [b"n%08d" % record.label]),
        "image/class/text": _feature("bytes", [b"class %d" % record.label]),
        "image/object/bbox/ymin": _feature("float", boxes[:, 0].tolist()),
        "image/object/bbox/xmin": _feature("float", boxes[:, 1].tolist()),
        "image/object/bbox/ymax": _feature("float", boxes[:, 2].tolist()),
        "image/object/bbox/xmax": _feature("float", boxes[:, 3].tolist()),
        "image/object/bbox/label": _feature("int", [record.label] * len(boxes)),
        "image/format": _feature("bytes", [b"JPEG"]),
        "image/filename": _feature("bytes", [b"image_%06d.JPEG" % index]),
        "image/encoded": _feature("bytes", [record.jpeg]),
    }
    return dt.train.Example(features=dt.train.Features(feature=feature)).SerializeToString()


def _record(rng: np.random.Generator, num_classes: int, size: tuple[int, int],
            index: int) -> Record:
    h, w = (int(rng.integers(size[0], size[1] + 1)) for _ in range(2))
    label = index % num_classes + 1
    noise = rng.normal(0.0, 30.0, (h, w, 3)).astype(np.float32)
    image = np.clip(_COLOURS[(label - 1) % len(_COLOURS)] + noise, 0, 255).astype(np.uint8)
    boxes: list[tuple[float, ...]] = []
    for _ in range(index % 3):   # 0, 1 or 2 boxes
        y0, x0 = rng.uniform(0.0, 0.5, 2)
        y1, x1 = y0 + rng.uniform(0.2, 0.5), x0 + rng.uniform(0.2, 0.5)
        boxes.append((float(y0), float(x0), float(y1), float(x1)))
    return Record(label, h, w, tuple(boxes), encode_jpeg(image))


def write_shards(directory: str, split: str = "train", num_files: int = 2, per_file: int = 8,
                 num_classes: int = 3, size: tuple[int, int] = (120, 320),
                 seed: int = 0) -> tuple[list[str], list[Record]]:
    """Write ``num_files`` shards of ``per_file`` Examples; their paths, and the
    records in file order (record ``i`` of file ``f`` is ``f * per_file + i``)."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths, records = [], []
    for f in range(num_files):
        path = os.path.join(directory, "%s-%05d-of-%05d" % (split, f, num_files))
        with dt.io.TFRecordWriter(path) as writer:
            for _ in range(per_file):
                record = _record(rng, num_classes, size, len(records))
                writer.write(_example(record, len(records)))
                records.append(record)
        paths.append(path)
    return paths, records
