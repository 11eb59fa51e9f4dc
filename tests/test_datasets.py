"""examples/datasets.py: the offline digits data and its deterministic split."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parent.parent / "examples" / "datasets.py"


def _load_module() -> ModuleType:
    # examples/ is not a package; load the file itself.
    spec = importlib.util.spec_from_file_location("examples_datasets", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


datasets = _load_module()


def test_raw_file_is_sklearn_digits() -> None:
    with np.load(datasets.DIGITS_PATH, allow_pickle=False) as archive:
        X, y = archive["X"], archive["y"]
    assert X.shape == (1797, 64) and X.dtype == np.uint8 and X.max() == 16 and X.min() == 0
    assert y.dtype == np.uint8
    # scikit-learn's class counts for load_digits()
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]


def test_train_and_test_shapes_dtypes_and_range() -> None:
    X_train, y_train = datasets.load_digits("train")
    X_test, y_test = datasets.load_digits("test")
    assert X_train.dtype == np.float32 and y_train.dtype == np.int64
    assert X_train.shape[1] == X_test.shape[1] == 64
    assert len(X_train) + len(X_test) == 1797 and len(X_train) == len(y_train)
    assert 0.19 < len(X_test) / 1797 < 0.21
    assert X_train.min() == 0.0 and X_train.max() == 1.0


def test_split_is_stratified_and_disjoint() -> None:
    X_all, y_all = datasets.load_digits("all")
    X_train, y_train = datasets.load_digits("train")
    X_test, y_test = datasets.load_digits("test")
    counts_all, counts_test = np.bincount(y_all), np.bincount(y_test, minlength=10)
    assert np.all(np.abs(counts_test - 0.2 * counts_all) <= 1)
    rows = {r.tobytes() for r in X_all}
    # every row lands in exactly one split (as multisets of (image, label))
    split = np.concatenate([X_train, X_test]), np.concatenate([y_train, y_test])
    together = sorted(zip(map(bytes, split[0]), split[1], strict=True))
    assert together == sorted(zip(map(bytes, X_all), y_all, strict=True))
    assert len(rows) > 1700  # the images are distinct enough that this comparison means something


def test_split_is_deterministic_and_seed_dependent() -> None:
    a = datasets.load_digits("test", seed=0)
    b = datasets.load_digits("test", seed=0)
    c = datasets.load_digits("test", seed=1)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_test_fraction_sets_the_size() -> None:
    assert len(datasets.load_digits("test", test_fraction=0.5)[1]) == pytest.approx(1797 / 2, abs=10)


@pytest.mark.parametrize("kwargs", [{"split": "validation"}, {"test_fraction": 0.0}, {"test_fraction": 1.5}])
def test_bad_arguments_are_value_errors(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        datasets.load_digits(**kwargs)


def test_labels_match_images_nearest_centroid_learns_them() -> None:
    # A shuffled or misaligned y would put this near 10%.
    X_train, y_train = datasets.load_digits("train")
    X_test, y_test = datasets.load_digits("test")
    centroids = np.stack([X_train[y_train == c].mean(axis=0) for c in range(10)])
    predicted = np.argmin(((X_test[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert (predicted == y_test).mean() > 0.85
