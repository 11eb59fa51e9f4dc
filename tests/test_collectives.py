"""dt.collective against numpy, and its failure rules, on in-process servers.

Every task is a real server (``dt.serve``) on the test's loop, so the wide
matrix (ops x dtypes x sizes x group sizes) runs in seconds; the
multi-process cases (shared memory against forced TCP, a killed or
restarted participant) are in test_collectives_procs.py.

Values are small integers, so sums and products are exact in every dtype and
the results can be compared exactly; every participant must get the very
same bytes (the ring and the direct round both guarantee it).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import AsyncIterator

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.errors import AbortedError, DeadlineExceededError, InvalidArgumentError
from distrib.runtime.collective.ring import segments

GUARD_S = 30   # hang guard only


@contextlib.asynccontextmanager
async def workers(n: int) -> AsyncIterator[list]:
    spec = {"worker": [f"localhost:{p}" for p in free_ports(n)]}
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(dt.serve(spec, "worker", i)) for i in range(n)]


def _inputs(n: int, size: int, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-3, 4, size).astype(dtype) for _ in range(n)]


def _expected(op: str, xs: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(xs)
    if op == "gather":
        return np.concatenate(xs)
    merge, final = op.split("/")
    out = {"Add": np.sum, "Mul": np.prod, "Min": np.min, "Max": np.max}[merge](stack, axis=0)
    out = out.astype(xs[0].dtype)
    if final == "Div":
        n = len(xs)
        if out.dtype.kind in "iu":
            out = (np.sign(out) * (np.abs(out) // n)).astype(out.dtype)
        else:
            out = (out / n).astype(out.dtype)
    return out


OPS = ["Add/Id", "Mul/Id", "Min/Id", "Max/Id", "Add/Div", "gather"]
DTYPES = ["float32", "float64", "int32", "int64", "float16"]
# 1 element; fewer than the group; not divisible by it; past the direct limit (ring)
SIZES = [1, 3, 1001, 20003]


def _build(n: int, cases: list[tuple], task_of: callable) -> tuple[dt.Graph, list]:
    g = dt.Graph()
    outs = []
    with g.as_default():
        for key, (op, dtype, size, hint) in enumerate(cases, start=1):
            xs = _inputs(n, size, dtype, key)
            row = []
            for r in range(n):
                with dt.device(task_of(r)):
                    x = dt.constant(xs[r])
                    if op == "gather":
                        y = dt.collective.all_gather(x, n, 1, key, communication_hint=hint)
                    else:
                        merge, final = op.split("/")
                        y = dt.collective.all_reduce(x, n, 1, key, merge, final,
                                                     communication_hint=hint)
                row.append(y)
            outs.append((op, xs, row))
    return g, outs


def _check(results: list, outs: list, cases: list) -> None:
    k = 0
    for (op, xs, row), case in zip(outs, cases):
        want = _expected(op, xs)
        for r in range(len(row)):
            got = results[k]
            k += 1
            assert got.dtype == want.dtype, case
            np.testing.assert_array_equal(got, want, err_msg=f"{case} rank {r}")


@pytest.mark.parametrize("n", [2, 3, 4])
async def test_collectives_match_numpy_for_every_op_dtype_and_size(n: int, monkeypatch) -> None:
    # small segments: the ring's larger tensors go in several segments per chunk
    monkeypatch.setenv("DISTRIB_COLLECTIVE_SEGMENT_BYTES", "4096")
    cases = [(op, dtype, size, hint) for op in OPS for dtype in DTYPES for size in SIZES
             for hint in (["auto", "ring"] if size <= 3 else ["auto"])]
    async with workers(n) as servers:
        g, outs = _build(n, cases, lambda r: f"/job:worker/task:{r}")
        async with dt.Session(servers[0].target, graph=g) as sess:
            fetches = [y for _, _, row in outs for y in row]
            for _ in range(2):   # the second run pairs with the second run (seq 1)
                results = await asyncio.wait_for(sess.run(fetches), GUARD_S)
                _check(results, outs, cases)


async def test_two_devices_of_one_task_are_two_participants() -> None:
    cases = [("Add/Id", "float32", 5000, "ring"), ("gather", "int32", 3, "auto")]
    async with workers(1) as servers:
        g, outs = _build(2, cases, lambda r: f"/job:worker/task:0/device:CPU:{r}")
        async with dt.Session(servers[0].target, graph=g) as sess:
            results = await asyncio.wait_for(sess.run([y for _, _, row in outs for y in row]),
                                             GUARD_S)
        _check(results, outs, cases)


async def test_broadcast_reaches_every_receiver() -> None:
    async with workers(3) as servers:
        value = np.arange(12, dtype=np.float64).reshape(3, 4)
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:worker/task:1"):
                sent = dt.collective.broadcast_send(dt.constant(value), [3, 4], dt.float64,
                                                    3, 7, 1)
            got = []
            for t in (0, 2):
                with dt.device(f"/job:worker/task:{t}"):
                    got.append(dt.collective.broadcast_recv([3, 4], dt.float64, 3, 7, 1))
        async with dt.Session(servers[0].target, graph=g) as sess:
            out = await asyncio.wait_for(sess.run([sent, *got]), GUARD_S)
        for o in out:
            np.testing.assert_array_equal(o, value)


def _pair(servers: list, shapes: list[tuple], instance: int, timeout: float = 0,
          who: tuple = (0, 1)) -> list:
    """Between-graph: one graph and session per task (as MWMS does)."""
    runs = []
    for t in who:
        g = dt.Graph()
        with g.as_default(), dt.device(f"/job:worker/task:{t}"):
            y = dt.collective.all_reduce(dt.ones(shapes[t]), 2, 3, instance, timeout=timeout)
        runs.append((servers[t].target, g, y))
    return runs


async def _run_all(runs: list) -> list:
    async def one(target: str, g: dt.Graph, y: dt.Tensor) -> object:
        async with dt.Session(target, graph=g) as sess:
            return await sess.run(y)
    return await asyncio.wait_for(asyncio.gather(*(one(*r) for r in runs),
                                                 return_exceptions=True), GUARD_S)


async def test_mismatch_fails_every_participant_naming_both_then_the_next_runs() -> None:
    async with workers(2) as servers:
        res = await _run_all(_pair(servers, [(4,), (5,)], instance=1))
        for r in res:
            assert isinstance(r, InvalidArgumentError), r
            msg = str(r)
            assert "shape" in msg, msg
            assert "/job:worker/replica:0/task:0/device:CPU:0" in msg, msg
            assert "/job:worker/replica:0/task:1/device:CPU:0" in msg, msg
        # poisons nothing: the next collective on the same servers runs
        res = await _run_all(_pair(servers, [(4,), (4,)], instance=2))
        for r in res:
            np.testing.assert_array_equal(r, np.full(4, 2.0, np.float32))


async def test_mismatched_dtypes_after_earlier_collectives_name_both_sides() -> None:
    """TF fails every participant of a mismatched collective with an error that
    names what differs. Ours, after earlier collectives (the group formed), failed
    a participant with ``CollectiveReduce failed: KeyError: (1, -1)`` when the
    peer's header and the peer's abort (it saw the mismatch first) came in one
    read: the waiter resumed on a mailbox the abort had emptied. The peer (task 1)
    is played here by its two messages, delivered back to back as such a read does."""
    from distrib import errors
    from distrib.runtime.collective.instance import HEADER_TAG
    async with workers(2) as servers:
        for instance in (1, 2):   # earlier collectives: same group, other instances
            res = await _run_all(_pair(servers, [(4,), (4,)], instance=instance))
            assert all(isinstance(r, np.ndarray) for r in res), res
        engine = servers[0].worker.collectives
        group = engine.groups[3]
        me, peer = group.members
        # task 0 issues instance 3 in float32 and waits for task 1's header
        run = asyncio.ensure_future(_run_all(_pair(servers, [(4,), (4,)], instance=3,
                                                   who=(0,))))
        key = (3, group.sig, 3, 0, me.device)
        async with asyncio.timeout(GUARD_S):
            while key not in engine.table.live or not engine.table.live[key].waiting:
                await asyncio.sleep(0.001)
        header = ["CollectiveReduce", "Add", "Id", [4], np.dtype(np.float64).str, "direct", ""]
        mismatch = InvalidArgumentError(
            f"collective mismatch on dtype: {peer.device} issued dtype='<f8' but "
            f"{me.device} issued dtype='<f4'")
        engine.deliver(list(key), engine.system.incarnation,
                       [1, peer.device, peer.task, peer.address, peer.incarnation],
                       HEADER_TAG, [header, np.ones(4)])
        engine.abort_instance(list(key), errors.to_wire(mismatch))
        (got,) = await run
        assert isinstance(got, InvalidArgumentError), got
        assert "dtype" in str(got) and me.device in str(got) and peer.device in str(got), got
        # and the real thing, float32 against float64, names both sides on both
        res = await _run_all([_pair(servers, [(4,), (4,)], instance=4)[0],
                              _dtype_run(servers, 1, np.float64, instance=4)])
        for r in res:
            assert isinstance(r, InvalidArgumentError), r
            assert "dtype" in str(r) and me.device in str(r) and peer.device in str(r), r


def _dtype_run(servers: list, t: int, dtype: type, instance: int) -> tuple:
    g = dt.Graph()
    with g.as_default(), dt.device(f"/job:worker/task:{t}"):
        y = dt.collective.all_reduce(dt.ones([4], dtype=dtype), 2, 3, instance)
    return servers[t].target, g, y


async def test_late_participant_is_named_then_deadline_then_recovery(caplog) -> None:
    async with workers(2) as servers:
        # form the group first: afterwards the late one is known by device
        res = await _run_all(_pair(servers, [(3,), (3,)], instance=5, timeout=5))
        assert all(isinstance(r, np.ndarray) for r in res), res
        caplog.set_level(logging.WARNING, logger="distrib.runtime.collective.engine")
        started = time.monotonic()
        res = await _run_all(_pair(servers, [(3,), (3,)], instance=5, timeout=1.0, who=(0,)))
        waited = time.monotonic() - started
        assert isinstance(res[0], DeadlineExceededError), res
        assert "/job:worker/replica:0/task:1/device:CPU:0" in str(res[0]), res[0]
        assert 0.9 < waited < 10, waited
        warned = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
        assert warned and "/job:worker/replica:0/task:1/device:CPU:0" in warned[0], warned
        # the late one reaches that run now: it fails at once with the same error
        started = time.monotonic()
        res = await _run_all(_pair(servers, [(3,), (3,)], instance=5, timeout=5, who=(1,)))
        assert isinstance(res[0], DeadlineExceededError), res
        assert time.monotonic() - started < 3
        # and the next run of the same instance pairs up again
        res = await _run_all(_pair(servers, [(3,), (3,)], instance=5, timeout=5))
        for r in res:
            np.testing.assert_array_equal(r, np.full(3, 2.0, np.float32))


@pytest.mark.parametrize("formed", [False, True], ids=["forming", "formed"])
async def test_a_step_abort_ends_a_waiting_collective(formed: bool) -> None:
    """Whether the group is still forming (the op runs as a task) or formed (a
    small op takes the engine's direct path, collective/direct.py)."""
    async with workers(2) as servers:
        if formed:
            g = dt.Graph()
            with g.as_default():
                ys = []
                for t in (0, 1):
                    with dt.device(f"/job:worker/task:{t}"):
                        ys.append(dt.collective.all_reduce(dt.ones([2]), 2, 9, 1))
            async with dt.Session(servers[0].target, graph=g) as sess:
                await asyncio.wait_for(sess.run(ys), GUARD_S)   # the group forms
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:worker/task:0"):
                y = dt.collective.all_reduce(dt.ones([2]), 2, 9, 2 if formed else 1)
            with dt.device("/job:worker/task:1"):
                p = dt.placeholder(dt.float32, [None])
                bad = dt.reshape(p, [2])   # fails when run: the step is aborted
        async with dt.Session(servers[0].target, graph=g) as sess:
            with pytest.raises((InvalidArgumentError, AbortedError)):
                await asyncio.wait_for(sess.run([y, bad], {p: np.ones(3, np.float32)}),
                                       GUARD_S)
        engine = servers[0].worker.collectives
        await asyncio.sleep(0.05)
        assert not engine.table.live, engine.table.live   # nothing left behind
        assert not engine.watchdog.ops


def test_segments_cover_the_range_in_order() -> None:
    assert segments(0, 10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert segments(5, 5, 4) == [(5, 5)]


def test_builders_check_their_arguments() -> None:
    g = dt.Graph()
    with g.as_default():
        x = dt.ones([2, 3])
        assert dt.collective.all_gather(x, 4, 1, 1).shape.as_list() == [8, 3]
        with pytest.raises(InvalidArgumentError, match="merge_op"):
            dt.collective.all_reduce(x, 2, 1, 1, merge_op="Sum")
        with pytest.raises(InvalidArgumentError, match="group_size"):
            dt.collective.all_reduce(x, 0, 1, 1)
        with pytest.raises(InvalidArgumentError, match="shape"):
            dt.collective.broadcast_recv([None, 3], dt.float32, 2, 1, 1)
