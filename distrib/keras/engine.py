"""The traced steps of ``fit``/``evaluate``/``predict`` and the loops that run them.

Keras' ``train_function``, on this runtime: one ``dt.function`` per model,
traced once per batch shape, so a step is one call, one ``session.run``,
with no graph building after the first (a short last batch traces once more).

* **Train step.** Under a strategy: ``strategy.run`` of the replica step
  (forward with ``training=True``, the loss, ``tape.gradient``,
  ``optimizer.apply_gradients``, which sums the gradients over the replicas)
  and one ``strategy.reduce(SUM)`` of the step's statistics; without one, the
  replica step itself. The loss a replica differentiates is Keras':
  ``SUM_OVER_BATCH_SIZE`` (and ``AUTO``) is the mean over the replica's rows
  divided by the replicas in sync (Keras' ``scale_loss_for_distribution``),
  so the summed gradient is the global batch's mean gradient; ``SUM`` (and
  ``NONE``, whose per-example values TF differentiates as their sum) is the
  plain sum. The model's ``losses`` (regularizers' penalties) are added to
  it, divided by the replicas in sync, as Keras 2's ``LossesContainer`` does,
  and to the reported loss (Keras' mean over rows of batch loss + penalty).
* **Statistics in the same fetch, at no op's cost.** The step returns
  ``[sum of the per-example losses, rows, sum of each metric's values]``:
  the loss sum and the rows are the ones the mean loss is made of (nothing
  more to compute), and each metric adds its own statistics (a mean metric
  its values and their sum; ``AUC`` its confusion counts), so
  the step has no more ops than the same step written by hand plus the
  metrics asked for (``tests/test_keras.py`` pins it). A model of several
  outputs adds each output's loss sum after ``rows``, and each output's
  metrics in output order (``compile_utils.py``). Without a strategy
  they come back as scalars in the step's own reply; under a strategy as one
  small vector summed over replicas (one reduce, one collective across
  workers; three ops pack it). The client adds them up (``EpochStats``):
  Keras' running means without metric variables, their updates or another
  round trip; the logs are worked out from the totals when a callback asks.
* **Evaluate and predict** run on one replica's device of this worker (every
  copy of a mirrored variable is equal), not split across replicas: no
  collectives, so a worker may validate or predict on its own.

``training_loop_for(strategy)`` picks how steps are driven, and the input
and train function that go with it: ``SyncLoop`` (awaits each step in turn,
on ``DataHandler``'s batches) for no strategy and the synchronous ones
(Mirrored, CentralStorage, MultiWorkerMirrored); ``ps_loop.CoordinatorLoop``
for ParameterServerStrategy (the train step, reading its batch with
``next(iterator)`` from per-worker datasets, scheduled ``steps_per_epoch``
times per epoch on a ``ClusterCoordinator``). Any other strategy is refused
with ``UnimplementedError``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from distrib.distribute.core.cross_device_ops import ReduceOp
from distrib.distribute.functions.def_function import Function, function
from distrib.distribute.strategies.collective import MultiWorkerMirroredStrategy
from distrib.distribute.strategies.mirrored import CentralStorageStrategy, MirroredStrategy
from distrib.distribute.strategies.parameter_server import ParameterServerStrategy
from distrib.errors import UnimplementedError
from distrib.framework.graph import Tensor
from distrib.keras.data_adapter import DataHandler, batch_rows, unpack
from distrib.keras.ps_loop import CoordinatorLoop
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import concat
from distrib.ops.backprop import GradientTape

__all__ = ["StepFunctions", "EpochStats", "SyncLoop", "CoordinatorLoop", "training_loop_for"]

SYNC_STRATEGIES = (MirroredStrategy, CentralStorageStrategy, MultiWorkerMirroredStrategy)


class StepFunctions:
    """The model's three traced steps, made on first use."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._train: Function | None = None
        self._scheduled: Function | None = None
        self._test: Function | None = None
        self._predict: Function | None = None

    # -- the functions ----------------------------------------------------------------------
    def train_function(self) -> Function:
        if self._train is None:
            model = self._model
            strategy = model.distribute_strategy

            def train_step(data: Any) -> Any:
                x, y = unpack(data)
                if strategy is None:
                    return self._train_replica(x, y, 1, pack=False)
                per_replica = strategy.run(self._train_replica,
                                           args=(x, y, strategy.num_replicas_in_sync))
                return strategy.reduce(ReduceOp.SUM, per_replica, axis=None)
            self._train = function(train_step)
        return self._train

    def scheduled_train_function(self) -> Function:
        """The train step as a coordinator schedules it: its argument is a per-worker
        iterator and the step reads its batch with ``next(iterator)`` (TF's
        ``train_function(iterator)``), one replica per worker."""
        if self._scheduled is None:
            strategy = self._model.distribute_strategy

            def train_step(iterator: Any) -> Tensor:
                x, y = unpack(next(iterator))
                per_replica = strategy.run(self._train_replica,
                                           args=(x, y, strategy.num_replicas_in_sync))
                return strategy.reduce(ReduceOp.SUM, per_replica, axis=None)
            self._scheduled = function(train_step)
        return self._scheduled

    def test_function(self) -> Function:
        if self._test is None:
            def test_step(data: Any) -> Any:
                x, y = unpack(data)
                y_pred = self._model(x, training=False)
                return self._loss_and_stats(y, y_pred, 1)[1]   # (one replica: no reduce)
            self._test = function(test_step)
        return self._test

    def predict_function(self) -> Function:
        if self._predict is None:
            def predict_step(data: Any) -> Tensor:
                x, _ = unpack(data)
                return self._model(x, training=False)
            self._predict = function(predict_step)
        return self._predict

    # -- the pieces -------------------------------------------------------------------------
    def _train_replica(self, x: Any, y: Any, replicas: int, pack: bool = True) -> Any:
        """One replica's step; its statistics as one vector (``pack``: for the
        strategy's reduce) or as scalars."""
        model = self._model
        with GradientTape() as tape:
            y_pred = model(x, training=True)
            loss, stats = self._loss_and_stats(y, y_pred, replicas)
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        model.optimizer.apply_gradients(zip(grads, variables))
        if pack:
            return concat([ops.reshape(s, [-1]) for s in stats], 0)
        return stats

    def _loss_and_stats(self, y: Any, y_pred: Any, replicas: int
                        ) -> tuple[Tensor, list[Tensor]]:
        """The loss to differentiate and the statistics (float32 scalars: module header),
        by the model's ``compile_utils.CompiledLoss`` (one or several outputs)."""
        model = self._model
        return model.compiled_loss.step(y, y_pred, replicas, model.losses)


class EpochStats:
    """Running totals of one epoch's (or evaluation's) step statistics."""

    def __init__(self, model: Any) -> None:
        self._compiled = model.compiled_loss
        self.totals: np.ndarray | None = None   # sized by the first step (outputs known)
        self.steps = 0
        self.examples = 0

    def add(self, stats: Any, examples: int) -> None:
        if isinstance(stats, (list, tuple)):   # scalars and, for AUC ..., vectors
            stats = np.concatenate([np.ravel(np.asarray(s, np.float64)) for s in stats])
        stats = np.asarray(stats, np.float64)
        self.totals = stats.copy() if self.totals is None else self.totals + stats
        self.steps += 1
        self.examples += examples

    def logs(self, prefix: str = "") -> dict[str, float]:
        """``{'loss': ..., '<output>_loss' ..., <metric>: ...}``: the loss as the compiled
        loss reduces it (a mean over examples; SUM: the mean batch sum), metrics as means
        (``compile_utils.CompiledLoss.logs``)."""
        totals = self.totals if self.totals is not None else \
            np.zeros(self._compiled.num_statistics(), np.float64)
        return self._compiled.logs(totals, self.steps, prefix)


class SyncLoop:
    """Drives synchronous steps: each step is awaited before the next starts."""

    def data_handler(self, x: Any, y: Any, batch_size: int | None, shuffle: bool,
                     steps_per_epoch: int | None, strategy: Any) -> DataHandler:
        """``fit``'s input: batches, split across the replicas under a strategy."""
        return DataHandler(x, y, batch_size, shuffle, steps_per_epoch, strategy,
                           distribute=True)

    def train_function(self, steps: StepFunctions) -> Function:
        return steps.train_function()

    def check_callbacks(self, callbacks: Any) -> None:
        """Every callback hook is supported."""

    async def close(self) -> None:
        """Nothing to release."""

    async def run_epoch(self, train_function: Function, batches: Iterator[Any],
                        stats: EpochStats, callbacks: Any, stop: Callable[[], bool],
                        before_first: Callable[[Any], Any] | None = None) -> None:
        """Run the epoch's steps; ``before_first(batch)`` (awaited) precedes the
        first, ``stop()`` ends the epoch early (``model.stop_training``)."""
        begin = callbacks.wants("on_train_batch_begin")
        end = callbacks.wants("on_train_batch_end")
        for step, batch in enumerate(batches):
            if before_first is not None:
                await before_first(batch)
                before_first = None
            if begin:
                await callbacks.call("on_train_batch_begin", step, None)
            stats.add(await train_function(batch), batch_rows(unpack(batch)[0]))
            if end:
                await callbacks.call("on_train_batch_end", step, stats.logs())
            if stop():
                break


def training_loop_for(strategy: Any) -> SyncLoop | CoordinatorLoop:
    """The loop that runs ``fit``'s steps under ``strategy`` (see the module header)."""
    if strategy is None or isinstance(strategy, SYNC_STRATEGIES):
        return SyncLoop()
    if isinstance(strategy, ParameterServerStrategy):
        return CoordinatorLoop(strategy)
    raise UnimplementedError(
        f"Model.fit does not support {type(strategy).__name__} yet: dt.keras trains under "
        "no strategy, MirroredStrategy, CentralStorageStrategy, MultiWorkerMirroredStrategy "
        "and ParameterServerStrategy. Write the step as a dt.function and run it yourself "
        "under this strategy (see examples/custom_loop.py)")

