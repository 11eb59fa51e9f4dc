"""Small offline datasets for the examples, loaded from ``examples/data/``.

The examples train real models without a network connection, so their data
ships in the repository as a compressed numpy archive (read with
``allow_pickle=False``: data files never run code). Splits are deterministic
and stratified: the same ``seed`` gives the same split on every machine, with
each class in the same proportion in train and test.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["load_digits", "DIGITS_PATH"]

DIGITS_PATH = Path(__file__).resolve().parent / "data" / "digits.npz"
_SPLITS = ("train", "test", "all")


def _read_digits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: it ships with the repository (examples/data/digits.npz)")
    with np.load(path, allow_pickle=False) as archive:
        images, labels = archive["X"], archive["y"]
    if images.shape != (1797, 64) or labels.shape != (1797,):
        raise ValueError(f"{path} holds X{images.shape}, y{labels.shape}; expected X(1797, 64), y(1797,)")
    return images, labels


def _test_mask(labels: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """A boolean mask of the test rows: ``round(test_fraction * n_c)`` random rows of each class c."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        mask[rng.permutation(rows)[: round(test_fraction * len(rows))]] = True
    return mask


def load_digits(split: str = "train", test_fraction: float = 0.2,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 handwritten digits: ``(X, y)`` with X float32 (n, 64) in [0, 1], y int64 (n,) in 0..9.

    ``split`` is ``"train"``, ``"test"`` or ``"all"``; ``test_fraction`` of each
    class goes to test, picked by ``seed``. Rows keep the file's order.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {_SPLITS}, got {split!r}")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
    images, labels = _read_digits(DIGITS_PATH)
    if split == "all":
        rows = np.ones(len(labels), dtype=bool)
    else:
        test = _test_mask(labels, test_fraction, seed)
        rows = test if split == "test" else ~test
    # Pixels count "on" cells of a 4x4 block, so 16 is the largest value.
    return (images[rows].astype(np.float32) / np.float32(16.0)), labels[rows].astype(np.int64)
