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

__all__ = ["tracing", "trace", "order"]

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
