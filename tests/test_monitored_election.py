"""MonitoredTrainingSession with the Supervisor's election and recovery: in a
cluster of a ps and two workers the chief role moves when the chief dies,
the chief-only hooks (checkpoints) move with it, the old chief is fenced
off, and a restarted chief starts from the live variables, never from a
checkpoint over them.

Real servers (one per task, in this process) on loopback; the heartbeat is
0.3 s, so a lease lasts 0.9 s. Waits are bounded (hang guards, not timings).
"""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import distrib as dt
from distrib.train.chief.checkpoint_fence import directory_term
from tests.peers.election import GUARD_S, ps_and_two_workers, until


@pytest.fixture
def cluster(monkeypatch):
    yield from ps_and_two_workers(monkeypatch)


class Replica:
    def __init__(self, spec: dt.ClusterSpec, index: int, sync: bool = False) -> None:
        self.graph = g = dt.Graph()
        with g.as_default(), dt.device(dt.train.replica_device_setter(
                cluster=spec, worker_device=f"/job:worker/task:{index}")):
            self.w = dt.Variable(np.zeros(4, np.float32), name="w")
            self.gs = dt.train.get_or_create_global_step()
            loss = dt.reduce_sum(dt.square(self.w - 1.0))
            opt = dt.train.GradientDescentOptimizer(0.01)
            if sync:
                opt = dt.train.SyncReplicasOptimizer(opt, replicas_to_aggregate=1,
                                                     total_num_replicas=2)
            self.opt = opt
            self.train = opt.minimize(loss, global_step=self.gs)
            dt.train.Saver(max_to_keep=100)   # the graph's SAVERS: the checkpoint hook's

    def mts(self, target: str, preferred: bool, logdir: str, hooks=()) -> dt.train.MonitoredSession:
        with self.graph.as_default():
            return dt.train.MonitoredTrainingSession(
                master=target, is_chief=preferred, checkpoint_dir=logdir,
                save_checkpoint_steps=5, hooks=list(hooks), log_step_count_steps=None)


def ckpt_steps(logdir: str) -> list[int]:
    """The global steps of the checkpoints in ``logdir`` (files ``model.ckpt-<step>``)."""
    if not os.path.isdir(logdir):
        return []
    return sorted(int(f.rsplit("-", 1)[1]) for f in os.listdir(logdir)
                  if f.startswith("model.ckpt-") and f.rsplit("-", 1)[1].isdigit())


async def test_the_role_and_the_checkpoints_move_to_the_other_worker(cluster, tmp_path) -> None:
    spec, servers = cluster
    logdir = str(tmp_path / "logs")
    r0, r1 = Replica(spec, 0), Replica(spec, 1)
    target = {i: servers[("worker", i)].target for i in range(2)}
    async with asyncio.timeout(GUARD_S):
        s0 = await r0.mts(target[0], True, logdir)
        try:
            async with r1.mts(target[1], False, logdir) as s1:
                assert s0.is_chief and not s1.is_chief
                for _ in range(12):
                    await s0.run(r0.train)
                    await s1.run(r1.train)
                assert directory_term(logdir) == 1 and ckpt_steps(logdir)
                before = set(ckpt_steps(logdir))
                # worker 0 "dies": its campaign stops without resigning, its steps stop
                s0._creator.role.election._task.cancel()
                await until(lambda: s1.is_chief, "a new chief")
                assert not s0.is_chief      # its own lease ran out by its own clock
                for _ in range(12):
                    await s1.run(r1.train)
                after = set(ckpt_steps(logdir)) - before
                assert after, "the new chief wrote no checkpoint"
                assert directory_term(logdir) == 2
                # the old chief wakes up and steps: its checkpoint hook writes nothing
                live = set(ckpt_steps(logdir))
                for _ in range(6):
                    await s0.run(r0.train)
                assert set(ckpt_steps(logdir)) == live
        finally:
            await s0.close()


async def test_a_restarted_chief_starts_from_the_live_variables(cluster, tmp_path) -> None:
    spec, servers = cluster
    logdir = str(tmp_path / "logs")
    r0, r1 = Replica(spec, 0), Replica(spec, 1)
    target = {i: servers[("worker", i)].target for i in range(2)}
    async with asyncio.timeout(GUARD_S):
        s0 = await r0.mts(target[0], True, logdir)     # the chief initializes the model
        async with r1.mts(target[1], False, logdir) as s1:
            for _ in range(7):
                await s0.run(r0.train)
            await s0.close()
            # the chief left (its session ended: a final save at its step)
            saved = max(ckpt_steps(logdir))
            await until(lambda: s1.is_chief, "worker 1 chief after worker 0 left")
            for _ in range(15):        # training goes on past the checkpoint
                await s1.run(r1.train)
            live = int(await s1.run(r1.gs))
            assert live >= saved + 15
            # worker 0 comes back (a new session, preferred as before): it starts from
            # the variables on the ps (the global step never goes back), as a non-chief
            r0b = Replica(spec, 0)
            async with r0b.mts(target[0], True, logdir) as s0b:
                assert int(await s0b.run(r0b.gs)) >= live
                w = await s0b.run(r0b.w)
                assert float(w[0]) > 0.0
                # it rejoins as a non-chief: the role stays where it is
                assert not s0b.is_chief and s1.is_chief


async def test_sync_replicas_chief_queue_runner_moves_with_the_role(cluster, tmp_path) -> None:
    spec, servers = cluster
    logdir = str(tmp_path / "logs")
    r0, r1 = Replica(spec, 0, sync=True), Replica(spec, 1, sync=True)
    target = {i: servers[("worker", i)].target for i in range(2)}
    async with asyncio.timeout(GUARD_S):
        s0 = await r0.mts(target[0], True, logdir, [r0.opt.make_session_run_hook(True)])
        try:
            async with r1.mts(target[1], False, logdir,
                              [r1.opt.make_session_run_hook(False)]) as s1:
                for _ in range(4):
                    await asyncio.gather(s0.run(r0.train), s1.run(r1.train))
                runner0 = r0.opt.get_chief_queue_runner()
                assert runner0.steps >= 2
                s0._creator.role.election._task.cancel()   # worker 0 "dies"
                await until(lambda: s1.is_chief, "a new chief")
                # worker 1 alone: its own chief queue runner aggregates its gradients
                start = int(await s1.run(r1.gs))
                # (the aggregation runs beside the steps and may trail them, the more so
                # on a loaded machine, and a stale gradient is dropped: bounded extra steps)
                for _ in range(15):
                    await s1.run(r1.train)
                    if int(await s1.run(r1.gs)) >= start + 3:
                        break
                assert int(await s1.run(r1.gs)) >= start + 3
                assert r1.opt.get_chief_queue_runner().steps >= 1   # it runs on worker 1 now
        finally:
            await s0.close()
