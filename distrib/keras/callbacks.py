"""``dt.keras.callbacks``: hooks into ``fit``/``evaluate``/``predict`` (Keras' names).

A callback overrides any of Keras' hooks (``on_train_begin``,
``on_epoch_end(epoch, logs)``, ``on_train_batch_end(batch, logs)`` ...); a
hook may be a plain method or a coroutine (``async def``), which the loop
awaits, since saving weights is a step on the cluster here. Batch hooks cost
nothing unless some callback overrides them (Keras' rule too).

* ``History``: ``history.history["loss"]``, one value per epoch (fit returns it).
* ``ProgbarLogger``: the progress bar (``progbar.py``); ``fit`` adds it for
  ``verbose`` 1 and 2.
* ``ModelCheckpoint(filepath, monitor='val_loss', save_best_only=False,
  save_weights_only=False, mode='auto', save_freq='epoch')``: the whole model
  (``model.save``: a folder, or one ``.keras`` file), or with
  ``save_weights_only`` its weights (``save_weights``), to ``filepath``
  formatted with ``epoch`` and the logs (``'ckpt/w.{epoch:02d}'``).
* ``BackupAndRestore(backup_dir, save_freq='epoch', delete_checkpoint=True)``:
  after each epoch the weights, the optimizer's state and the epoch go to one
  file in ``backup_dir`` (atomically: a crash leaves the old backup or the
  new one); a later ``fit`` with the same callback restores them and resumes
  at the next epoch (it tells ``fit`` through ``resume_from_epoch``); a fit
  that completes deletes the backup.
* ``EarlyStopping``, ``LambdaCallback`` as in Keras.
* ``TensorBoard(log_dir="logs", histogram_freq=0, update_freq="epoch")``:
  event files in ``log_dir/train`` and ``log_dir/validation``: ``epoch_loss``
  and ``epoch_<metric>`` each epoch (the ``val_`` logs go to validation/),
  ``batch_<name>`` every ``update_freq`` batches (``"batch"``: 1), and every
  ``histogram_freq`` epochs a histogram of each weight. Only the chief writes
  (a multi-worker strategy's other workers make no writer). ``write_graph``
  and the profiler arguments are accepted and ignored.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import math
import os
import sys
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from distrib.keras.progbar import Progbar, format_value
from distrib.summary import create_file_writer, values

logger = logging.getLogger(__name__)

__all__ = ["Callback", "CallbackList", "History", "ProgbarLogger", "ModelCheckpoint",
           "BackupAndRestore", "EarlyStopping", "LambdaCallback", "TensorBoard"]

_BATCH_HOOKS = ("on_train_batch_begin", "on_train_batch_end", "on_test_batch_begin",
                "on_test_batch_end", "on_predict_batch_begin", "on_predict_batch_end")


class Callback:
    """Base class: every hook does nothing."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}

    def set_model(self, model: Any) -> None:
        self.model = model

    def set_params(self, params: Mapping[str, Any]) -> None:
        self.params = dict(params)

    def on_train_begin(self, logs: Any = None) -> Any: ...
    def on_train_end(self, logs: Any = None) -> Any: ...
    def on_epoch_begin(self, epoch: int, logs: Any = None) -> Any: ...
    def on_epoch_end(self, epoch: int, logs: Any = None) -> Any: ...
    def on_train_batch_begin(self, batch: int, logs: Any = None) -> Any: ...
    def on_train_batch_end(self, batch: int, logs: Any = None) -> Any: ...
    def on_test_begin(self, logs: Any = None) -> Any: ...
    def on_test_end(self, logs: Any = None) -> Any: ...
    def on_test_batch_begin(self, batch: int, logs: Any = None) -> Any: ...
    def on_test_batch_end(self, batch: int, logs: Any = None) -> Any: ...
    def on_predict_begin(self, logs: Any = None) -> Any: ...
    def on_predict_end(self, logs: Any = None) -> Any: ...
    def on_predict_batch_begin(self, batch: int, logs: Any = None) -> Any: ...
    def on_predict_batch_end(self, batch: int, logs: Any = None) -> Any: ...

    def _implements_train_batch_hooks(self) -> bool:
        """Whether this callback needs ``on_train_batch_begin/end`` (fit under
        ParameterServerStrategy refuses such callbacks, as TF does)."""
        return _overrides(self, "on_train_batch_begin") or \
            _overrides(self, "on_train_batch_end")


def _overrides(callback: Callback, hook: str) -> bool:
    return getattr(type(callback), hook, None) is not getattr(Callback, hook) or \
        hook in vars(callback)


class CallbackList:
    """The callbacks of one ``fit``/``evaluate``/``predict``, called in order."""

    def __init__(self, callbacks: Iterable[Callback] | None, model: Any,
                 params: Mapping[str, Any]) -> None:
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be dt.keras.callbacks.Callback objects, got "
                                f"{cb!r}")
            cb.set_model(model)
            cb.set_params(params)
        self._batch = {hook: [cb for cb in self.callbacks if _overrides(cb, hook)]
                       for hook in _BATCH_HOOKS}

    def wants(self, hook: str) -> bool:
        """Whether some callback overrides the batch hook ``hook``."""
        return bool(self._batch.get(hook, True))

    async def call(self, hook: str, *args: Any) -> None:
        for cb in self._batch.get(hook, self.callbacks):
            result = getattr(cb, hook)(*args)
            if inspect.isawaitable(result):
                await result


class History(Callback):
    """``model.fit(...)`` returns this: ``history.history[name]`` per epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.epoch: list[int] = []
        self.history: dict[str, list[float]] = {}

    def on_train_begin(self, logs: Any = None) -> None:
        self.epoch = []

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
        if self.model is not None:
            self.model.history = self


class ProgbarLogger(Callback):
    """The progress bar of each epoch (see ``progbar.py``)."""

    def __init__(self, count_mode: str = "steps", verbose: int = 1,
                 examples: Callable[[], int] | None = None, stream: Any = None) -> None:
        super().__init__()
        self.verbose = verbose
        self._examples = examples
        self._stream = stream
        self._bar: Progbar | None = None
        self._seen = 0

    def _start(self) -> None:
        self._bar = Progbar(self.params.get("steps"), verbose=self.verbose,
                            stream=self._stream)
        self._seen = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        epochs = self.params.get("epochs", 1)
        if self.verbose and epochs > 1:
            stream = self._stream or sys.stdout
            stream.write(f"Epoch {epoch + 1}/{epochs}\n")
            stream.flush()
        self._start()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._seen = batch + 1
        if self._bar is not None and self.verbose == 1:
            self._bar.update(self._seen, logs, finalize=False, examples=self._count())

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._bar is not None:
            self._bar.target = self._bar.target or self._seen
            self._bar.update(self._seen, logs, finalize=True, examples=self._count())

    def on_test_begin(self, logs: Any = None) -> None:
        if self.params.get("mode") in ("evaluate", "predict"):
            self._start()

    on_predict_begin = on_test_begin

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.params.get("mode") in ("evaluate", "predict"):
            self.on_train_batch_end(batch, logs)

    on_predict_batch_end = on_test_batch_end

    def on_test_end(self, logs: Any = None) -> None:
        if self.params.get("mode") in ("evaluate", "predict"):
            self.on_epoch_end(0, logs)

    on_predict_end = on_test_end

    def _count(self) -> int | None:
        return self._examples() if self._examples is not None else None


class ModelCheckpoint(Callback):
    """Save the weights after every epoch (or ``save_freq`` batches), or only
    when ``monitor`` improved (``save_best_only``)."""

    def __init__(self, filepath: str, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False,
                 mode: str = "auto", save_freq: Any = "epoch",
                 initial_value_threshold: float | None = None) -> None:
        super().__init__()
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
            raise ValueError(f"Unrecognized save_freq: {save_freq!r}; use 'epoch' or a "
                             "positive number of batches")
        self.filepath = os.fspath(filepath)
        self.monitor, self.verbose = monitor, verbose
        self.save_best_only, self.save_weights_only = save_best_only, save_weights_only
        self.save_freq = save_freq
        self.mode = _mode(mode, monitor)
        self.best = initial_value_threshold if initial_value_threshold is not None else \
            (math.inf if self.mode == "min" else -math.inf)
        self._batches = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch

    def _implements_train_batch_hooks(self) -> bool:
        return self.save_freq != "epoch"

    async def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if isinstance(self.save_freq, int):
            self._batches += 1
            if self._batches % self.save_freq == 0:
                await self._save(self._epoch, dict(logs or {}), batch=batch + 1)

    async def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.save_freq == "epoch":
            await self._save(epoch, dict(logs or {}))

    async def _save(self, epoch: int, logs: dict[str, Any], batch: int | None = None) -> None:
        path = self.filepath.format(epoch=epoch + 1, batch=batch, **logs)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                logger.warning("Can save best model only with %s available, skipping",
                               self.monitor)
                return
            better = current < self.best if self.mode == "min" else current > self.best
            if not better:
                if self.verbose:
                    print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from "
                          f"{format_value(self.best)}")
                return
            if self.verbose:
                print(f"\nEpoch {epoch + 1}: {self.monitor} improved from "
                      f"{format_value(self.best)} to {format_value(current)}, saving model "
                      f"to {path}")
            self.best = current
        elif self.verbose:
            print(f"\nEpoch {epoch + 1}: saving model to {path}")
        if self.save_weights_only:
            await self.model.save_weights(path)
        else:
            await self.model.save(path, overwrite=True)


class BackupAndRestore(Callback):
    """Back up the training state every epoch (or every ``save_freq`` batches) and
    resume an interrupted ``fit`` where its last backup was, as tf_keras 2.x does:
    after an epoch's backup at the next epoch; after a batch's, at the next batch
    of that epoch (its remaining batches run), or the next epoch after its last."""

    FILE = "ckpt"

    def __init__(self, backup_dir: str, save_freq: Any = "epoch",
                 delete_checkpoint: bool = True, save_before_preemption: bool = False) -> None:
        super().__init__()
        if not backup_dir:
            raise ValueError("Empty `backup_dir` argument passed: give the folder for the "
                             "backup")
        if save_freq != "epoch" and not (isinstance(save_freq, int) and
                                         not isinstance(save_freq, bool) and save_freq > 0):
            raise ValueError(f"Unrecognized save_freq: {save_freq!r}. Expected save_freq "
                             "are 'epoch' or a positive integer")
        if save_before_preemption:
            raise NotImplementedError("BackupAndRestore(save_before_preemption=True) is not "
                                      "supported by dt.keras; use dt.distribute.experimental."
                                      "PreemptionCheckpointHandler")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.resume_from_epoch: int | None = None
        self.resume_from_step = 0
        self._epoch = 0
        self._batch = 0        # the batch of this epoch about to end
        self._since_backup = 0
        if isinstance(save_freq, int):   # a batch hook only when batches count
            self.on_train_batch_end = self._on_train_batch_end

    @property
    def path(self) -> str:
        return os.path.join(self.backup_dir, self.FILE)

    async def on_train_begin(self, logs: Any = None) -> None:
        self.resume_from_epoch, self.resume_from_step = None, 0
        self._since_backup = 0
        if not os.path.exists(self.path):
            return
        extra = await self.model.state_io.load(self.path)
        epoch = int(np.asarray(extra.get("training/epoch", -1)))
        batch = int(np.asarray(extra.get("training/batch", -1)))
        steps = self.params.get("steps")
        if batch >= 0 and not (steps is not None and batch == steps - 1):
            self.resume_from_epoch, self.resume_from_step = epoch, batch + 1
        else:
            self.resume_from_epoch = epoch + 1
        logger.info("restored the backup of epoch %d (batch %d) from %s: fit resumes at "
                    "epoch %d, batch %d", epoch + 1, batch, self.path,
                    self.resume_from_epoch + 1, self.resume_from_step)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        resumed = self.resume_from_epoch is not None and epoch == self.resume_from_epoch
        self._epoch, self._batch = epoch, (self.resume_from_step if resumed else 0)

    async def _on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._since_backup += 1
        if self._since_backup >= self.save_freq:
            self._since_backup = 0
            await self._backup(self._epoch, self._batch)
        self._batch += 1

    async def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.save_freq == "epoch":
            await self._backup(epoch, -1)

    async def _backup(self, epoch: int, batch: int) -> None:
        await self.model.state_io.save(self.path, extra={"training/epoch": np.int64(epoch),
                                                         "training/batch": np.int64(batch)})

    def on_train_end(self, logs: Any = None) -> None:
        strategy = self.model.distribute_strategy
        if not self.delete_checkpoint or (strategy is not None and
                                          not strategy.extended.should_checkpoint):
            return
        for name in (self.FILE, "checkpoint"):
            try:
                os.remove(os.path.join(self.backup_dir, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.backup_dir)
        except OSError:
            pass   # not empty (the user's files) or gone


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs."""

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0.0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0) -> None:
        super().__init__()
        self.monitor, self.patience, self.verbose = monitor, patience, verbose
        self.mode = _mode(mode, monitor)
        self.min_delta = abs(min_delta) * (1 if self.mode == "max" else -1)
        self.baseline, self.restore_best_weights = baseline, restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.stopped_epoch = 0

    def on_train_begin(self, logs: Any = None) -> None:
        self.wait, self.stopped_epoch = 0, 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.best_weights: list[np.ndarray] | None = None

    async def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        current = (logs or {}).get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return
        self.wait += 1
        reference = self.best if self.baseline is None or self.best not in (math.inf,
                                                                            -math.inf) \
            else self.baseline
        improved = (current - self.min_delta < reference) if self.mode == "min" else \
            (current - self.min_delta > reference)
        if improved:
            self.best, self.wait = current, 0
            if self.restore_best_weights:
                self.best_weights = await self.model.get_weights()
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                await self.model.set_weights(self.best_weights)

    def on_train_end(self, logs: Any = None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


class LambdaCallback(Callback):
    """Callbacks from functions: ``LambdaCallback(on_epoch_end=lambda epoch, logs: ...)``."""

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        super().__init__()
        for name, fn in hooks.items():
            if not name.startswith("on_") or not hasattr(Callback, name):
                raise TypeError(f"LambdaCallback: unknown hook {name!r}")
            setattr(self, name, fn)


def _mode(mode: str, monitor: str) -> str:
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"mode {mode!r} is unknown: use 'auto', 'min' or 'max'")
    if mode != "auto":
        return mode
    return "max" if ("acc" in monitor or monitor.startswith("fmeasure")) else "min"


class TensorBoard(Callback):
    """Keras' ``TensorBoard`` callback (see the module header)."""

    def __init__(self, log_dir: str = "logs", histogram_freq: int = 0, write_graph: bool = True,
                 write_images: bool = False, write_steps_per_second: bool = False,
                 update_freq: str | int = "epoch", profile_batch: Any = 0,
                 embeddings_freq: int = 0, embeddings_metadata: Any = None) -> None:
        super().__init__()
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = int(histogram_freq or 0)
        self.update_freq = 1 if update_freq == "batch" else update_freq
        self._writers: dict[str, Any] = {}
        self._batches = 0   # train batches over the whole fit: the batch summaries' step
        if isinstance(self.update_freq, int):   # a batch hook only when it writes (Keras' rule)
            self.on_train_batch_end = self._on_batch_end

    def _writer(self, which: str) -> Any:
        if which not in self._writers:
            self._writers[which] = create_file_writer(os.path.join(self.log_dir, which))
        return self._writers[which]

    def _writes(self) -> bool:
        strategy = getattr(self.model, "distribute_strategy", None)
        return strategy is None or bool(getattr(strategy.extended, "should_checkpoint", True))

    def _scalars(self, which: str, prefix: str, logs: Mapping[str, Any], step: int) -> None:
        items = [values.scalar_value(prefix + name, value) for name, value in logs.items()
                 if np.ndim(value) == 0 and isinstance(value, (int, float, np.number))]
        if items:
            self._writer(which).write(values.serialize(items), step)

    def on_train_begin(self, logs: Any = None) -> None:
        self._batches = 0

    def _on_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batches += 1
        if logs and self._batches % self.update_freq == 0 and self._writes():
            self._scalars("train", "batch_", logs, self._batches)

    async def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if not self._writes():
            return
        logs = dict(logs or {})
        self._scalars("train", "epoch_", {k: v for k, v in logs.items() if not k.startswith("val_")},
                      epoch)
        self._scalars("validation", "epoch_", {k[4:]: v for k, v in logs.items()
                                               if k.startswith("val_")}, epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            weights = self.model.weights
            found = await self.model.get_weights()
            items = [values.histogram_value(getattr(w, "name", f"weight_{i}").split(":")[0], value)
                     for i, (w, value) in enumerate(zip(weights, found))]
            if items:
                self._writer("train").write(values.serialize(items), epoch)

    async def on_train_end(self, logs: Any = None) -> None:
        writers, self._writers = self._writers, {}
        for writer in writers.values():   # the disk I/O off the loop
            await asyncio.to_thread(writer.close)
