"""TF1's variable sharing: ``dt.get_variable``, ``dt.variable_scope``, ``dt.AUTO_REUSE``.

``get_variable(name, shape, ...)`` prefixes ``name`` with the current variable
scope and looks the full name up in the graph's variable store: a scope that
does not reuse refuses a name it already holds, a reusing one (``reuse=True``,
or after ``scope.reuse_variables()``) refuses a name it does not hold, and
``AUTO_REUSE`` creates or returns. The errors are TF's ``ValueError`` texts
("Variable foo/w already exists, disallowed. Did you mean to set reuse=True
..."), so ported code that tests for them keeps working. What the store
holds are plain ``dt.Variable`` objects (in a strategy's scope, the
strategy's own variable), so they live on their task under their name as
every other variable does, and a Saver saves them by that name.

The rules are TF1's, kept whole because TF1 programs depend on them:

* **Names come from the variable scope only.** A variable is made with the
  name scope reset to the root, so ``foo/w`` stays ``foo/w`` inside a
  re-entered ``foo`` whose ops are named ``foo_1/...``.
* **A variable scope opens a name scope** of the same name (made unique as
  name scopes are), or, entered with a captured ``VariableScope``, of the
  last part of its name; ``default_name`` scopes are made unique per parent
  (``default``, ``default_1``) and their counts restart when the parent closes.
* **Reuse is inherited** by sub-scopes; ``reuse=False`` means "inherit" (TF
  1.1+), so a reusing scope cannot be left by a sub-scope.
* **The store is per graph, the current scope per thread**
  (:mod:`distrib.ops.variable_sharing` keeps the variables): both live in the
  graph's collections (TF's ``__variable_store`` and ``__varscope``), the
  scope state in a thread-local object, so two threads building the same
  graph do not see each other's scopes. A replica of ``strategy.run`` after
  the first reuses the first replica's variables (TF's replica threads enter
  their scope with ``reuse=True``).

Defaults are TF1's: ``dtype`` float32, ``trainable`` True (False with
``synchronization=ON_READ``), and the initializer is the scope's, else
``glorot_uniform_initializer()`` for floats and zeros for integers and bools.
"""
from __future__ import annotations

import copy
import enum
import functools
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from distrib.framework import distribution_context, dtypes
from distrib.framework.graph import GraphKeys, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.variable_sharing import REGULARIZATION_LOSSES, SharedVariableStore, VariableScopeError
from distrib.ops.variables import VariableAggregation, VariableSynchronization

__all__ = ["AUTO_REUSE", "VariableScope", "VariableScopeError", "get_variable_scope",
           "get_variable", "get_local_variable", "variable_scope", "no_regularizer",
           "REGULARIZATION_LOSSES"]

_VARSTORE_KEY = "__variable_store"
_VARSCOPESTORE_KEY = "__varscope"


class _ReuseMode(enum.Enum):
    """How ``get_variable`` treats a name: ``AUTO_REUSE`` creates it or returns it."""
    AUTO_REUSE = 1


AUTO_REUSE = _ReuseMode.AUTO_REUSE


def no_regularizer(_: Any) -> None:
    """A regularizer that adds nothing (``dt.no_regularizer``): turns a scope's off."""
    return None


class VariableScope:
    """The defaults ``get_variable`` takes inside a ``variable_scope`` (TF1's
    ``tf.VariableScope``): its name (the prefix), reuse, initializer,
    regularizer, dtype, caching device, partitioner, custom getter."""

    def __init__(self, reuse: Any, name: str = "", initializer: Any = None,
                 regularizer: Callable | None = None, caching_device: Any = None,
                 partitioner: Callable | None = None, custom_getter: Callable | None = None,
                 name_scope: str = "", dtype: Any = dtypes.float32, use_resource: Any = None,
                 constraint: Callable | None = None) -> None:
        self._name, self._reuse, self._name_scope = name, reuse, name_scope
        self._initializer, self._regularizer = initializer, regularizer
        self._caching_device, self._partitioner = caching_device, partitioner
        self._custom_getter, self._dtype = custom_getter, dtype
        self._use_resource, self._constraint = use_resource, constraint

    name = property(lambda self: self._name)
    original_name_scope = property(lambda self: self._name_scope)
    reuse = property(lambda self: self._reuse)
    initializer = property(lambda self: self._initializer)
    dtype = property(lambda self: self._dtype)
    use_resource = property(lambda self: self._use_resource)
    regularizer = property(lambda self: self._regularizer)
    caching_device = property(lambda self: self._caching_device)
    partitioner = property(lambda self: self._partitioner)
    custom_getter = property(lambda self: self._custom_getter)
    constraint = property(lambda self: self._constraint)

    def reuse_variables(self) -> None:
        """Reuse variables in this scope (and the sub-scopes opened after this call)."""
        self._reuse = True

    def set_initializer(self, initializer: Any) -> None:
        self._initializer = initializer

    def set_dtype(self, dtype: Any) -> None:
        self._dtype = dtype

    def set_use_resource(self, use_resource: Any) -> None:
        self._use_resource = use_resource

    def set_regularizer(self, regularizer: Callable | None) -> None:
        self._regularizer = regularizer

    def set_caching_device(self, caching_device: Any) -> None:
        self._caching_device = caching_device

    def set_partitioner(self, partitioner: Callable | None) -> None:
        self._partitioner = partitioner

    def set_custom_getter(self, custom_getter: Callable | None) -> None:
        self._custom_getter = custom_getter

    def get_collection(self, name: str) -> list[Any]:
        """This scope's members of collection ``name``."""
        return get_default_graph().get_collection(name, self._name + "/" if self._name else "")

    def trainable_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.TRAINABLE_VARIABLES)

    def global_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.GLOBAL_VARIABLES)

    def local_variables(self) -> list[Any]:
        return self.get_collection(GraphKeys.LOCAL_VARIABLES)

    def get_variable(self, var_store: SharedVariableStore, name: str, shape: Any = None,
                     dtype: Any = None, initializer: Any = None,
                     regularizer: Callable | None = None, reuse: Any = None,
                     trainable: bool | None = None, collections: Sequence[str] | None = None,
                     caching_device: Any = None, partitioner: Callable | None = None,
                     validate_shape: bool = True, use_resource: Any = None,
                     custom_getter: Callable | None = None, constraint: Callable | None = None,
                     synchronization: Any = VariableSynchronization.AUTO,
                     aggregation: Any = VariableAggregation.NONE) -> Any:
        """The variable ``<scope>/<name>`` of ``var_store``, with this scope's defaults."""
        regularizer = self._regularizer if regularizer is None else regularizer
        caching_device = self._caching_device if caching_device is None else caching_device
        partitioner = self._partitioner if partitioner is None else partitioner
        custom_getter = self._custom_getter if custom_getter is None else custom_getter
        reuse = self._reuse if reuse is None else reuse
        if _later_replica():
            reuse = True   # TF: replicas after the first enter their scope reusing
        full_name = self._name + "/" + name if self._name else name
        graph = get_default_graph()
        with graph.name_scope(None):   # names come from the variable scope only
            if dtype is not None and initializer is not None and not callable(initializer):
                init_dtype = ops.convert_to_tensor(initializer).dtype
                if init_dtype != dtypes.as_dtype(dtype):
                    raise VariableScopeError(f"Initializer type '{init_dtype.name}' and "
                                             f"explicit dtype '{dtypes.as_dtype(dtype).name}' "
                                             "don't match.")
            initializer = self._initializer if initializer is None else initializer
            constraint = self._constraint if constraint is None else constraint
            dtype = self._dtype if dtype is None else dtype
            return var_store.get_variable(
                full_name, shape=shape, dtype=dtype, initializer=initializer,
                regularizer=regularizer, reuse=reuse, trainable=trainable,
                collections=collections, caching_device=caching_device,
                partitioner=partitioner, validate_shape=validate_shape,
                use_resource=use_resource, custom_getter=custom_getter,
                constraint=constraint, synchronization=synchronization,
                aggregation=aggregation)

    def __repr__(self) -> str:
        return f"<dt.VariableScope {self._name!r} reuse={self._reuse}>"


def _later_replica() -> bool:
    replica = distribution_context.replica_context()
    return replica is not None and (getattr(replica, "local_index", 0) or 0) > 0


class _VariableScopeStore(threading.local):
    """This thread's current scope and the counts behind ``default_name``."""

    def __init__(self) -> None:
        super().__init__()
        self.current_scope = VariableScope(False)
        self.variable_scopes_count: dict[str, int] = {}

    def open_variable_scope(self, scope_name: str) -> None:
        self.variable_scopes_count[scope_name] = self.variable_scopes_count.get(scope_name, 0) + 1

    def close_variable_subscopes(self, scope_name: str | None) -> None:
        for k in list(self.variable_scopes_count):
            if scope_name is None or k.startswith(scope_name + "/"):
                self.variable_scopes_count[k] = 0

    def variable_scope_count(self, scope_name: str) -> int:
        return self.variable_scopes_count.get(scope_name, 0)


def _graph_singleton(key: str, make: Callable[[], Any]) -> Any:
    # get_collection_ref: reading a scope must not fail on a finalized graph
    found = get_default_graph().get_collection_ref(key)
    if not found:
        found.append(make())
    return found[0]


def get_variable_scope_store() -> _VariableScopeStore:
    """The default graph's scope state (this thread's view of it)."""
    return _graph_singleton(_VARSCOPESTORE_KEY, _VariableScopeStore)


def get_variable_scope() -> VariableScope:
    """The current variable scope (``dt.get_variable_scope()``)."""
    return get_variable_scope_store().current_scope


def _get_default_variable_store() -> SharedVariableStore:
    return _graph_singleton(_VARSTORE_KEY, SharedVariableStore)


def get_variable(name: str, shape: Any = None, dtype: Any = None, initializer: Any = None,
                 regularizer: Callable | None = None, trainable: bool | None = None,
                 collections: Sequence[str] | None = None, caching_device: Any = None,
                 partitioner: Callable | None = None, validate_shape: bool = True,
                 use_resource: Any = None, custom_getter: Callable | None = None,
                 constraint: Callable | None = None,
                 synchronization: Any = VariableSynchronization.AUTO,
                 aggregation: Any = VariableAggregation.NONE) -> Any:
    """The variable ``<current scope>/<name>``: made, or returned when the scope
    reuses (see the module header). ``initializer`` may be an initializer object
    or class, a callable ``(shape, dtype)``, or a value (then give no shape)."""
    return get_variable_scope().get_variable(
        _get_default_variable_store(), name, shape=shape, dtype=dtype,
        initializer=initializer, regularizer=regularizer, trainable=trainable,
        collections=collections, caching_device=caching_device, partitioner=partitioner,
        validate_shape=validate_shape, use_resource=use_resource,
        custom_getter=custom_getter, constraint=constraint, synchronization=synchronization,
        aggregation=aggregation)


def get_local_variable(name: str, shape: Any = None, dtype: Any = None,
                       initializer: Any = None, regularizer: Callable | None = None,
                       trainable: bool = False, collections: Sequence[str] | None = None,
                       caching_device: Any = None, partitioner: Callable | None = None,
                       validate_shape: bool = True, use_resource: Any = None,
                       custom_getter: Callable | None = None,
                       constraint: Callable | None = None,
                       synchronization: Any = VariableSynchronization.AUTO,
                       aggregation: Any = VariableAggregation.NONE) -> Any:
    """``get_variable`` of a non-trainable variable in LOCAL_VARIABLES."""
    collections = list(collections or []) + [GraphKeys.LOCAL_VARIABLES]
    return get_variable(name, shape=shape, dtype=dtype, initializer=initializer,
                        regularizer=regularizer, trainable=False, collections=collections,
                        caching_device=caching_device, partitioner=partitioner,
                        validate_shape=validate_shape, use_resource=use_resource,
                        custom_getter=custom_getter, constraint=constraint,
                        synchronization=synchronization, aggregation=aggregation)


class _PureVariableScope:
    """The variable-scope half of ``variable_scope`` (no name scope): TF's
    ``_pure_variable_scope``."""

    def __init__(self, name_or_scope: str | VariableScope, reuse: Any = None,
                 old_name_scope: str | None = None, constraint: Callable | None = None,
                 **defaults: Any) -> None:
        self._name_or_scope, self._reuse = name_or_scope, reuse
        self._old_name_scope, self._defaults = old_name_scope, defaults
        self._constraint = constraint
        self._store = get_variable_scope_store()
        self._last: VariableScope | None = None

    def __enter__(self) -> VariableScope:
        store, target = self._store, self._name_or_scope
        self._old = old = store.current_scope
        if isinstance(target, VariableScope):
            self._new_name = target.name
            scope = _copy_scope(target, target.reuse if not self._reuse else self._reuse,
                                target.name, target.original_name_scope, self._constraint)
            store.open_variable_scope(self._new_name)
            self._old_subscopes = copy.copy(store.variable_scopes_count)
        else:
            self._new_name = old.name + "/" + target if old.name else target
            name_scope = target if self._old_name_scope is None else self._old_name_scope
            scope = _copy_scope(old, self._reuse or old.reuse, self._new_name, name_scope,
                                self._constraint)
        for key, value in self._defaults.items():
            if value is not None and key == "custom_getter":
                scope.set_custom_getter(_wrap_custom_getter(value, scope.custom_getter))
            elif value is not None:
                getattr(scope, "set_" + key)(value)
        if not isinstance(target, VariableScope):
            store.open_variable_scope(self._new_name)
        store.current_scope = self._last = scope
        return scope

    def __exit__(self, *exc: Any) -> None:
        store = self._store
        if store.current_scope is not self._last:
            raise RuntimeError("Improper nesting of variable_scope.")
        if isinstance(self._name_or_scope, VariableScope):
            store.variable_scopes_count = self._old_subscopes
        else:
            store.close_variable_subscopes(self._new_name)
        store.current_scope = self._old


def _copy_scope(base: VariableScope, reuse: Any, name: str, name_scope: str,
                constraint: Callable | None) -> VariableScope:
    return VariableScope(reuse, name=name, initializer=base.initializer,
                         regularizer=base.regularizer, caching_device=base.caching_device,
                         partitioner=base.partitioner, custom_getter=base.custom_getter,
                         name_scope=name_scope, dtype=base.dtype, use_resource=base.use_resource,
                         constraint=constraint)


def _wrap_custom_getter(getter: Callable, outer: Callable | None) -> Callable:
    """A scope's custom getter over its parent's: ``getter`` calls ``outer``,
    which calls the true getter (TF's ``_maybe_wrap_custom_getter``)."""
    if outer is None:
        return getter

    def wrapped(true_getter: Callable, *args: Any, **kwargs: Any) -> Any:
        return getter(functools.partial(outer, true_getter), *args, **kwargs)
    return wrapped


def _get_unique_variable_scope(prefix: str) -> str:
    """``prefix``, or ``prefix_N``: a name not yet opened in the current scope."""
    store = get_variable_scope_store()
    current = store.current_scope
    name = current.name + "/" + prefix if current.name else prefix
    if store.variable_scope_count(name) == 0:
        return prefix
    idx = 1
    while store.variable_scope_count(f"{name}_{idx}") > 0:
        idx += 1
    return f"{prefix}_{idx}"


class variable_scope:  # noqa: N801 - TF's name (a class, as TF's is)
    """``with dt.variable_scope(name_or_scope, default_name=None, values=None,
    initializer=None, regularizer=None, caching_device=None, partitioner=None,
    custom_getter=None, reuse=None, dtype=None, use_resource=None,
    constraint=None, auxiliary_name_scope=True) as scope``: a name scope and a
    variable scope (see the module header)."""

    def __init__(self, name_or_scope: str | VariableScope | None, default_name: str | None = None,
                 values: Sequence[Any] | None = None, initializer: Any = None,
                 regularizer: Callable | None = None, caching_device: Any = None,
                 partitioner: Callable | None = None, custom_getter: Callable | None = None,
                 reuse: Any = None, dtype: Any = None, use_resource: Any = None,
                 constraint: Callable | None = None, auxiliary_name_scope: bool = True) -> None:
        if default_name is None and name_or_scope is None:
            raise TypeError("If default_name is None then name_or_scope is required")
        if reuse is False:   # TF 1.1+: False means inherit, as None
            reuse = None
        if not (reuse is True or reuse is None or reuse is AUTO_REUSE):
            raise VariableScopeError("The reuse parameter must be True or False or None.")
        if not isinstance(auxiliary_name_scope, bool):
            raise TypeError("The auxiliary_name_scope must be `True` or `False`, while get "
                            f"{auxiliary_name_scope}")
        if name_or_scope is not None and not isinstance(name_or_scope, (VariableScope, str)):
            raise TypeError("VariableScope: name_or_scope must be a string or VariableScope.")
        self._name_or_scope, self._default_name, self._reuse = name_or_scope, default_name, reuse
        self._defaults = {"initializer": initializer, "regularizer": regularizer,
                          "caching_device": caching_device, "partitioner": partitioner,
                          "custom_getter": custom_getter, "dtype": dtype,
                          "use_resource": use_resource}
        self._constraint = constraint
        self._auxiliary_name_scope = auxiliary_name_scope
        self._graph = next((v.graph for v in (values or ()) if hasattr(v, "graph")),
                           None) or get_default_graph()
        self._entered: list[list[AbstractContextManager]] = []

    def __enter__(self) -> VariableScope:
        opened: list[AbstractContextManager] = []
        self._entered.append(opened)
        try:
            _enter(opened, self._graph.as_default())
            return self._enter_scopes(opened)
        except BaseException:
            self._entered.pop()
            _exit_all(opened, None, None, None)
            raise

    def _enter_scopes(self, opened: list[AbstractContextManager]) -> VariableScope:
        graph, target = self._graph, self._name_or_scope
        if target is None and self._reuse:
            raise VariableScopeError("reuse=True cannot be used without a name_or_scope")
        if self._auxiliary_name_scope:
            name_scope = target if isinstance(target, str) else (
                target.name.split("/")[-1] if target is not None else self._default_name)
            scope_name = _enter(opened, graph.name_scope(name_scope)) if name_scope else None
        else:   # re-enter the current name scope
            current = graph.get_name_scope()
            scope_name = _enter(opened, graph.name_scope(current + "/")) if current else ""
        if target is None:
            target = _get_unique_variable_scope(self._default_name or "")
            old_name_scope, reuse = scope_name, None
        else:
            old_name_scope = scope_name if isinstance(target, str) else None
            reuse = self._reuse
        pure = _PureVariableScope(target, reuse=reuse, old_name_scope=old_name_scope,
                                  constraint=self._constraint, **self._defaults)
        return _enter(opened, pure)

    def __exit__(self, *exc: Any) -> None:
        _exit_all(self._entered.pop(), *exc)


def _enter(opened: list[AbstractContextManager], cm: Any) -> Any:
    value = cm.__enter__()
    opened.append(cm)
    return value


def _exit_all(opened: list[AbstractContextManager], *exc: Any) -> None:
    error: BaseException | None = None
    for cm in reversed(opened):
        try:
            cm.__exit__(*exc)
        except BaseException as e:  # keep closing the outer ones, then raise the first
            error = error or e
    opened.clear()
    if error is not None:
        raise error
