"""A traced step (``RunOptions(trace_level=FULL_TRACE)``): its run metadata,
its Chrome trace, and ``dt.summary.trace_on`` / ``trace_export``.

Two CLI-started tasks (their own processes: the records cross the wire) run
one step that sends a tensor from one to the other and all-reduces across
both; the metadata must name every op that ran on each task, pair the send
with its receive (same key, same bytes, each naming the other's task), and
show the collective's wait. The Chrome trace is checked against the
trace-event format's rules. The GPU counters are checked under numba's CUDA
simulator in a child process (the simulator is chosen before numba loads).
"""
from __future__ import annotations

import asyncio
import gzip
import json
import os
import time

import numpy as np
import pytest

import distrib as dt
from distrib.client.run_metadata import function_tracing
from distrib.client.timeline import Timeline
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from distrib.runtime.step.step_trace import StepTrace
from kernels.counters import KINDS
from tests.helpers import simulated_json
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

FULL = dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE)


def _two_task_graph():
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:1"):
            a = dt.constant(np.arange(6.0).reshape(2, 3))
            x = dt.placeholder(dt.float64, [2, 3], name="x")
            c = dt.matmul(a + x, dt.transpose(x), name="product")
            r1 = dt.collective.all_reduce(dt.ones([4]), 2, 7, 1)
        with dt.device("/job:worker/task:0"):
            b = dt.reduce_sum(c * 2.0, name="total")
            r0 = dt.collective.all_reduce(dt.ones([4]), 2, 7, 1)
    return g, x, [b, r0, r1]


@pytest.fixture
def two_workers(tmp_path):
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0), cli_task(cfg, "worker", 1):
        yield spec


def _by_device(md: dt.RunMetadata) -> dict[str, dict[str, dt.client.run_metadata.NodeExecStats]]:
    return {d.device: {n.node_name: n for n in d.node_stats} for d in md.step_stats.dev_stats}


def _check_chrome_trace(text: str, md: dt.RunMetadata) -> dict:
    trace = json.loads(text)
    events = trace["traceEvents"]
    for e in events:
        assert "ph" in e and "pid" in e and "tid" in e, e
        if e["ph"] != "M":   # metadata events carry no time (the format's rule)
            assert isinstance(e["ts"], int) and e["ts"] > 0, e
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == sum(len(d.node_stats) for d in md.step_stats.dev_stats)
    assert all(e["dur"] >= 0 for e in ops)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"{d.device} Compute" for d in md.step_stats.dev_stats}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and starts
    for flow_id, s in starts.items():
        assert s["pid"] != ends[flow_id]["pid"]   # send and receive on different tasks
    return trace


def test_traced_step_of_two_tasks_records_ops_sends_receives_and_collective_waits(two_workers):
    spec = two_workers
    g, x, fetches = _two_task_graph()
    feed = {x: np.ones((2, 3))}
    began_us = time.time_ns() // 1000
    with dt.SyncSession("distrib://" + spec["worker"][0], graph=g) as sess:
        md = dt.RunMetadata()
        total, r0, r1 = sess.run(fetches, feed, options=FULL, run_metadata=md)
        assert total == 84.0 and r0.tolist() == r1.tolist() == [2.0] * 4
        untraced = dt.RunMetadata()
        sess.run(fetches, feed, run_metadata=untraced)       # no options: nothing recorded
        assert untraced.step_stats.dev_stats == [] and untraced.partition_graphs == []
        graphs = dt.RunMetadata()
        sess.run(fetches, feed, options={"output_partition_graphs": True}, run_metadata=graphs)
    assert sorted(p.task for p in graphs.partition_graphs) == ["/job:worker/task:0",
                                                               "/job:worker/task:1"]
    assert graphs.step_stats.dev_stats == []   # graphs asked, no trace level
    devices = _by_device(md)
    t0, t1 = "/job:worker/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"
    assert set(devices) == {t0, t1}
    for name in ("add", "transpose", "product"):
        assert name in devices[t1], sorted(devices[t1])
    for name in ("mul", "total"):
        assert name in devices[t0], sorted(devices[t0])
    for node in (n for d in devices.values() for n in d.values()):
        assert began_us - 1_000_000 < node.all_start_micros < began_us + 60_000_000
        assert 0 <= node.op_start_rel_micros <= node.op_end_rel_micros <= node.all_end_rel_micros
        assert node.thread_id > 0 and node.timeline_label.startswith(node.node_name + " = ")
    sends = [n for n in devices[t1].values() if n.kind == "send"]
    recvs = {n.tensor_key: n for n in devices[t0].values() if n.kind == "recv"}
    assert len(sends) == 1 and sends[0].tensor_key in recvs
    send, recv = sends[0], recvs[sends[0].tensor_key]
    assert send.peer == "/job:worker/task:0" and recv.peer == "/job:worker/task:1"
    assert send.output_bytes == recv.output_bytes == 2 * 2 * 8   # the 2x2 float64 product
    for dev in (t0, t1):
        waits = [n for n in devices[dev].values() if n.kind == "collective"]
        assert len(waits) == 1 and "(collective wait)" in waits[0].timeline_label
        assert waits[0].output_bytes == 4 * 4
    assert all(d.counters is None for d in md.step_stats.dev_stats)   # no GPU here
    trace = _check_chrome_trace(Timeline(md.step_stats).generate_chrome_trace_format(), md)
    flows = [e for e in trace["traceEvents"] if e["ph"] == "s"]
    assert [f["name"] for f in flows] == [f"{send.tensor_key} (32 B)"]
    waits = [e for e in trace["traceEvents"] if e.get("cat") == "Collective"]
    assert len(waits) == 2 and all(e["name"].endswith("(wait)") for e in waits)


def test_run_options_map_onto_the_run_options_a_master_takes():
    assert dt.RunOptions().as_dict() == {}
    assert dt.RunOptions(trace_level=dt.RunOptions.SOFTWARE_TRACE, timeout_in_ms=1500,
                         output_partition_graphs=True).as_dict() == {
        "trace_level": 1, "operation_timeout_s": 1.5, "output_partition_graphs": True}
    for bad in ({"trace_level": 4}, {"trace_level": True}, {"timeout_in_ms": -1}):
        with pytest.raises(ValueError):
            dt.RunOptions(**bad)


async def test_callable_dict_options_and_show_memory(tmp_path):
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [3], name="x")
        y = dt.reduce_sum(dt.square(x), name="y")
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            call = sess.make_callable(y, [x], accept_options=True)
            md = dt.RunMetadata()
            assert await call(np.ones(3, np.float32), options={"trace_level": 3},
                              run_metadata=md) == 3.0
            assert await call(np.ones(3, np.float32), options=FULL) == 3.0   # nobody reads it
            with pytest.raises(TypeError):
                await sess.run(y, {x: np.ones(3, np.float32)}, options="FULL_TRACE")
    (dev,) = md.step_stats.dev_stats
    assert dev.device == "/job:local/replica:0/task:0/device:CPU:0"
    assert {"Square", "y"} <= {n.node_name for n in dev.node_stats}
    text = Timeline(md.step_stats).generate_chrome_trace_format(show_dataflow=False,
                                                                 show_memory=True)
    counters = [e for e in json.loads(text)["traceEvents"] if e["ph"] == "C"]
    assert counters and counters[-1]["args"]["bytes"] == sum(n.output_bytes
                                                            for n in dev.node_stats)


async def test_monitored_session_hook_gets_the_trace_it_asked_for():
    seen = []

    class TraceHook(dt.train.SessionRunHook):
        def before_run(self, run_context):
            return dt.train.SessionRunArgs(None, options=FULL)

        def after_run(self, run_context, run_values):
            seen.append(run_values.run_metadata)

    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(1.0, name="v")
        inc = v.assign_add(1.0)
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        with g.as_default():
            async with dt.train.MonitoredSession(
                    session_creator=dt.train.ChiefSessionCreator(master=srv.target),
                    hooks=[TraceHook()]) as sess:
                assert await sess.run(inc) == 2.0
    (md,) = seen
    assert any(" = AssignAdd(" in n.timeline_label
               for d in md.step_stats.dev_stats for n in d.node_stats)


async def test_trace_on_and_export_write_a_profile_trace(tmp_path):
    @dt.function
    def step(a):
        return dt.reduce_sum(a * 3.0)

    assert float(await step(np.ones(4, np.float32))) == 12.0   # compiled and warm, untraced
    dt.summary.trace_on(graph=True, profiler=True)
    assert function_tracing() is not None
    assert float(await step(np.ones(4, np.float32))) == 12.0
    path = dt.summary.trace_export("step", step=3, profiler_outdir=str(tmp_path))
    assert function_tracing() is None   # exported: tracing is off, as in TF
    assert path == os.path.join(str(tmp_path), "plugins", "profile", "step_3",
                                os.path.basename(path))
    assert path.endswith(".trace.json.gz")
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e["ph"] == "X" and e["name"] == "Mul" for e in events)
    # a writer's logdir serves when no profiler_outdir is given; nothing traced: no file
    writer = dt.summary.create_file_writer(str(tmp_path / "logs"))
    dt.summary.trace_on()
    await step(np.ones(4, np.float32))
    with writer.as_default():
        exported = dt.summary.trace_export("again")
    writer.close()
    assert exported is not None and exported.startswith(str(tmp_path / "logs" / "plugins"))
    dt.summary.trace_on()
    assert dt.summary.trace_export("nothing", profiler_outdir=str(tmp_path)) is None
    assert function_tracing() is None


@pytest.mark.slow
def test_gpu_partition_reports_its_device_counters_under_the_simulator():
    res = simulated_json(["tests/peers/gpu_trace.py"], timeout=300)
    gpu = [d for d in res["dev_stats"] if d["device"].endswith("/device:GPU:0")]
    assert len(gpu) == 1 and gpu[0]["nodes"]
    counters = gpu[0]["counters"]
    assert counters is not None and set(KINDS) <= set(counters)
    assert counters["d2h_copies"] >= 1   # the fetched value came back from the device
    cpu = [d for d in res["dev_stats"] if d["device"].endswith("/device:CPU:0")]
    assert all(d["counters"] is None for d in cpu)


class _LateChannel:
    """A step's channel whose one tensor comes ``after`` seconds after the
    step expects it (the executor's side of a receive, no wire)."""

    timeout = None

    def __init__(self, after: float) -> None:
        self.after = after

    def expect(self, key, src_task):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        loop.call_later(self.after, fut.set_result, np.ones(3, np.float32))
        return fut

    def received(self, value):
        return value

    def flush(self, early=False):
        return None


async def test_a_receives_wait_is_this_steps_and_never_an_earlier_ones():
    part = CompiledPartition([{"name": "r", "op": "_Recv", "inputs": [],
                               "attrs": {"key": "k", "src_task": "/job:a/task:0"}}], ["r:0"])
    trace = StepTrace("/job:b/task:0", part)
    with trace.scope():
        (got,) = await part.run({}, VariableStore(), _LateChannel(0.2), trace=trace)
    assert got.tolist() == [1.0] * 3
    ((_, row),) = trace.rows
    assert row[8] == "recv" and 150_000 <= row[5] < 5_000_000   # the 0.2 s it waited
    # a receive with no wait recorded this step is not given the last step's
    part.recv_took[0] = 100.0
    again = StepTrace("/job:b/task:0", part)
    began = time.time_ns() // 1000
    again.result_taker(lambda i, fut, channel: [np.ones(3)])(0, None, None)
    ((_, row),) = again.rows
    assert row[2] >= began - 1000 and row[5] < 1_000_000, row
