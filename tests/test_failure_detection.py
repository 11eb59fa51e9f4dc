"""Failure detection: a task that stops answering is declared dead after three
missed heartbeats, and every step that needs it fails naming it, with the
default config (no ``operation_timeout_s``).

The cluster tests run CLI tasks with ``DISTRIB_HEARTBEAT_S=0.2`` (so three
missed heartbeats take 0.6 s) and bound each step with ``asyncio.wait_for``
as a hang guard only. The unit tests drive ``FailureDetector.check`` with a
stand-in connection, whose bytes received the test sets.
"""
from __future__ import annotations

import asyncio
import signal
import time

import numpy as np
import pytest

import distrib as dt
from distrib.errors import UnavailableError
from distrib.runtime.actors.failure_detector import MISSED_HEARTBEATS, FailureDetector, heartbeat_s
from distrib.runtime.actors.system import ActorSystem
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

HEARTBEAT_S = 0.2
GUARD_S = 30   # hang guard: detection takes 3-3.25 heartbeats (0.6-0.65 s) here


@pytest.fixture(autouse=True)
def fast_heartbeats(monkeypatch) -> None:
    # read by every actor system started after this: ours and the children's
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", str(HEARTBEAT_S))


def pinned_sum(task: str):
    g = dt.Graph()
    with g.as_default(), dt.device(task):
        out = dt.reduce_sum(dt.constant(np.arange(4, dtype=np.float32)))
    return g, out


def cross_graph():
    """worker 0 makes a tensor, worker 1 reduces it: a step needs both."""
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:0"):
            x = dt.constant(np.arange(6, dtype=np.float32), name="x")
        with dt.device("/job:worker/task:1"):
            s = dt.reduce_sum(x * 2.0)
    return g, s


async def test_a_stopped_worker_fails_the_step_naming_it_with_the_default_config(
        tmp_path) -> None:
    spec = cluster_spec(host=1, worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0) as w0, cli_task(cfg, "worker", 1):
        server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
        try:
            g, s = cross_graph()
            async with dt.Session(server.target, graph=g) as sess:   # no operation timeout
                assert await asyncio.wait_for(sess.run(s), GUARD_S) == 30.0
                w0.p.send_signal(signal.SIGSTOP)
                try:
                    started = time.monotonic()
                    with pytest.raises(UnavailableError) as e:
                        await asyncio.wait_for(sess.run(s), GUARD_S)
                    waited = time.monotonic() - started
                    assert "/job:worker/task:0" in str(e.value), str(e.value)
                    assert "declared dead" in str(e.value), str(e.value)
                    # a bound, not a speed: the guard alone would allow 30 s
                    assert waited < 10 * MISSED_HEARTBEATS * HEARTBEAT_S, waited
                finally:
                    w0.p.send_signal(signal.SIGCONT)
                # back: the next step reconnects and runs
                assert await asyncio.wait_for(sess.run(s), GUARD_S) == 30.0
        finally:
            server.stop()


async def test_a_client_finds_its_stopped_master_dead_and_the_session_recovers(
        tmp_path) -> None:
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0) as master:
        g, out = pinned_sum("/job:worker/task:0")
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            assert await asyncio.wait_for(sess.run(out), GUARD_S) == 6.0
            master.p.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(UnavailableError, match="/job:worker/task:0"):
                    await asyncio.wait_for(sess.run(out), GUARD_S)
            finally:
                master.p.send_signal(signal.SIGCONT)
            assert await asyncio.wait_for(sess.run(out), GUARD_S) == 6.0


async def test_a_busy_task_is_not_declared_dead(tmp_path, monkeypatch) -> None:
    # a step whose kernels run for many heartbeats on the worker: the worker's
    # loop still answers (long kernels run off it), so nobody gives up on it
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", str(HEARTBEAT_S / 2))
    spec = cluster_spec(host=1, worker=1)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0):
        server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
        try:
            # the step must outlast twice the detection bound on any machine: the chain
            # of matmuls grows fourfold until it does (a fast machine runs more of them)
            bound = 2 * MISSED_HEARTBEATS * HEARTBEAT_S / 2
            took = 0.0
            for matmuls in (24, 96, 384, 1536):
                g = dt.Graph()
                with g.as_default(), dt.device("/job:worker/task:0"):
                    x = dt.random_uniform([1500, 1500], seed=1)
                    y = x
                    for _ in range(matmuls):
                        y = dt.matmul(y, x) * (1.0 / 1500)
                    total = dt.reduce_sum(y)
                async with dt.Session(server.target, graph=g) as sess:
                    started = time.monotonic()
                    value = await asyncio.wait_for(sess.run(total), GUARD_S)
                    took = time.monotonic() - started
                    assert np.isfinite(value)
                if took >= bound:
                    break
            assert took >= bound, f"even {matmuls} matmuls took only {took:.2f}s"
        finally:
            server.stop()


async def test_a_system_whose_own_loop_stalled_blames_no_peer(tmp_path) -> None:
    # (the worker, which would rightly find *this* system silent meanwhile,
    # runs without detection: only this side's judgement is under test)
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0, DISTRIB_HEARTBEAT_S="0"):
        system = await ActorSystem("/job:probe/task:0", listen=False).start()
        try:
            worker = system.ref(spec["worker"][0], "worker")
            await asyncio.wait_for(worker.call("stats"), GUARD_S)
            conn = system._out[spec["worker"][0]].conn     # white-box: the one connection
            time.sleep(5 * MISSED_HEARTBEATS * HEARTBEAT_S)  # this loop hears nothing meanwhile
            await asyncio.sleep(2 * HEARTBEAT_S)            # the detector looks again
            assert not conn.closed
            await asyncio.wait_for(worker.call("stats"), GUARD_S)
            assert system._out[spec["worker"][0]].conn is conn
        finally:
            await system.shutdown()


# -- the detector's rule, on a stand-in connection -------------------------------------------

class FakePeer:
    name = "/job:worker/task:7"


class FakeConnection:
    """What the detector reads and does: bytes received, sends, fail."""

    def __init__(self) -> None:
        self.peer = FakePeer()
        self.bytes_received = 0
        self.sent: list = []
        self.failed: BaseException | None = None
        self.closed = False

    def send_nowait(self, msg) -> None:
        self.sent.append(msg)

    def fail(self, exc: BaseException) -> None:
        self.failed = exc
        self.closed = True


def ticks(detector: FailureDetector, conn: FakeConnection, n: int, *, grow: bool,
          start: float = 0.0, deaf_at: int | None = None) -> float:
    now = start
    for i in range(n):
        now += detector.every / 4
        if grow:
            conn.bytes_received += 1
        detector.check(conn, now, beat=i % 4 == 0, deaf=i == deaf_at)
        if conn.closed:
            break
    return now


def test_silence_for_three_heartbeats_is_death_and_names_the_peer() -> None:
    conn = FakeConnection()
    detector = FailureDetector("/job:host/task:0", lambda: [conn], ["hb"], every=1.0)
    detector.check(conn, 0.0, beat=True, deaf=False)      # first sight
    now = ticks(detector, conn, 11, grow=False)            # 2.75 heartbeats of silence
    assert conn.failed is None and now == 2.75
    ticks(detector, conn, 1, grow=False, start=now)        # the third
    assert conn.failed is not None
    msg = str(conn.failed)
    assert "/job:worker/task:7" in msg and "declared dead" in msg
    assert conn.sent.count(["hb"]) >= 3   # a heartbeat went out each heartbeat


def test_bytes_still_arriving_are_life_even_without_a_whole_message() -> None:
    conn = FakeConnection()
    detector = FailureDetector("/job:host/task:0", lambda: [conn], ["hb"], every=1.0)
    ticks(detector, conn, 100, grow=True)                  # 25 heartbeats of a big frame
    assert conn.failed is None


def test_a_deaf_tick_restarts_every_clock() -> None:
    conn = FakeConnection()
    detector = FailureDetector("/job:host/task:0", lambda: [conn], ["hb"], every=1.0)
    detector.check(conn, 0.0, beat=True, deaf=False)
    # silent all along, but at the 10th tick this system itself had been stalled
    ticks(detector, conn, 21, grow=False, deaf_at=9)
    assert conn.failed is None
    ticks(detector, conn, 4, grow=False, start=5.25)
    assert conn.failed is not None


@pytest.mark.parametrize("raw, expected", [("", 1.0), ("0.5", 0.5), ("0", 0.0)])
def test_heartbeat_setting(monkeypatch, raw, expected) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", raw)
    assert heartbeat_s() == expected


@pytest.mark.parametrize("raw", ["-1", "soon", "inf", "nan"])
def test_a_bad_heartbeat_setting_is_refused_naming_the_variable(monkeypatch, raw) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", raw)
    with pytest.raises(ValueError, match="DISTRIB_HEARTBEAT_S"):
        heartbeat_s()
