"""Members of a collective that issued different collectives fail, never hang.

Two workers that traced different functions issue collectives with
different instance keys: each sends the other its header and waits for the
other's, which never comes (the other waits on its own key). Before, both
waited for ever, a warning every stall time. Now the stall check finds the
cross wait (collective.stall) and, when it is still there at the next check,
every member fails with ``InvalidArgumentError`` naming both sides and
their instance keys (with a ``timeout``, at its deadline, if that comes
first); the next collective on the same servers runs.

The workers are ``python -m distrib.server`` processes (free ports, stopped
by pid; ``DISTRIB_COLLECTIVE_STALL_S`` small, so the bound of two stall
times is short); the test process is only a client running each worker's
own graph (between-graph, as MultiWorkerMirroredStrategy does). Each test
uses its own group key on the module's three servers.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

pytestmark = pytest.mark.slow
GUARD_S = 60   # hang guard only: the failure comes after two stall times (0.5 s each)


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    spec = cluster_spec(worker=3)
    cfg = write_cluster(tmp_path_factory.mktemp("mismatch"), spec)
    env = {"DISTRIB_COLLECTIVE_STALL_S": "0.5"}
    procs = []
    try:
        procs.extend(cli_task(cfg, "worker", t, **env) for t in range(3))
        yield [f"distrib://{a}" for a in spec["worker"]]
    finally:
        for p in procs:
            p.stop()


def _graph(t: int, n: int, group: int, instance: int, size: int, hint: str,
           timeout: float) -> tuple:
    g = dt.Graph()
    with g.as_default(), dt.device(f"/job:worker/task:{t}"):
        x = dt.constant(np.ones(size, np.float32) * (t + 1))
        y = dt.collective.all_reduce(x, n, group, instance, communication_hint=hint,
                                     timeout=timeout)
    return g, y


async def _run(targets: list[str], n: int, group: int, keys: list[int], size: int = 4,
               hint: str = "auto", timeout: float = 0) -> list:
    """Worker t runs one all-reduce of instance key ``keys[t]`` (all at once)."""
    async def one(t: int) -> object:
        g, y = _graph(t, n, group, keys[t], size, hint, timeout)
        async with dt.Session(targets[t], graph=g) as sess:
            return await sess.run(y)
    return await asyncio.wait_for(asyncio.gather(*(one(t) for t in range(n)),
                                                 return_exceptions=True), GUARD_S)


def _assert_mismatch_named(results: list, keys: set[int]) -> None:
    """Every member failed with the mismatch, naming both sides (two tasks)
    and both instance keys."""
    for res in results:
        assert isinstance(res, InvalidArgumentError), res
        text = str(res)
        assert "collective mismatch" in text, text
        assert all(f"instance_key={k} " in text for k in keys), text
        assert len({t for t in range(3) if f"/task:{t}/" in text}) == 2, text


@pytest.mark.parametrize("case", ["forming", "formed", "ring"])
async def test_two_members_on_different_instance_keys_fail_both_naming_both(
        targets, case) -> None:
    group = {"forming": 11, "formed": 12, "ring": 13}[case]
    size, hint = (100_000, "ring") if case == "ring" else (4, "auto")
    if case == "formed":   # the group formed and ran: the fast path (collective.direct)
        for res in await _run(targets, 2, group, [1, 1]):
            np.testing.assert_array_equal(res, np.full(4, 3.0, np.float32))
    res = await _run(targets, 2, group, [100, 101], size, hint)
    _assert_mismatch_named(res, {100, 101})
    # a failed collective poisons nothing: the next one runs on the same servers
    for out in await _run(targets, 2, group, [200, 200], size, hint):
        np.testing.assert_array_equal(out, np.full(size, 3.0, np.float32))


async def test_one_member_of_three_on_another_key_fails_every_member(targets) -> None:
    res = await _run(targets, 3, 14, [300, 301, 300])
    _assert_mismatch_named(res, {300, 301})
    assert all("/task:1/" in str(r) for r in res)   # the odd one is named on every side
    for out in await _run(targets, 3, 14, [400, 400, 400]):
        np.testing.assert_array_equal(out, np.full(4, 6.0, np.float32))


@pytest.mark.parametrize("case", ["forming", "formed"])
async def test_a_mismatch_under_a_timeout_fails_every_side_as_a_mismatch(targets, case) -> None:
    # with a timeout the stall check runs once, at half of it; at the deadline it
    # runs again, so the error is the mismatch, not a DeadlineExceededError
    group = {"forming": 15, "formed": 16}[case]
    if case == "formed":   # the fast path's watchdog (collective.direct)
        for res in await _run(targets, 2, group, [1, 1], timeout=2.0):
            np.testing.assert_array_equal(res, np.full(4, 3.0, np.float32))
    res = await _run(targets, 2, group, [500, 501], timeout=1.0)
    _assert_mismatch_named(res, {500, 501})
