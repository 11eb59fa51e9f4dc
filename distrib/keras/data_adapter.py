"""What ``fit``/``evaluate``/``predict`` iterate: the user's input as batches.

Two kinds of input, as in Keras:

* **Arrays** (``x`` and ``y`` numpy, or anything ``np.asarray`` takes): cut
  into batches of ``batch_size`` rows (32 by default), reshuffled every epoch
  when ``shuffle`` (a permutation of the rows, seeded from ``dt.set_random_seed``
  when set, so every worker of a multi-worker strategy draws the same one).
  Without a strategy the batches are sliced straight from the arrays (a view
  when not shuffled): no per-element work, since ``fit``'s per-step overhead
  is what keeps it as fast as a hand-written loop. Float64 arrays become
  float32 (Keras' floatx), as Keras' adapters do.
* **A ``dt.data.Dataset``** of batches ``(x, y)`` (or ``x``), iterated anew
  each epoch.
* **A ``dt.keras.utils.experimental.DatasetCreator``** (``utils.py``): its
  function makes the dataset (per process, through
  ``strategy.distribute_datasets_from_function`` under a strategy);
  ``steps_per_epoch`` is required, as in Keras.

Under a strategy, ``distribute=True`` hands the batches to
``strategy.experimental_distribute_dataset``: each global batch is split
between the replicas (and workers) as TF splits it, and a step gets
``PerReplica`` values. ``steps`` is the steps per epoch (``None`` when the
dataset cannot tell); with ``steps_per_epoch`` one iterator runs across the
epochs, as Keras does, and an input that runs dry ends the training with a
warning.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Iterator

import numpy as np

from distrib.data import Dataset
from distrib.data.pipeline import INFINITE
from distrib.distribute.core.input_lib import (
    DistributedDataset,
    DistributedDatasetsFromFunction,
    InputContext,
)
from distrib.distribute.core.values import DistributedValues
from distrib.framework.graph import get_default_graph
from distrib.keras.utils import DatasetCreator

logger = logging.getLogger(__name__)

__all__ = ["DataHandler", "unpack", "batch_rows", "split_validation", "as_array"]


def unpack(data: Any) -> tuple[Any, Any]:
    """``(x, y)`` of one element: ``(x, y)``, ``(x,)`` or ``x``; y may be None."""
    if isinstance(data, tuple) and not hasattr(data, "_fields"):
        if len(data) == 1:
            return data[0], None
        if len(data) == 2:
            return data[0], data[1]
        if len(data) == 3:
            raise NotImplementedError("sample weights (a third element) are not supported "
                                      "by dt.keras; give (x, y) elements")
    return data, None


def batch_rows(x: Any) -> int:
    """The rows in a batch's ``x`` (all replicas' for a PerReplica)."""
    if isinstance(x, DistributedValues):
        return sum(batch_rows(v) for v in x.values)
    if isinstance(x, (list, tuple)) and x:
        return batch_rows(x[0])
    if isinstance(x, dict) and x:
        return batch_rows(next(iter(x.values())))
    return int(np.shape(x)[0]) if np.ndim(x) else 1


def as_array(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    if array.ndim == 0:
        raise ValueError(f"`{name}` must hold one row per example; got a scalar")
    return array


def split_validation(x: Any, y: Any, fraction: float) -> tuple[Any, Any, tuple[Any, Any]]:
    """Keras' ``validation_split``: the last ``fraction`` of the rows (before shuffling)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"validation_split must be between 0 and 1, got {fraction}")
    if isinstance(x, Dataset):
        raise ValueError("`validation_split` is only supported for numpy arrays; pass "
                         "validation_data with a dataset")
    x, y = _arrays(x, "x"), None if y is None else _arrays(y, "y")   # several: each cut
    rows = len(_leaves(x)[0])
    cut = int(math.floor(rows * (1.0 - fraction)))
    if cut == 0 or cut == rows:
        raise ValueError(f"validation_split={fraction} leaves no rows on one side of "
                         f"{rows} examples")
    head, tail = slice(0, cut), slice(cut, None)
    y_head, y_tail = (None, None) if y is None else (_take(y, head), _take(y, tail))
    return _take(x, head), y_head, (_take(x, tail), y_tail)


def _arrays(value: Any, name: str) -> Any:
    """One array, or a tuple (from a list or tuple) or dict of them."""
    if isinstance(value, dict):
        return {k: as_array(v, f"{name}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, np.ndarray) or hasattr(v, "__array__") for v in value):
        return tuple(as_array(v, f"{name}[{i}]") for i, v in enumerate(value))
    return as_array(value, name)


def _leaves(value: Any) -> list[np.ndarray]:
    if value is None:
        return []
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, tuple) else [value]


def _take(value: Any, rows: Any) -> Any:
    if isinstance(value, dict):
        return {k: v[rows] for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(v[rows] for v in value)
    return value[rows]


class _ArrayBatches:
    """Batches of arrays, a new permutation per epoch when shuffling."""

    def __init__(self, x: Any, y: Any, batch_size: int, shuffle: bool, seed: int | None
                 ) -> None:
        # several inputs or outputs: a list (kept as a tuple: tf.data's nest) or a dict
        self.x = _arrays(x, "x")
        self.y = None if y is None else _arrays(y, "y")
        sizes = {len(a) for a in _leaves(self.x) + _leaves(self.y)}
        if len(sizes) > 1:
            raise ValueError(f"Data cardinality is ambiguous: x sizes: "
                             f"{[len(a) for a in _leaves(self.x)]}, y sizes: "
                             f"{[len(a) for a in _leaves(self.y)]}. Make sure all arrays "
                             "contain the same number of samples.")
        self._rows = sizes.pop() if sizes else 0
        self.batch_size = batch_size
        self.shuffle = shuffle
        self._rng = np.random.default_rng(seed)
        self._order: np.ndarray | None = None
        self.num_batches = max(1, -(-self._rows // batch_size)) if self._rows else 0

    def new_epoch(self) -> None:
        self._order = self._rng.permutation(self._rows) if self.shuffle else None

    def batch(self, i: Any) -> Any:
        i = int(i)
        lo, hi = i * self.batch_size, min((i + 1) * self.batch_size, self._rows)
        rows = slice(lo, hi) if self._order is None else self._order[lo:hi]
        x = _take(self.x, rows)
        return (x,) if self.y is None else (x, _take(self.y, rows))

    def first_x(self) -> Any:
        return _take(self.x, slice(0, 1))

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.num_batches):
            yield self.batch(i)

    def dataset(self) -> Dataset:
        return Dataset.range(self.num_batches).map(self.batch)


class DataHandler:
    """One call's input: ``epoch()`` gives the batches of the next epoch."""

    def __init__(self, x: Any, y: Any = None, batch_size: int | None = None,
                 shuffle: bool = False, steps_per_epoch: int | None = None,
                 strategy: Any = None, distribute: bool = False) -> None:
        self._strategy = strategy if distribute else None
        self._arrays: _ArrayBatches | None = None
        self._source: Any
        if isinstance(x, DatasetCreator):
            _no_y_or_batch_size(y, batch_size)
            if steps_per_epoch is None:
                raise ValueError(DATASET_CREATOR_STEPS)
            self._source = x(InputContext()) if self._strategy is None else \
                self._strategy.distribute_datasets_from_function(x)
            steps = -2
        elif isinstance(x, (Dataset, DistributedDataset, DistributedDatasetsFromFunction)):
            _no_y_or_batch_size(y, batch_size)
            self._source = x
            if isinstance(x, Dataset) and self._strategy is not None:
                self._source = self._strategy.experimental_distribute_dataset(x)
            steps = _dataset_steps(x)
        else:
            if x is None:
                raise ValueError("fit/evaluate/predict need input data: x (and y), or a "
                                 "dt.data.Dataset")
            size = 32 if batch_size is None else int(batch_size)
            if size <= 0:
                raise ValueError(f"batch_size must be positive, got {batch_size}")
            self._arrays = _ArrayBatches(x, y, size, shuffle, _shuffle_seed(strategy))
            self._source = self._arrays if self._strategy is None else \
                self._strategy.experimental_distribute_dataset(self._arrays.dataset())
            steps = self._arrays.num_batches
        if steps == INFINITE and steps_per_epoch is None:
            raise ValueError("When passing an infinitely repeating dataset, you must specify "
                             "how many steps to draw per epoch (steps_per_epoch=...)")
        self._per_epoch = steps_per_epoch is not None
        self.steps: int | None = int(steps_per_epoch) if self._per_epoch else \
            (steps if steps >= 0 else None)
        self._iterator: Iterator[Any] | None = None
        self.exhausted = False

    @property
    def first_x(self) -> Any:
        """An x batch's array, to build the model from (arrays only; else None)."""
        return None if self._arrays is None else self._arrays.first_x()

    def epoch(self) -> Iterator[Any]:
        """The next epoch's batches (``steps`` of them when steps_per_epoch is set)."""
        if self._arrays is not None:
            self._arrays.new_epoch()
        if not self._per_epoch:
            yield from self._source
            return
        if self._iterator is None:
            self._iterator = iter(self._source)
        for _ in range(self.steps or 0):
            try:
                yield next(self._iterator)
            except StopIteration:
                self.exhausted = True
                logger.warning("Your input ran out of data; interrupting training. Make sure "
                               "that your dataset can generate at least `steps_per_epoch * "
                               "epochs` batches (use .repeat()).")
                return


DATASET_CREATOR_STEPS = (
    "When using a `dt.keras.utils.experimental.DatasetCreator`, `steps_per_epoch` (fit) "
    "or `steps` (evaluate, predict) must be given: the function's dataset is read for "
    "that many steps per epoch (repeat it so it does not run out)")


def _no_y_or_batch_size(y: Any, batch_size: Any) -> None:
    """A dataset (or a DatasetCreator) carries its targets and is batched already."""
    if y is not None:
        raise ValueError("`y` argument is not supported when using a dataset as input: the "
                         "dataset's elements are (x, y)")
    if batch_size is not None:
        raise ValueError("`batch_size` is not supported with a dataset as input: the dataset "
                         "is batched already")


def _dataset_steps(x: Any) -> int:
    """The dataset's batches per epoch; -2 (unknown) for a distributed one."""
    return int(x.cardinality()) if isinstance(x, Dataset) else -2


def _shuffle_seed(strategy: Any) -> int | None:
    seed = get_default_graph().seed
    if seed is None and strategy is not None and strategy.extended.experimental_between_graph:
        return 0   # every worker must draw the same permutation of the global batches
    return seed
