"""What a thread is building: its default-graph stack, and each graph's lexical
scopes (name scope, device stack, colocation, control dependencies).

TF1 keeps this state per thread: replica functions that build in parallel
threads (the mirrored strategies) must not see each other's scopes, while the
graph they build into (its ops, names, collections) is shared and locked
(:mod:`distrib.framework.graph`). A :class:`BuildingState` is one graph's
scopes, a ``threading.local``, so each thread sees its own stacks; the graph
resolves what a scope names (a fetch, a device string) and asks the state to
push it, and the state places each op the graph builds (:meth:`place`). The
default-graph stack (``graph.as_default()``) is one per thread too, and sits
here rather than in graph.py so the one idea, per-thread building state, is
in one module (a control-flow context would join it).
"""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

from distrib.framework.device import check_device_string, merge_device
from distrib.framework.operation import Operation

if TYPE_CHECKING:
    from distrib.framework.graph import Graph

__all__ = ["BuildingState", "default_graphs"]

DeviceFn = Callable[[Operation], Any]


class BuildingState(threading.local):
    """One graph's lexical building state, as each thread sees it."""

    def __init__(self) -> None:
        self.name_stack = ""
        self.device_stack: list[DeviceFn | None] = []
        self.colocation_stack: list[Operation] = []
        # each entry is a list of control ops, or None meaning "cleared here"
        self.control_stack: list[list[Operation] | None] = []

    # -- handing it to another thread -------------------------------------------
    def snapshot(self) -> tuple:
        """This thread's state, for another thread that builds on its behalf."""
        return (self.name_stack, list(self.device_stack), list(self.colocation_stack),
                list(self.control_stack))

    def adopt(self, state: tuple) -> None:
        """Make ``state`` (from :meth:`snapshot`) this thread's."""
        self.name_stack = state[0]
        self.device_stack = list(state[1])
        self.colocation_stack = list(state[2])
        self.control_stack = list(state[3])

    # -- devices and colocation ----------------------------------------------------
    @contextlib.contextmanager
    def device(self, device_name_or_function: Any) -> Iterator[None]:
        """Push a device request (``Graph.device``, which says what it may be)."""
        spec = device_name_or_function
        if spec is None or callable(spec):
            entry = spec
        else:
            check_device_string(spec)  # a malformed string fails here, at the `with`
            entry = merge_device(spec)
        self.device_stack.append(entry)
        try:
            yield
        finally:
            self.device_stack.pop()

    @contextlib.contextmanager
    def colocate_with(self, target: Operation | None, ignore_existing: bool = False
                      ) -> Iterator[None]:
        """Place ops built inside on ``target``'s device; outer device scopes are
        ignored (TF); ``target`` None (or ``ignore_existing``) drops outer colocations."""
        saved_devices, saved_coloc = self.device_stack, self.colocation_stack
        self.device_stack = []
        if target is None or ignore_existing:
            self.colocation_stack = []
        self.colocation_stack = self.colocation_stack + ([target] if target else [])
        try:
            yield
        finally:
            self.device_stack, self.colocation_stack = saved_devices, saved_coloc

    # -- control dependencies --------------------------------------------------------
    @contextlib.contextmanager
    def control_dependencies(self, ops: list[Operation] | None) -> Iterator[None]:
        """Ops built inside run after ``ops``; None clears the outer scopes."""
        self.control_stack.append(ops)
        try:
            yield
        finally:
            self.control_stack.pop()

    def control_inputs(self) -> list[Operation]:
        """The control inputs the open scopes give an op built now (innermost
        first, up to the innermost clearing scope)."""
        found: list[Operation] = []
        for entry in reversed(self.control_stack):
            if entry is None:
                break
            found.extend(op for op in entry if op not in found)
        return found

    # -- placing an op -----------------------------------------------------------------
    def place(self, op: Operation) -> None:
        """Set the device the scopes choose for ``op``, which the graph is building.

        The building state fills in the fields of an op under construction (its
        device, its colocation): the graph and its ops are one data model in a few
        modules, only a Graph creates an op (operation.py), and a method call per
        field would cost on every op built."""
        # innermost device function first, so an inner scope's fields win; each outer
        # one fills the gaps
        for fn in reversed(self.device_stack):
            if fn is None:
                break
            op._device = check_device_string(fn(op))  # noqa: SLF001 - see above
        for target in self.colocation_stack:  # innermost last, so it wins
            op._colocation_op = target  # noqa: SLF001 - see above
            if target.device:
                op._device = target.device  # noqa: SLF001 - see above


# -- the default-graph stack ------------------------------------------------------------
class _DefaultStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[Graph] = []


_stack = _DefaultStack()


def default_graphs() -> list[Graph]:
    """This thread's stack of ``as_default`` graphs, innermost last (graph.py
    pushes and pops it, and reads its top for ``get_default_graph``)."""
    return _stack.stack
