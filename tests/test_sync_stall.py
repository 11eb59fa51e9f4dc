"""SyncReplicasOptimizer with a dead, stopped or paused replica (docs/CONTRACT.md,
"Fault tolerance"): without backup replicas the chief waits for it, naming it in the log
every ``DISTRIB_STALL_S``, and goes on when it restarts; with backup replicas the
others go on, and the paused replica's stale gradient is dropped when it resumes.

Real servers on free ports (one ``dt.serve`` per task on the test's loop, so the
ps's accumulators can be inspected); each replica has its own graph and session,
as between-graph replication does, and a restarted replica rebuilds both, as a
restarted process would.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.runtime.state.resources import ConditionalAccumulator, stall_s
from tests.test_sync_replicas import GUARD, Replica

ACC = "w/grad_accum"
TARGET = np.array([1.0, 1.0, 1.0], np.float32)


class Cluster:
    """A ps and ``n`` workers; a worker's server can be stopped and started again."""

    def __init__(self, workers: int) -> None:
        ports = free_ports(1 + workers)
        self.spec = {"ps": [f"localhost:{ports[0]}"],
                     "worker": [f"localhost:{p}" for p in ports[1:]]}
        self.servers: dict[str, contextlib.AbstractAsyncContextManager] = {}
        self.ps = None

    async def start(self, job: str, task: int):
        cm = dt.serve(self.spec, job_name=job, task_index=task)
        core = await cm.__aenter__()
        self.servers[f"{job}:{task}"] = cm
        return core

    async def stop(self, job: str, task: int) -> None:
        await self.servers.pop(f"{job}:{task}").__aexit__(None, None, None)

    async def __aenter__(self) -> Cluster:
        self.ps = await self.start("ps", 0)
        for i in range(len(self.spec["worker"])):
            await self.start("worker", i)
        return self

    async def __aexit__(self, *exc) -> None:
        for key in reversed(list(self.servers)):
            job, task = key.split(":")
            await self.stop(job, int(task))

    def accumulator(self) -> ConditionalAccumulator | None:
        return self.ps.worker.variables.resources.accumulators.get(ACC)


class Loop:
    """A replica's training loop, which can be told to stop after its current step."""

    def __init__(self, rep: Replica, sess, done: asyncio.Event) -> None:
        self.stop = asyncio.Event()
        self.steps = 0
        self.task = asyncio.ensure_future(self._run(rep, sess, done))

    async def _run(self, rep: Replica, sess, done: asyncio.Event) -> int:
        with contextlib.suppress(dt.errors.OutOfRangeError):   # the token queue closed
            while not done.is_set() and not self.stop.is_set():
                await rep.step(sess, TARGET)
                self.steps += 1
        return self.steps

    async def halt(self) -> int:
        self.stop.set()
        return await asyncio.wait_for(self.task, GUARD)


async def until(pred, what: str) -> None:
    try:
        async with asyncio.timeout(GUARD):
            while not await pred():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"no {what} within {GUARD:g}s") from None


async def start_chief(cluster: Cluster, r0: Replica, s0, done: asyncio.Event) -> asyncio.Task:
    chief = r0.opt.get_chief_queue_runner().start(s0, done.is_set)

    # the first take must wait before the replicas start: then the round's quota is
    # met exactly and the initial tokens leave no spare one behind (a spare token
    # would let one replica stand in for a stopped one, as TF allows)
    async def take_waits() -> bool:
        acc = cluster.accumulator()
        return acc is not None and acc.waiting()
    await until(take_waits, "the chief's first take")
    return chief


async def finish(r0: Replica, s0, done: asyncio.Event, chief: asyncio.Task,
                 loops: list[Loop]) -> None:
    done.set()
    await asyncio.wait_for(chief, GUARD)
    await s0.run(r0.opt.sync_token_queue.close())   # releases replicas waiting for a token
    await asyncio.wait_for(asyncio.gather(*(lp.task for lp in loops)), GUARD)


def test_stall_s_reads_DISTRIB_STALL_S(monkeypatch):
    monkeypatch.delenv("DISTRIB_STALL_S", raising=False)
    assert stall_s() == 30.0
    monkeypatch.setenv("DISTRIB_STALL_S", "0.25")
    assert stall_s() == 0.25
    for bad in ("soon", "0", "-1", "nan", "inf"):
        monkeypatch.setenv("DISTRIB_STALL_S", bad)
        with pytest.raises(ValueError, match="DISTRIB_STALL_S"):
            stall_s()
    # the optimizer checks it when it is built, not in the middle of training
    g = dt.Graph()
    with g.as_default(), pytest.raises(ValueError, match="DISTRIB_STALL_S"):
        dt.train.SyncReplicasOptimizer(dt.train.GradientDescentOptimizer(0.1), 2, 2)


def test_gradients_carry_their_replicas_task_and_a_take_names_the_missing():
    spec = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}
    rep = Replica(spec, 1, 2, 2)
    assert rep.opt.replica_id == "/job:worker/task:1"
    nodes = rep.graph.as_graph_def()["nodes"]
    applies = [n for n in nodes if n["op"] == "AccumulatorApplyGradient"]
    takes = [n for n in nodes if n["op"] == "AccumulatorTakeGradient"]
    assert [n["attrs"]["replica"] for n in applies] == ["/job:worker/task:1"]
    assert [n["attrs"]["num_replicas"] for n in takes] == [2]
    # the accumulator's bookkeeping: a stale gradient shows its replica alive but
    # does not count; a replica never heard from is counted as such
    acc = ConditionalAccumulator("a", "float32", [1])
    acc.num_replicas = 3
    acc.global_step = 4
    acc.apply_grad(4, [1.0], "/job:worker/task:0")
    acc.apply_grad(3, [1.0], "/job:worker/task:1")
    assert acc.missing() == "/job:worker/task:1; 1 replica(s) never heard from"
    assert "1 so far from /job:worker/task:0 x1" in acc.describe_wait(3)
    assert acc.counted["/job:worker/task:0"] == 1 and acc.stale["/job:worker/task:1"] == 1


async def test_a_stopped_replica_stalls_the_chief_which_names_it_until_it_restarts(
        monkeypatch, caplog, shm_snapshot):
    monkeypatch.setenv("DISTRIB_STALL_S", "0.2")
    caplog.set_level(logging.WARNING)
    async with Cluster(2) as cluster:
        spec = cluster.spec
        r0, r1 = Replica(spec, 0, 2, 2), Replica(spec, 1, 2, 2)   # no backup replica
        done = asyncio.Event()
        async with r0.session() as s0:
            s1 = r1.session()
            await r0.start(s0, chief=True)
            await r1.start(s1)
            chief = await start_chief(cluster, r0, s0, done)
            loop0, loop1 = Loop(r0, s0, done), Loop(r1, s1, done)

            async def at_least(n: int) -> bool:
                return await s0.run(r0.gs) >= n
            await until(lambda: at_least(3), "synchronous training")

            # replica 1 stops (its process dies between steps); the chief waits for it
            await loop1.halt()
            await s1.close()
            await cluster.stop("worker", 1)
            caplog.clear()

            def stalls() -> list[str]:
                return [r.getMessage() for r in caplog.records
                        if r.name == "distrib.runtime.state.resources"]

            async def warned_twice() -> bool:
                takes = [m for m in stalls() if "AccumulatorTakeGradient" in m]
                return len(takes) >= 2
            await until(warned_twice, "two stall warnings")
            stalled_at = await s0.run(r0.gs)
            await asyncio.sleep(0.3)
            assert await s0.run(r0.gs) == stalled_at, "the chief must wait for replica 1"
            assert not chief.done() and not loop0.task.done(), "the wait must not fail"
            takes = [m for m in stalls() if "AccumulatorTakeGradient" in m]
            # replica 1, and only it, is named as the one the round waits for
            assert all("not yet from: /job:worker/task:1; it goes on waiting" in m
                       for m in takes), takes
            assert all("2 gradients in accumulator w/grad_accum" in m and
                       "1 so far from /job:worker/task:0 x1" in m for m in takes), takes
            # replica 0 waits for a token: its warning says why the queue is empty
            assert any("QueueDequeue" in m and "sync_token_q" in m and
                       "waits for /job:worker/task:1" in m for m in stalls()), stalls()
            assert any("chief: the aggregation step has waited" in r.getMessage()
                       for r in caplog.records)

            # the replica's process restarts: a new server on the same address, a new
            # graph and session; it takes the current global step and rejoins
            before = cluster.accumulator().counted["/job:worker/task:1"]
            await cluster.start("worker", 1)
            r1 = Replica(spec, 1, 2, 2)
            async with r1.session() as s1:
                await r1.start(s1)
                loop1 = Loop(r1, s1, done)
                await until(lambda: at_least(stalled_at + 3), "training after the restart")
                assert loop1.steps >= 2
                # the same replica as before (its task), now counted again
                assert cluster.accumulator().counted["/job:worker/task:1"] > before
                await finish(r0, s0, done, chief, [loop0, loop1])
    assert {n for n in os.listdir("/dev/shm")} - shm_snapshot == set()


async def test_backup_replicas_go_on_without_a_stopped_one_and_drop_its_stale_gradient(
        shm_snapshot):
    async with Cluster(3) as cluster:
        spec = cluster.spec
        reps = [Replica(spec, i, 2, 3) for i in range(3)]   # aggregate 2 of 3: one backup
        done = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            sess = [await stack.enter_async_context(r.session()) for r in reps]
            await reps[0].start(sess[0], chief=True)
            for r, s in zip(reps[1:], sess[1:]):
                await r.start(s)
            r0, s0 = reps[0], sess[0]
            chief = await start_chief(cluster, r0, s0, done)
            loops = [Loop(r, s, done) for r, s in zip(reps, sess)]

            async def at_least(n: int) -> bool:
                return await s0.run(r0.gs) >= n
            await until(lambda: at_least(3), "synchronous training")

            # replica 2 pauses: training goes on without it
            await loops[2].halt()
            paused_at = int(await sess[2].run(reps[2].local_step))
            await until(lambda: at_least(paused_at + 3), "training without replica 2")

            # it resumes with a gradient computed at its old local step: dropped, not
            # counted, however far off it is; then it takes a token and rejoins
            acc = cluster.accumulator()
            me = "/job:worker/task:2"
            counted, stale = acc.counted[me], acc.stale[me]
            w_before, resumed_at = await s0.run([r0.w, r0.gs])
            await asyncio.wait_for(reps[2].step(sess[2], np.full(3, 1e6, np.float32)), GUARD)
            assert acc.stale[me] == stale + 1 and acc.counted[me] == counted
            assert np.abs(await s0.run(r0.w) - w_before).max() < 1.0   # no 1e6 pull
            # it rejoins: its local step catches up with the global step (whether its
            # next gradients count is a race it may keep losing: it is a backup)
            async with asyncio.timeout(GUARD):
                while await sess[2].run(reps[2].local_step) < resumed_at:
                    await reps[2].step(sess[2], TARGET)
            await finish(r0, s0, done, chief, loops[:2])
    assert {n for n in os.listdir("/dev/shm")} - shm_snapshot == set()
