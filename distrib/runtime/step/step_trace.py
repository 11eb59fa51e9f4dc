"""The trace of one partition's run: what a traced step records on a task.

A step run with ``RunOptions(trace_level=...)`` hands each partition run a
:class:`StepTrace`; an untraced run gets None and pays one check per
partition run, nothing per op. The executor then calls its ops through
:meth:`StepTrace.node_runner` and takes the results of pending ones
(receives, collectives, pool kernels, waiting resource ops) through
:meth:`StepTrace.result_taker`, which time each op; a kernel sent to the pool
goes there through :meth:`StepTrace.submit` (in a copy of the step's context,
so the GPU counters of :mod:`kernels.counters` follow it) and records its own
thread and times there.

Times are wall-clock microseconds (``time.time_ns`` once per run, then
``perf_counter`` offsets from it: one clock per task, comparable across
tasks as far as their clocks agree). The record goes back to the master as
plain lists (``distrib.client.run_metadata`` reads them): one entry per device
of the task, "/job:J/replica:0/task:T/device:CPU:0".
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from distrib.framework.op_def import op_types
from kernels.counters import StepCounters, counting

__all__ = ["StepTrace", "active_trace", "device_name", "metadata_record"]

_COLLECTIVE_OPS = op_types(lambda d: d.is_collective)

# the trace of the partition run in this context, if traced (the executor's
# pool submissions ask it, so only a traced run pays for a copied context)
_ACTIVE: contextvars.ContextVar[StepTrace | None] = contextvars.ContextVar(
    "distrib_step_trace", default=None)


def active_trace() -> StepTrace | None:
    """The trace of the partition run in this context (None: untraced)."""
    return _ACTIVE.get()


def device_name(task: str, dev: tuple[str, int]) -> str:
    """"/job:J/task:T" and ("CPU", 0) -> "/job:J/replica:0/task:T/device:CPU:0"."""
    job, _, index = task.rpartition("/task:")
    return f"{job}/replica:0/task:{index}/device:{dev[0]}:{dev[1]}"


def _nbytes(values: Any) -> int:
    return sum(getattr(v, "nbytes", 0) for v in values) if type(values) is list else 0


class StepTrace:
    """What one partition run did, op by op (see the module header)."""

    def __init__(self, task: str, part: Any) -> None:
        self.task = task
        self.part = part
        self.wall0_us = time.time_ns() // 1000
        self.perf0 = time.perf_counter()
        self.loop_tid = threading.get_native_id()
        self.rows: list[tuple[int, list[Any]]] = []   # (node index, row)
        # pending node -> its dispatch (a receive: when this step began waiting for it)
        self.starts: dict[int, float] = {}
        self.sent: dict[int, int] = {}                # pending node -> bytes it sends
        self.pooled: dict[int, tuple[int, float, float]] = {}   # node -> thread, kernel span
        self.current = -1                              # the node being dispatched
        gpu = any(dev[0] != "CPU" for dev in part.devices)
        self.counters = StepCounters() if gpu else None

    @contextlib.contextmanager
    def scope(self) -> Iterator[StepTrace]:
        """Around the partition's run: this trace active, and on a partition
        with a GPU device, the counters open."""
        token = _ACTIVE.set(self)
        try:
            if self.counters is None:
                yield self
            else:
                with counting(self.counters):
                    yield self
        finally:
            _ACTIVE.reset(token)

    def _us(self, t: float) -> int:
        return self.wall0_us + int((t - self.perf0) * 1e6)

    def _record(self, i: int, t0: float, t1: float, nbytes: int,
                pooled: tuple[int, float, float] | None = None) -> None:
        part = self.part
        node = part.nodes[i]
        op, attrs = node["op"], node.get("attrs") or {}
        kind, peer, key = "op", "", ""
        label = f"{node['name']} = {op}({', '.join(map(str, node.get('inputs') or []))})"
        if op == "_Send":
            kind, peer, key = "send", attrs.get("dst_task", ""), attrs.get("key", "")
        elif op == "_Recv":
            kind, peer, key = "recv", attrs.get("src_task", ""), attrs.get("key", "")
        elif op in _COLLECTIVE_OPS:
            kind = "collective"
            label += " (collective wait)"
        tid, k0, k1 = pooled if pooled is not None else (self.loop_tid, t0, t1)
        start = self._us(t0)
        self.rows.append((i, [node["name"], label, start, self._us(k0) - start,
                              self._us(k1) - start, self._us(t1) - start, tid, nbytes,
                              kind, peer, key]))

    # -- the executor's hooks -------------------------------------------------------
    def node_runner(self, run_node: Callable[..., Any]) -> Callable[..., Any]:
        """``run_node`` (the executor's, bound) timed op by op."""
        part = self.part
        is_send = [n["op"] == "_Send" for n in part.nodes]

        def traced(i: int, values: list, uses: list, feeds: dict, *rest: Any) -> Any:
            sent = self._send_bytes(i, values, feeds) if is_send[i] else 0
            self.current = i
            t0 = time.perf_counter()
            out = run_node(i, values, uses, feeds, *rest)
            if type(out) is list:
                self._record(i, t0, time.perf_counter(), sent or _nbytes(out))
                return out
            if hasattr(out, "add_done_callback"):   # pending: see result_taker
                self.starts[i] = t0
                return out
            return self._sending(i, t0, out, sent)   # a send held up by its connection
        return traced

    async def _sending(self, i: int, t0: float, sending: Any, nbytes: int) -> None:
        try:
            await sending
        finally:
            self._record(i, t0, time.perf_counter(), nbytes)

    def result_taker(self, result: Callable[..., Any]) -> Callable[..., Any]:
        """``result`` (the executor's, bound) recording each pending op's end.
        A receive starts when this step began waiting for it (the executor
        puts that in ``starts``); without one it is recorded as no wait, never
        with a wait the partition remembers from an earlier step."""

        def traced(i: int, fut: Any, channel: Any) -> Any:
            out = result(i, fut, channel)
            now = time.perf_counter()
            t0 = self.starts.pop(i, now)
            self._record(i, t0, now, _nbytes(out), self.pooled.pop(i, None))
            return out
        return traced

    def submit(self, pool: Any, fn: Callable[..., Any], args: tuple) -> Any:
        """``fn(*args)`` on ``pool`` in a copy of this context (the open
        counters follow it), recording its thread and span."""
        i = self.current
        return pool.submit(contextvars.copy_context().run, self._on_pool, i, fn, args)

    def _on_pool(self, i: int, fn: Callable[..., Any], args: tuple) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.pooled[i] = (threading.get_native_id(), t0, time.perf_counter())

    def _send_bytes(self, i: int, values: list, feeds: dict) -> int:
        ref = self.part.inputs[i][0]
        value = feeds.get(ref) if type(ref) is str else (values[ref[0]] or [None])[ref[1]]
        return int(getattr(value, "nbytes", 0))

    # -- the record ---------------------------------------------------------------------
    def to_wire(self) -> list[dict[str, Any]]:
        """``[{"device", "node_stats": [row, ...], "counters"}]``, one per device."""
        by_device: dict[tuple[str, int], list[list[Any]]] = {}
        for dev in self.part.devices:
            by_device.setdefault(tuple(dev), [])
        for i, row in self.rows:
            by_device[tuple(self.part.devices[i])].append(row)
        out = []
        counted = False
        for dev, rows in by_device.items():
            entry: dict[str, Any] = {"device": device_name(self.task, dev), "node_stats": rows,
                                     "counters": None}
            if self.counters is not None and dev[0] != "CPU" and not counted:
                entry["counters"] = self.counters.as_dict()
                counted = True
            out.append(entry)
        return out


def metadata_record(records: dict[str, list[dict[str, Any]]],
                    partitions: dict[str, list[dict[str, Any]]] | None) -> dict[str, Any]:
    """The master's metadata of one step: every task's devices (``records``:
    task -> :meth:`StepTrace.to_wire`), and each task's partition nodes when
    asked (``output_partition_graphs``)."""
    out: dict[str, Any] = {"dev_stats": [d for t in sorted(records) for d in records[t]]}
    if partitions is not None:
        out["partition_graphs"] = [{"task": t, "nodes": nodes}
                                   for t, nodes in sorted(partitions.items())]
    return out
