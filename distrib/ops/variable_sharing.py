"""The store behind ``dt.get_variable``: one per graph, the variables it made by full name.

``SharedVariableStore.get_variable`` is TF1's ``_VariableStore.get_variable``:
it returns the variable of a full name or makes it, and keeps TF1's checks
and their ``ValueError`` texts, which ported programs test for: a name made
before without reuse ("Variable foo/w already exists, disallowed. Did you
mean to set reuse=True ..."), a missing name with ``reuse=True`` ("... does
not exist, or was not created with tf.get_variable() ..."), a shape or dtype
that differs from the stored variable's. ``reuse=None`` or ``AUTO_REUSE``
creates or returns. The scopes (``variable_scope``) decide the full name and
the reuse flag; this module only keeps the variables.

What it makes is a plain ``dt.Variable`` (in a strategy's scope, the
strategy's own variable), built with the name scope reset to the root, so
it lives on its task under its full name like every other variable. The
default initializer is TF1's (Glorot uniform for floats, zeros for
integers, bools and strings); a regularizer's loss is built beside the
variable and added to ``REGULARIZATION_LOSSES``.
"""
from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from distrib.errors import InvalidArgumentError, UnimplementedError
from distrib.framework import dtypes
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import init_ops, partitioned_variables
from distrib.ops.variables import Variable, VariableAggregation, VariableSynchronization

__all__ = ["SharedVariableStore", "VariableScopeError", "REGULARIZATION_LOSSES"]

# TF's GraphKeys.REGULARIZATION_LOSSES
REGULARIZATION_LOSSES = "regularization_losses"


class VariableScopeError(InvalidArgumentError, ValueError):
    """A ``get_variable``/``variable_scope`` rule broken (reuse, shape, dtype). It is
    also a ``ValueError``, which is what TF1 raises, so ported ``except`` code works."""


class SharedVariableStore:
    """The variables ``get_variable`` made in one graph, by full name."""

    def __init__(self) -> None:
        self.vars: dict[str, Any] = {}
        self._made_at: dict[str, list[traceback.FrameSummary]] = {}

    def get_variable(self, name: str, shape: Any = None, dtype: Any = dtypes.float32,
                     initializer: Any = None, regularizer: Callable | None = None,
                     reuse: Any = None, trainable: bool | None = None,
                     collections: Sequence[str] | None = None, caching_device: Any = None,
                     partitioner: Callable | None = None, validate_shape: bool = True,
                     use_resource: Any = None, custom_getter: Callable | None = None,
                     constraint: Callable | None = None,
                     synchronization: Any = VariableSynchronization.AUTO,
                     aggregation: Any = VariableAggregation.NONE) -> Any:
        if custom_getter is not None and not callable(custom_getter):
            raise VariableScopeError(f"Passed a custom_getter which is not callable: "
                                     f"{custom_getter}")
        if synchronization is None:
            synchronization = VariableSynchronization.AUTO
        if trainable is None:
            trainable = synchronization != VariableSynchronization.ON_READ
        kwargs = {"name": name, "shape": shape, "dtype": dtype, "initializer": initializer,
                  "regularizer": regularizer, "reuse": reuse, "trainable": trainable,
                  "collections": collections, "caching_device": caching_device,
                  "partitioner": partitioner, "validate_shape": validate_shape,
                  "use_resource": use_resource, "constraint": constraint,
                  "synchronization": synchronization,
                  "aggregation": aggregation or VariableAggregation.NONE}
        if custom_getter is not None:
            return custom_getter(self._true_getter, **kwargs)
        return self._true_getter(**kwargs)

    def _true_getter(self, name: str, shape: Any = None, dtype: Any = dtypes.float32,
                     initializer: Any = None, regularizer: Callable | None = None,
                     reuse: Any = None, trainable: bool | None = None,
                     collections: Sequence[str] | None = None, caching_device: Any = None,
                     partitioner: Callable | None = None, validate_shape: bool = True,
                     use_resource: Any = None, constraint: Callable | None = None,
                     synchronization: Any = VariableSynchronization.AUTO,
                     aggregation: Any = VariableAggregation.NONE) -> Any:
        is_scalar = shape is not None and isinstance(shape, Sequence) and not shape
        if partitioner is not None and not is_scalar:   # shards: <name>/part_<i>
            if name in self.vars:
                return self._existing(name, TensorShape(shape), dtypes.as_dtype(dtype), reuse)
            var = partitioned_variables.create_partitioned_variable(
                name, shape, dtype, initializer, partitioner, lambda part, dims, init:
                self._get_single_variable(part, None if init is not None and not callable(init)
                                          else dims, dtype, init, regularizer, reuse, trainable,
                                          collections, caching_device, validate_shape,
                                          synchronization, aggregation))
            self.vars[name] = var
            return var
        if constraint is not None:
            raise UnimplementedError(
                f"get_variable({name!r}, constraint=...): the dt.train optimizers do not "
                "apply constraints; assign the projected value after each step yourself")
        if trainable is None:
            trainable = synchronization != VariableSynchronization.ON_READ
        return self._get_single_variable(
            name, shape, dtype, initializer, regularizer, reuse, trainable, collections,
            caching_device, validate_shape, synchronization, aggregation)

    def _get_single_variable(self, name: str, shape: Any, dtype: Any, initializer: Any,
                             regularizer: Callable | None, reuse: Any, trainable: bool,
                             collections: Sequence[str] | None, caching_device: Any,
                             validate_shape: bool, synchronization: Any,
                             aggregation: Any) -> Any:
        from_value = initializer is not None and not callable(initializer)
        if shape is not None and from_value:
            raise VariableScopeError("If initializer is a constant, do not specify shape.")
        dtype = dtypes.as_dtype(dtype)
        shape = TensorShape(shape)
        if name in self.vars:
            return self._existing(name, shape, dtype, reuse)
        if reuse is True:
            raise VariableScopeError(
                f"Variable {name} does not exist, or was not created with tf.get_variable(). "
                "Did you mean to set reuse=tf.AUTO_REUSE in VarScope? (dt.get_variable; "
                "dt.AUTO_REUSE creates it when it is missing)")
        if initializer is None:
            initializer, from_value = _default_initializer(name, dtype), False
        init_val, var_dtype = _initial_value(initializer, from_value, shape, dtype)
        var = Variable(**_variable_kwargs(init_val, name, trainable, collections,
                                          caching_device, var_dtype, validate_shape,
                                          synchronization, aggregation))
        self.vars[name] = var
        self._made_at[name] = _user_frames()
        if regularizer:
            _regularize(var, name, regularizer)
        return var

    def _existing(self, name: str, shape: TensorShape, dtype: dtypes.DType, reuse: Any) -> Any:
        found = self.vars[name]
        if reuse is False:
            where = "".join(traceback.format_list(self._made_at.get(name, [])))
            raise VariableScopeError(
                f"Variable {name} already exists, disallowed. Did you mean to set reuse=True "
                "or reuse=tf.AUTO_REUSE in VarScope? (dt.variable_scope(..., reuse=True) or "
                "dt.AUTO_REUSE) Originally defined at:\n\n" + where)
        if not shape.is_compatible_with(found.shape):
            raise VariableScopeError(f"Trying to share variable {name}, but specified shape "
                                     f"{shape} and found shape {found.shape}.")
        if dtype != found.dtype:
            raise VariableScopeError(f"Trying to share variable {name}, but specified dtype "
                                     f"{dtype.name} and found dtype {found.dtype.name}.")
        return found


def _default_initializer(name: str, dtype: dtypes.DType) -> Any:
    """TF1's: Glorot uniform for floats, zeros for integers, bools and strings."""
    if dtype.is_floating:
        return init_ops.GlorotUniform()
    if dtype.is_integer or dtype.is_bool or dtype == dtypes.string:
        return init_ops.Zeros()
    raise VariableScopeError(f"An initializer for variable {name} of {dtype.name} is required")


def _initial_value(initializer: Any, from_value: bool, shape: TensorShape,
                   dtype: dtypes.DType) -> tuple[Any, dtypes.DType | None]:
    """(what dt.Variable takes as initial_value, the dtype to give it)."""
    if from_value:
        return initializer, None
    if inspect.isclass(initializer):
        initializer = initializer()
    if shape.is_fully_defined():
        dims = shape.as_list()
        if _takes(initializer, "partition_info"):
            return (lambda: initializer(dims, dtype=dtype, partition_info=None)), dtype
        return (lambda: initializer(dims, dtype=dtype)), dtype
    if _needs_no_arguments(initializer):
        return initializer, None
    raise VariableScopeError(
        "The initializer passed is not valid. It should be a callable with no arguments and "
        "the shape should not be provided or an instance of `tf.keras.initializers.*' and "
        f"`shape` should be fully defined (got shape {shape}).")


def _takes(fn: Any, arg: str) -> bool:
    try:
        return arg in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _needs_no_arguments(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not inspect.Parameter.empty
               or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def _variable_kwargs(init_val: Any, name: str, trainable: bool,
                     collections: Sequence[str] | None, caching_device: Any,
                     dtype: dtypes.DType | None, validate_shape: bool, synchronization: Any,
                     aggregation: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"initial_value": init_val, "trainable": trainable,
                              "collections": collections, "validate_shape": validate_shape,
                              "name": name, "dtype": dtype}
    if caching_device is not None:
        kwargs["caching_device"] = caching_device
    # (the strategies read these two; a plain variable ignores them)
    if synchronization != VariableSynchronization.AUTO:
        kwargs["synchronization"] = synchronization
    if aggregation != VariableAggregation.NONE:
        kwargs["aggregation"] = aggregation
    return kwargs


def _regularize(var: Any, name: str, regularizer: Callable) -> None:
    """``regularizer(var)`` beside ``var``, in REGULARIZATION_LOSSES when not None."""
    graph = var.graph
    with graph.as_default(), graph.colocate_with(var), graph.name_scope(name + "/Regularizer/"):
        loss = regularizer(var)
    if loss is not None:
        graph.add_to_collection(REGULARIZATION_LOSSES, loss)


def _user_frames() -> list[traceback.FrameSummary]:
    """The last few frames of the caller outside distrib (TF's "Originally defined at")."""
    frames = [f for f in traceback.extract_stack()[:-3] if "/distrib/" not in f.filename]
    return frames[-5:]
