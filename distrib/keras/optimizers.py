"""``dt.keras.optimizers``: ``SGD``, ``Adam``, ``Adagrad`` with Keras' arguments
and defaults, applying updates with the TF1 optimizers of ``dt.train``.

Each Keras optimizer holds one TF1 optimizer with the same update rule
(Keras 2's rules are TF1's kernels): ``SGD`` is ``GradientDescentOptimizer``,
or ``MomentumOptimizer`` when ``momentum > 0`` (Keras' velocity
``v = m v - lr g`` is TF1's ``accum = m accum + g`` scaled by ``-lr``;
Nesterov alike); ``Adam`` is ``AdamOptimizer`` with Keras' ``epsilon=1e-7``
(TF1's default is 1e-8). So ``apply_gradients`` inside ``strategy.run`` sums
the gradients over the replicas exactly as a custom loop's does.

``iterations`` is a variable (int64) made on first use in the model's
strategy scope and advanced by every ``apply_gradients`` (TF1's global step
argument). ``state_variables`` names everything a checkpoint needs to resume
the optimizer: ``iterations``, each weight's slots (``m``, ``v``, ``momentum``
...), and Adam's ``beta1_power``/``beta2_power``, each as the list of its
copies (one per replica under a mirrored strategy).

Hyper-parameters are read when the train step is traced: set
``learning_rate`` before the first ``fit``.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any, Iterable, Sequence

from distrib.distribute.values import local_results
from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import get_default_graph
from distrib.ops.gradients import gradients
from distrib.ops.variables import Variable, VariableAggregation
from distrib.train import optimizers as tf1

__all__ = ["Optimizer", "SGD", "Adam", "Adagrad", "get"]

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
        self._optimizer: tf1.Optimizer | None = None
        self._iterations: Any = None
        self._strategy: Any = None

    # -- what subclasses decide ---------------------------------------------------------
    def _make_optimizer(self) -> tf1.Optimizer:
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
            with scope, graph.name_scope(None), graph.control_dependencies(None):
                self._iterations = Variable(0, trainable=False, dtype=dtypes.int64,
                                            name=f"{self.name}/iterations",
                                            aggregation=VariableAggregation.ONLY_FIRST_REPLICA)
        return self._iterations

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
    def tf1_optimizer(self) -> tf1.Optimizer:
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

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "learning_rate": self.learning_rate}

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

    def _make_optimizer(self) -> tf1.Optimizer:
        if self.momentum == 0.0 and not self.nesterov:
            return tf1.GradientDescentOptimizer(self.learning_rate, name=self.name)
        return tf1.MomentumOptimizer(self.learning_rate, self.momentum, name=self.name,
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

    def _make_optimizer(self) -> tf1.Optimizer:
        return tf1.AdamOptimizer(self.learning_rate, self.beta_1, self.beta_2, self.epsilon,
                                 name=self.name)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon}


class Adagrad(Optimizer):
    """``Adagrad(learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7)``;
    TF1's update, which has no epsilon (it matters only for a zero accumulator)."""

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, name: str = "Adagrad", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, **kwargs)
        self.initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon

    def _make_optimizer(self) -> tf1.Optimizer:
        return tf1.AdagradOptimizer(self.learning_rate, self.initial_accumulator_value,
                                    name=self.name)


_BY_NAME = {"sgd": SGD, "adam": Adam, "adagrad": Adagrad}


def get(identifier: Any) -> Optimizer:
    """An optimizer for a name (``'sgd'``, ``'adam'``, ``'adagrad'``) or an Optimizer."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, type) and issubclass(identifier, Optimizer):
        return identifier()
    if isinstance(identifier, str) and identifier.lower() in _BY_NAME:
        return _BY_NAME[identifier.lower()]()
    if isinstance(identifier, tf1.Optimizer):
        raise ValueError(f"{identifier!r} is a dt.train (TF1) optimizer; compile takes a "
                         "dt.keras.optimizers one, e.g. dt.keras.optimizers.SGD(0.01)")
    raise ValueError(f"Could not interpret optimizer identifier: {identifier!r}; use one of "
                     f"{sorted(_BY_NAME)} or a dt.keras.optimizers.Optimizer (RMSprop and the "
                     "others are not available in dt.keras)")
