"""``dt.keras.layers.Layer``: the base of every layer and model (Keras' ``Layer``).

A layer builds its weights the first time it is called on an input of known
last dimension (or when a model builds it from ``input_shape=``), as
``dt.Variable``\\ s named ``<layer>/<weight>`` at the graph's root scope
(``dense/kernel``), whatever scope the call is traced in. In a strategy's
scope, or with the strategy of the model that owns the layer, they are that
strategy's variables (MirroredVariables under the mirrored strategies; under
ParameterServerStrategy with a partitioner a large one is a ShardedVariable,
which ``weights``, ``trainable_weights`` and ``variables`` list as its
shards, as Keras 2 does, while the layer computes with the whole). Layer
names come from a per-process counter per class (``dense``, ``dense_1`` ...,
``backend.unique_name``), so two layers never share a variable.

Calling a layer builds graph ops (this runtime traces; ``dt.function`` runs
them). Float inputs are cast to the layer's dtype (float32), as Keras'
autocasting does, so float64 numpy data works unchanged. ``training`` reaches
every layer of a model: ``Dropout`` drops only when it is True.

Every layer has Keras' ``get_config()`` (its constructor's arguments as plain
JSON values) and ``from_config(config)``. A user's layer whose ``__init__``
takes arguments of its own must override ``get_config``, as Keras requires
(``model.save`` says so).
"""
from __future__ import annotations

import contextlib
import inspect
import math
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from distrib.distribute.strategies.parameter_server import ShardedVariable
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import Tensor, get_default_graph
from distrib.keras import backend, initializers, node, regularizers, serialization
from distrib.keras.eager_calls import placed, run_placed
from distrib.ops import math_ops as ops
from distrib.ops.array_ops import slice_rows
from distrib.ops.variables import Variable
from distrib.train.checkpoints import trackable

__all__ = ["Layer", "listed_weights", "shape_tuple"]

_BASE_ARGS = ("self", "trainable", "name", "dtype", "input_shape", "batch_input_shape",
              "input_dim", "activity_regularizer")
_CALL_DEPTH = [0]   # layers being called now: the outermost call starts the losses afresh


def shape_tuple(shape: Any) -> tuple[int | None, ...]:
    dims = getattr(shape, "dims", shape)
    return tuple(None if d is None else int(getattr(d, "value", d)) for d in dims)


class Layer:
    """``dt.keras.layers.Layer(trainable=True, name=None, dtype=None, input_shape=None)``.

    Subclasses implement ``build(input_shape)`` (``add_weight`` ...) and
    ``call(inputs, training=None)``.
    """

    def __init__(self, trainable: bool = True, name: str | None = None, dtype: Any = None,
                 input_shape: Sequence[int | None] | None = None,
                 batch_input_shape: Sequence[int | None] | None = None,
                 input_dim: int | None = None, activity_regularizer: Any = None,
                 **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"Keyword argument(s) not understood: {sorted(kwargs)}")
        self.name = name or backend.unique_name(backend.snake_case(type(self).__name__))
        self.trainable = bool(trainable)
        self.dtype = dtypes.as_dtype(dtype or backend.floatx()).name
        if input_shape is None and input_dim is not None:
            input_shape = (input_dim,)
        if input_shape is not None:
            batch_input_shape = (None, *tuple(input_shape))
        self.batch_input_shape = None if batch_input_shape is None else tuple(batch_input_shape)
        self.built = False
        self._weights: list[tuple[Any, bool, str]] = []   # (variable, trainable, name)
        self._strategy: Any = None    # the owning model's strategy (set by the model)
        self._graph: Any = None       # the graph the weights live in
        self._takes_training = "training" in inspect.signature(self.call).parameters
        self.activity_regularizer = regularizers.get(activity_regularizer)
        self._weight_losses: list[Any] = []   # () -> penalty, one per regularized weight
        self._call_losses: list[Any] = []     # this call's activity penalties and add_loss
        self.inbound_nodes: list[Any] = []    # functional calls (keras.node)

    # -- weights -------------------------------------------------------------------------
    @property
    def weights(self) -> list[Any]:
        return self.trainable_weights + self.non_trainable_weights

    @property
    def trainable_weights(self) -> list[Any]:
        return listed_weights(v for v, t, _ in self._weights if t and self.trainable)

    @property
    def non_trainable_weights(self) -> list[Any]:
        return listed_weights(v for v, t, _ in self._weights if not (t and self.trainable))

    def weight_names(self) -> dict[int, str]:
        """``{id(weight): its name in the layer}`` (``kernel``, ``bias`` ...; a
        sharded weight's shards ``embeddings/part_0`` ...)."""
        out = {}
        for v, _, name in self._weights:
            out[id(v)] = name
            if isinstance(v, ShardedVariable):
                out.update({id(s): f"{name}/part_{i}" for i, s in enumerate(v.variables)})
        return out

    variables = property(lambda self: self.weights)
    trainable_variables = property(lambda self: self.trainable_weights)
    non_trainable_variables = property(lambda self: self.non_trainable_weights)

    def add_weight(self, name: str, shape: Sequence[int], dtype: Any = None,
                   initializer: Any = None, trainable: bool = True, regularizer: Any = None,
                   **kwargs: Any) -> Any:
        """A new weight ``<layer name>/<name>`` of ``shape``, from ``initializer``
        (glorot_uniform for floats, as Keras), in the owning strategy's scope."""
        dtype = dtypes.as_dtype(dtype or self.dtype)
        init = initializers.get(initializer if initializer is not None else
                                ("glorot_uniform" if dtype.is_floating else "zeros"))
        shape = tuple(int(d) for d in shape)
        restored = trackable.deferred_value(self, name)
        if restored is not None:   # a Checkpoint restored before the layer was built
            init = _restored_initializer(restored, name, self.name)
        graph = self._graph if self._graph is not None else get_default_graph()
        self._graph = graph
        with self._strategy_scope(), graph.as_default(), graph.name_scope(None), \
                graph.name_scope(self.name + "/"):
            var = Variable(lambda: init(shape, dtype), name=name, trainable=trainable,
                           dtype=dtype, **kwargs)
        self._weights.append((var, bool(trainable), name))
        penalty = regularizers.get(regularizer)
        if penalty is not None:
            self._weight_losses.append(lambda: _penalty(penalty, var, f"{self.name}/{name}"))
        if restored is not None:   # live restores bind it now: its optimizer slots wait too
            trackable.children_changed(self)
        return var

    # -- dt.train.Checkpoint's protocol (distrib.train.checkpoints.trackable) ---------------------------
    def trackable_children(self) -> dict[str, Any]:
        """The weights by their names in the layer (``kernel``, ``bias``), as Keras tracks them."""
        return {name: var for var, _, name in self._weights}

    def defer_restore(self, name: str, restoration: Any) -> bool:
        """A restored weight this layer has not made yet: ``add_weight`` starts it from there."""
        trackable.defer(self, name, restoration)
        return True

    @contextlib.contextmanager
    def _strategy_scope(self) -> Iterator[None]:
        if self._strategy is None or distribution_context.strategy() is not None:
            yield
            return
        with self._strategy.scope():
            yield

    def count_params(self) -> int:
        return sum(int(math.prod(v.shape.as_list())) for v in self.weights)

    # -- building and calling ------------------------------------------------------------
    def build(self, input_shape: Any) -> None:
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        return inputs

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return shape_tuple(input_shape)

    def _maybe_build(self, input_shape: Any) -> None:
        if not self.built:
            self.build(_shapes(input_shape))
            self.built = True

    def __call__(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        graph = self._graph if self._graph is not None else get_default_graph()
        symbolic = node.is_symbolic(inputs)
        if not symbolic and _CALL_DEPTH[0] == 0 and self.built and placed(self.weights):
            # eager code calling a model a strategy placed: one step (keras.eager_calls)
            return run_placed(self, ("call", training, tuple(sorted(kwargs.items()))),
                              lambda x: self(x, training=training, **kwargs), inputs)
        if _CALL_DEPTH[0] == 0:
            self._reset_call_losses()
        _CALL_DEPTH[0] += 1
        try:
            with graph.as_default():
                x = node.map_nest(self._cast_input, inputs)
                self._maybe_build(node.map_nest(lambda t: t.shape, x))
                with graph.name_scope(self.name):
                    if self._takes_training:
                        outputs = self.call(x, training=bool(training), **kwargs)
                    else:
                        outputs = self.call(x, **kwargs)
                    if self.activity_regularizer is not None:
                        self._call_losses.extend(_activity_penalty(self.activity_regularizer, y)
                                                 for y in node.flatten(outputs))
        finally:
            _CALL_DEPTH[0] -= 1
        if symbolic:
            return node.record(self, inputs, outputs, training, kwargs)
        return outputs

    # -- losses (Keras' ``add_loss`` / ``losses``) ------------------------------------------
    def add_loss(self, loss: Any) -> None:
        """Add ``loss`` (a scalar tensor, or a function of none giving one) to ``losses``."""
        if callable(loss) and not isinstance(loss, Tensor):
            self._weight_losses.append(loss)
        else:
            self._call_losses.append(loss)

    @property
    def losses(self) -> list[Any]:
        """The penalties of this layer and the layers in it: each regularized weight's
        (built now, in the graph being traced) and the latest call's activity ones."""
        out = [fn() for fn in self._weight_losses] + list(self._call_losses)
        for layer in self._sublayers():
            out.extend(layer.losses)
        return out

    def _sublayers(self) -> list[Layer]:
        """The layers this one holds (a model's ``layers``; none for a plain layer)."""
        return []

    def _reset_call_losses(self) -> None:
        self._call_losses = []
        for layer in self._sublayers():
            layer._reset_call_losses()  # noqa: SLF001 - same class

    def _cast_input(self, inputs: Any) -> Tensor:
        if isinstance(inputs, Tensor) or hasattr(inputs, "_as_tensor"):
            x = ops.convert_to_tensor(inputs)
        else:   # numpy or Python values: floats become this layer's dtype
            array = np.asarray(inputs)
            if array.dtype.kind == "f":
                array = array.astype(dtypes.as_dtype(self.dtype).as_numpy_dtype)
            x = ops.convert_to_tensor(array)
        if x.dtype.is_floating and x.dtype.name != self.dtype:
            x = ops.cast(x, self.dtype)
        return x

    # -- config (Keras' get_config / from_config) -----------------------------------------
    def get_config(self) -> dict[str, Any]:
        """``name``, ``trainable``, ``dtype`` and, when given, ``batch_input_shape``:
        what ``from_config`` needs to make this layer again (a subclass adds its own
        arguments; one that takes arguments and does not is refused, as in Keras)."""
        if type(self).get_config is Layer.get_config:
            own = [n for n, p in inspect.signature(type(self).__init__).parameters.items()
                   if n not in _BASE_ARGS and p.kind not in (inspect.Parameter.VAR_KEYWORD,
                                                            inspect.Parameter.VAR_POSITIONAL)]
            if own:
                raise NotImplementedError(
                    f"Layer {type(self).__name__} has arguments {own} in `__init__` and "
                    "therefore must override `get_config()`.")
        config: dict[str, Any] = {"name": self.name, "trainable": self.trainable,
                                  "dtype": self.dtype}
        if self.batch_input_shape is not None:
            config["batch_input_shape"] = tuple(self.batch_input_shape)
        return serialization.constructor_config(self, config)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        """The layer ``get_config`` describes (``cls(**config)``)."""
        config = dict(config)
        if config.get("batch_input_shape") is not None:
            config["batch_input_shape"] = tuple(config["batch_input_shape"])
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _shapes(input_shape: Any) -> Any:
    """A build's input shape: a tuple, or Keras' list (dict) of tuples for several inputs."""
    if isinstance(input_shape, (list, tuple)) and input_shape and \
            not isinstance(input_shape[0], (int, type(None))) and \
            not hasattr(input_shape[0], "value"):
        return [_shapes(s) for s in input_shape]
    if isinstance(input_shape, dict):
        return {k: _shapes(v) for k, v in input_shape.items()}
    return shape_tuple(input_shape)


def _penalty(regularizer: Any, var: Any, name: str) -> Tensor:
    """A weight's penalty, named as Keras names it (``dense/kernel/Regularizer``)."""
    graph = get_default_graph()
    with graph.name_scope(name + "/Regularizer"):
        return ops.convert_to_tensor(regularizer(var))


def _activity_penalty(regularizer: Any, output: Any) -> Tensor:
    """Keras 2's: the output's penalty divided by the batch's rows."""
    penalty = ops.convert_to_tensor(regularizer(output))
    rows = ops.cast(ops.reshape(slice_rows(ops.shape(output), 0, 1), []), penalty.dtype)
    return penalty / rows


def listed_weights(variables: Iterable[Any]) -> list[Any]:
    """A layer's weights as Keras 2 (``tf_keras``) lists them: a ``ShardedVariable``
    (ParameterServerStrategy with a ``variable_partitioner``) as its shards, each
    a variable on its ps; the layer's own math still reads the ShardedVariable."""
    out: list[Any] = []
    for v in variables:
        out.extend(v.variables if isinstance(v, ShardedVariable) else [v])
    return out


def _restored_initializer(value: Any, weight: str, layer: str) -> Any:
    """An initializer giving a checkpoint's value (checked against the weight's shape)."""
    def init(shape: tuple[int, ...], dtype: Any) -> Any:
        array = np.asarray(value)
        if tuple(array.shape) != tuple(shape):
            raise ValueError(f"Received incompatible tensor with shape {list(array.shape)} "
                             f"when attempting to restore variable {layer}/{weight} with shape "
                             f"{list(shape)}: the checkpoint was saved from a layer of other "
                             "units")
        return ops.constant(array, dtype=dtype)
    return init
