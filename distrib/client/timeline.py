"""A traced step as a Chrome trace: ``dt.client.timeline.Timeline`` (TF's).

    run_metadata = dt.RunMetadata()
    sess.run(train_op, options=dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
             run_metadata=run_metadata)
    trace = Timeline(run_metadata.step_stats).generate_chrome_trace_format()
    open("step.json", "w").write(trace)   # chrome://tracing or ui.perfetto.dev

The trace-event format (Google's "Trace Event Format" document): one
process per device of each task (a ``process_name`` metadata event names it
"/job:J/replica:0/task:T/device:CPU:0 Compute"), one thread per thread the
ops ran on, one complete ("X") event per op with ``ts`` and ``dur`` in
microseconds, its name the op type and its node name, inputs and bytes in
``args``. With ``show_dataflow`` each tensor sent to another task is an arrow:
a flow start ("s") inside the ``_Send`` and its finish ("f", bound to the
enclosing slice) inside the matching ``_Recv``. A collective op's event is
its wait for the other members ("CollectiveReduce (wait)", category
"Collective"). ``show_memory`` adds a counter ("C") per device of the bytes
its ops produced, cumulative over the step (distrib has no allocator
tracker: the bytes are outputs, not live memory).
"""
from __future__ import annotations

import json
import re
from typing import Any

from distrib.client.run_metadata import NodeExecStats, StepStats

__all__ = ["Timeline"]

_LABEL = re.compile(r"^(.*?) = (.*?)\((.*)\)")   # "name = Op(inputs)" (TF's label)


def _op_and_inputs(node: NodeExecStats) -> tuple[str, list[str]]:
    m = _LABEL.match(node.timeline_label)
    if m is None:
        return node.node_name, []
    inputs = [x.strip() for x in m.group(3).split(",") if x.strip()]
    return m.group(2), inputs


class _Events:
    """The trace's events, built in the format's terms."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def process(self, pid: int, name: str) -> None:
        self.events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                            "args": {"name": name}})
        self.events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid}})

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                            "args": {"name": name}})

    def region(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int,
               args: dict[str, Any]) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                            "ts": ts, "dur": dur, "args": args})

    def flow(self, ph: str, name: str, pid: int, tid: int, ts: int, flow_id: int) -> None:
        event = {"ph": ph, "cat": "DataFlow", "name": name, "pid": pid, "tid": tid,
                 "ts": ts, "id": flow_id}
        if ph == "f":
            event["bp"] = "e"
        self.events.append(event)

    def counter(self, name: str, pid: int, ts: int, value: int) -> None:
        self.events.append({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts,
                            "args": {"bytes": value}})


class Timeline:
    """TF's ``tf.python.client.timeline.Timeline`` over distrib's step stats."""

    def __init__(self, step_stats: StepStats, graph: Any = None) -> None:
        self._step_stats = step_stats
        self._graph = graph   # accepted as TF's; the labels already name each op's inputs

    def generate_chrome_trace_format(self, show_dataflow: bool = True,
                                     show_memory: bool = False) -> str:
        """The step as trace-event JSON (``{"traceEvents": [...]}``)."""
        out = _Events()
        where: dict[int, tuple[int, int]] = {}   # id(node stats) -> (pid, tid)
        for pid, dev in enumerate(self._step_stats.dev_stats):
            out.process(pid, f"{dev.device} Compute")
            threads: dict[int, str] = {}
            produced = 0
            for node in sorted(dev.node_stats, key=lambda n: n.all_start_micros):
                tid = int(node.thread_id)
                threads.setdefault(tid, f"thread {tid}")
                where[id(node)] = (pid, tid)
                self._emit_op(out, node, pid, tid)
                if show_memory:
                    produced += int(node.output_bytes)
                    out.counter("output bytes", pid, _end(node), produced)
            for tid, name in threads.items():
                out.thread(pid, tid, name)
        if show_dataflow:
            self._emit_flows(out, where)
        return json.dumps({"traceEvents": out.events})

    @staticmethod
    def _emit_op(out: _Events, node: NodeExecStats, pid: int, tid: int) -> None:
        op, inputs = _op_and_inputs(node)
        args: dict[str, Any] = {"name": node.node_name, "op": op, "bytes": int(node.output_bytes)}
        args.update({f"input{k}": name for k, name in enumerate(inputs)})
        cat, name = "Op", op
        if node.kind == "collective":
            cat, name = "Collective", f"{op} (wait)"
        elif node.kind in ("send", "recv"):
            cat = "Send" if node.kind == "send" else "Recv"
            args["peer"] = node.peer
            args["tensor"] = node.tensor_key
        start = int(node.all_start_micros)
        out.region(cat, name, pid, tid, start, max(int(node.all_end_rel_micros), 0), args)

    def _emit_flows(self, out: _Events, where: dict[int, tuple[int, int]]) -> None:
        """One arrow per tensor sent to another task: from its send to its receive."""
        sends: dict[str, NodeExecStats] = {}
        recvs: dict[str, NodeExecStats] = {}
        for dev in self._step_stats.dev_stats:
            for node in dev.node_stats:
                if node.kind == "send" and node.tensor_key:
                    sends[node.tensor_key] = node
                elif node.kind == "recv" and node.tensor_key:
                    recvs[node.tensor_key] = node
        for flow_id, key in enumerate(sorted(set(sends) & set(recvs))):
            send, recv = sends[key], recvs[key]
            name = f"{key} ({int(send.output_bytes)} B)"
            pid, tid = where[id(send)]
            out.flow("s", name, pid, tid, int(send.all_start_micros), flow_id)
            pid, tid = where[id(recv)]
            out.flow("f", name, pid, tid, _end(recv), flow_id)


def _end(node: NodeExecStats) -> int:
    return int(node.all_start_micros) + max(int(node.all_end_rel_micros), 0)
