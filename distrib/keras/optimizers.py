"""``dt.keras.optimizers``: ``SGD``, ``Adam``, ``Adagrad``, ``RMSprop`` with Keras'
arguments and defaults, applying updates with the TF1 optimizers of ``dt.train``.

Each Keras optimizer holds one TF1 optimizer with the same update rule
(Keras 2's rules are TF1's kernels): ``SGD`` is ``GradientDescentOptimizer``,
or ``MomentumOptimizer`` when ``momentum > 0`` (Keras' velocity
``v = m v - lr g`` is TF1's ``accum = m accum + g`` scaled by ``-lr``;
Nesterov alike); ``Adam`` is ``AdamOptimizer`` with Keras' ``epsilon=1e-7``
(TF1's default is 1e-8). ``RMSprop`` is Keras 2's (``optimizer_v2``): ``rms``
starts at zero (TF1's at one); with ``momentum > 0`` it is TF1's
``ApplyRMSProp`` kernel (epsilon inside the square root), without it Keras'
own ops, ``var -= lr * g / (sqrt(rms) + epsilon)`` (epsilon outside). So
``apply_gradients`` inside ``strategy.run`` sums the gradients over the
replicas exactly as a custom loop's does. ``compile`` takes each of their
names (``'sgd'``, ``'adam'``, ``'adagrad'``, ``'rmsprop'``, any case).

``iterations`` is a variable (int64) made on first use in the model's
strategy scope and advanced by every ``apply_gradients`` (TF1's global step
argument). ``state_variables`` names everything a checkpoint needs to resume
the optimizer: ``iterations``, each weight's slots (``m``, ``v``, ``momentum``
...), and Adam's ``beta1_power``/``beta2_power``, each as the list of its
copies (one per replica under a mirrored strategy).

``learning_rate`` may be a ``schedules.LearningRateSchedule``: the rate is then
the schedule's value at ``iterations``, computed in every step (Keras 2's
``_decayed_lr``). ``legacy`` holds the same classes under
``tf.keras.optimizers.legacy``'s names: these are Keras 2's ``optimizer_v2``.

Hyper-parameters are read when the train step is traced: set
``learning_rate`` before the first ``fit``. ``get_config()`` gives them as
Keras does (``{"name", "learning_rate", ...}``, the constructor's arguments),
``from_config`` makes the optimizer again, and ``serialize``/``deserialize``
are Keras' (a class name, any case, or a user's class through
``custom_objects``): what ``model.save`` keeps of the optimizer besides its
state.
"""
from __future__ import annotations

import contextlib
import re
import types
from typing import Any, Iterable, Sequence

from distrib.distribute.core.values import local_results
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import Operation, Tensor, get_default_graph
from distrib.keras import schedules, serialization
from distrib.ops import array_gather
from distrib.ops import math_ops as ops
from distrib.ops.gradients import gradients
from distrib.ops.variables import Variable, VariableAggregation
from distrib.train.checkpoints import trackable
from distrib.train.optimizers.adagrad import AdagradOptimizer
from distrib.train.optimizers.adam import AdamOptimizer
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer
from distrib.train.optimizers.momentum import MomentumOptimizer
from distrib.train.optimizers.optimizer import Optimizer as TF1Optimizer
from distrib.train.optimizers.optimizer import deduplicate
from distrib.train.optimizers.rmsprop import RMSPropOptimizer

__all__ = ["Optimizer", "SGD", "Adam", "Adagrad", "RMSprop", "get", "serialize", "deserialize",
           "legacy", "schedules"]

_UNSUPPORTED = ("clipnorm", "clipvalue", "global_clipnorm", "use_ema", "weight_decay")


class Optimizer:
    """Base of the Keras optimizers (see the module header)."""

    def __init__(self, name: str, learning_rate: Any, **kwargs: Any) -> None:
        if "lr" in kwargs:   # Keras 2's deprecated alias
            learning_rate = kwargs.pop("lr")
        given = sorted(k for k in _UNSUPPORTED if kwargs.pop(k, None) not in (None, False))
        if given:
            raise NotImplementedError(f"{type(self).__name__}: {given} are not supported by "
                                      "dt.keras optimizers; leave them unset")
        kwargs.pop("jit_compile", None)
        if kwargs:
            raise TypeError(f"{type(self).__name__}: unexpected keyword argument(s) "
                            f"{sorted(kwargs)}")
        self.name = name
        self.learning_rate = learning_rate
        self._optimizer: TF1Optimizer | None = None
        self._iterations: Any = None
        self._strategy: Any = None

    # -- what subclasses decide ---------------------------------------------------------
    def _make_optimizer(self) -> TF1Optimizer:
        raise NotImplementedError

    # -- the API ----------------------------------------------------------------------------
    @property
    def iterations(self) -> Any:
        """The number of ``apply_gradients`` steps run so far (a variable)."""
        if self._iterations is None:
            graph = get_default_graph()
            scope = self._strategy.scope() if (self._strategy is not None and
                                                distribution_context.strategy() is None) \
                else contextlib.nullcontext()
            restored = trackable.deferred_value(self, "iter")   # a Checkpoint's, if restored
            start = 0 if restored is None else int(restored)
            with scope, graph.name_scope(None), graph.control_dependencies(None):
                self._iterations = Variable(start, trainable=False, dtype=dtypes.int64,
                                            name=f"{self.name}/iterations",
                                            aggregation=VariableAggregation.ONLY_FIRST_REPLICA)
        return self._iterations

    def _lr(self) -> Any:
        """The learning rate for the step being traced: a schedule's value at
        ``iterations`` (read before this step advances it), else the number."""
        if isinstance(self.learning_rate, schedules.LearningRateSchedule):
            return self.learning_rate(self.iterations)
        return self.learning_rate

    def build_for(self, strategy: Any) -> None:
        """Remember the strategy whose scope the optimizer's variables belong to."""
        self._strategy = strategy

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]],
                        name: str | None = None) -> Any:
        """Apply each (gradient, variable) pair; inside ``strategy.run`` the
        gradients are summed over the replicas first. Advances ``iterations``."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("No gradients provided for any variable: check that the loss "
                             "depends on the model's trainable variables")
        return self.tf1_optimizer.apply_gradients(pairs, global_step=self.iterations,
                                                  name=name)

    def minimize(self, loss: Any, var_list: Sequence[Any], tape: Any = None) -> Any:
        """``apply_gradients`` of ``loss``'s gradients (``tape.gradient`` when given)."""
        var_list = list(var_list)
        grads = tape.gradient(loss, var_list) if tape is not None else gradients(loss, var_list)
        return self.apply_gradients(zip(grads, var_list))

    @property
    def tf1_optimizer(self) -> TF1Optimizer:
        if self._optimizer is None:
            self._optimizer = self._make_optimizer()
        return self._optimizer

    def state_variables(self, weights: Sequence[Any]) -> dict[str, list[Any]]:
        """``{key: [copies]}`` of the optimizer's state for ``weights`` (in order):
        ``iterations``, ``<i>/<slot>`` per weight, and the non-slot variables."""
        out: dict[str, list[Any]] = {}
        if self._iterations is not None:
            out["iterations"] = list(local_results(self._iterations))
        opt = self._optimizer
        if opt is None:
            return out
        slots: set[int] = set()
        for i, weight in enumerate(weights):
            for slot in opt.get_slot_names():
                copies = [opt.get_slot(c, slot) for c in local_results(weight)]
                if copies and all(c is not None for c in copies):
                    out[f"{i}/{slot}"] = copies
                    slots.update(id(c) for c in copies)
        for var in opt.variables():
            if id(var) not in slots:
                base = re.sub(r"_\d+$", "", var.op.name.rsplit("/", 1)[-1])
                out.setdefault(base, []).append(var)
        return out

    # -- dt.train.Checkpoint's protocol (distrib.train.checkpoints.trackable) ---------------------------
    def trackable_children(self) -> dict[str, Any]:
        """``iter`` (Keras' name for ``iterations``) and the variables of no one
        weight (Adam's ``beta1_power``), once made; the slots are per weight
        (``checkpoint_slot``)."""
        out: dict[str, Any] = {}
        if self._iterations is not None:
            out["iter"] = self._iterations
            if self._optimizer is not None:
                graph = local_results(self._iterations)[0].graph
                for name, copies in self._optimizer.non_slot_variables(graph).items():
                    out[name] = trackable.MirroredValue(copies)
        return out

    def checkpoint_slot_names(self) -> list[str]:
        return self._optimizer.get_slot_names() if self._optimizer is not None else []

    def checkpoint_slot(self, variable: Any, slot_name: str) -> Any:
        """The slot ``slot_name`` of ``variable`` (laid out as it is), or None."""
        opt = self._optimizer
        if opt is None:
            return None
        return trackable.SlotValue.of(variable, lambda part: opt.get_slot(part, slot_name))

    def defer_restore(self, name: str, restoration: Any) -> bool:
        """A restored ``iter`` or non-slot value not made yet: made from it."""
        if name == "iter":
            trackable.defer(self, "iter", restoration)
        else:
            trackable.defer(self.tf1_optimizer, ("non_slot", name), restoration)
        return True

    def defer_slot_restore(self, variable: Any, slot_name: str, restoration: Any) -> bool:
        """A restored slot of ``variable`` not made yet (the first train step makes
        it): each copy's or shard's slot starts from its part of the value."""
        opt = self.tf1_optimizer
        for part, piece in restoration.split(variable):
            trackable.defer(opt, ("slot", part.op, slot_name), piece)
        return True

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments (Keras' config): ``name``, ``learning_rate`` ..."""
        lr = self.learning_rate
        if isinstance(lr, schedules.LearningRateSchedule):
            lr = schedules.serialize(lr)
        return {"name": self.name, "learning_rate": lr}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Optimizer:
        """The optimizer ``get_config`` describes (no state: that is the checkpoint's)."""
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules.deserialize(config["learning_rate"],
                                                            custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return f"<dt.keras.optimizers.{type(self).__name__} {self.get_config()}>"


class SGD(Optimizer):
    """``SGD(learning_rate=0.01, momentum=0.0, nesterov=False, name='SGD')``."""

    def __init__(self, learning_rate: Any = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 name: str = "SGD", **kwargs: Any) -> None:
        if isinstance(momentum, (int, float)) and not 0.0 <= momentum <= 1.0:
            raise ValueError(f"`momentum` must be between [0, 1]. Received: momentum={momentum}")
        super().__init__(name, learning_rate, **kwargs)
        self.momentum = momentum
        self.nesterov = bool(nesterov)

    def _make_optimizer(self) -> TF1Optimizer:
        if self.momentum == 0.0 and not self.nesterov:
            return GradientDescentOptimizer(self._lr(), name=self.name)
        return MomentumOptimizer(self._lr(), self.momentum, name=self.name,
                                     use_nesterov=self.nesterov)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}


class Adam(Optimizer):
    """``Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False)``."""

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, name: str = "Adam",
                 **kwargs: Any) -> None:
        if amsgrad:
            raise NotImplementedError("Adam(amsgrad=True) is not supported by dt.keras")
        super().__init__(name, learning_rate, **kwargs)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

    def _make_optimizer(self) -> TF1Optimizer:
        return AdamOptimizer(self._lr(), self.beta_1, self.beta_2, self.epsilon,
                                 name=self.name)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "amsgrad": False}


class Adagrad(Optimizer):
    """``Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7)``;
    TF1's update, which has no epsilon (it matters only for a zero accumulator)."""

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, name: str = "Adagrad", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, **kwargs)
        self.initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon

    def _make_optimizer(self) -> TF1Optimizer:
        return AdagradOptimizer(self._lr(), self.initial_accumulator_value,
                                    name=self.name)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(),
                "initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}


class RMSprop(Optimizer):
    """``RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
    name='RMSprop')``: Keras 2's rule (see the module header)."""

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.9, momentum: Any = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, name: str = "RMSprop",
                 **kwargs: Any) -> None:
        if isinstance(momentum, (int, float)) and not 0.0 <= momentum <= 1.0:
            raise ValueError("`momentum` must be between [0, 1].")
        super().__init__(name, learning_rate, **kwargs)
        self.rho, self.momentum, self.centered = rho, momentum, bool(centered)
        self.epsilon = epsilon or 1e-7   # Keras: None or 0 take backend.epsilon()

    def _make_optimizer(self) -> TF1Optimizer:
        return _KerasRMSProp(self._lr(), self.rho, self.momentum, self.epsilon,
                             centered=self.centered, name=self.name)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "centered": self.centered}


class _KerasRMSProp(RMSPropOptimizer):
    """The TF1 optimizer behind ``RMSprop``: Keras 2's slots (``rms`` from zero;
    ``momentum`` only with momentum; ``mg`` when centered) and its two rules."""

    def __init__(self, learning_rate: Any, rho: Any, momentum: Any, epsilon: Any,
                 centered: bool, name: str) -> None:
        super().__init__(learning_rate, rho, momentum, epsilon, centered=centered, name=name,
                         initial_rms=0.0)
        self._with_momentum = ops.is_tensor(momentum) or callable(momentum) or momentum > 0

    def _create_slots(self, var_list: list[Variable]) -> None:
        if self._with_momentum:   # TF1's slots and kernel, rms from zero
            return super()._create_slots(var_list)
        for var in var_list:
            self._zeros_slot(var, "rms", self._name)
            if self._centered:
                self._zeros_slot(var, "mg", self._name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        if self._with_momentum:
            return super()._apply_dense(grad, var)
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        rho = self._hyper(self._decay, var, "rho")
        one_minus_rho = ops.subtract(ops.constant(1, dtype=var.dtype), rho)
        epsilon = self._hyper(self._epsilon, var, "epsilon")
        rms = self.get_slot(var, "rms")
        denom = rms.assign(rho * rms + one_minus_rho * ops.square(grad))
        if self._centered:
            mg = self.get_slot(var, "mg")
            mg_t = mg.assign(rho * mg + one_minus_rho * grad)
            denom = denom - ops.square(mg_t)
        return var.assign(var - lr * grad / (ops.sqrt(denom) + epsilon), read_value=False)

    def _apply_sparse(self, grad: Any, var: Variable) -> Operation:
        """Keras 2's sparse rule: with momentum TF1's row kernel; without, ``rms``
        (and ``mg``) decay whole, the rows' terms are scattered in, rows of var move."""
        if self._with_momentum:
            return super()._apply_sparse(grad, var)
        grad = deduplicate(grad)   # rms adds squares: one row per index
        lr = self._hyper(self._learning_rate, var, "learning_rate")
        rho = self._hyper(self._decay, var, "rho")
        one_minus_rho = ops.subtract(ops.constant(1, dtype=var.dtype), rho)
        epsilon = self._hyper(self._epsilon, var, "epsilon")
        graph = var.graph

        def decayed(slot: Variable, rows: Tensor) -> Tensor:
            with graph.control_dependencies([slot.assign(slot.read_value() * rho)]):
                new = array_gather.scatter_add(slot, grad.indices, one_minus_rho * rows)
            return array_gather.gather(new, grad.indices)
        denom = decayed(self.get_slot(var, "rms"), ops.square(grad.values))
        if self._centered:
            denom = denom - ops.square(decayed(self.get_slot(var, "mg"), grad.values))
        step = lr * grad.values / (ops.sqrt(denom) + epsilon)
        return array_gather.scatter_sub(var, grad.indices, step).op


_BY_NAME = {"sgd": SGD, "adam": Adam, "adagrad": Adagrad, "rmsprop": RMSprop}

# tf.keras.optimizers.legacy (tf_keras 2.11+): Keras 2's optimizer_v2 classes, which these
# are (same rules, slots, defaults and configs)
legacy = types.SimpleNamespace(Optimizer=Optimizer, SGD=SGD, Adam=Adam, Adagrad=Adagrad,
                               RMSprop=RMSprop)


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """Keras' dict of ``optimizer``: ``{"module", "class_name", "config", ...}``."""
    return serialization.serialize_keras_object(optimizer)


def deserialize(config: Any, custom_objects: dict[str, Any] | None = None) -> Optimizer:
    """The optimizer of Keras' dict (a class name in any case, as Keras 2 reads them;
    a user's class through ``custom_objects`` or the registry)."""
    if isinstance(config, str) and config.lower() in _BY_NAME:
        return get(config)
    if isinstance(config, dict) and isinstance(config.get("class_name"), str):
        name = config["class_name"]
        if name.lower() in _BY_NAME and serialization.get_registered_object(
                name, custom_objects) is None:
            config = {**config, "class_name": _BY_NAME[name.lower()].__name__,
                      "registered_name": None}
    known = {cls.__name__: cls for cls in _BY_NAME.values()}
    return serialization.deserialize_keras_object(config, known, custom_objects,
                                                  printable_module_name="optimizer")


def get(identifier: Any) -> Optimizer:
    """An optimizer for a name (``'sgd'``, ``'adam'``, ``'adagrad'``, ``'rmsprop'``, any
    case) or an Optimizer (a class is made with its defaults)."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Optimizer):
        return identifier()
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    if isinstance(identifier, TF1Optimizer):
        raise ValueError(f"{identifier!r} is a dt.train (TF1) optimizer; compile takes a "
                         "dt.keras.optimizers one, e.g. dt.keras.optimizers.SGD(0.01)")
    raise ValueError(f"Could not interpret optimizer identifier: {identifier!r}; use one of "
                     f"{sorted(_BY_NAME)} or a dt.keras.optimizers.Optimizer (Adadelta, Adamax, "
                     "Nadam and Ftrl are not available in dt.keras)")
