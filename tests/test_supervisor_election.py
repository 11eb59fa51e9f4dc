"""The Supervisor's chief role is elected in a cluster of a ps and workers:
it moves when the chief dies, chief-only work (checkpoints) moves with it,
an old chief is fenced off, and a restarted chief rejoins as a non-chief
without restoring a checkpoint over the live variables.

Real servers (one per task, in this process) on loopback; the heartbeat is
0.3 s, so a lease lasts 0.9 s. Waits are bounded (hang guards, not timings).
"""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.errors import AbortedError, FencedError
from distrib.train.chief.checkpoint_fence import directory_term
from tests.peers.election import GUARD_S, ps_and_two_workers, until


@pytest.fixture
def cluster(monkeypatch):
    yield from ps_and_two_workers(monkeypatch)


def model(cluster: dt.ClusterSpec, index: int):
    g = dt.Graph()
    with g.as_default(), dt.device(dt.train.replica_device_setter(
            cluster=cluster, worker_device=f"/job:worker/task:{index}")):
        w = dt.Variable(np.zeros(4, np.float32), name="w")
        gs = dt.train.get_or_create_global_step()
        loss = dt.reduce_sum(dt.square(w - 1.0))
        train = dt.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        saver = dt.train.Saver(max_to_keep=50)
    return g, gs, train, saver


def supervisor(cluster, index: int, logdir: str, preferred: bool) -> tuple:
    g, gs, train, saver = model(cluster, index)
    sv = dt.train.Supervisor(graph=g, is_chief=preferred, logdir=logdir, saver=saver,
                             global_step=gs, save_model_secs=0.3, recovery_wait_secs=0.1)
    return sv, gs, train


async def test_the_chief_role_moves_when_the_chief_dies_and_the_old_chief_is_fenced(
        cluster, tmp_path) -> None:
    spec, servers = cluster
    logdir = str(tmp_path / "logs")
    sv0, gs0, train0 = supervisor(spec, 0, logdir, preferred=True)
    sv1, gs1, train1 = supervisor(spec, 1, logdir, preferred=False)
    target = {i: servers[("worker", i)].target for i in range(2)}
    async with sv0.managed_session(target[0]) as s0:
        async with sv1.managed_session(target[1]) as s1:
            assert sv0.is_chief and not sv1.is_chief
            for _ in range(5):
                await s0.run(train0)
                await s1.run(train1)
            await until(lambda: directory_term(logdir) == 1, "the chief's first checkpoint")
            # worker 0 "dies": its campaign stops without resigning, its steps stop
            sv0._role.election._task.cancel()
            await until(lambda: sv1.is_chief, "a new chief")
            assert not sv0.is_chief           # its lease ran out by its own clock
            assert sv1._role.term == 2
            step = int(await s1.run(gs1))
            await until(lambda: directory_term(logdir) == 2, "the new chief's checkpoint")
            latest = dt.train.latest_checkpoint(logdir)
            assert latest is not None and int(latest.rsplit("-", 1)[1]) >= step
            for _ in range(3):
                await s1.run(train1)
            # the old chief wakes up and tries its chief-only writes: both fenced
            with pytest.raises(FencedError) as save_refused:
                await sv0._save_checkpoint(s0)
            with pytest.raises(FencedError) as init_refused:
                await s0.run(sv0.init_op, options={"fencing_term": 1})
            assert isinstance(save_refused.value, AbortedError)
            assert isinstance(init_refused.value, AbortedError)
            assert int(await s1.run(gs1)) >= step + 3   # the fenced init wrote nothing


async def test_a_restarted_chief_rejoins_as_a_non_chief_and_restores_nothing(
        cluster, tmp_path) -> None:
    spec, servers = cluster
    logdir = str(tmp_path / "logs")
    sv0, gs0, train0 = supervisor(spec, 0, logdir, preferred=True)
    sv1, gs1, train1 = supervisor(spec, 1, logdir, preferred=False)
    target = {i: servers[("worker", i)].target for i in range(2)}
    async with sv1_session(sv1, sv0, target) as (s0, s1):
        for _ in range(10):
            await s0.run(train0)
        await until(lambda: dt.train.latest_checkpoint(logdir) is not None, "a checkpoint")
        sv0._role.election._task.cancel()              # the chief dies...
        await until(lambda: sv1.is_chief, "a new chief")
        for _ in range(20):                            # ...training goes on past the checkpoint
            await s1.run(train1)
        live = int(await s1.run(gs1))
        # worker 0 restarts: a new Supervisor (a new incarnation), preferred as before
        sv0b, gs0b, train0b = supervisor(spec, 0, logdir, preferred=True)
        async with sv0b.managed_session(target[0]) as s0b:
            assert not sv0b.is_chief and sv1.is_chief
            assert int(await s0b.run(gs0b)) >= live   # the live variables, not a checkpoint
            await s0b.run(train0b)
        assert int(await s1.run(gs1)) >= live + 1


class sv1_session:
    """Both workers' managed sessions, worker 0 (the chief) first."""

    def __init__(self, sv1, sv0, target) -> None:
        self.sv0, self.sv1, self.target = sv0, sv1, target

    async def __aenter__(self):
        self.c0 = self.sv0.managed_session(self.target[0])
        s0 = await self.c0.__aenter__()
        self.c1 = self.sv1.managed_session(self.target[1])
        s1 = await self.c1.__aenter__()
        return s0, s1

    async def __aexit__(self, *exc):
        await self.c1.__aexit__(*exc)
        await self.c0.__aexit__(*exc)


def test_the_role_is_fixed_without_a_ps_job(tmp_path) -> None:
    # one task, no ps: nothing to elect, the role is what the script says (TF)
    async def run() -> None:
        g = dt.Graph()
        with g.as_default():
            v = dt.Variable(1.0, name="v")
        sv = dt.train.Supervisor(graph=g, is_chief=True, logdir=str(tmp_path))
        async with sv.managed_session("") as sess:
            assert sv.is_chief and sv._role.election is None
            assert float(await sess.run(v)) == 1.0
        assert not os.path.exists(os.path.join(str(tmp_path), "chief_term"))
    asyncio.run(run())


# -- a ps that restarts: the chief restores it, every managed session rides through ----------

async def test_a_restarted_ps_is_restored_by_the_chief_and_both_workers_ride_through(
        tmp_path, monkeypatch) -> None:
    from tests.peers.cli_cluster import cli_task, write_cluster
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "2")
    p, w0, w1 = free_ports(3)
    spec_dict = {"ps": [f"localhost:{p}"], "worker": [f"localhost:{w0}", f"localhost:{w1}"]}
    spec = dt.ClusterSpec(spec_dict)
    cfg = write_cluster(tmp_path, spec_dict)
    logdir = str(tmp_path / "logs")
    ps = cli_task(cfg, "ps", 0)
    workers = [dt.Server(spec, job_name="worker", task_index=i) for i in range(2)]
    try:
        sv0, gs0, train0 = supervisor(spec, 0, logdir, preferred=True)
        sv1, gs1, train1 = supervisor(spec, 1, logdir, preferred=False)
        target = {i: workers[i].target for i in range(2)}
        async with sv1_session(sv1, sv0, target) as (s0, s1):
            for _ in range(10):
                await s0.run(train0)
                await s1.run(train1)
            await until(lambda: _ckpt_step(logdir) >= 10, "a checkpoint past step 10")
            before = int(await s0.run(gs0))
            saved = _ckpt_step(logdir)
            ps.kill()
            ps = cli_task(cfg, "ps", 0)              # a new, empty process on the same port

            async def train_on(sess, op, n: int) -> None:
                for _ in range(n):
                    await asyncio.wait_for(sess.run(op), GUARD_S)

            await asyncio.gather(train_on(s0, train0, 5), train_on(s1, train1, 5))
            after = int(await s1.run(gs1))
            # the ps came back from the newest checkpoint (at most one interval old),
            # and the ten steps after the restart all counted
            assert saved + 10 <= after <= before + 10, (saved, before, after)
            assert sv0.is_chief and not sv1.is_chief
    finally:
        ps.stop()
        for s in workers:
            s.stop()


def _ckpt_step(logdir: str) -> int:
    latest = dt.train.latest_checkpoint(logdir)
    return -1 if latest is None else int(latest.rsplit("-", 1)[1])


def test_an_uninitialized_variable_outside_the_model_fails_the_step_at_once(tmp_path) -> None:
    # the managed session retries a step only while the model itself recovers:
    # a variable the Supervisor does not manage stays a FailedPreconditionError
    from distrib.errors import FailedPreconditionError

    async def run() -> None:
        g = dt.Graph()
        with g.as_default():
            dt.Variable(1.0, name="v")
            outside = dt.Variable(2.0, name="outside", collections=[])
            read = outside.read_value()
        sv = dt.train.Supervisor(graph=g, is_chief=True, logdir=str(tmp_path))
        async with sv.managed_session("") as sess:
            with pytest.raises(FailedPreconditionError, match="outside"):
                await asyncio.wait_for(sess.run(read), GUARD_S)
    asyncio.run(run())


async def test_a_chief_started_long_before_its_ps_still_initializes_the_model(
        tmp_path, monkeypatch) -> None:
    # the preferred chief cannot reach the arbiter (the ps) for longer than it
    # waits for its role: it waits as a non-chief, and prepares the model
    # itself once the role is granted
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    p, w0, w1 = free_ports(3)
    spec = dt.ClusterSpec({"ps": [f"localhost:{p}"],
                           "worker": [f"localhost:{w0}", f"localhost:{w1}"]})
    workers = [dt.Server(spec, job_name="worker", task_index=i) for i in range(2)]
    ps = None
    try:
        sv0, gs0, train0 = supervisor(spec, 0, str(tmp_path / "logs"), preferred=True)
        # the context manager is held: an unreferenced one is an async generator that
        # the collector may finalize mid-test, which stops the Supervisor and closes
        # its session (the test failed so once in a while)
        managed = sv0.managed_session(workers[0].target)
        opening = asyncio.ensure_future(managed.__aenter__())
        await asyncio.sleep(3.0)               # > two leases (1.8 s) without a ps
        assert not opening.done()
        ps = await asyncio.to_thread(dt.Server, spec, job_name="ps", task_index=0)
        s0 = await asyncio.wait_for(opening, GUARD_S)
        try:
            assert sv0.is_chief
            await s0.run(train0)
            assert int(await s0.run(gs0)) == 1
        finally:
            await managed.__aexit__(None, None, None)   # stop (the final save), then close
    finally:
        for s in workers + ([ps] if ps is not None else []):
            s.stop()
