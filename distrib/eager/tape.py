"""The eager tape: the ops a ``dt.GradientTape`` saw run, and their reverse pass.

With eager values on, a ``GradientTape`` (``distrib.ops.backprop``) records
each op the eager runner runs on its thread while it records
(:class:`EagerTape`), and ``tape.gradient`` walks them backwards, calling
each op type's gradient from the op catalogue, the same functions
``dt.gradients`` uses for a graph. Those functions build their ops with the
ordinary builders, which run eagerly too, so an eager gradient has the
graph path's numbers by construction (TF's eager backprop works the same
way). As in TF:

* a variable is watched when a recording tape reads it (trainable ones,
  with ``watch_accessed_variables``), a tensor when ``tape.watch`` names
  it; a source the tape did not watch gets ``None``;
* only the ops on a path from a watched value to the target run their
  gradient (an op beside the path, a label's ``Cast``, needs none);
* gradients that reach one value along several paths are added.

The gradient's own ops are not recorded on the tape that computes them; an
outer tape records them (a second derivative).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from distrib.eager import context
from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework.op_def import find_op_def

__all__ = ["EagerTape", "record", "recording_tapes"]


class _Tapes(threading.local):
    def __init__(self) -> None:
        self.active: list[EagerTape] = []


_tapes = _Tapes()


def recording_tapes() -> list[EagerTape]:
    """The tapes recording on this thread, innermost last."""
    return _tapes.active


def record(op: Any) -> None:
    """Note ``op`` (an eager op that just ran) on every tape recording on this thread."""
    for t in _tapes.active:
        t.note(op)


class EagerTape:
    """What one ``GradientTape`` recorded eagerly: ops in run order, watched values."""

    def __init__(self, watch_accessed_variables: bool = True) -> None:
        self.ops: list[Any] = []
        self.watched: dict[int, Any] = {}   # id -> watched tensor (kept alive here)
        self.variables: dict[str, Any] = {}  # shared name -> variable watched
        self._watch_accessed = watch_accessed_variables

    # -- recording ------------------------------------------------------------------
    def start(self) -> None:
        _tapes.active.append(self)
        context.count_recording(1)

    def stop(self) -> None:
        if self in _tapes.active:
            _tapes.active.remove(self)
            context.count_recording(-1)

    def note(self, op: Any) -> None:
        self.ops.append(op)

    def release(self) -> None:
        """Drop the recorded ops and watched tensors (a non-persistent tape answered):
        a variable's read kept here would make its next update copy it."""
        self.ops, self.watched = [], {}

    def watch(self, value: Any) -> None:
        """Watch an eager tensor, or a variable (by its shared name)."""
        name = getattr(value, "shared_name", None)
        if name is not None and hasattr(value, "_as_tensor"):
            self.variables[name] = value
        else:
            self.watched[id(value)] = value

    def accessed(self, variable: Any) -> None:
        """A variable read while this tape records (watched if trainable)."""
        if self._watch_accessed and getattr(variable, "trainable", True):
            self.variables.setdefault(variable.shared_name, variable)

    # -- the reverse pass ---------------------------------------------------------------
    def gradient(self, targets: list[Any], sources: list[Any], output_gradients: list[Any] | None,
                 ones_like: Callable[[Any], Any], add_n: Callable[[list], Any]) -> list[Any]:
        """d(sum of targets)/d(source) per source (None where unwatched or unconnected)."""
        reads = self._variable_reads()
        reachable = set(self.watched) | {i for ids in reads.values() for i in ids}
        on_path = []
        for op in self.ops:   # forward: the ops a watched value flows through
            if any(id(t) in reachable for t in op.inputs):
                on_path.append(op)
                reachable.update(id(t) for t in op.outputs)
        pending: dict[int, list[Any]] = {}
        for i, y in enumerate(targets):
            seed = ones_like(y) if output_gradients is None else output_gradients[i]
            pending.setdefault(id(y), []).append(seed)
        paused = self in _tapes.active
        self.stop()   # the gradient's ops are not recorded here
        try:
            for op in reversed(on_path):
                self._backprop(op, pending, add_n)
        finally:
            if paused:
                self.start()
        out = []
        for s in sources:
            name = getattr(s, "shared_name", None)
            if name is not None and hasattr(s, "_as_tensor"):
                ids = reads.get(name, []) if name in self.variables else []
            else:
                ids = [id(s)] if id(s) in self.watched else []
            grads = [g for i in ids for g in pending.get(i, ())]
            out.append(None if not grads else grads[0] if len(grads) == 1 else add_n(grads))
        return out

    def _variable_reads(self) -> dict[str, list[int]]:
        reads: dict[str, list[int]] = {}
        for op in self.ops:
            if op.type == "VariableV2" and op.attrs.get("var") in self.variables:
                reads.setdefault(op.attrs["var"], []).append(id(op.outputs[0]))
        return reads

    @staticmethod
    def _backprop(op: Any, pending: dict[int, list[Any]], add_n: Callable[[list], Any]) -> None:
        out_grads = []
        for t in op.outputs:
            got = pending.pop(id(t), None)
            out_grads.append(None if not got else got[0] if len(got) == 1 else add_n(got))
        if all(g is None for g in out_grads):
            return
        entry = find_op_def(op.type)
        if entry is None or entry.no_gradient:
            return
        if entry.gradient is None:
            raise NotFoundError(f"no gradient is defined for op type {op.type}, which the tape "
                                "recorded between the sources and the target; register one "
                                f"with @dt.register_gradient(\"{op.type}\")")
        in_grads = list(entry.gradient(op, *out_grads))
        if len(in_grads) != len(op.inputs):
            raise InvalidArgumentError(f"the gradient function of {op.type} returned "
                                       f"{len(in_grads)} gradients for {len(op.inputs)} inputs")
        for t, g in zip(op.inputs, in_grads):
            if g is not None and np.dtype(t.dtype.as_numpy_dtype).kind in "fc":
                pending.setdefault(id(t), []).append(g)
