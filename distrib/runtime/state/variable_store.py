"""The variables a task owns, by shared name: they outlive steps and sessions.

Copy on write: reading a variable hands out the stored array itself, and an
in-place update first copies the array when anyone else still holds it (a
step's pending consumer, a view, a fetched result in this process, a send in
progress, a co-located peer reading it from shared memory), judged by
CPython's reference counts. A read is therefore always a snapshot, and a
training step whose reads finish before its updates copies nothing (the
executor orders a step's updates after its reads).

Shared memory: a variable of 64 KiB or more is stored in this process's
shared-memory arena (:mod:`transports.shm`), so a worker on the same host
reads it without any copy; while that worker holds a version, an update
writes the next version into another arena buffer (:meth:`update_target`).
"""
from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

from distrib.errors import UninitializedVariableError
from distrib.runtime.state.resources import ResourceStore
from transports.shm import ARENA, shared_empty

__all__ = ["VariableStore"]


class VariableStore:
    """The variables a task owns, by shared name. They outlive steps and
    sessions: every client that names a variable sees the same storage.

    A stored array is never changed while anyone else holds it: in-place
    updates go through :meth:`writable`, which copies first when the array is
    shared (copy on write). Readers therefore take the array itself."""

    def __init__(self, task: str = "") -> None:
        self.task = task
        self._values: dict[str, Any] = {}
        self._owned: set[int] = set()   # ids of the stored arrays, see owns()
        self._ids: dict[str, tuple[int, ...]] = {}   # what each variable put in _owned
        # the task's accumulators and queues: they live exactly as long as its variables
        self.resources = ResourceStore(task)
        # GPU updates running off the loop (a first run that may compile its
        # kernel): while any is pending, every GPU update goes behind it on the
        # pool (update_lock), so updates of a variable never overlap
        self.offloop_updates = 0
        self.update_lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def names(self) -> list[str]:
        return sorted(self._values)

    def get(self, name: str, op: str | None = None) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise UninitializedVariableError(
                f"attempting to use uninitialized value {name}: run its initializer "
                "(e.g. dt.global_variables_initializer()) or restore a checkpoint first",
                task=self.task or None, op=op) from None

    def writable(self, name: str, op: str | None = None) -> Any:
        """The variable's array for an in-place update: the stored one when
        nobody else holds it, else a private copy that replaces it."""
        cur, out = self.update_target(name, op)
        if out is not cur:
            np.copyto(out, cur)
        return out

    def update_target(self, name: str, op: str | None = None) -> tuple[Any, Any]:
        """``(current, out)`` for an update written as ``out = f(current, ...)``:
        ``out`` is ``current`` when nobody else holds it, else an uninitialised
        array that already replaces it in the store (so the new version is
        written once, with no copy of the old one first)."""
        # no local reference to the array while counting: it would count as a holder
        if type(self.get(name, op)) is np.ndarray and _shared(self._values, name):
            old = self._values[name]
            self.set(name, shared_empty(old.shape, old.dtype))
            return old, self._values[name]
        cur = self._values[name]
        return cur, cur

    def owns(self, value: Any) -> bool:
        """Whether ``value`` is (a view of) a stored array, which must be
        copied before it leaves the runtime's hands (a client may write to it)."""
        base = getattr(value, "base", None)
        return id(value if base is None else base) in self._owned

    def set(self, name: str, value: Any) -> None:
        # views of an arena array point at its buffer's root, not at the array
        ids = (id(value), id(value.base)) if ARENA.lookup(value) is not None else (id(value),)
        old = self._ids.get(name)
        self._owned.update(ids)
        # replaced in one step: a reader on another thread (the loop, while a GPU
        # update on the kernel pool replaces the array) never finds it missing
        self._values[name] = value
        self._ids[name] = ids
        if old is not None:
            self._owned.difference_update(set(old) - set(ids))

    def delete(self, name: str) -> None:
        if self._values.pop(name, None) is not None:
            self._owned.difference_update(self._ids.pop(name))

    def clear(self) -> None:
        self._values.clear()
        self._ids.clear()
        self._owned.clear()
        self.resources.clear()


def _refs(values: dict[str, Any], name: str) -> int:
    value = values[name]
    return sys.getrefcount(value)


def _calibrate_refs() -> int:
    # The count an unshared stored array shows through the same code path, on
    # this interpreter (the dict's reference, the local, the call's argument).
    values = {"x": np.zeros(1)}
    return _refs(values, "x")


_UNSHARED_REFS = _calibrate_refs()


def _shared(values: dict[str, Any], name: str) -> bool:
    # CPython counts every holder: a step's pending consumer, a view, a
    # fetched result in this process, a transport still sending it or a peer
    # reading it (a shared-memory loan holds the array). Views of an arena
    # array point at its buffer, which the arena counts.
    return _refs(values, name) > _UNSHARED_REFS or ARENA.holders(values[name]) > 0
