"""``dt.GradientTape``: TF2's way of asking for gradients, on the graph runtime.

In TF2 a tape records the eager ops run inside it. Here every op is a graph
op already (a ``dt.function`` traces its Python body into the graph), so the
tape records the span of ops its graph gained while it was recording, and
``tape.gradient(target, sources)`` is ``dt.gradients(target, sources)``
through those ops only: what was computed before the tape (or inside
``stop_recording()``) is a constant to it, as in TF, and a variable's read
counts as the variable. TF2's argument shapes (a nested structure of sources
gives the same structure of gradients; ``None`` where the target does not
depend on a source) and TF's rules: a non-persistent tape answers once,
``output_gradients`` weights the target, ``unconnected_gradients="zero"``
gives zeros instead of ``None``.
Distributed variables resolve to the current replica's copy, so the same
step works inside ``strategy.run``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

from distrib.eager.context import executing_eagerly
from distrib.eager.tape import EagerTape
from distrib.errors import InvalidArgumentError
from distrib.framework.graph import get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops.gradients import gradients

__all__ = ["GradientTape", "UnconnectedGradients"]


class UnconnectedGradients:
    """What ``gradient`` returns for a source the target does not depend on."""
    NONE = "none"
    ZERO = "zero"


class GradientTape:
    """``with dt.GradientTape() as tape: ...; tape.gradient(loss, variables)``."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._persistent = bool(persistent)
        self._watch_accessed = bool(watch_accessed_variables)
        self._watched: list[Any] = []
        self._used = False
        self._recording = False
        self._graph: Any = None
        self._spans: list[list[Any]] = []   # [first, end) op indices recorded; end None: open
        self._inside_stop = False
        self._eager: EagerTape | None = None   # eager values on: the ops it saw run

    def __enter__(self) -> GradientTape:
        if self._recording:
            raise ValueError("Tape is still recording: a GradientTape cannot be entered again "
                             "inside its own `with` block")
        if executing_eagerly():   # records the ops that run at once (distrib.eager.tape)
            if self._eager is None:
                self._eager = EagerTape(self._watch_accessed)
            self._eager.start()
            self._recording = True
            return self
        graph = get_default_graph()
        if graph is not self._graph:    # a tape entered again goes on recording (TF's)
            self._graph, self._spans = graph, []
        self._spans.append([len(graph), None])
        self._recording = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pause()

    def _pause(self) -> None:
        if self._eager is not None:
            self._eager.stop()
        elif self._spans and self._spans[-1][1] is None:
            self._spans[-1][1] = len(self._graph)
        self._recording = False

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Ops built inside are not recorded: no gradient flows through them."""
        if not self._recording:
            raise ValueError("Tape must be recording: stop_recording() is for inside the tape's "
                             "`with` block")
        self._pause()
        self._inside_stop = True
        try:
            yield
        finally:
            self._inside_stop = False
            if self._eager is not None:
                self._eager.start()
            else:
                self._spans.append([len(self._graph), None])
            self._recording = True

    def reset(self) -> None:
        """Forget what was recorded and watched, as a new tape would (recording
        from here on inside the tape's block)."""
        if self._inside_stop:
            raise ValueError("reset() inside stop_recording(): leave that block first")
        self._watched = []
        self._used = False
        if self._eager is not None:
            self._eager.stop()
            self._eager = EagerTape(self._watch_accessed)
            if self._recording:
                self._eager.start()
        self._spans = [[len(self._graph), None]] if self._recording else []

    def _unrecorded(self, graph: Any) -> list[Any]:
        """The outputs of the ops of ``graph`` the tape did not record: the
        gradient's ``stop_gradients`` (none on a graph it did not watch). A
        variable's snapshot read is the variable: kept."""
        if graph is not self._graph:
            return []
        every = graph.get_operations()
        recorded = bytearray(len(every))
        for first, end in self._spans:
            stop = len(every) if end is None else end
            recorded[first:stop] = b"\1" * max(stop - first, 0)
        return [t for op, kept in zip(every, recorded) if not kept
                and not (op.type == "Identity" and len(op.inputs) == 1
                         and op.inputs[0].op.type == "VariableV2") for t in op.outputs]

    def watch(self, tensor: Any) -> None:
        """Watch ``tensor`` (a tensor or variable, or a nested structure of them)."""
        self._watched.extend(_flatten(tensor))
        if self._eager is not None:
            for value in _flatten(tensor):
                self._eager.watch(value)

    def watched_variables(self) -> tuple[Any, ...]:
        if self._eager is not None:
            return tuple(self._eager.variables.values())
        return tuple(v for v in self._watched if hasattr(v, "_reads"))

    def gradient(self, target: Any, sources: Any, output_gradients: Any = None,
                 unconnected_gradients: str = UnconnectedGradients.NONE) -> Any:
        """d(target)/d(source) for each source, in ``sources``' structure."""
        if self._recording and not self._persistent:
            pass   # TF warns about efficiency only; computing inside is allowed
        if self._used and not self._persistent:
            raise RuntimeError("A non-persistent GradientTape can only be used to compute one "
                               "set of gradients (or jacobians); pass persistent=True")
        if unconnected_gradients not in (UnconnectedGradients.NONE, UnconnectedGradients.ZERO):
            raise InvalidArgumentError(f"unconnected_gradients must be 'none' or 'zero', got "
                                       f"{unconnected_gradients!r}")
        self._used = True
        flat = _flatten(sources)
        if not flat:
            return _pack(sources, iter([]))
        targets = _flatten(target)
        if self._eager is not None:
            grads = self._eager.gradient(
                [ops.convert_to_tensor(t) for t in targets], flat,
                None if output_gradients is None else _flatten(output_gradients),
                ops.ones_like, ops.add_n)
            if not self._persistent:   # answered once: let go of the values it recorded
                self._eager.release()   # (TF's does too): a read kept here made the next
                # update copy its variable
            if unconnected_gradients == UnconnectedGradients.ZERO:
                grads = [g if g is not None else ops.zeros_like(ops.convert_to_tensor(s))
                         for g, s in zip(grads, flat)]
            return _pack(sources, iter(grads))
        graph = ops.convert_to_tensor(targets[0]).graph
        grads = gradients(targets, flat, grad_ys=None if output_gradients is None
                          else _flatten(output_gradients), stop_gradients=self._unrecorded(graph))
        if unconnected_gradients == UnconnectedGradients.ZERO:
            grads = [g if g is not None else ops.zeros_like(ops.convert_to_tensor(s))
                     for g, s in zip(grads, flat)]
        return _pack(sources, iter(grads))


def _flatten(value: Any) -> list[Any]:
    shards = getattr(value, "_shards", None)
    if shards is not None:   # a sharded variable: one gradient per shard, as TF's
        return list(shards)
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in _flatten(value[k])]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _pack(structure: Any, flat: Any) -> Any:
    shards = getattr(structure, "_shards", None)
    if shards is not None:
        return [next(flat) for _ in shards]
    if isinstance(structure, dict):
        return {k: _pack(structure[k], flat) for k in sorted(structure)}
    if isinstance(structure, tuple):
        return tuple(_pack(v, flat) for v in structure)
    if isinstance(structure, list):
        return [_pack(v, flat) for v in structure]
    return next(flat)
