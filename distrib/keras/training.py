"""``dt.keras.Model``: compile, fit, evaluate, predict, weights (Keras' API, async).

A model is a ``Layer`` made of layers (``Sequential`` lists them; a subclass
assigns them as attributes, which are tracked in order). It belongs to the
graph it was made in and to the strategy whose scope was open when it was
made or compiled (``distribute_strategy``, as Keras records it): its
variables are built in that scope, and every step it runs (``fit`` ...,
``save_weights``) runs in that scope on that strategy's target
(``function_scope``). Compiling in another strategy's scope than the one the
weights were made in is refused, as in Keras.

``fit``, ``evaluate``, ``predict``, ``save_weights``, ``load_weights``,
``get_weights``, ``set_weights`` and ``save`` are coroutines (``await model.fit(...)``):
every one of them runs steps on a server. ``fit`` returns a ``History``; its
progress bar, callbacks and return values are Keras'; see ``engine.py`` for
how a step runs and ``data_adapter.py`` for the inputs. Under
ParameterServerStrategy ``fit`` schedules its steps on a ClusterCoordinator
(``ps_loop.py``; ``steps_per_epoch`` required), while ``evaluate``,
``predict`` and the weights' methods run on the chief's server. ``save``
writes the whole model (config, compile arguments, weights, optimizer state)
to one folder; ``model_saving.py`` has it and ``load_model``.
"""
from __future__ import annotations

import contextlib
import itertools
import os
from typing import Any, Iterator, Sequence

import numpy as np

from distrib.distribute.core.values import local_results
from distrib.framework import distribution_context
from distrib.framework.graph import get_default_graph
from distrib.keras import compile_utils, model_saving, model_summary, node
from distrib.keras import metrics as metrics_mod
from distrib.keras import optimizers as optimizers_mod
from distrib.keras.callbacks import BackupAndRestore, CallbackList, History, ProgbarLogger
from distrib.keras.data_adapter import DataHandler, batch_rows, split_validation, unpack
from distrib.keras.engine import EpochStats, StepFunctions, training_loop_for
from distrib.keras.layers import Layer, distrib_models, listed_weights
from distrib.keras.saving import StateIO
from distrib.train.checkpoints import trackable

__all__ = ["Model"]


class Model(Layer):
    """``dt.keras.Model(name=None)``: see the module header; ``Model(inputs, outputs)``
    is a functional model (``functional.Functional``)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Model and (args or "inputs" in kwargs or "outputs" in kwargs):
            cls = distrib_models()["Functional"]   # looked up: functional imports this module
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__.setdefault("_tracked", [])   # a subclass may assign layers first
        super().__init__(*args, **kwargs)
        self._strategy = distribution_context.strategy()
        self._graph = get_default_graph()
        self.optimizer: Any = None
        self.loss: Any = None
        self.compiled_loss: compile_utils.CompiledLoss | None = None
        self._optimizer_id: Any = None
        self._compile_args: tuple[Any, Any, Any] = (None, None, None)
        self.stop_training = False
        self.history: History | None = None
        self._steps = StepFunctions(self)
        self.state_io = StateIO(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Layer) and not name.startswith("_") and \
                value not in self.__dict__.get("_tracked", ()):
            self.__dict__.setdefault("_tracked", []).append(value)
        if not name.startswith("_") and name != "optimizer":   # a checkpoint's edge names
            named = self.__dict__.setdefault("_attribute_children", {})
            if isinstance(value, Layer) or trackable.is_value(value):
                named[name] = value
            else:
                named.pop(name, None)
        super().__setattr__(name, value)

    # -- dt.train.Checkpoint's protocol (distrib.train.checkpoints.trackable) ---------------------------
    def trackable_children(self) -> dict[str, Any]:
        """As Keras tracks a model: layers (and variables) by attribute name, then
        ``layer_with_weights-<i>`` (the i-th layer that has weights) and
        ``layer-<i>``, the model's own weights, and ``optimizer`` once compiled."""
        out: dict[str, Any] = dict(self.__dict__.get("_attribute_children", {}))
        for i, layer in enumerate([layer for layer in self.layers if layer.weights]):
            out[f"layer_with_weights-{i}"] = layer
        for i, layer in enumerate(self.layers):
            out[f"layer-{i}"] = layer
        out.update(super().trackable_children())
        if self.optimizer is not None:
            out["optimizer"] = self.optimizer
        return out

    # -- structure ------------------------------------------------------------------------
    @property
    def layers(self) -> list[Layer]:
        return list(self._tracked)

    def _sublayers(self) -> list[Layer]:
        return self.layers

    @classmethod
    def from_config(cls, config: dict[str, Any],
                    custom_objects: dict[str, Any] | None = None) -> Any:
        """A functional model's config makes a functional model (Keras'); else ``cls(**config)``."""
        if cls is Model and "input_layers" in config:
            return distrib_models()["Functional"].from_config(config, custom_objects)
        return super().from_config(config)

    @property
    def distribute_strategy(self) -> Any:
        """The strategy the model's variables belong to (None: no strategy)."""
        return self._strategy

    def _adopt(self, layer: Layer) -> None:
        # a Model is a Layer: it gives its layers its own Layer state (same class family)
        layer._strategy = self._strategy  # noqa: SLF001 - a Layer's state, set by a Layer
        layer._graph = self._graph  # noqa: SLF001 - a Layer's state, set by a Layer

    def _all_weights(self, which: str) -> list[Any]:
        out: list[Any] = []
        seen: set[int] = set()
        for layer in self.layers:
            for v in getattr(layer, which):
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
        if which == "trainable_weights" or which == "weights":
            out += [v for v in listed_weights(v for v, t, _ in self._weights
                                              if t or which == "weights") if id(v) not in seen]
        return out

    @property
    def weights(self) -> list[Any]:
        return self.trainable_weights + self.non_trainable_weights

    @property
    def trainable_weights(self) -> list[Any]:
        return self._all_weights("trainable_weights") if self.trainable else []

    @property
    def non_trainable_weights(self) -> list[Any]:
        if not self.trainable:
            return self._all_weights("weights")
        return self._all_weights("non_trainable_weights")

    trainable_variables = property(lambda self: self.trainable_weights)
    non_trainable_variables = property(lambda self: self.non_trainable_weights)
    variables = property(lambda self: self.weights)

    @contextlib.contextmanager
    def function_scope(self) -> Iterator[None]:
        """The model's graph and strategy scope: where its steps are traced and run."""
        with self._graph.as_default():
            if self._strategy is not None and distribution_context.strategy() is None:
                with self._strategy.scope():
                    yield
            else:
                yield

    def build(self, input_shape: Any) -> None:
        for layer in self.layers:
            self._adopt(layer)
        self.built = True

    def __call__(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        for layer in self.layers:
            if layer._graph is None:  # noqa: SLF001 - a Layer's state, read by a Layer (_adopt)
                self._adopt(layer)
        return super().__call__(inputs, training=training, **kwargs)

    # -- compile ----------------------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Any = None,
                loss_weights: Any = None, weighted_metrics: Any = None,
                run_eagerly: Any = None, steps_per_execution: Any = None,
                jit_compile: Any = None, **kwargs: Any) -> None:
        """``compile(optimizer, loss, metrics, loss_weights)`` with Keras' strings or
        objects; ``loss``, ``loss_weights`` and ``metrics`` one for all outputs, a list
        or a dict by output name (``compile_utils.py``)."""
        if weighted_metrics is not None:
            raise NotImplementedError("compile(weighted_metrics=...) is not supported by "
                                      "dt.keras (no sample weights)")
        if kwargs:
            raise TypeError(f"Invalid keyword argument(s) in `compile()`: {sorted(kwargs)}")
        self._adopt_strategy(distribution_context.strategy())
        compiled = compile_utils.CompiledLoss(loss, loss_weights, metrics)
        self._optimizer_id = optimizer
        # Keras' names and objects, resolved now: an unknown name fails here, naming the known
        self.optimizer = optimizers_mod.get(optimizer)
        self.optimizer.build_for(self._strategy)
        self.compiled_loss = compiled
        self.loss = compiled.loss
        structure = self._output_structure()
        if structure is not None:
            compiled.build(*structure)
        self._compile_args = (loss, metrics, loss_weights)   # as given: what save keeps
        self._steps = StepFunctions(self)
        trackable.children_changed(self)   # a restore done before compile finds the optimizer

    def _output_structure(self) -> tuple[Any, list[str]] | None:
        """The outputs' structure and names when known before a step (a Sequential has one
        output; a functional model its ``outputs``); None: found by the first step."""
        if hasattr(self, "output_names") and hasattr(self, "_nested_outputs"):
            return self._nested_outputs, list(self.output_names)
        if hasattr(self, "_stack"):
            return 0, [self.layers[-1].name if self.layers else "output_1"]
        return None

    @property
    def compiled_metrics(self) -> list[metrics_mod.Metric]:
        """The compiled metrics, every output's, in the logs' order."""
        compiled = self.__dict__.get("compiled_loss")
        return [] if compiled is None else compiled.metrics_in_order()

    @property
    def metrics_names(self) -> list[str]:
        """Keras 2's: the logs' names in order (``loss``, ``<output>_loss`` ...,
        the metrics); empty until the model is compiled and its outputs known."""
        compiled = self.__dict__.get("compiled_loss")
        return compiled.metrics_names() if compiled is not None and compiled.built else []

    def get_compile_config(self) -> dict[str, Any] | None:
        """Keras 3's: ``compile``'s arguments as JSON values (None: not compiled)."""
        if self.loss is None or self.optimizer is None:
            return None
        loss, metrics, loss_weights = self._compile_args
        return model_saving.compile_config(self.optimizer, loss, metrics, loss_weights)

    def compile_from_config(self, config: dict[str, Any],
                            custom_objects: dict[str, Any] | None = None) -> None:
        """``compile`` with what ``get_compile_config`` gave."""
        self.compile(**model_saving.compile_arguments(config, custom_objects))

    def _adopt_strategy(self, strategy: Any) -> None:
        if strategy is None or strategy is self._strategy:
            return
        if self.weights:
            raise ValueError(
                f"the model's variables were made outside {type(strategy).__name__}'s scope "
                "and cannot be used in it: create the model (and compile it) inside "
                "`with strategy.scope():`")
        self._strategy = strategy
        for layer in self.layers:
            self._adopt(layer)

    def _check_compiled(self, need_optimizer: bool) -> None:
        if self.loss is None:
            raise RuntimeError("You must compile your model before training/testing. Use "
                               "`model.compile(optimizer, loss)`.")
        if need_optimizer and self.optimizer is None:
            optimizers_mod.get(self._optimizer_id)   # raises, saying what is available

    # -- fit ------------------------------------------------------------------------------
    async def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                  epochs: int = 1, verbose: Any = "auto", callbacks: Sequence[Any] | None = None,
                  validation_split: float = 0.0, validation_data: Any = None,
                  shuffle: bool = True, class_weight: Any = None, sample_weight: Any = None,
                  initial_epoch: int = 0, steps_per_epoch: int | None = None,
                  validation_steps: int | None = None, validation_batch_size: int | None = None,
                  validation_freq: int = 1) -> History:
        """Train for ``epochs`` epochs; returns the ``History`` of losses and metrics."""
        self._check_compiled(need_optimizer=True)
        if class_weight is not None or sample_weight is not None:
            raise NotImplementedError("class_weight and sample_weight are not supported by "
                                      "dt.keras")
        loop = training_loop_for(self._strategy)
        if validation_split and validation_data is None:
            x, y, validation_data = split_validation(x, y, validation_split)
        with self.function_scope():
            data = loop.data_handler(x, y, batch_size, shuffle, steps_per_epoch,
                                     self._strategy)
            self._build_for(data)
            self.optimizer.iterations   # made now, in the model's scope
        history = History()
        verbose = 1 if verbose == "auto" else int(verbose)
        stats_box: list[EpochStats] = []
        extra = [ProgbarLogger(verbose=verbose, examples=lambda: stats_box[-1].examples)] \
            if verbose else []
        cbs = CallbackList([*(callbacks or []), *extra, history], self,
                           {"epochs": epochs, "steps": data.steps, "verbose": verbose,
                            "mode": "fit"})
        loop.check_callbacks(cbs)
        self.stop_training = False
        train_function = loop.train_function(self._steps)
        try:
            await cbs.call("on_train_begin", None)
            skip = 0   # a backup taken mid-epoch: that epoch's remaining batches run
            for cb in cbs.callbacks:
                if isinstance(cb, BackupAndRestore) and cb.resume_from_epoch is not None:
                    initial_epoch = max(initial_epoch, cb.resume_from_epoch)
                    skip = cb.resume_from_step
            logs: dict[str, float] = {}
            for epoch in range(initial_epoch, epochs):
                stats = EpochStats(self)
                stats_box.append(stats)
                await cbs.call("on_epoch_begin", epoch, None)
                batches = itertools.islice(data.epoch(), skip, None) if skip else data.epoch()
                skip = 0
                with self.function_scope():
                    await loop.run_epoch(
                        train_function, batches, stats, cbs, lambda: self.stop_training,
                        before_first=lambda batch: self._prepare_first_step(train_function,
                                                                            batch))
                logs = stats.logs()
                if validation_data is not None and (epoch + 1) % validation_freq == 0:
                    logs.update(await self._validate(validation_data, validation_batch_size
                                                     or batch_size, validation_steps))
                await cbs.call("on_epoch_end", epoch, logs)
                if self.stop_training or data.exhausted:
                    break
            await cbs.call("on_train_end", logs)
        finally:
            await loop.close()
        return history

    def _build_for(self, data: Any) -> None:
        if not self.built and data.first_x is not None:
            self.build((None, *data.first_x.shape[1:]))

    async def _prepare_first_step(self, train_function: Any, batch: Any) -> None:
        """Trace the train step before its first run, then assign the optimizer
        state a restore found before the optimizer's slots existed."""
        if self.state_io.pending:
            train_function.get_concrete_function(batch)
            await self.state_io.apply_pending()

    async def _validate(self, validation_data: Any, batch_size: int | None,
                        steps: int | None) -> dict[str, float]:
        if isinstance(validation_data, tuple):
            vx, vy = unpack(validation_data)
        else:   # a dataset of (x, y) batches
            vx, vy, batch_size = validation_data, None, None
        stats = await self._run_test(DataHandler(vx, vy, batch_size, False, steps,
                                                 self._strategy), None)
        return stats.logs("val_")

    # -- evaluate / predict ---------------------------------------------------------------------
    async def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                       verbose: Any = "auto", sample_weight: Any = None,
                       steps: int | None = None, callbacks: Sequence[Any] | None = None,
                       return_dict: bool = False) -> Any:
        """The loss (and metrics) over the data: a float, a list, or a dict."""
        self._check_compiled(need_optimizer=False)
        if sample_weight is not None:
            raise NotImplementedError("sample_weight is not supported by dt.keras")
        verbose = 1 if verbose == "auto" else int(verbose)
        with self.function_scope():
            data = DataHandler(x, y, batch_size, False, steps, self._strategy)
            self._build_for(data)
        cbs = self._callbacks(callbacks, verbose, data, "evaluate")
        await cbs.call("on_test_begin", None)
        stats = await self._run_test(data, cbs)
        logs = stats.logs()
        await cbs.call("on_test_end", logs)
        if return_dict:
            return logs
        values = [logs[name] for name in self.metrics_names]
        return values[0] if len(values) == 1 else values

    async def _run_test(self, data: DataHandler, cbs: CallbackList | None) -> EpochStats:
        stats = EpochStats(self)
        test_function = self._steps.test_function()
        with self.function_scope():
            for step, batch in enumerate(data.epoch()):
                stats.add(await test_function(batch), batch_rows(unpack(batch)[0]))
                if cbs is not None and cbs.wants("on_test_batch_end"):
                    await cbs.call("on_test_batch_end", step, stats.logs())
        return stats

    async def predict(self, x: Any, batch_size: int | None = None, verbose: Any = "auto",
                      steps: int | None = None, callbacks: Sequence[Any] | None = None
                      ) -> np.ndarray:
        """The model's outputs for ``x``, one row per example (numpy)."""
        verbose = 1 if verbose == "auto" else int(verbose)
        with self.function_scope():
            data = DataHandler(x, None, batch_size, False, steps, self._strategy)
            self._build_for(data)
        cbs = self._callbacks(callbacks, verbose, data, "predict")
        await cbs.call("on_predict_begin", None)
        predict_function = self._steps.predict_function()
        outputs = []
        with self.function_scope():
            for step, batch in enumerate(data.epoch()):
                outputs.append(await predict_function(batch))
                if cbs.wants("on_predict_batch_end"):
                    await cbs.call("on_predict_batch_end", step, {})
        await cbs.call("on_predict_end", {})
        if not outputs:
            raise ValueError("Unexpected result of `predict_function` (Empty batch_outputs). "
                             "Please use `Model.compile(..., run_eagerly=True)`, or "
                             "`tf.data.Dataset` with at least one element.")
        # several outputs (a list or dict): each concatenated over the batches
        leaves = [np.concatenate([np.asarray(b) for b in parts], axis=0)
                  for parts in zip(*(node.flatten(out) for out in outputs))]
        return node.pack_like(outputs[0], leaves) if len(leaves) != 1 or \
            isinstance(outputs[0], (list, dict)) else leaves[0]

    def _callbacks(self, callbacks: Sequence[Any] | None, verbose: int, data: DataHandler,
                   mode: str) -> CallbackList:
        extra = [ProgbarLogger(verbose=verbose)] if verbose else []
        return CallbackList([*(callbacks or []), *extra], self,
                            {"epochs": 1, "steps": data.steps, "verbose": verbose,
                             "mode": mode})

    # -- weights ----------------------------------------------------------------------------
    async def get_weights(self) -> list[np.ndarray]:
        """The weights' values (the first copy of each), in ``weights`` order."""
        state = {str(i): [v] for i, v in enumerate(self.weights)}
        values = await self.state_io.read(state)
        return [values[str(i)] for i in range(len(state))]

    async def set_weights(self, weights: Sequence[Any]) -> None:
        """Set every weight (every copy of it) from a list in ``weights`` order."""
        mine = self.weights
        if len(weights) != len(mine):
            raise ValueError(f"You called `set_weights(weights)` on layer {self.name!r} with "
                             f"a weight list of length {len(weights)}, but the layer was "
                             f"expecting {len(mine)} weights.")
        state = {str(i): list(local_results(v)) for i, v in enumerate(mine)}
        await self.state_io.assign(state, {str(i): w for i, w in enumerate(weights)})

    async def save_weights(self, filepath: str, overwrite: bool = True,
                           save_format: Any = None, options: Any = None) -> str:
        """Write the weights and the optimizer's state to ``filepath`` (distrib's
        checkpoint format); returns the path. Under a multi-worker strategy every
        worker calls it and it returns once the chief's file is whole
        (``distrib.train.checkpoints.worker_saves``)."""
        if not overwrite and os.path.exists(filepath):
            raise FileExistsError(f"{filepath} exists and overwrite=False")
        return await self.state_io.save(filepath)

    async def load_weights(self, filepath: str, skip_mismatch: bool = False,
                           by_name: bool = False, options: Any = None) -> None:
        """Set the weights (and the optimizer's state, when saved) from ``filepath``
        or the newest checkpoint of the folder ``filepath``."""
        if by_name or skip_mismatch:
            raise NotImplementedError("load_weights(by_name=True / skip_mismatch=True) is not "
                                      "supported by dt.keras")
        if not self.built:
            raise ValueError("Unable to load weights saved in this format into a subclassed "
                             "model which has not created its variables yet. Call the model "
                             "first (or build it), then load the weights.")
        await self.state_io.load(filepath)

    def count_params(self) -> int:
        return sum(int(np.prod(v.shape.as_list())) for v in self.weights)

    def summary(self, line_length: int | None = None, positions: Sequence[float] | None = None,
                print_fn: Any = None, expand_nested: bool = False,
                show_trainable: bool = False, layer_range: Sequence[str] | None = None) -> None:
        """Print the table of layers, shapes and parameters in tf_keras' format
        (``model_summary.py``); ``print_fn`` gets each line (default: stdout)."""
        if not self.built:
            raise ValueError("This model has not yet been built. Build the model first by "
                             "calling `build()` or by calling the model on a batch of data.")
        model_summary.print_summary(self, line_length, positions, print_fn, expand_nested,
                                    show_trainable, layer_range)

    # -- the whole model ------------------------------------------------------------------------
    async def save(self, filepath: Any, overwrite: bool = True, include_optimizer: bool = True,
                   save_format: str | None = None, signatures: Any = None, options: Any = None,
                   save_traces: bool = True) -> str:
        """Save the model whole (config, compile arguments, weights, optimizer state) to
        the folder ``filepath`` (a zip file for ``*.keras``); load it with
        ``dt.keras.models.load_model``. Returns the path. Under a multi-worker strategy
        every worker calls it (a non-chief writes its own copy to its path, unless that
        is the chief's) and it returns once the chief's model is whole."""
        return await model_saving.save_model(self, filepath, overwrite, include_optimizer,
                                             save_format, signatures, options, save_traces)

    def to_json(self, **kwargs: Any) -> str:
        """The model's Keras config as JSON (``dt.keras.models.model_from_json``)."""
        return model_saving.model_to_json(self, **kwargs)
