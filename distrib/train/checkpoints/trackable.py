"""The checkpoint protocol: how an object takes part in ``dt.train.Checkpoint``.

TF2 checkpoints objects, not names: a checkpoint is the graph of objects
reachable from its root by named edges (``model`` -> ``layer_with_weights-0``
-> ``kernel``), and a value is keyed by its path, so a second program that
builds the same objects restores them whatever its variables are called.
Here an object takes part through a few public methods, looked up by name
(duck typing, so the layers below ``train`` need not import it); each is
optional:

* ``trackable_children() -> {name: object}``: its named dependencies, in a
  stable order (Keras layers, models and optimizers, ``Checkpoint``). Lists,
  tuples and dicts of trackables are trackable too (edges ``"0"``, ``"1"``,
  or the dict's keys).
* A *value* (a variable) has one saved value, whatever its layout:
  ``checkpoint_parts()`` (the plain ``dt.Variable``\\ s read to make it),
  ``checkpoint_join(arrays)`` (those parts' values -> the saved array),
  ``checkpoint_split(array)`` (``[(plain variable, its array)]`` to assign),
  ``dtype`` and ``shape``. A ``dt.Variable`` is itself; a ``MirroredVariable``
  reads its first copy and writes every copy; a ``ShardedVariable`` joins its
  shards along axis 0 and splits a saved value by its own shards' rows, so
  the number of replicas or shards may differ between save and restore.
* An *optimizer* adds slot values per variable:
  ``checkpoint_slot_names()`` and ``checkpoint_slot(variable, slot_name)``
  (a value laid out as ``variable``, :class:`SlotValue`, or None).
* Restore on create (TF's deferred restoration): a restore that finds no
  object yet for a value offers it to the owner, ``defer_restore(name,
  restoration)`` / ``defer_slot_restore(variable, slot_name, restoration)``
  (True: "I will make it from this"); the owner keeps it with :func:`defer`
  and takes it with :func:`deferred_value` when it makes the variable, as its
  initial value. So a Keras layer built after a restore, or an optimizer's
  slots made when the first train step is traced, start from the checkpoint.
  An owner that gains children (a model compiled after a restore) calls
  :func:`children_changed` so that live restores look at it again.

Values move through steps run by a *step runner* (reads and assigns of plain
variables, on the right target, with TF2's first-use initialization): that is
``dt.function``'s business, one layer up: the process runtime
(``distrib.process``) hands its runner to ``distrib.client.step_runner``,
whose names this module re-exports.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from distrib.client.step_runner import StepRunner, register_step_runner, step_runner

__all__ = ["is_value", "is_trackable", "children", "identity", "SlotValue", "MirroredValue",
           "Restoration", "defer", "deferred_value", "forget", "watch", "children_changed",
           "StepRunner", "register_step_runner", "step_runner", "read_values"]


# -- what an object is ---------------------------------------------------------------------

def is_value(obj: Any) -> bool:
    """Whether ``obj`` holds one saved value (a variable of any layout)."""
    return callable(getattr(obj, "checkpoint_parts", None))


def is_trackable(obj: Any) -> bool:
    """Whether ``obj`` can be a node of a checkpoint's object graph."""
    return (is_value(obj) or callable(getattr(obj, "trackable_children", None))
            or isinstance(obj, (list, tuple, dict)))


def children(obj: Any) -> dict[str, Any]:
    """``obj``'s named dependencies that are trackable, in order."""
    if isinstance(obj, (list, tuple)):
        found: dict[str, Any] = {str(i): v for i, v in enumerate(obj)}
    elif isinstance(obj, dict):
        found = {str(k): v for k, v in obj.items()}
    else:
        method = getattr(obj, "trackable_children", None)
        found = dict(method()) if callable(method) else {}
    return {name: child for name, child in found.items() if child is not None
            and is_trackable(child)}


def identity(obj: Any) -> tuple[str, int]:
    """What makes two walks' objects the same object: a value is its first part
    (a slot wrapper is made anew by every walk), anything else itself."""
    if is_value(obj):
        parts = obj.checkpoint_parts()
        if parts:
            return ("value", id(parts[0]))
    return ("object", id(obj))


# -- values laid out over several variables ------------------------------------------------

class SlotValue:
    """An optimizer's slot of ``variable``, laid out as ``variable`` is (one slot
    variable per copy or shard; ``slot_for(part)`` finds each)."""

    def __init__(self, variable: Any, slot_for: Callable[[Any], Any]) -> None:
        self._variable = variable
        self._slot_for = slot_for

    @classmethod
    def of(cls, variable: Any, slot_for: Callable[[Any], Any]) -> SlotValue | None:
        """The slot, or None while ``variable`` has none (not made yet)."""
        parts = variable.checkpoint_parts()
        if not parts or any(slot_for(p) is None for p in parts):
            return None
        return cls(variable, slot_for)

    dtype = property(lambda self: self.checkpoint_parts()[0].dtype)
    shape = property(lambda self: self._variable.shape)

    def checkpoint_parts(self) -> list[Any]:
        return [self._slot_for(p) for p in self._variable.checkpoint_parts()]

    def checkpoint_join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        return self._variable.checkpoint_join(parts)

    def checkpoint_split(self, value: np.ndarray) -> list[tuple[Any, np.ndarray]]:
        out = []
        for part, array in self._variable.checkpoint_split(value):
            slot = self._slot_for(part)
            if slot is not None:
                out.append((slot, array))
        return out

    def __repr__(self) -> str:
        return f"<slot of {self._variable!r}>"


class MirroredValue:
    """One value kept in several equal variables (an optimizer's per-replica
    scalars): saved from the first, restored into all."""

    def __init__(self, copies: Sequence[Any]) -> None:
        self._copies = list(copies)

    dtype = property(lambda self: self._copies[0].dtype)
    shape = property(lambda self: self._copies[0].shape)

    def checkpoint_parts(self) -> list[Any]:
        return self._copies[:1]

    def checkpoint_join(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        return parts[0]

    def checkpoint_split(self, value: np.ndarray) -> list[tuple[Any, np.ndarray]]:
        return [(c, value) for c in self._copies]

    def __repr__(self) -> str:
        return f"<MirroredValue {self._copies[0].name!r} x{len(self._copies)}>"


# -- restore on create ---------------------------------------------------------------------

class Restoration:
    """A checkpoint value waiting for its variable: ``value`` (numpy), ``key``
    (its checkpoint key, for messages); :meth:`taken` tells the restore that
    a variable was made from it."""

    __slots__ = ("value", "key", "_on_taken")

    def __init__(self, value: np.ndarray, key: str,
                 on_taken: Callable[[], None] | None = None) -> None:
        self.value = value
        self.key = key
        self._on_taken = on_taken

    def part(self, value: np.ndarray) -> Restoration:
        """A piece of this value (one shard's rows) that counts as it."""
        return Restoration(value, self.key, self._on_taken)

    def split(self, variable: Any) -> list[tuple[Any, Restoration]]:
        """This value laid out over ``variable``'s plain variables."""
        return [(part, self.part(array)) for part, array in variable.checkpoint_split(self.value)]

    def taken(self) -> None:
        if self._on_taken is not None:
            self._on_taken()


_lock = threading.Lock()   # variables are made in a trace's replica threads too
_deferred: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # owner -> {key: Restoration}


def defer(owner: Any, key: Any, restoration: Restoration) -> None:
    """Keep ``restoration`` for the variable ``owner`` will make under ``key``."""
    with _lock:
        _deferred.setdefault(owner, {})[key] = restoration


def deferred_value(owner: Any, key: Any, keep: bool = False) -> np.ndarray | None:
    """The checkpoint value kept for ``owner``'s ``key`` (None: none), taken:
    the variable made now starts from it. ``keep``: left for the next maker too
    (one variable per replica, each made separately)."""
    with _lock:
        table = _deferred.get(owner)
        found = None if table is None else (table.get(key) if keep else table.pop(key, None))
    if found is None:
        return None
    found.taken()
    return found.value


def forget(owner: Any, key: Any) -> None:
    """Drop what :func:`defer` kept (the object turned up another way)."""
    with _lock:
        table = _deferred.get(owner)
        if table is not None:
            table.pop(key, None)


class _Watcher(Protocol):
    def rematch(self) -> None: ...


_watchers: weakref.WeakSet = weakref.WeakSet()   # live restores


def watch(restore: _Watcher) -> None:
    """Have ``restore.rematch()`` called when an object gains children."""
    with _lock:
        _watchers.add(restore)


def children_changed(owner: Any) -> None:
    """``owner`` gained dependencies (an optimizer compiled in, an attribute of a
    Checkpoint set): live restores match them (and defer what is not made yet)."""
    with _lock:
        live = list(_watchers)
    for restore in live:
        restore.rematch()


# -- the steps that move values ------------------------------------------------------------

async def read_values(runner: StepRunner, values: Sequence[Any], strategy: Any = None,
                      bump: Any = None) -> list[np.ndarray]:
    """The saved form of each value object in ``values``, read in one step per graph."""
    parts = [value.checkpoint_parts() for value in values]
    flat: list[Any] = []
    where: dict[int, int] = {}
    for group in parts:
        for var in group:
            if id(var) not in where:
                where[id(var)] = len(flat)
                flat.append(var)
    arrays = await runner.read(flat, strategy=strategy, bump=bump)
    return [value.checkpoint_join([np.asarray(arrays[where[id(v)]]) for v in group])
            for value, group in zip(values, parts)]


