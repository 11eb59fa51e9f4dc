"""Cluster execution across processes: the seed's config.json example, a
parameter server shared by concurrent between-graph clients, a large tensor
crossing three tasks over shared memory and TCP, placement errors, and the
rendezvous incarnation check.

Every task but the test's own is a ``python -m distrib.server`` process on
free loopback ports; each is stopped when its test ends.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Iterator

import numpy as np
import pytest

import distrib as dt
from distrib.demo import seed_graph
from distrib.errors import AbortedError, InvalidArgumentError, PeerRestartedError
from distrib.runtime.step.rendezvous import Rendezvous
from tests.helpers import Proc
from tests.peers.cli_cluster import cli_flags_task, cli_task, cluster_spec, write_cluster


@contextlib.contextmanager
def running(procs: list[Proc]) -> Iterator[list[Proc]]:
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()


@contextlib.contextmanager
def host_server(spec: dict, job: str = "host") -> Iterator[dt.Server]:
    server = dt.Server(dt.ClusterSpec(spec), job_name=job, task_index=0)
    try:
        yield server
    finally:
        server.stop()


# -- the seed's config.json example ------------------------------------------------

def seed_expected() -> np.ndarray:
    a = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    b = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    c = a @ b
    return c + np.log(100 + c)


@pytest.fixture
def seed_cluster(tmp_path) -> Iterator[dict]:
    spec = cluster_spec(worker=2, host=1)
    cfg = write_cluster(tmp_path, spec)
    with running([cli_task(cfg, "worker", i) for i in (0, 1)]) as procs:
        assert procs[0].line.startswith("serving /job:worker/task:0 at ")
        yield spec


def test_seed_example_sync_session_matches_numpy(seed_cluster) -> None:
    g, d = seed_graph()
    with host_server(seed_cluster) as server:
        with dt.SyncSession(server.target, graph=g) as sess:
            out = sess.run(d)
            again = sess.run(d)  # second step: cached plan and registrations
    np.testing.assert_allclose(out, seed_expected(), rtol=1e-5)
    np.testing.assert_array_equal(out, again)


async def test_seed_example_async_session_matches_numpy(seed_cluster) -> None:
    g, d = seed_graph()
    with host_server(seed_cluster) as server:
        async with dt.Session(server.target, graph=g) as sess:
            outs = await asyncio.gather(*(sess.run(d) for _ in range(4)))
    for out in outs:
        np.testing.assert_allclose(out, seed_expected(), rtol=1e-5)


# -- a ps's variables in shared memory: read without a copy, updated copy-on-write ----

async def test_ps_variable_read_over_shared_memory_stays_a_snapshot() -> None:
    # The ps keeps a big variable in its shared-memory arena and lends it to
    # the worker (in this process) as it is. A value the client still holds
    # must not change when the ps updates the variable: the update writes the
    # new version elsewhere, by assign_add (copy, then update) and by the
    # optimizer's ApplyGradientDescent (written out of place in one pass).
    spec = cluster_spec(ps=1, worker=1)
    with running([cli_flags_task(spec, "ps", 0)]):
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                v = dt.Variable(np.zeros((128, 256), np.float32), name="v")   # 128 KiB
            bump = v.assign_add(np.ones((128, 256), np.float32))
            with dt.device("/job:worker/task:0"):
                read = dt.reshape(v, [-1])  # a view of what the worker received, fetched
                loss = dt.reduce_sum(v * 1.0)
            step = dt.train.GradientDescentOptimizer(0.5).minimize(loss)     # v -= 0.5
            init = dt.global_variables_initializer()
        async with dt.serve(spec, job_name="worker", task_index=0) as wk:
            async with dt.Session(wk.target, graph=g) as sess:
                await sess.run(init)
                held = await sess.run(read)
                assert not held.flags.writeable            # a view of the ps's memory
                await sess.run(bump)
                assert (held == 0).all()
                again = await sess.run(read)
                assert (again == 1).all()
                await sess.run(step)
                assert (held == 0).all() and (again == 1).all()
                assert (await sess.run(v) == 0.5).all()
                del held, again
                for _ in range(3):                          # nobody holds it now
                    await sess.run(step)
                assert (await sess.run(v) == -1.0).all()


# -- parameter server shared across sessions and graphs -----------------------------

def ps_graph(seed: int):
    """A model on a worker reading a variable on the ps, and an update that
    carries a worker-computed tensor back to the ps (tensors both ways)."""
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:ps/task:0"):
            w = dt.Variable(dt.zeros([3], dtype=dt.float32), name="w")
            counter = dt.Variable(0.0, dtype=dt.float32, name="counter")
        with dt.device(f"/job:worker/task:{seed % 2}"):
            x = dt.constant([1.0, 2.0, 3.0], name="x")
            y = dt.reduce_sum(w * x)          # ps -> worker
            one = dt.ones([], dtype=dt.float32) + 0.0 * y
        inc = counter.assign_add(one)          # worker -> ps
        bump = w.assign_add(x)
        init = dt.global_variables_initializer()
    return g, {"y": y, "inc": inc, "bump": bump, "init": init, "counter": counter, "w": w}


@pytest.fixture
def ps_cluster() -> Iterator[dict]:
    spec = cluster_spec(ps=1, worker=2)
    with running([cli_flags_task(spec, "ps", 0)]
                 + [cli_flags_task(spec, "worker", i) for i in (0, 1)]) as procs:
        assert procs[0].line.startswith("serving /job:ps/task:0 at ")
        yield spec


async def test_between_graph_clients_share_ps_variables(ps_cluster) -> None:
    n = 15
    g0, t0 = ps_graph(0)
    async with dt.Session(f"distrib://{ps_cluster['worker'][0]}", graph=g0) as chief:
        await chief.run(t0["init"])

    async def client(i: int) -> None:
        g, t = ps_graph(i)   # its own graph, same variable names
        async with dt.Session(f"distrib://{ps_cluster['worker'][i]}", graph=g) as sess:
            for _ in range(n):
                await sess.run(t["inc"])

    await asyncio.wait_for(asyncio.gather(client(0), client(1)), 60)
    g2, t2 = ps_graph(1)
    async with dt.Session(f"distrib://{ps_cluster['ps'][0]}", graph=g2) as reader:
        assert await reader.run(t2["counter"]) == pytest.approx(2 * n)
        await reader.run(t2["bump"])
        assert await reader.run(t2["y"]) == pytest.approx(1 + 4 + 9)


# -- a 64 MiB tensor across three tasks ----------------------------------------------

def _new_shm(before: set[str]) -> set[str]:
    try:
        return set(os.listdir("/dev/shm")) - before
    except FileNotFoundError:
        return set()


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_64mib_tensor_crosses_three_tasks_intact(transport, tmp_path, monkeypatch,
                                                 shm_snapshot) -> None:
    env = {} if transport == "auto" else {"DISTRIB_TRANSPORT": "tcp"}
    if transport == "tcp":
        monkeypatch.setenv("DISTRIB_TRANSPORT", "tcp")
    spec = cluster_spec(worker=2, ps=1, client=1)
    cfg = write_cluster(tmp_path, spec)
    n = (64 << 20) // 4
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:0"):
            x = dt.random_uniform([n], seed=7, dtype=dt.float32)
        with dt.device("/job:worker/task:1"):
            y = dt.identity(x)
        with dt.device("/job:ps/task:0"):
            z = dt.identity(y)
        with dt.device("/job:worker/task:0"):
            s = dt.reduce_sum(x)
    with running([cli_task(cfg, "worker", i, **env) for i in (0, 1)]
                 + [cli_task(cfg, "ps", 0, **env)]):
        with host_server(spec, job="client") as server:
            with dt.SyncSession(server.target, graph=g) as sess:
                xv, zv, sv = sess.run([x, z, s])
    assert zv.shape == (n,) and zv.dtype == np.float32
    np.testing.assert_array_equal(zv, xv)
    assert np.float32(xv.sum(dtype=np.float64)) == pytest.approx(sv, rel=1e-3)
    assert _new_shm(shm_snapshot) == set()


# -- placement errors ------------------------------------------------------------------

def test_unknown_job_or_task_is_invalid_argument_listing_tasks_and_session_survives(
        seed_cluster) -> None:
    g, d = seed_graph()
    with g.as_default():
        with dt.device("/job:worker/task:7"):
            bad_task = dt.constant(1.0, name="on_missing_task") * 2.0
        with dt.device("/job:chief/task:0"):
            bad_job = dt.constant(1.0, name="on_missing_job") * 2.0
    with host_server(seed_cluster) as server:
        with dt.SyncSession(server.target, graph=g) as sess:
            with pytest.raises(InvalidArgumentError) as e1:
                sess.run(bad_task)
            assert "/job:worker/task:7" in str(e1.value)
            assert "/job:worker/task:0" in str(e1.value) and "/job:host/task:0" in str(e1.value)
            with pytest.raises(InvalidArgumentError) as e2:
                sess.run(bad_job)
            assert "/job:chief/task:0" in str(e2.value)
            np.testing.assert_allclose(sess.run(d), seed_expected(), rtol=1e-5)
        with dt.SyncSession(server.target, graph=g) as other:
            np.testing.assert_allclose(other.run(d), seed_expected(), rtol=1e-5)


# -- rendezvous incarnations -------------------------------------------------------------

async def test_rendezvous_rejects_tensor_from_a_restarted_sender() -> None:
    rv = Rendezvous("/job:worker/task:1")
    rv.begin(5, {"/job:worker/task:0": 0xA1})
    rv.put(5, "t->w1", np.ones(2), "/job:worker/task:0", 0xB2)   # the sender restarted
    with pytest.raises(PeerRestartedError, match=r"/job:worker/task:0 restarted"):
        await rv.get(5, "t->w1", "/job:worker/task:0", timeout=5)


async def test_rendezvous_accepts_the_expected_incarnation_in_either_order() -> None:
    rv = Rendezvous("/job:worker/task:1")
    rv.begin(6, {"/job:worker/task:0": 0xA1})
    getter = asyncio.ensure_future(rv.get(6, "k", "/job:worker/task:0", timeout=5))
    await asyncio.sleep(0)
    rv.put(6, "k", np.arange(3), "/job:worker/task:0", 0xA1)
    np.testing.assert_array_equal(await getter, np.arange(3))
    rv.put(6, "k2", 7, "/job:worker/task:0", 0xA1)
    assert await rv.get(6, "k2", "/job:worker/task:0", timeout=5) == 7


async def test_tensors_of_steps_that_never_start_or_already_ended_are_not_kept(monkeypatch) -> None:
    from distrib.runtime.step import rendezvous as rendezvous_module
    monkeypatch.setattr(rendezvous_module, "_MAX_EARLY", 8)
    rv = Rendezvous("/job:worker/task:1")
    # early tensors are normal (the sender was quicker than the master's call)...
    rv.put(1, "k", 1, "/job:worker/task:0", 1)
    rv.begin(1, {"/job:worker/task:0": 1})
    assert await rv.get(1, "k", "/job:worker/task:0", timeout=5) == 1
    rv.end(1)
    # ...a late one, after its step ended here, is dropped
    rv.put(1, "k2", np.ones(4), "/job:worker/task:0", 1)
    # and of steps that never start, only the newest _MAX_EARLY are kept
    for step in range(100, 200):
        rv.put(step, "k", np.ones(4), "/job:worker/task:0", 1)
    assert set(rv._slots) == set(range(192, 200))
    monkeypatch.setattr(rendezvous_module, "_EARLY_TTL_S", 0.0)   # and none past their time
    rv.put(300, "k", 1, "/job:worker/task:0", 1)
    assert set(rv._slots) == {300}


async def test_aborted_step_fails_waiting_receives_and_drops_late_tensors() -> None:
    rv = Rendezvous("/job:worker/task:1")
    rv.begin(7, {"/job:worker/task:0": 1})
    getter = asyncio.ensure_future(rv.get(7, "k", "/job:worker/task:0", timeout=30))
    await asyncio.sleep(0)
    rv.abort(7, AbortedError("peer failed", task="/job:worker/task:0"))
    with pytest.raises(AbortedError, match="peer failed"):
        await asyncio.wait_for(getter, 5)
    rv.put(7, "k", 1, "/job:worker/task:0", 1)   # late: dropped, not stored
    with pytest.raises(AbortedError):
        rv.begin(7, {})


def test_tensor_from_a_sender_restarted_since_the_step_began_aborts_it(seed_cluster) -> None:
    """End to end across processes: the master starts a step believing worker 0
    has an older incarnation (what it would see if worker 0 restarted after the
    step began); worker 0's tensor reaches worker 1 carrying its real
    incarnation, and worker 1 fails the step instead of using it. The master
    then forgets its stale view, so the next step works."""
    g, d = seed_graph()
    with host_server(seed_cluster) as server:
        with dt.SyncSession(server.target, graph=g) as sess:
            sess.run(d)
            master = server._core.master           # white-box: the host's master
            state = master._tasks["/job:worker/task:0"]
            state.incarnation ^= 0x5A5A
            with pytest.raises(PeerRestartedError, match=r"/job:worker/task:0 restarted during the step"):
                sess.run(d)
            np.testing.assert_allclose(sess.run(d), seed_expected(), rtol=1e-5)
