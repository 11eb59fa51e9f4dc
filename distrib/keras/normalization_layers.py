"""``dt.keras.layers.BatchNormalization`` (Keras 3's, with ``synchronized=``) and
``SyncBatchNormalization`` (``tf.keras.layers.experimental``'s name for
``synchronized=True``).

Training (``training=True`` and the layer trainable: ``fit``'s steps)
normalizes by the batch's mean and (biased) variance and moves the moving
statistics toward them, ``moving = moving * momentum + batch * (1 -
momentum)``, as Keras 3 does; otherwise (``evaluate``, ``predict``, a plain
call: Keras' learning phase is False) it normalizes by the moving statistics.
A 4-d input normalized over its channels is one ``FusedBatchNormV3`` op
(forward and gradient; the op's unbiased variance is scaled back to the
biased one Keras 3 averages), anything else the composite of ``dt.nn.moments``
and ``dt.nn.batch_normalization``.

**Moving statistics under a strategy.** They are non-trainable weights made
with ``aggregation=MEAN`` (and ``synchronization=ON_READ``, as tf_keras makes
them). Under MirroredStrategy and MultiWorkerMirroredStrategy a mirrored
variable updated inside ``strategy.run`` takes the MEAN of the replicas'
new values, so every copy ends equal to the mean of the replicas' updates
and ``evaluate`` (one replica) or ``save`` (the first copy) read it. TF keeps
ON_READ copies apart and averages them when read across replicas; since the
update is linear the mean it reads is the same number, distrib pays one small
all-reduce per statistic per step instead. Under CentralStorageStrategy (one
variable for all local replicas) the replicas' values are averaged first;
under ParameterServerStrategy (one replica per worker) each worker's step
updates the variable on its ps, as in TF.

**Synchronized statistics.** With ``synchronized=True`` the batch statistics
are those of the global batch: each replica's sum, sum of squares and count
are all-reduced (one ``SUM`` all-reduce per step of the three, as Keras 3's
TF backend does, whose gradient is TF's: the all-reduce of the upstream
gradients) and the mean and variance made
from them, so every replica normalizes, and updates, as one replica on the
whole batch would. Outside a strategy it is plain batch normalization.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from distrib.distribute.core.cross_device_ops import ReduceOp
from distrib.distribute.core.values import DistributedValues
from distrib.framework import distribution_context
from distrib.keras import initializers
from distrib.keras.base_layer import Layer, shape_tuple
from distrib.keras.conv_layers import refuse_unsupported
from distrib.keras.layer_configs import initializer_config, initializer_from
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.nn_norm import MIN_EPSILON
from distrib.ops.variables import VariableAggregation, VariableSynchronization

__all__ = ["BatchNormalization", "SyncBatchNormalization"]

_INITIALIZERS = ("beta_initializer", "gamma_initializer", "moving_mean_initializer",
                 "moving_variance_initializer")


class BatchNormalization(Layer):
    """``BatchNormalization(axis=-1, momentum=0.99, epsilon=0.001, center=True,
    scale=True, beta_initializer='zeros', gamma_initializer='ones',
    moving_mean_initializer='zeros', moving_variance_initializer='ones', ...,
    synchronized=False)``."""

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", moving_mean_initializer: Any = "zeros",
                 moving_variance_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, renorm: bool = False,
                 renorm_clipping: Any = None, renorm_momentum: float = 0.99,
                 synchronized: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        refuse_unsupported(type(self).__name__, beta_regularizer=beta_regularizer,
                           gamma_regularizer=gamma_regularizer, beta_constraint=beta_constraint,
                           gamma_constraint=gamma_constraint, renorm_clipping=renorm_clipping)
        if renorm:
            raise NotImplementedError(f"{type(self).__name__}: renorm=True (batch "
                                      "renormalization) is not supported by dt.keras")
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.synchronized = bool(synchronized)
        self.renorm, self.renorm_clipping, self.renorm_momentum = False, None, \
            float(renorm_momentum)
        self.beta_initializer = initializers.get(beta_initializer)
        self.gamma_initializer = initializers.get(gamma_initializer)
        self.moving_mean_initializer = initializers.get(moving_mean_initializer)
        self.moving_variance_initializer = initializers.get(moving_variance_initializer)
        self.gamma: Any = None
        self.beta: Any = None
        self.moving_mean: Any = None
        self.moving_variance: Any = None

    # -- weights ----------------------------------------------------------------------------
    def _axis_of(self, shape: tuple[int | None, ...]) -> int:
        if not -len(shape) <= self.axis < len(shape):
            raise ValueError(f"Axis {self.axis} is out of bounds for input shape {shape}. "
                             f"Received: axis={self.axis}")
        return self.axis % len(shape)

    def build(self, input_shape: Any) -> None:
        shape = shape_tuple(input_shape)
        channels = shape[self._axis_of(shape)]
        if channels is None:
            raise ValueError(f"Axis {self.axis} of input tensor should have a defined "
                             f"dimension but the layer received an input with shape {shape}.")
        dims = (int(channels),)
        if self.scale:
            self.gamma = self.add_weight("gamma", dims, initializer=self.gamma_initializer)
        if self.center:
            self.beta = self.add_weight("beta", dims, initializer=self.beta_initializer)
        # non-trainable, averaged over the replicas that update them (module header)
        stats = {"trainable": False, "aggregation": VariableAggregation.MEAN,
                 "synchronization": VariableSynchronization.ON_READ}
        self.moving_mean = self.add_weight("moving_mean", dims,
                                           initializer=self.moving_mean_initializer, **stats)
        self.moving_variance = self.add_weight("moving_variance", dims,
                                               initializer=self.moving_variance_initializer,
                                               **stats)
        self.built = True

    # -- the computation --------------------------------------------------------------------
    def call(self, inputs: Any, training: Any = None) -> Any:
        shape = shape_tuple(inputs.shape)
        axis = self._axis_of(shape)
        reduction = [i for i in range(len(shape)) if i != axis]
        if bool(training) and self.trainable:
            y, mean, variance = self._normalize_batch(inputs, shape, axis, reduction)
            self._move(self.moving_mean, mean)
            self._move(self.moving_variance, variance)
            return y
        mean, variance = ops.convert_to_tensor(self.moving_mean), \
            ops.convert_to_tensor(self.moving_variance)
        fmt = self._fused_format(shape, axis)
        if fmt is not None:
            return nn.fused_batch_norm(inputs, self._gamma(shape[axis]), self._beta(shape[axis]),
                                       mean, variance, epsilon=self.epsilon, data_format=fmt,
                                       is_training=False)[0]
        return self._apply(inputs, shape, axis, mean, variance)

    def _fused_format(self, shape: tuple[int | None, ...], axis: int) -> str | None:
        """``NHWC``/``NCHW`` where one ``FusedBatchNormV3`` does the work, else None."""
        if len(shape) != 4 or self.epsilon < MIN_EPSILON or axis not in (1, 3):
            return None
        return "NHWC" if axis == 3 else "NCHW"

    def _normalize_batch(self, x: Any, shape: tuple[int | None, ...], axis: int,
                         reduction: list[int]) -> tuple[Any, Any, Any]:
        """``(y, batch mean, batch variance)``, the variance biased (Keras 3's)."""
        fmt = self._fused_format(shape, axis)
        count = None if any(shape[i] is None for i in reduction) else \
            int(np.prod([shape[i] for i in reduction]))
        if fmt is not None and not self.synchronized and count is not None and count > 1:
            y, mean, unbiased = nn.fused_batch_norm(x, self._gamma(shape[axis]),
                                                    self._beta(shape[axis]),
                                                    epsilon=self.epsilon, data_format=fmt,
                                                    is_training=True)
            return y, mean, unbiased * ((count - 1) / count)
        mean, variance = self._synchronized_moments(x, reduction) if self.synchronized else \
            nn.moments(x, reduction)
        return self._apply(x, shape, axis, mean, variance), mean, variance

    def _synchronized_moments(self, x: Any, reduction: list[int]) -> tuple[Any, Any]:
        """The global batch's mean and variance: one SUM all-reduce of each replica's
        sum, sum of squares and count per channel (Keras 3's ``_compute_moments_sync``)."""
        replica = distribution_context.replica_context()
        if replica is None:
            return nn.moments(x, reduction)
        local_sum = ops.reduce_sum(x, reduction)
        local_squares = ops.reduce_sum(ops.square(x), reduction)
        dims = x.shape.as_list()
        if all(dims[i] is not None for i in reduction):
            local_count = ops.constant([float(np.prod([dims[i] for i in reduction]))],
                                       dtype=x.dtype)
        else:   # rows known only at run time (the same count for every channel)
            local_count = ops.reduce_sum(ops.ones_like(x), reduction)
        total, squares, count = replica.all_reduce(ReduceOp.SUM, [local_sum, local_squares,
                                                                  local_count])
        mean = total / count
        variance = ops.maximum(squares / count - ops.square(mean), 0.0)
        return mean, variance

    def _apply(self, x: Any, shape: tuple[int | None, ...], axis: int, mean: Any,
               variance: Any) -> Any:
        """``dt.nn.batch_normalization`` with the per-channel vectors broadcast on ``axis``."""
        view = [1] * len(shape)
        view[axis] = -1

        def along(v: Any) -> Any:
            return None if v is None else \
                (v if axis == len(shape) - 1 else ops.reshape(v, view))
        return nn.batch_normalization(x, along(mean), along(variance), along(self.beta),
                                      along(self.gamma), self.epsilon)

    def _gamma(self, channels: int | None) -> Any:
        return self.gamma if self.scale else ops.constant(np.ones(channels, np.float32))

    def _beta(self, channels: int | None) -> Any:
        return self.beta if self.center else ops.constant(np.zeros(channels, np.float32))

    def _move(self, variable: Any, batch_value: Any) -> None:
        """``variable = variable * momentum + batch_value * (1 - momentum)``, combined
        over the replicas as the module header says."""
        value = ops.convert_to_tensor(variable) * self.momentum + \
            ops.cast(batch_value, variable.dtype) * (1.0 - self.momentum)
        replica = distribution_context.replica_context()
        if replica is not None and not isinstance(variable, DistributedValues) and \
                len(replica.strategy.replica_devices) > 1:
            value = replica.all_reduce(ReduceOp.MEAN, value)   # one variable, many replicas
        variable.assign(value, read_value=False)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = shape_tuple(input_shape)
        self._axis_of(shape)
        return shape

    # -- config --------------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "axis": self.axis, "momentum": self.momentum,
                "epsilon": self.epsilon, "center": self.center, "scale": self.scale,
                **{key: initializer_config(getattr(self, key)) for key in _INITIALIZERS},
                "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
                "gamma_constraint": None, "synchronized": self.synchronized,
                "renorm": self.renorm, "renorm_clipping": self.renorm_clipping,
                "renorm_momentum": self.renorm_momentum}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Any:
        config = dict(config)
        for key in _INITIALIZERS:
            if key in config:
                config[key] = initializer_from(config[key])
        return super().from_config(config)


class SyncBatchNormalization(BatchNormalization):
    """``tf.keras.layers.experimental.SyncBatchNormalization(axis=-1, momentum=0.99,
    epsilon=0.001, ...)``: ``BatchNormalization(synchronized=True)`` by its Keras 2 name."""

    def __init__(self, axis: int = -1, momentum: float = 0.99, epsilon: float = 1e-3,
                 center: bool = True, scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", moving_mean_initializer: Any = "zeros",
                 moving_variance_initializer: Any = "ones", beta_regularizer: Any = None,
                 gamma_regularizer: Any = None, beta_constraint: Any = None,
                 gamma_constraint: Any = None, **kwargs: Any) -> None:
        for key in ("synchronized", "renorm", "renorm_clipping", "renorm_momentum"):
            kwargs.pop(key, None)   # fixed here (a config from get_config carries them)
        super().__init__(axis, momentum, epsilon, center, scale, beta_initializer,
                         gamma_initializer, moving_mean_initializer,
                         moving_variance_initializer, beta_regularizer, gamma_regularizer,
                         beta_constraint, gamma_constraint, synchronized=True, **kwargs)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("synchronized", "renorm", "renorm_clipping", "renorm_momentum"):
            config.pop(key)
        return config
