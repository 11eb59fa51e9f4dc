"""Which distribution strategy, and which replica, the graph is being built for.

The strategies live above the ops (``distrib.distribute``), but a few
things below them must know where they are: a ``dt.Variable`` made in a
strategy's scope becomes the strategy's distributed variable, an optimizer
that applies gradients inside ``strategy.run`` aggregates them across the
replicas first, ``dt.nn.compute_average_loss`` divides by the global batch.
As in TF (``distribution_strategy_context``), this module holds only the
state: a per-thread stack of contexts, each naming a strategy and, inside
``strategy.run``, the replica. The objects themselves are the strategy's;
code here and in ``ops`` uses them through the few methods named below,
never by importing ``distrib.distribute``.

A context object has:
* ``strategy``: the strategy (``num_replicas_in_sync``, ``create_variable``);
* ``replica``: the replica context inside ``strategy.run`` (None in the
  strategy's scope, the "cross-replica context").
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

__all__ = ["current", "strategy", "replica_context", "enter", "variable_creation_paused",
           "creating_variable", "num_replicas_in_sync"]


class _Stack(threading.local):
    def __init__(self) -> None:
        self.entries: list[tuple[Any, Any]] = []   # (strategy, replica context or None)
        self.paused = 0                             # >0: dt.Variable makes a plain variable


_stack = _Stack()


def current() -> tuple[Any, Any] | None:
    """The innermost (strategy, replica context), or None outside every strategy."""
    return _stack.entries[-1] if _stack.entries else None


def strategy() -> Any:
    """The strategy whose scope (or replica function) is being built, else None."""
    top = current()
    return top[0] if top is not None else None


def replica_context() -> Any:
    """The replica context inside ``strategy.run``, else None."""
    top = current()
    return top[1] if top is not None else None


def num_replicas_in_sync() -> int:
    """How many replicas a step's batch is split across (1 outside any strategy)."""
    s = strategy()
    return int(s.num_replicas_in_sync) if s is not None else 1


@contextlib.contextmanager
def enter(strategy_obj: Any, replica: Any = None) -> Iterator[None]:
    """Build under ``strategy_obj`` (its scope), in ``replica`` when given."""
    _stack.entries.append((strategy_obj, replica))
    try:
        yield
    finally:
        _stack.entries.pop()


@contextlib.contextmanager
def variable_creation_paused() -> Iterator[None]:
    """``dt.Variable`` makes plain variables inside (the strategy's own components)."""
    _stack.paused += 1
    try:
        yield
    finally:
        _stack.paused -= 1


def creating_variable() -> Any:
    """The strategy that makes ``dt.Variable``'s now, or None (plain variables)."""
    if _stack.paused:
        return None
    return strategy()
