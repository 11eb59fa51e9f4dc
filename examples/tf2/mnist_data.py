"""``mnist.load_data()`` for the ported tutorials, offline: the 8x8 digits as MNIST.

TF's tutorials read MNIST with ``tf.keras.datasets.mnist.load_data()``, a
download; this machine is offline. The digits of ``examples/data``
(``examples.datasets.load_digits``) stand in, shaped as MNIST's arrays are so
the tutorials' code runs as written: each 8x8 image is scaled up 3x
(nearest neighbour) and padded by 2 pixels to 28x28, as MNIST centres its
20x20 digits in 28x28; pixels are ``uint8`` in [0, 255]; labels ``uint8``.
There are 1437 training and 360 test images instead of 60000 and 10000.
"""
from __future__ import annotations

import numpy as np

from examples.datasets import load_digits

__all__ = ["load_data"]


def _as_mnist(x: np.ndarray) -> np.ndarray:
    images = np.kron(x.reshape(-1, 8, 8), np.ones((3, 3), np.float32))   # 24x24
    images = np.pad(images, ((0, 0), (2, 2), (2, 2)))                      # 28x28
    return np.round(images * 255).astype(np.uint8)


def load_data() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``(x_train, y_train), (x_test, y_test)`` as ``keras.datasets.mnist.load_data()``."""
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    return ((_as_mnist(x_train), y_train.astype(np.uint8)),
            (_as_mnist(x_test), y_test.astype(np.uint8)))
