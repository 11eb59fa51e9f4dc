"""Eager variables a ``dt.function`` uses: their twins kept equal around each call.

While a function traces, an eager variable stands for its twin graph
variable (``distrib.ops.eager_captures``). This module is the function's
side of that bargain, per trace:

* **before a call**, each twin the trace uses whose eager value changed
  since this trace last saw it on that target (the store's write version:
  the process assigned it, another function wrote it back, or the trace
  never ran there) is filled from the process's value, fed, in one small
  step of the twins' initializers;
* **during the call**, the twins the trace writes are read once more, last
  (``auto_deps`` orders those reads after every write), and fetched with the
  function's outputs;
* **after the call**, those values become the eager variables' values, and
  the trace notes their versions, so its next call pushes nothing.

A training step thus moves its weights into the process once per call (a
memory copy on the local server); nothing else is read or written.

The push, the call and the pull of a trace that uses twins hold one lock of
the event loop (:meth:`EagerSync.exclusive`): two calls in flight at once
(``asyncio.gather`` of two functions, a coordinator's closures on two
workers) would otherwise push a value into a twin another call had already
updated on the server, or pull in an order other than the server's, and
lose an update (``v.assign_add(1)`` in two concurrent calls added 1). TF's
eager variable lives on one device and every call updates it there; this is
that serialization, for the calls that share eager variables only.
"""
from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any, AsyncIterator, Sequence

from distrib.eager import context
from distrib.framework.op_def import op_defs
from distrib.ops.eager_captures import Twin, twins

__all__ = ["EagerSync", "collect"]

# the ops that write the variable named by their "var" attr
_WRITES = {d.name for d in op_defs() if d.is_update} | {"Assign", "AssignAdd", "AssignSub"}
# event loop -> the lock of the calls that use eager variables (module header)
_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _loop_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _LOCKS.get(loop)
    if lock is None:
        lock = _LOCKS[loop] = asyncio.Lock()
    return lock


class EagerSync:
    """One trace's twins: the ones it uses, the reads of those it writes."""

    def __init__(self, used: list[Twin], written: list[Twin], reads: list[Any]) -> None:
        self.used = used
        self.written = written
        self.reads = reads
        self._held: dict[str, dict[str, int]] = {}   # target -> {shared name: version}

    def __bool__(self) -> bool:
        return bool(self.used)

    @property
    def initializers(self) -> set[Any]:
        """The twins' fill ops: run by :meth:`push` only, never in the step."""
        return {t.initializer for t in self.used}

    @contextlib.asynccontextmanager
    async def exclusive(self, session: Any) -> AsyncIterator[None]:
        """Push, then hold the loop's eager lock while the body runs the call and
        :meth:`pull`s (module header); only for a trace that uses twins."""
        async with _loop_lock():
            await self.push(session)
            yield

    async def push(self, session: Any) -> None:
        """Fill the twins whose eager value this trace has not seen on ``session``'s target."""
        store = context.runner().store   # type: ignore[attr-defined]
        held = self._held.setdefault(session.target, {})
        stale = [t for t in self.used if held.get(t.shared_name) != store.version(t.shared_name)
                 and t.shared_name in store]
        if not stale:
            return
        versions = {t.shared_name: store.version(t.shared_name) for t in stale}
        await session.run([t.initializer for t in stale],
                          feed_dict={t.value: store.read(t.shared_name) for t in stale})
        held.update(versions)

    def pull(self, target: str, values: Sequence[Any]) -> None:
        """The written twins' values (fetched by the call) become the eager values."""
        store = context.runner().store   # type: ignore[attr-defined]
        held = self._held.setdefault(target, {})
        for twin, value in zip(self.written, values):
            version = store.take(twin.shared_name, value)
            if version >= 0:
                held[twin.shared_name] = version


def collect(graph: Any, new_ops: Sequence[Any]) -> EagerSync:
    """The twins the trace's ops (``new_ops``) use, and a last read of each one they
    write (made now, in the trace, so ``auto_deps`` puts it after the writes)."""
    made = twins(graph)
    if not made:
        return EagerSync([], [], [])
    names = {op.attrs.get("var") for op in new_ops} & set(made)
    used = [made[n] for n in sorted(names)]
    inits = {t.initializer for t in used}
    written_names = {op.attrs["var"] for op in new_ops if op.type in _WRITES
                     and op.attrs.get("var") in names and op not in inits}
    written = [t for t in used if t.shared_name in written_names]
    reads = [t.variable.read_value() for t in written]
    return EagerSync(used, written, reads)
