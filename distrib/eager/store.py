"""The values of the variables made eagerly, in this process, by shared name.

An eager variable (``distrib.ops.eager_variables``) is the same
``VariableV2`` shared name a graph variable is, but its value lives here
instead of on a task's server, and its ops (read, ``Assign``,
``AssignAdd``, an optimizer's ``Apply*``) run against this store at once.

Copy on write, as the task's ``VariableStore``: a read hands out the stored
array itself (no copy), and an update first copies it when anyone still
holds it (an eager tensor read earlier, a view of one), judged by CPython's
reference counts, so an eager tensor never changes after it was made and a
training step that drops its reads before updating copies nothing. Queues
and accumulators (the catalogue's resource ops) stay graph ops.
"""
from __future__ import annotations

import itertools
import sys
import threading
from typing import Any

import numpy as np

import kernels
from distrib.errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError, UnimplementedError
from distrib.framework.op_def import find_op_def

__all__ = ["EagerStore"]


def _refs(values: dict[str, Any], name: str) -> int:
    return sys.getrefcount(values[name])


_UNSHARED = _refs({"x": np.zeros(1)}, "x")
_WRITES = itertools.count(1)   # versions: unique in the process, so a reused name never matches


class EagerStore:
    """The eager variables' arrays by shared name; runs their stateful ops."""

    def __init__(self) -> None:
        self._values: dict[str, np.ndarray] = {}
        self._versions: dict[str, int] = {}   # bumped by every write (a dt.function's sync)
        self._lock = threading.Lock()   # an update is atomic with respect to the others

    def version(self, name: str) -> int:
        """How many writes ``name`` has seen (``distrib.distribute.functions.eager_sync``
        pushes a value to a function's twin only when this moved)."""
        return self._versions.get(name, 0)

    def take(self, name: str, value: np.ndarray) -> int:
        """Set ``name`` to ``value`` (a dt.function's result, not copied); its new version."""
        with self._lock:
            if name not in self._values:
                return -1   # collected meanwhile
            old = self._values[name]
            self._values[name] = np.asarray(value, dtype=old.dtype)
            version = self._versions[name] = next(_WRITES)
            return version

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def unique(self, name: str) -> str:
        """``name``, suffixed ``_1``, ``_2``... while a live variable holds it (eager name
        scopes mark nothing used, so two ``dt.Variable(1.0)`` both ask for ``Variable``)."""
        with self._lock:
            found, i = name, 0
            while found in self._values:
                i += 1
                found = f"{name}_{i}"
            self._values[found] = np.zeros(())   # reserved until the first assign
            return found

    def delete(self, name: str) -> None:
        """Forget a variable (its object was collected)."""
        self._values.pop(name, None)
        self._versions.pop(name, None)

    def read(self, name: str) -> np.ndarray:
        try:
            return self._values[name]
        except KeyError:
            raise FailedPreconditionError(
                f"variable {name!r} has no value in this process: a variable a strategy's "
                "scope placed on a task is read with `await v.read_value()` and updated "
                "inside a dt.function (or the strategy's run)") from None

    def _writable(self, name: str) -> np.ndarray:
        self.read(name)   # (a typed error when it has no value here)
        # counted before any local name binds the array: a local `cur` is a holder too,
        # and every update copied
        if _refs(self._values, name) > _UNSHARED or not self._values[name].flags.writeable:
            self._values[name] = np.array(self._values[name])   # someone holds it: copy
        return self._values[name]

    def run(self, op_type: str, args: list[Any], attrs: dict[str, Any]) -> list[Any]:
        """Run stateful ``op_type`` on ``args`` (host arrays); its outputs."""
        name = attrs.get("var")
        with self._lock:
            if op_type == "VariableV2":
                return [self.read(name)]
            if op_type == "IsVariableInitialized":
                return [np.array(name in self._values)]
            self._versions[name] = next(_WRITES)
            if op_type == "Assign":
                return [self._assign(name, args[0], attrs)]
            if op_type in ("AssignAdd", "AssignSub"):
                cur = self._writable(name)
                delta = np.asarray(args[0], dtype=cur.dtype)
                (np.add if op_type == "AssignAdd" else np.subtract)(cur, delta, out=cur)
                return [cur]
            if op_type == "CountUpTo":
                cur = self.read(name)
                if int(cur) >= int(attrs["limit"]):
                    raise OutOfRangeError(f"reached limit of {attrs['limit']} (variable {name})")
                self._values[name] = np.array(cur + 1, dtype=cur.dtype)
                return [np.array(cur)]
            entry = find_op_def(op_type)
            if entry is not None and entry.is_update:
                for k in entry.slot_attrs:
                    self._versions[attrs[k]] = next(_WRITES)
                var = self._writable(name)
                slots = [self._writable(attrs[k]) for k in entry.slot_attrs]
                kernels.get_kernel(op_type, kernels.CPU)([var, *slots, *args], attrs)
                return [var]
        raise UnimplementedError(
            f"{op_type} does not run eagerly (queues and accumulators are graph ops): build "
            "it in a dt.function or inside `with dt.Graph().as_default():`")

    def _assign(self, name: str, value: Any, attrs: dict[str, Any]) -> np.ndarray:
        dtype = attrs.get("dtype")
        src = np.asarray(value, dtype=dtype) if dtype else np.asarray(value)
        old = self._values.get(name)
        if old is not None and attrs.get("validate_shape", True) and old.shape != src.shape:
            raise InvalidArgumentError(
                f"cannot assign a value of shape {list(src.shape)} to variable {name} of shape "
                f"{list(old.shape)}; pass validate_shape=False to change its shape")
        keep = old is not None and attrs.get("validate_shape", True) and not dtype
        arr = self._values[name] = np.array(src, dtype=old.dtype if keep else None)
        return arr
