"""``fit`` under ParameterServerStrategy: the train step scheduled on a
``ClusterCoordinator``, as TF's Keras drives it.

* **The coordinator.** The strategy's coordinator when the program made one
  (``ClusterCoordinator(strategy)``: ``fit`` then shares it, and leaves it
  running), else one ``fit`` makes on first use and whose worker loops it
  stops when it returns (they start again on the next ``fit``): TF's
  ``model._cluster_coordinator``, made implicitly.
* **The input, per worker** (``PerWorkerData``). ``x``/``y`` arrays become,
  on each worker, ``Dataset.from_tensor_slices((x, y))``, shuffled with the
  worker's own seed (derived from ``dt.set_random_seed`` when set), batched
  by ``batch_size`` (32 by default) and repeated: every worker reads all the
  data in its own order, as TF's PSS data adapter does (no sharding). A
  ``dt.data.Dataset`` is each worker's dataset, repeated when finite; a
  ``dt.keras.utils.experimental.DatasetCreator`` is called once per worker
  with its ``InputContext``. One per-worker iterator runs across the epochs.
* **An epoch** is ``steps_per_epoch`` schedules of the model's
  ``scheduled_train_function`` (the step reading ``next(iterator)``, traced
  once per worker), then a ``join``. ``steps_per_epoch`` is required, as in
  TF. Each step's statistics vector (``engine.EpochStats``) comes back in
  its ``RemoteValue``; they are added up in the order scheduled, so the
  progress bar moves as steps finish, and the epoch's logs are the means
  over every example the workers trained on.
* **Callbacks** run at the epoch level (and ``fit``'s progress bar per step
  finished); a callback of the program that implements a train batch hook
  (``on_train_batch_begin/end``) is refused with ValueError, as TF refuses
  batch-level callbacks with ParameterServerStrategy.
* **Running out of input** (a DatasetCreator's finite dataset): the
  coordinator fails the step with ``OutOfRangeError``; the epoch ends there
  with Keras' warning and ``fit`` stops, as with a dataset that runs dry.

``evaluate``, ``predict``, validation and the weights' save/load run on the
coordinator's own server (the chief), reading the variables on the ps tasks
(``training.py``): TF schedules evaluation on the workers instead.
"""
from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from distrib.data import Dataset
from distrib.data.pipeline import INFINITE
from distrib.distribute.coordinator.cluster_coordinator import ClusterCoordinator, RemoteValue
from distrib.distribute.core.input_lib import (
    DistributedDataset,
    DistributedDatasetsFromFunction,
    InputContext,
)
from distrib.distribute.functions.def_function import Function
from distrib.errors import OutOfRangeError
from distrib.framework.graph import get_default_graph
from distrib.keras.callbacks import ProgbarLogger
from distrib.keras.data_adapter import as_array, unpack
from distrib.keras.utils import DatasetCreator

if TYPE_CHECKING:
    from distrib.keras.engine import StepFunctions

logger = logging.getLogger(__name__)

__all__ = ["CoordinatorLoop", "PerWorkerData", "STEPS_REQUIRED"]

STEPS_REQUIRED = (
    "`steps_per_epoch` must be specified with `ParameterServerStrategy`: every worker "
    "reads its own repeated dataset, so an epoch is the number of steps you schedule, e.g. "
    "model.fit(x, y, batch_size=32, steps_per_epoch=len(x) // 32)")

# coordinators that a fit made (not the program): fit stops their worker loops at its end
_MADE_BY_FIT: weakref.WeakSet = weakref.WeakSet()


class PerWorkerData:
    """``fit``'s input as one dataset per worker (see the module header)."""

    def __init__(self, coordinator: ClusterCoordinator, x: Any, y: Any,
                 batch_size: int | None, shuffle: bool, steps_per_epoch: int | None) -> None:
        if steps_per_epoch is None:
            raise ValueError(STEPS_REQUIRED)
        if int(steps_per_epoch) <= 0:
            raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")
        self.steps: int | None = int(steps_per_epoch)
        self.exhausted = False
        self.first_x: Any = None
        self._iterator: Any = None
        dataset_fn: Callable[..., Any]
        if isinstance(x, (DistributedDataset, DistributedDatasetsFromFunction)):
            raise ValueError("a distributed dataset cannot be given to fit under "
                             "ParameterServerStrategy: pass the dt.data.Dataset itself, or a "
                             "dt.keras.utils.experimental.DatasetCreator")
        if isinstance(x, (Dataset, DatasetCreator)):
            if y is not None or batch_size is not None:
                raise ValueError("`y` and `batch_size` are not supported with a dataset (or "
                                 "a DatasetCreator) as input: its elements are (x, y) batches")
            if isinstance(x, Dataset):
                self.first_x = _example_of(x.element_spec)
                dataset_fn = _repeated(x)
            else:
                dataset_fn = x
        else:
            if x is None:
                raise ValueError("fit needs input data: x (and y), a dt.data.Dataset or a "
                                 "dt.keras.utils.experimental.DatasetCreator")
            dataset_fn = _array_dataset_fn(x, y, 32 if batch_size is None else int(batch_size),
                                           shuffle)
            self.first_x = as_array(x, "x")[:1]
        self._per_worker = coordinator.create_per_worker_dataset(dataset_fn)

    def epoch(self) -> PerWorkerData:
        """What ``run_epoch`` reads: this object (its iterator runs across the epochs)."""
        return self

    @property
    def iterator(self) -> Any:
        """The per-worker iterator the scheduled steps read (made on first use)."""
        if self._iterator is None:
            self._iterator = iter(self._per_worker)
        return self._iterator


def _array_dataset_fn(x: Any, y: Any, batch_size: int, shuffle: bool
                      ) -> Callable[[InputContext], Dataset]:
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    xs = as_array(x, "x")
    ys = None if y is None else as_array(y, "y")
    if ys is not None and len(ys) != len(xs):
        raise ValueError(f"Data cardinality is ambiguous: x sizes: {len(xs)}, y sizes: "
                         f"{len(ys)}. Make sure all arrays contain the same number of samples.")
    if not len(xs):
        raise ValueError("fit got no examples (x has 0 rows)")
    seed = get_default_graph().seed

    def dataset_fn(context: InputContext) -> Dataset:
        dataset = Dataset.from_tensor_slices((xs,) if ys is None else (xs, ys))
        if shuffle:   # each worker its own order; reproducible when the graph is seeded
            dataset = dataset.shuffle(len(xs), seed=None if seed is None else
                                      seed * 1009 + context.input_pipeline_id + 1)
        return dataset.batch(batch_size).repeat()
    return dataset_fn


def _repeated(dataset: Dataset) -> Callable[[], Dataset]:
    finite = int(dataset.cardinality()) != INFINITE
    return lambda: dataset.repeat() if finite else dataset


def _example_of(spec: Any) -> np.ndarray | None:
    """One zero row shaped as a dataset's ``x`` (to build the model), when known."""
    x_spec = unpack(spec)[0]
    dims = getattr(getattr(x_spec, "shape", None), "dims", None)
    if not dims or any(d is None for d in dims[1:]):
        return None
    return np.zeros([1, *(int(d) for d in dims[1:])], x_spec.dtype.as_numpy_dtype)


class CoordinatorLoop:
    """Schedules ``fit``'s steps on the strategy's coordinator (see the module header)."""

    def __init__(self, strategy: Any) -> None:
        self._strategy = strategy
        self._coordinator: ClusterCoordinator | None = None

    @property
    def coordinator(self) -> ClusterCoordinator:
        """The strategy's coordinator (made now when the program made none)."""
        if self._coordinator is None:
            made = getattr(self._strategy, "coordinator", None)
            if made is None:
                made = ClusterCoordinator(self._strategy)
                _MADE_BY_FIT.add(made)
            self._coordinator = made
        return self._coordinator

    def data_handler(self, x: Any, y: Any, batch_size: int | None, shuffle: bool,
                     steps_per_epoch: int | None, strategy: Any) -> PerWorkerData:
        """``fit``'s input as per-worker datasets."""
        if steps_per_epoch is None:   # before a coordinator or a dataset is made
            raise ValueError(STEPS_REQUIRED)
        return PerWorkerData(self.coordinator, x, y, batch_size, shuffle, steps_per_epoch)

    def train_function(self, steps: StepFunctions) -> Function:
        return steps.scheduled_train_function()

    def check_callbacks(self, callbacks: Any) -> None:
        """Refuse the program's callbacks that need train batch hooks (TF's rule)."""
        # Keras's private Callback hook (TF's CallbackList asks it; subclasses override it)
        unsupported = [cb for cb in callbacks.callbacks if not isinstance(cb, ProgbarLogger)
                       and cb._implements_train_batch_hooks()]  # noqa: SLF001 - Keras's hook
        if unsupported:
            raise ValueError("Batch-level `Callback`s are not supported with "
                             "`ParameterServerStrategy`: the steps run asynchronously on the "
                             "workers. Found unsupported callbacks: "
                             f"{unsupported}. Use epoch-level hooks (on_epoch_end ...)")

    async def run_epoch(self, train_function: Function, batches: PerWorkerData,
                        stats: Any, callbacks: Any, stop: Callable[[], bool],
                        before_first: Callable[[Any], Any] | None = None) -> None:
        """Schedule the epoch's steps, add up their statistics as they finish, join.
        ``before_first(iterator)`` (awaited) precedes the first schedule; ``stop`` is
        read by ``fit`` between epochs only (the epoch's steps are all scheduled)."""
        coordinator = self.coordinator
        iterator = batches.iterator
        if before_first is not None:
            await before_first(iterator)
        results: list[RemoteValue] = [coordinator.schedule(train_function, args=(iterator,))
                                      for _ in range(batches.steps or 0)]
        end = callbacks.wants("on_train_batch_end")
        failure: BaseException | None = None
        for step, result in enumerate(results):
            try:
                value = np.asarray(await result.fetch(), np.float64)
            except Exception as exc:   # the first failure; join raises it (once)
                failure = exc
                break
            stats.add(value, int(round(float(value[1]))))
            if end:
                await callbacks.call("on_train_batch_end", step, stats.logs())
        try:
            await coordinator.join()
        except OutOfRangeError:
            batches.exhausted = True
            logger.warning("Your input ran out of data; interrupting training. Make sure that "
                           "your dataset can generate at least `steps_per_epoch * epochs` "
                           "batches (use .repeat()).")
            return
        if failure is not None:
            raise failure

    async def close(self) -> None:
        """Stop the worker loops of a coordinator that ``fit`` made (not the program's)."""
        if self._coordinator is not None and self._coordinator in _MADE_BY_FIT:
            await self._coordinator.shutdown()
