"""A step's gradients all-reduced in packs, and small collectives without a task.

Packs (``CollectiveAllReduce.batch_reduce``, MultiWorkerMirroredStrategy's
gradient all-reduce): the gradients, last first, in packs of about
``bytes_per_pack``; the sums are the unpacked path's bit for bit (random
floats, not small integers: a different order of addition would show).
The fast path (collective.direct): once a group is formed, a small collective
is a future the engine completes from the peers' messages, not a task; a
step abort and a cancelled step still end it and leave nothing behind.
Every task is a real server (``dt.serve``) on the test's loop.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.distribute.core.cross_device_ops import (
    CollectiveAllReduce,
    CollectiveKeys,
    ReduceOp,
    pack_by_size,
)
from distrib.errors import AbortedError

GUARD_S = 30   # hang guard only
# an MLP's gradients in creation order: w0, b0, w1, b1, w2, b2
SHAPES = [(300, 200), (200,), (200, 100), (100,), (100, 10), (10,)]


@contextlib.asynccontextmanager
async def workers(n: int) -> AsyncIterator[list]:
    spec = {"worker": [f"localhost:{p}" for p in free_ports(n)]}
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(dt.serve(spec, "worker", i)) for i in range(n)]


def test_packs_take_the_last_gradients_first_and_leave_big_ones_whole() -> None:
    g = dt.Graph()
    with g.as_default():
        ts = [dt.zeros(s) for s in SHAPES]
        unknown = dt.placeholder(dt.float32, [None])
    # bytes: 240000, 800, 80000, 400, 4000, 40
    assert pack_by_size(ts, 10_000) == [[5, 4, 3], [2], [1], [0]]
    assert pack_by_size(ts, 1 << 20) == [[5, 4, 3, 2, 1, 0]]
    assert pack_by_size(ts, 0) == [[5], [4], [3], [2], [1], [0]]
    assert pack_by_size([ts[5], unknown, ts[3]], 1 << 20) == [[2], [1], [0]]
    with g.as_default():
        mixed = [dt.zeros([3], dt.float64), dt.zeros([3]), dt.zeros([3])]
    assert pack_by_size(mixed, 1 << 20) == [[2, 1], [0]]


def test_no_pack_goes_past_the_limit() -> None:
    """With more than two workers the limit is the one-round size: a pack past
    it would go to the ring, whose order of addition is not rank order."""
    g = dt.Graph()
    with g.as_default():
        ts = [dt.zeros([10 * 1024]) for _ in range(3)]   # 40 KiB each
        small = [dt.zeros([n]) for n in (4096, 8192, 4096, 2048)]   # 16, 32, 16, 8 KiB
    assert pack_by_size(ts, 64 * 1024) == [[2], [1], [0]]
    assert pack_by_size(ts, 80 * 1024) == [[2, 1], [0]]   # exactly the limit: one pack
    assert pack_by_size(small, 48 * 1024) == [[3, 2], [1, 0]]
    for limit in (20_000, 48 * 1024, 64 * 1024, 100_000):
        for pack in pack_by_size(small + ts, limit):
            assert len(pack) == 1 or sum(4 * (small + ts)[k].shape.num_elements()
                                         for k in pack) <= limit


def _grads(task: int) -> list[np.ndarray]:
    rng = np.random.default_rng(task)
    return [(rng.standard_normal(s) * 10.0 ** int(rng.integers(-3, 4))).astype(np.float32)
            for s in SHAPES]


async def _batch_reduce(servers: list, bytes_per_pack: int, group_key: int) -> tuple:
    """Each task's results of one batch_reduce (between-graph, as MWMS runs)."""
    async def one(t: int) -> tuple:
        g = dt.Graph()
        device = f"/job:worker/replica:0/task:{t}/device:CPU:0"
        with g.as_default(), dt.device(device):
            ops = CollectiveAllReduce([device], 2, CollectiveKeys(group_key),
                                      bytes_per_pack=bytes_per_pack)
            out = ops.batch_reduce(ReduceOp.MEAN, [[dt.constant(x)] for x in _grads(t)],
                                   [device])
            count = sum(op.type == "CollectiveReduce" for op in g.get_operations())
        async with dt.Session(servers[t].target, graph=g) as sess:
            return await sess.run([o[0] for o in out]), count
    return await asyncio.wait_for(asyncio.gather(one(0), one(1)), GUARD_S)


async def test_packed_sums_are_the_unpacked_ones_bit_for_bit() -> None:
    async with workers(2) as servers:
        unpacked = await _batch_reduce(servers, 1, 11)     # every gradient alone
        packed = await _batch_reduce(servers, 100_000, 12)
        one_pack = await _batch_reduce(servers, 1 << 30, 13)
    assert [c for _, c in unpacked] == [6, 6]
    assert [c for _, c in packed] == [2, 2]   # [b2, w2, b1, w1, b0], [w0]
    assert [c for _, c in one_pack] == [1, 1]
    want = [(a + b) / np.float32(2) for a, b in zip(_grads(0), _grads(1))]
    for results in (unpacked, packed, one_pack):
        for got, _ in results:
            for g, w, ref in zip(got, want, unpacked[0][0]):
                assert g.shape == w.shape and g.dtype == np.float32
                assert g.tobytes() == ref.tobytes()
                np.testing.assert_allclose(g, w, rtol=1e-6)


def _node(device: str, instance: int) -> dict:
    return {"op": "CollectiveReduce", "name": f"r{instance}", "device": device,
            "attrs": {"group_size": 2, "group_key": 21, "instance_key": instance,
                      "merge_op": "Add", "final_op": "Id", "T": "float32"}}


async def test_a_small_collective_of_a_formed_group_is_no_task() -> None:
    async with workers(2) as servers:
        engines = [s.worker.collectives for s in servers]
        devices = [f"/job:worker/replica:0/task:{t}/device:CPU:0" for t in (0, 1)]
        x = np.arange(4, dtype=np.float32)
        first = [e.start(_node(d, 1), [x], None) for e, d in zip(engines, devices)]
        assert all(isinstance(f, asyncio.Task) for f in first)   # the group forms first
        await asyncio.wait_for(asyncio.gather(*first), GUARD_S)
        for rnd in range(3):
            futs = [e.start(_node(d, 2), [x + rnd], None) for e, d in zip(engines, devices)]
            assert not any(isinstance(f, asyncio.Task) for f in futs)
            for (got,) in await asyncio.wait_for(asyncio.gather(*futs), GUARD_S):
                np.testing.assert_array_equal(got, 2 * (x + rnd))
        # a cancelled one (its step ended) fails the peer's too, and leaves nothing
        mine = engines[0].start(_node(devices[0], 3), [x], None)
        await asyncio.sleep(0.01)
        mine.cancel()
        await asyncio.sleep(0.05)   # its abort reaches the peer first
        theirs = engines[1].start(_node(devices[1], 3), [x], None)
        with pytest.raises(AbortedError, match="cancelled"):
            await asyncio.wait_for(theirs, GUARD_S)
        for e in engines:
            assert not e.table.live and not e.watchdog.ops
