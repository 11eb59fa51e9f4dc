"""Program order for the stateful ops of a traced function (TF2's automatic
control dependencies, ``auto_control_deps.py``), on the graph runtime.

In TF2 the body of a ``tf.function`` runs as if eagerly: a read of a variable
sees every earlier write in the function, and a write waits for every earlier
read. A graph has no such order by itself: two ops run in whatever order the
dataflow allows. So while a ``dt.function`` traces (``tracing()`` is true),
using a variable as a tensor makes a fresh read of it (its own
``VariableV2`` node) instead of the shared snapshot, and ``order(ops)``
then chains, per variable, each read after the write before it and each
write after the write and the reads before it. Every edge added runs from an
op made earlier to one made later, as the data edges do, so no cycle can
form.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Sequence

from distrib.framework.op_def import op_defs

__all__ = ["tracing", "trace", "order", "writes_after_collectives"]

# ops that write a variable (its "var" attr), each with the attrs naming the
# slots it writes too (the op catalogue's is_update and slot_attrs)
_WRITE_SLOTS = {d.name: d.slot_attrs for d in op_defs() if d.is_update}

_lock = threading.Lock()
_depth = 0   # traces in progress (a trace's replica threads build on its behalf)


def tracing() -> bool:
    return _depth > 0


@contextlib.contextmanager
def trace() -> Iterator[None]:
    global _depth
    with _lock:
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1


def order(ops: Sequence[Any], skip: Any = frozenset()) -> int:
    """Chain the variable reads and writes of ``ops`` (in creation order) in
    program order, leaving out ``skip`` (the initializers of variables made in
    the trace: they run once, on first use, not in the step); returns how many
    control edges were added."""
    last_write: dict[str, Any] = {}
    reads: dict[str, list[Any]] = {}
    added = 0
    for op in ops:
        if op in skip:
            continue
        attrs = op.attrs
        var = attrs.get("var")
        if var is None:
            continue
        if op.type == "VariableV2":
            write = last_write.get(var)
            if write is not None and write not in op.control_inputs:
                op.add_control_input(write)
                added += 1
            reads.setdefault(var, []).append(op)
        elif op.type in _WRITE_SLOTS:
            names = [var] + [attrs[k] for k in _WRITE_SLOTS[op.type]
                             if isinstance(attrs.get(k), str)]
            for name in names:
                before = ([last_write[name]] if name in last_write else []) + reads.pop(name, [])
                for dep in before:
                    if dep is not op and dep not in op.control_inputs:
                        op.add_control_input(dep)
                        added += 1
                last_write[name] = op
    return added


# ops that run with a group of tasks (the op catalogue's is_collective)
_COLLECTIVES = frozenset(d.name for d in op_defs() if d.is_collective)


def writes_after_collectives(ops: Sequence[Any], skip: Any = frozenset()) -> int:
    """Make every variable write of ``ops`` wait for every collective of
    ``ops`` that does not itself come after a write (an elastic step: a step
    that fails in any of its collectives, its membership agreement included,
    has then written nothing, so it can run again exactly). Run after
    :func:`order` (its edges count as ancestry). A collective that waits for a
    write of the step (directly or not) cannot gate it and is left out, so no
    cycle can form. Returns how many control edges were added."""
    ops = [op for op in ops if op not in skip]
    writes = [op for op in ops if op.type in _WRITE_SLOTS]
    collectives = [op for op in ops if op.type in _COLLECTIVES]
    if not writes or not collectives:
        return 0
    written = set(writes)
    after_write: dict[Any, bool] = {}   # op -> a write of the step is among its ancestors

    def before(op: Any) -> list[Any]:
        return [*(t.op for t in op.inputs), *op.control_inputs]

    def waits_on_write(op: Any) -> bool:
        stack, entered = [op], set()
        while stack:   # iterative depth-first over the (acyclic) graph: it can be deep
            top = stack[-1]
            if top in after_write:
                stack.pop()
                continue
            pending = [p for p in before(top) if p not in after_write]
            if pending and top not in entered:
                entered.add(top)
                stack.extend(pending)
                continue
            stack.pop()
            after_write[top] = any(p in written or after_write.get(p, False)
                                   for p in before(top))
        return after_write[op]

    gates = [c for c in collectives if not waits_on_write(c)]
    added = 0
    for write in writes:
        for gate in gates:
            if gate not in write.control_inputs:
                write.add_control_input(gate)
                added += 1
    return added
