"""``dt.keras.layers``: ``Layer`` and the layers the seeds use: ``Dense``,
``Flatten``, ``Dropout``, ``Activation`` (Keras' names, arguments, defaults).

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
JSON values: initializers as Keras' ``{"class_name", "config"}`` dicts,
activations by name) and ``from_config(config)``; ``deserialize(config,
custom_objects)`` makes any layer (a user's found through ``custom_objects``
or ``register_keras_serializable``) from Keras' dict. A user's layer whose
``__init__`` takes arguments of its own must override ``get_config``, as
Keras requires (``model.save`` says so).
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
from distrib.keras import activations, backend, initializers, serialization
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.variables import Variable
from distrib.train.checkpoints import trackable

__all__ = ["Layer", "Dense", "Flatten", "Dropout", "Activation", "serialize", "deserialize",
           "listed_weights"]

_BASE_ARGS = ("self", "trainable", "name", "dtype", "input_shape", "batch_input_shape",
              "input_dim")


def _shape_tuple(shape: Any) -> tuple[int | None, ...]:
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
                 input_dim: int | None = None, **kwargs: Any) -> None:
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
                   initializer: Any = None, trainable: bool = True, **kwargs: Any) -> Any:
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
        return _shape_tuple(input_shape)

    def _maybe_build(self, input_shape: Any) -> None:
        if not self.built:
            self.build(_shape_tuple(input_shape))
            self.built = True

    def __call__(self, inputs: Any, training: Any = None, **kwargs: Any) -> Any:
        graph = self._graph if self._graph is not None else get_default_graph()
        with graph.as_default():
            x = self._cast_input(inputs)
            self._maybe_build(x.shape)
            with graph.name_scope(self.name):
                if self._takes_training:
                    return self.call(x, training=bool(training), **kwargs)
                return self.call(x, **kwargs)

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


class Dense(Layer):
    """``Dense(units, activation=None, use_bias=True, kernel_initializer='glorot_uniform',
    bias_initializer='zeros', ...)``: ``activation(inputs @ kernel + bias)``."""

    def __init__(self, units: int, activation: Any = None, use_bias: bool = True,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        units = int(units) if not isinstance(units, bool) else 0
        if units <= 0:
            raise ValueError(f"Received an invalid value for `units`, expected a positive "
                             f"integer. Received: units={units}")
        unsupported = {k: v for k, v in (("kernel_regularizer", kernel_regularizer),
                                         ("bias_regularizer", bias_regularizer),
                                         ("activity_regularizer", activity_regularizer),
                                         ("kernel_constraint", kernel_constraint),
                                         ("bias_constraint", bias_constraint)) if v is not None}
        if unsupported:
            raise NotImplementedError(f"Dense: {sorted(unsupported)} are not supported by "
                                      "dt.keras; leave them None")
        self.units = units
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel: Any = None
        self.bias: Any = None

    def build(self, input_shape: Any) -> None:
        shape = _shape_tuple(input_shape)
        if not shape or shape[-1] is None:
            raise ValueError(f"The last dimension of the inputs to a Dense layer should be "
                             f"defined. Found None. Full input shape received: {shape}")
        self.kernel = self.add_weight("kernel", (shape[-1], self.units),
                                      initializer=self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), initializer=self.bias_initializer)
        self.built = True

    def call(self, inputs: Any, training: Any = None) -> Any:
        shape = _shape_tuple(inputs.shape)
        x = inputs
        if len(shape) != 2:   # applied on the last axis, as Keras' tensordot
            if any(d is None for d in shape[1:]):
                raise ValueError(f"Dense on inputs of rank {len(shape)} needs every dimension "
                                 f"but the first known; got {shape}")
            x = ops.reshape(x, [-1, shape[-1]])
        y = ops.matmul(x, self.kernel)
        if self.use_bias:
            y = nn.bias_add(y, self.bias)
        if len(shape) != 2:
            y = ops.reshape(y, [-1, *shape[1:-1], self.units])
        return self.activation(y)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        return (*_shape_tuple(input_shape)[:-1], self.units)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "units": self.units,
                "activation": _activation_name(self.activation), "use_bias": self.use_bias,
                "kernel_initializer": _initializer_config(self.kernel_initializer),
                "bias_initializer": _initializer_config(self.bias_initializer),
                "kernel_regularizer": None, "bias_regularizer": None,
                "activity_regularizer": None, "kernel_constraint": None,
                "bias_constraint": None}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["activation"] = _activation_from(config.get("activation"))
        for key in ("kernel_initializer", "bias_initializer"):
            if key in config:
                config[key] = _initializer_from(config[key])
        return super().from_config(config)


class Flatten(Layer):
    """``Flatten()``: every dimension but the first folded into one."""

    def call(self, inputs: Any, training: Any = None) -> Any:
        shape = _shape_tuple(inputs.shape)
        if any(d is None for d in shape[1:]):
            raise ValueError(f"Flatten needs every dimension but the first known; got {shape}")
        return ops.reshape(inputs, [-1, int(math.prod(shape[1:]))])

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = _shape_tuple(input_shape)
        return (shape[0], int(math.prod(shape[1:])))


class Dropout(Layer):
    """``Dropout(rate, noise_shape=None, seed=None)``: while training, each value
    is zeroed with probability ``rate`` and the rest scaled by ``1 / (1 - rate)``;
    outside training the inputs pass unchanged."""

    def __init__(self, rate: float, noise_shape: Sequence[int | None] | None = None,
                 seed: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) <= 1.0:
            raise ValueError(f"Invalid value received for argument `rate`. Expected a float "
                             f"value between 0 and 1. Received: rate={rate}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed

    def call(self, inputs: Any, training: Any = None) -> Any:
        if not training or self.rate == 0.0:
            return inputs
        shape = _shape_tuple(inputs.shape)
        noise = self.noise_shape or shape
        noise = tuple(s if n is None else n for n, s in zip(noise, shape))
        if any(d is None for d in noise):
            raise ValueError(f"Dropout while training needs the input's shape known, got "
                             f"{shape}: run the model in a dt.function (it traces with the "
                             "batch's shape) or pass noise_shape")
        if self.rate == 1.0:
            return ops.zeros_like(inputs)
        draw = ops.random_uniform(list(noise), dtype=inputs.dtype,
                                  seed=backend.derived_seed(self.seed, inputs.graph))
        keep = ops.cast(ops.greater_equal(draw, self.rate), inputs.dtype)
        return inputs * keep * (1.0 / (1.0 - self.rate))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rate": self.rate, "noise_shape": self.noise_shape,
                "seed": self.seed}


class Activation(Layer):
    """``Activation('relu')``: an activation function as a layer."""

    def __init__(self, activation: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs: Any, training: Any = None) -> Any:
        return self.activation(inputs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "activation": _activation_name(self.activation)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        config["activation"] = _activation_from(config.get("activation"))
        return super().from_config(config)


# -- configs of what layers hold --------------------------------------------------------------
def _activation_name(fn: Any) -> str:
    """A built-in activation's Keras name, or the name a user's function is saved under."""
    name = activations.serialize(fn)
    try:
        if activations.get(name) is fn:
            return name
    except ValueError:
        pass
    return serialization.serialize_function(fn)


def _activation_from(identifier: Any) -> Any:
    return serialization.resolve_function(identifier, activations.get, "activation")


_INITIALIZERS = {name: getattr(initializers, name) for name in initializers.__all__
                 if inspect.isclass(getattr(initializers, name))}


def _initializer_config(init: Any) -> Any:
    """Keras' ``{"class_name", "config"}`` of an initializer (its constructor's
    arguments only), or a user's function by name."""
    if not isinstance(init, initializers.Initializer):
        return serialization.serialize_function(init)
    return {"module": type(init).__module__, "class_name": type(init).__name__,
            "config": serialization.constructor_config(init, init.get_config()),
            "registered_name": serialization.get_registered_name(type(init))}


def _initializer_from(config: Any) -> Any:
    if isinstance(config, dict):
        return serialization.deserialize_keras_object(config, _INITIALIZERS,
                                                      printable_module_name="initializer")
    return serialization.resolve_function(config, initializers.get, "initializer")


# -- any layer --------------------------------------------------------------------------------
_LAYERS = {"Layer": Layer, "Dense": Dense, "Flatten": Flatten, "Dropout": Dropout,
           "Activation": Activation}


def serialize(layer: Layer) -> dict[str, Any]:
    """Keras' dict of ``layer``: ``{"module", "class_name", "config", "registered_name"}``."""
    return serialization.serialize_keras_object(layer)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Any:
    """The layer (or model) Keras' dict ``config`` describes; a user's class is found
    in ``custom_objects`` or among those registered (``register_keras_serializable``)."""
    return serialization.deserialize_keras_object(config, {**distrib_models(), **_LAYERS},
                                                  custom_objects, printable_module_name="layer")


def distrib_models() -> dict[str, Any]:
    """distrib's own model classes (``Sequential``, ...) by name: the subclasses of
    ``Layer`` defined in ``distrib.keras`` outside this module's table (their module
    imports this one, so they are looked up, not imported or registered)."""
    found: dict[str, Any] = {}
    todo = [Layer]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("distrib.keras.") and not sub.__name__.startswith("_"):
                found.setdefault(sub.__name__, sub)
    return found
