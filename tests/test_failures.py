"""Failures across processes end in a typed error, never a hang.

A task that is down, a task SIGKILLed in the middle of a step, a task (ps
included) restarted on its port, and the live tasks around them: each test
bounds every step with ``asyncio.wait_for`` as a hang guard, and asserts the
error names the task at fault. The host (master) is an in-process server whose
connect deadline is made short through ``DISTRIB_CONNECT_TIMEOUT_S``.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Iterator

import numpy as np
import pytest

import distrib as dt
from distrib.errors import DeadlineExceededError, FailedPreconditionError, OpError, UnavailableError
from distrib.runtime.actors.system import ActorSystem
from tests.helpers import Proc, child_env
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

GUARD_S = 45  # hang guard only: every failure below is expected well within it
# a stuck task with operation_timeout_s=2 must fail the step far sooner than the
# 30-60 s control-call defaults; still only a hang guard, not a timing
STUCK_GUARD_S = 20


@pytest.fixture(autouse=True)
def short_connect_deadline(monkeypatch) -> None:
    # read by every actor system created after this (ours and the children's)
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "2")


class Cluster:
    """CLI tasks of a cluster file, started and restarted by (job, index); all
    stopped at the end."""

    def __init__(self, tmp_path, **jobs: int) -> None:
        self.spec = cluster_spec(host=1, **jobs)
        self.cfg = write_cluster(tmp_path, self.spec)
        self.procs: dict[tuple[str, int], Proc] = {}

    def start(self, job: str, index: int) -> Proc:
        p = self.procs[(job, index)] = cli_task(self.cfg, job, index)
        return p

    def kill(self, job: str, index: int) -> None:
        self.procs[(job, index)].kill()

    def address(self, job: str, index: int) -> str:
        return self.spec[job][index]

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.stop()


@contextlib.contextmanager
def cluster(tmp_path, **jobs: int) -> Iterator[tuple[Cluster, dt.Server]]:
    c = Cluster(tmp_path, **jobs)
    server = None
    try:
        server = dt.Server(dt.ClusterSpec(c.spec), job_name="host", task_index=0)
        yield c, server
    finally:
        if server is not None:
            server.stop()
        c.stop_all()


def pinned_sum(task: str, name: str):
    g = dt.Graph()
    with g.as_default(), dt.device(task):
        out = dt.reduce_sum(dt.constant([1.0, 2.0, 3.0], name=name))
    return g, out


def cross_graph():
    """worker0 -> worker1 -> worker0: a tensor crosses each way per step, so a
    restarted task is reached both by new connections and by its peers' old ones."""
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:0"):
            x = dt.constant(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
        with dt.device("/job:worker/task:1"):
            s = dt.reduce_sum(x * 2.0)
        with dt.device("/job:worker/task:0"):
            y = s + 0.0
    return g, y


def slow_cross_graph(n: int = 2000, rounds: int = 40):
    """worker0 runs a long matmul chain (seconds of CPU); worker1 waits for
    its result. Lets a test kill worker0 while worker1 waits."""
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:0"):
            x = dt.random_uniform([n, n], seed=3, dtype=dt.float32)
            y = x
            for _ in range(rounds):
                y = dt.matmul(y, x) * (1.0 / n)
        with dt.device("/job:worker/task:1"):
            out = dt.reduce_sum(y)
    return g, out


async def run(sess: dt.Session, fetch):
    return await asyncio.wait_for(sess.run(fetch), GUARD_S)


# -- a task that is down ------------------------------------------------------------------

async def test_down_task_is_unavailable_naming_it_and_live_steps_are_not_disturbed(
        tmp_path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="distrib.runtime.step.master")
    with cluster(tmp_path, worker=2) as (c, server):
        c.start("worker", 0)            # worker 1 never starts
        g0, on0 = pinned_sum("/job:worker/task:0", "on0")
        g1, on1 = pinned_sum("/job:worker/task:1", "on1")
        # a session waits only for the tasks its graph uses
        async with dt.Session(server.target, graph=g0) as s0:
            assert await run(s0, on0) == 6.0
        async with dt.Session(server.target, graph=g1) as s1:
            with pytest.raises(UnavailableError) as e:
                await run(s1, on1)
        msg = str(e.value)
        assert "/job:worker/task:1" in msg and c.address("worker", 1) in msg, msg
        # while it waited (the 2 s connect deadline), it said for which task
        assert any("waiting for /job:worker/task:1" in r.getMessage() for r in caplog.records)
        async with dt.Session(server.target, graph=g0) as s0:
            assert await run(s0, on0) == 6.0


# -- a task killed mid-step, then restarted on its port ---------------------------------------

async def test_task_killed_mid_step_fails_the_step_naming_it_then_restart_recovers(
        tmp_path) -> None:
    config = dt.ConfigProto(operation_timeout_s=20)
    with cluster(tmp_path, worker=2) as (c, server):
        c.start("worker", 0)
        c.start("worker", 1)
        g, y = cross_graph()
        gs, slow = slow_cross_graph()
        g1, on1 = pinned_sum("/job:worker/task:1", "on1")
        async with dt.Session(server.target, graph=g, config=config) as sess, \
                dt.Session(server.target, graph=gs, config=config) as slow_sess, \
                dt.Session(server.target, graph=g1, config=config) as s1:
            assert await run(sess, y) == 30.0
            master = server._core.master    # white-box: the host's master
            stale = master._tasks["/job:worker/task:0"]
            step = asyncio.ensure_future(slow_sess.run(slow))
            await _wait_step_dispatched(server, "/job:worker/task:0")
            c.kill("worker", 0)
            with pytest.raises(OpError) as e:
                await asyncio.wait_for(step, GUARD_S)
            assert "/job:worker/task:0" in str(e.value), str(e.value)
            # worker 1's half of that step was aborted: it serves steps at once
            assert await run(s1, on1) == 6.0
            with pytest.raises(UnavailableError, match=r"/job:worker/task:0"):
                await run(sess, y)
            c.start("worker", 0)        # new incarnation on the same port
            # as if the master had missed the restart: it still believes the old
            # incarnation has the partitions; the new one says they are unknown,
            # and the master registers them again within the same step
            master._tasks["/job:worker/task:0"] = stale
            for _ in range(3):
                assert await run(sess, y) == 30.0
            assert master._tasks["/job:worker/task:0"].incarnation != stale.incarnation


async def _wait_step_dispatched(server: dt.Server, task: str) -> None:
    """Until the master has registered the slow plan on ``task`` and the step
    is running there (white-box: the host's master is in this process)."""
    master = server._core.master
    for _ in range(400):
        st = master._tasks.get(task)
        if st is not None and len(st.registered) >= 2:
            await asyncio.sleep(0.5)   # the chain runs for seconds; kill well inside it
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"the step never reached {task}")


# -- a restarted ps loses its variables ------------------------------------------------------

def ps_graph():
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:ps/task:0"):
            w = dt.Variable(dt.constant([1.0, 2.0, 3.0]), name="weights")
        with dt.device("/job:worker/task:0"):
            y = dt.reduce_sum(w * 2.0)
        step = w.assign_add(dt.ones([3]))
        init = dt.global_variables_initializer()
    return g, y, step, init


async def test_restarted_ps_has_uninitialized_variables_until_init(tmp_path) -> None:
    with cluster(tmp_path, ps=1, worker=1) as (c, server):
        c.start("ps", 0)
        c.start("worker", 0)
        g, y, step, init = ps_graph()
        g0, on0 = pinned_sum("/job:worker/task:0", "on0")
        async with dt.Session(server.target, graph=g) as sess, \
                dt.Session(server.target, graph=g0) as s0:
            await run(sess, init)
            await run(sess, step)
            assert await run(sess, y) == 18.0
            c.kill("ps", 0)
            with pytest.raises(UnavailableError, match=r"/job:ps/task:0"):
                await run(sess, y)
            assert await run(s0, on0) == 6.0      # the worker alone is not disturbed
            c.start("ps", 0)
            with pytest.raises(FailedPreconditionError, match=r"weights") as e:
                await run(sess, y)
            assert "/job:ps/task:0" in str(e.value)
            await run(sess, init)
            assert await run(sess, y) == 12.0


# -- a task that stops answering (SIGSTOP): the operation timeout ends the step -------------

async def test_stuck_task_fails_the_step_within_the_operation_timeout_naming_it(
        tmp_path, monkeypatch) -> None:
    # the operation timeout's path: heartbeats (test_failure_detection) would
    # declare the task dead first, so they are slowed down here
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "30")
    config = dt.ConfigProto(operation_timeout_s=2)
    with cluster(tmp_path, worker=2) as (c, server):
        c.start("worker", 0)
        c.start("worker", 1)
        g, y = cross_graph()
        g0, on0 = pinned_sum("/job:worker/task:0", "on0")
        async with dt.Session(server.target, graph=g, config=config) as sess:
            assert await run(sess, y) == 30.0     # plan registered everywhere
            c.procs[("worker", 0)].p.send_signal(signal.SIGSTOP)
            try:
                # worker 1 waits for worker 0's tensor: the receive times out
                with pytest.raises(DeadlineExceededError, match=r"/job:worker/task:0"):
                    await asyncio.wait_for(sess.run(y), STUCK_GUARD_S)
                # a new plan for the stuck task: registering it is bounded too
                async with dt.Session(server.target, graph=g0, config=config) as s0:
                    with pytest.raises(DeadlineExceededError, match=r"/job:worker/task:0"):
                        await asyncio.wait_for(s0.run(on0), STUCK_GUARD_S)
            finally:
                c.procs[("worker", 0)].p.send_signal(signal.SIGCONT)
            assert await run(sess, y) == 30.0


async def test_list_devices_skips_down_tasks_and_lists_the_live_ones(tmp_path) -> None:
    with cluster(tmp_path, worker=4) as (c, server):
        c.start("worker", 0)            # workers 1-3 never start
        g, _ = pinned_sum("/job:worker/task:0", "on0")
        async with dt.Session(server.target, graph=g) as sess:
            devices = await asyncio.wait_for(sess.list_devices(), GUARD_S)
        names = {d["name"] for d in devices}
        assert "/job:worker/replica:0/task:0/device:CPU:0" in names
        assert "/job:host/replica:0/task:0/device:CPU:0" in names
        assert not any(n.startswith("/job:worker/") and "/task:0/" not in n for n in names)


async def test_a_master_that_stops_answering_fails_the_run_within_the_timeout(
        tmp_path, monkeypatch) -> None:
    # the client's session talks to a master in another process; with
    # operation_timeout_s set, a stuck master cannot hold a run for ever
    # (heartbeats slowed down: this is the operation timeout's path)
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "30")
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    config = dt.ConfigProto(operation_timeout_s=0.5)
    with cli_task(cfg, "worker", 0) as master:
        g, on0 = pinned_sum("/job:worker/task:0", "on0")
        async with dt.Session("distrib://" + spec["worker"][0], graph=g, config=config) as sess:
            assert await run(sess, on0) is not None
            master.p.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(DeadlineExceededError):
                    await asyncio.wait_for(sess.run(on0), STUCK_GUARD_S)
            finally:
                master.p.send_signal(signal.SIGCONT)
            assert await run(sess, on0) is not None   # and the session works again


# -- a client that dies: what it left on the servers is freed --------------------------

DEAD_CLIENT = """
import sys, time
import distrib as dt
g = dt.Graph()
with g.as_default():
    with dt.device("/job:worker/task:1"):
        out = dt.reduce_sum(dt.constant([1.0, 2.0, 3.0]))
sess = dt.SyncSession("distrib://" + sys.argv[1], graph=g)
assert sess.run(out) == 6.0
print("ran", flush=True)
time.sleep(120)
"""


async def test_a_dead_clients_session_and_partitions_are_freed(tmp_path) -> None:
    # the client opens a session on worker 0's master, whose step runs on
    # worker 1; it is then SIGKILLed and never closes the session
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    gc = {"DISTRIB_SESSION_GC_S": "0.5"}
    with cli_task(cfg, "worker", 0, **gc), cli_task(cfg, "worker", 1, **gc):
        client = Proc(["-c", DEAD_CLIENT, spec["worker"][0]], ready_prefix="ran",
                      env=child_env())
        with client:
            client.p.kill()
            client.p.wait()
        probe = await ActorSystem("/job:probe/task:0", listen=False).start()
        try:
            master = probe.ref(spec["worker"][0], "master")
            worker1 = probe.ref(spec["worker"][1], "worker")
            for _ in range(int(GUARD_S / 0.05)):
                sessions = (await master.call("stats"))["sessions_open"]
                partitions = (await worker1.call("stats"))["partitions"]
                if sessions == 0 and partitions == 0:
                    break
                await asyncio.sleep(0.05)
            assert (sessions, partitions) == (0, 0)
        finally:
            await probe.shutdown()
