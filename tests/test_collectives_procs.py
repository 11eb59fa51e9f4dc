"""dt.collective between real processes: over shared memory (the default
between tasks of one host) and forced TCP (``DISTRIB_TRANSPORT=tcp``), and
the failure rules that need a process to die: a killed participant fails the
others within the heartbeat bound (``DISTRIB_HEARTBEAT_S`` x 3), never a
hang, and a restarted one rejoins: the next collective runs.

Each worker is ``python -m distrib.server`` (free ports, stopped by pid);
the test process is only a client: each worker runs its own graph through
its own session (between-graph, as MultiWorkerMirroredStrategy does).
"""
from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import distrib as dt
from distrib.errors import UnavailableError
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

HEARTBEAT_S = 0.2
GUARD_S = 30   # hang guard only


def _graph(t: int, n: int, instance: int, size: int, hint: str = "auto") -> tuple:
    g = dt.Graph()
    with g.as_default(), dt.device(f"/job:worker/task:{t}"):
        x = dt.constant(np.arange(size, dtype=np.float32) * (t + 1))
        y = dt.collective.all_reduce(x, n, 1, instance, communication_hint=hint)
        z = dt.collective.all_gather(x, n, 1, instance + 1000)
    return g, [y, z]


async def _run(targets: list[str], who: list[int], n: int, instance: int, size: int,
               hint: str = "auto") -> list:
    async def one(t: int) -> object:
        g, fetches = _graph(t, n, instance, size, hint)
        async with dt.Session(targets[t], graph=g) as sess:
            return await sess.run(fetches)
    return await asyncio.wait_for(asyncio.gather(*(one(t) for t in who),
                                                 return_exceptions=True), GUARD_S)


def _check(results: list, n: int, size: int) -> None:
    base = np.arange(size, dtype=np.float32)
    for res in results:
        assert not isinstance(res, BaseException), res
        y, z = res
        np.testing.assert_array_equal(y, base * sum(range(1, n + 1)))
        np.testing.assert_array_equal(z, np.concatenate([base * (t + 1) for t in range(n)]))


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["auto", "tcp"])
async def test_collectives_between_processes_over_shm_and_tcp(tmp_path, transport) -> None:
    n = 3
    spec = cluster_spec(worker=n)
    cfg = write_cluster(tmp_path, spec)
    env = {"DISTRIB_TRANSPORT": transport, "DISTRIB_COLLECTIVE_SEGMENT_BYTES": "65536"}
    procs = [cli_task(cfg, "worker", t, **env) for t in range(n)]
    try:
        targets = [f"distrib://{a}" for a in spec["worker"]]
        # direct (small) and ring (several chunks, several segments each)
        for instance, size in ((1, 5), (2, 200_003)):
            _check(await _run(targets, list(range(n)), n, instance, size), n, size)
    finally:
        for p in procs:
            p.stop()


@pytest.mark.slow
async def test_killed_participant_fails_the_others_then_a_restarted_one_rejoins(
        tmp_path) -> None:
    n = 3
    spec = cluster_spec(worker=n)
    cfg = write_cluster(tmp_path, spec)
    env = {"DISTRIB_HEARTBEAT_S": str(HEARTBEAT_S)}
    procs = [cli_task(cfg, "worker", t, **env) for t in range(n)]
    try:
        targets = [f"distrib://{a}" for a in spec["worker"]]
        _check(await _run(targets, [0, 1, 2], n, 1, 100_000), n, 100_000)
        # workers 0 and 1 start the next run; worker 2 never does: it is killed
        waiting = asyncio.ensure_future(_run(targets, [0, 1], n, 1, 100_000))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        killed_at = time.monotonic()
        procs[2].kill()
        res = await waiting
        took = time.monotonic() - killed_at
        for r in res:
            assert isinstance(r, UnavailableError), r
            assert "/job:worker/task:2" in str(r), r
        assert took < 10 * 3 * HEARTBEAT_S, took   # a bound, not a speed
        # a new process of worker 2 (new incarnation) joins: the next run works
        procs[2] = cli_task(cfg, "worker", 2, **env)
        _check(await _run(targets, [0, 1, 2], n, 1, 100_000), n, 100_000)
    finally:
        for p in procs:
            p.stop()


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
async def test_shared_memory_ring_lends_arena_arrays_and_every_member_gets_the_same_bytes(
        tmp_path, n) -> None:
    """Variables and collective outputs live in the shared-memory arena: the
    ring lends them whole instead of copying (collective.ring). A chain of
    collectives, run for several steps (so buffers are lent, released and
    reused), still gives every member the exact, identical result."""
    size = 300_007   # chunks and segments of unequal sizes
    spec = cluster_spec(worker=n)
    cfg = write_cluster(tmp_path, spec)
    env = {"DISTRIB_TRANSPORT": "shm", "DISTRIB_COLLECTIVE_SEGMENT_BYTES": "262144"}
    procs = [cli_task(cfg, "worker", t, **env) for t in range(n)]
    base = np.arange(size, dtype=np.float32) % 1000
    total = sum(range(1, n + 1))
    try:
        sessions, fetches = [], []
        for t in range(n):
            g = dt.Graph()
            with g.as_default(), dt.device(f"/job:worker/task:{t}"):
                v = dt.Variable(base * (t + 1), name="v")
                y1 = dt.collective.all_reduce(v, n, 1, 1)                   # input: a variable
                y2 = dt.collective.all_reduce(y1, n, 1, 2, final_op="Div")  # input: y1
                y3 = dt.collective.all_reduce(y2 * (t + 1), n, 1, 3, merge_op="Max")
                z = dt.collective.all_gather(y2, n, 1, 4)
                init = dt.global_variables_initializer()
            sess = dt.Session(f"distrib://{spec['worker'][t]}", graph=g)
            await sess.run(init)
            sessions.append(sess)
            fetches.append([y1, y2, y3, z])
        for _ in range(3):
            res = await asyncio.wait_for(asyncio.gather(
                *(s.run(f) for s, f in zip(sessions, fetches))), GUARD_S)
            for y1, y2, y3, z in res:
                np.testing.assert_array_equal(y1, base * total)
                np.testing.assert_array_equal(y2, base * total)
                np.testing.assert_array_equal(y3, base * total * n)
                np.testing.assert_array_equal(z, np.concatenate([base * total] * n))
            for other in res[1:]:
                for a, b in zip(res[0], other):
                    assert a.tobytes() == b.tobytes()
        for s in sessions:
            await s.close()
    finally:
        for p in procs:
            p.stop()
