"""MNIST's reader, as TF1's ``tensorflow.examples.tutorials.mnist.input_data``
(``read_data_sets(train_dir, one_hot=...)`` -> ``train``, ``validation``,
``test`` DataSets with ``images``, ``labels`` and ``next_batch``).

It reads MNIST's four files (``train-images-idx3-ubyte.gz`` ...) from
``train_dir``. TF's downloads them when they are missing; this machine may
have no network, so a missing set is *generated* instead: 8000 training and
1000 test images of MNIST's format and shapes (28x28 uint8, labels 0..9),
each a noisy copy of one of ten fixed random strokes, written to
``train_dir`` in MNIST's own file format and then read back like the real
files. A model learns it as it learns MNIST (a softmax layer alone gets far
above chance), so mnist_replica.py's cross entropy falls as on the real data.
"""
from __future__ import annotations

import gzip
import logging
import os
from typing import NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

FILES = {"train_images": "train-images-idx3-ubyte.gz",
         "train_labels": "train-labels-idx1-ubyte.gz",
         "test_images": "t10k-images-idx3-ubyte.gz",
         "test_labels": "t10k-labels-idx1-ubyte.gz"}


def _read32(f) -> int:
    return int(np.frombuffer(f.read(4), dtype=">u4")[0])


def extract_images(path: str) -> np.ndarray:
    """A [n, 28, 28, 1] uint8 array from an idx3 file (magic 2051)."""
    with gzip.open(path, "rb") as f:
        if _read32(f) != 2051:
            raise ValueError(f"invalid magic number in MNIST image file {path}")
        n, rows, cols = _read32(f), _read32(f), _read32(f)
        return np.frombuffer(f.read(n * rows * cols), np.uint8).reshape(n, rows, cols, 1)


def extract_labels(path: str, one_hot: bool = False, num_classes: int = 10) -> np.ndarray:
    """The labels of an idx1 file (magic 2049), as ints or one-hot rows."""
    with gzip.open(path, "rb") as f:
        if _read32(f) != 2049:
            raise ValueError(f"invalid magic number in MNIST label file {path}")
        labels = np.frombuffer(f.read(_read32(f)), np.uint8)
    return dense_to_one_hot(labels, num_classes) if one_hot else labels


def dense_to_one_hot(labels: np.ndarray, num_classes: int) -> np.ndarray:
    out = np.zeros((labels.shape[0], num_classes), np.float32)
    out[np.arange(labels.shape[0]), labels] = 1.0
    return out


class DataSet:
    """Images (flattened to 784 floats in [0, 1]) and labels, served in
    shuffled batches epoch after epoch (TF's ``DataSet``)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, dtype=np.float32,
                 reshape: bool = True, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)
        if reshape:
            images = images.reshape(images.shape[0], -1)
        if dtype == np.float32:
            images = images.astype(np.float32) * (1.0 / 255.0)
        self._images, self._labels = images, labels
        self._num_examples = images.shape[0]
        self._epochs_completed = 0
        self._index_in_epoch = 0

    images = property(lambda self: self._images)
    labels = property(lambda self: self._labels)
    num_examples = property(lambda self: self._num_examples)
    epochs_completed = property(lambda self: self._epochs_completed)

    def next_batch(self, batch_size: int, fake_data: bool = False, shuffle: bool = True):
        """The next ``batch_size`` examples, reshuffled at each epoch's start."""
        start = self._index_in_epoch
        if start == 0 and shuffle:
            self._shuffle()
        if start + batch_size > self._num_examples:
            self._epochs_completed += 1
            rest_images, rest_labels = self._images[start:], self._labels[start:]
            if shuffle:
                self._shuffle()
            need = batch_size - rest_images.shape[0]
            self._index_in_epoch = need
            return (np.concatenate([rest_images, self._images[:need]]),
                    np.concatenate([rest_labels, self._labels[:need]]))
        self._index_in_epoch = start + batch_size
        return self._images[start:start + batch_size], self._labels[start:start + batch_size]

    def _shuffle(self) -> None:
        order = self._rng.permutation(self._num_examples)
        self._images, self._labels = self._images[order], self._labels[order]


class Datasets(NamedTuple):
    train: DataSet
    validation: DataSet
    test: DataSet


def _write_idx(path: str, magic: int, array: np.ndarray) -> None:
    header = np.array([magic, *array.shape], dtype=">u4").tobytes()
    tmp = f"{path}.{os.getpid()}.tmp"   # tasks that start together each write their own
    with gzip.open(tmp, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())
    os.replace(tmp, path)


def generate(train_dir: str, n_train: int = 8000, n_test: int = 1000, seed: int = 0) -> None:
    """Write a generated MNIST-shaped set to ``train_dir`` in MNIST's file format."""
    rng = np.random.default_rng(seed)
    strokes = rng.random((10, 28, 28)) < 0.18          # ten fixed random "digits"
    os.makedirs(train_dir, exist_ok=True)
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        noise = rng.random((n, 28, 28))
        pixels = np.where(strokes[labels], 160 + 95 * noise, 60 * noise * (noise > 0.8))
        _write_idx(os.path.join(train_dir, FILES[f"{split}_images"]), 2051, pixels[..., None]
                   .reshape(n, 28, 28))
        _write_idx(os.path.join(train_dir, FILES[f"{split}_labels"]), 2049, labels)
    logger.info("generated an MNIST-shaped set in %s (%d train, %d test)", train_dir, n_train,
                n_test)


def read_data_sets(train_dir: str, fake_data: bool = False, one_hot: bool = False,
                   dtype=np.float32, reshape: bool = True, validation_size: int = 5000,
                   seed: int | None = None) -> Datasets:
    """MNIST's train (less the first ``validation_size``), validation and test sets."""
    paths = {k: os.path.join(train_dir, v) for k, v in FILES.items()}
    if not all(os.path.exists(p) for p in paths.values()):
        generate(train_dir)
    train_images = extract_images(paths["train_images"])
    train_labels = extract_labels(paths["train_labels"], one_hot=one_hot)
    test_images = extract_images(paths["test_images"])
    test_labels = extract_labels(paths["test_labels"], one_hot=one_hot)
    if not 0 <= validation_size <= len(train_images):
        raise ValueError(f"validation_size should be between 0 and {len(train_images)}, "
                         f"received {validation_size}")
    validation = DataSet(train_images[:validation_size], train_labels[:validation_size],
                         dtype, reshape, seed)
    train = DataSet(train_images[validation_size:], train_labels[validation_size:], dtype,
                    reshape, seed)
    return Datasets(train, validation, DataSet(test_images, test_labels, dtype, reshape, seed))
