"""Where the executor runs kernels: inline on the event loop's thread by
default, on the kernel pool when another heavy kernel of the step is ready
(they run side by side) or when a kernel is too long to hold the loop. The
results must not depend on where a kernel ran, and a long kernel must not
stall other sessions served by the same loop."""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import distrib as dt
from distrib.errors import DeadlineExceededError
from distrib.runtime.core import kernel_pool
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from tests.peers.cli_cluster import cli_flags_task, cluster_spec

GUARD_S = 30  # hang guard only

pytestmark = pytest.mark.timeout(120)


def _two_heavy_branches(seed: int, width_b: int = 512):
    """Two independent matmuls of x (256 x 512), the first made first: by
    512 x 512 (2^26 multiply-adds: heavy) and by 512 x width_b."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    w1 = rng.standard_normal((512, 512)).astype(np.float32)
    w2 = rng.standard_normal((512, width_b)).astype(np.float32)
    g = dt.Graph()
    with g.as_default():
        xp = dt.placeholder(dt.float32, [None, 512], name="x")
        a = dt.matmul(xp, dt.constant(w1))
        b = dt.matmul(xp, dt.constant(w2))
        out = dt.reduce_sum(dt.nn.relu(a), axis=1) - dt.reduce_sum(b, axis=1)
    return g, xp, out, x, np.maximum(x @ w1, 0).sum(1) - (x @ w2).sum(1)


async def test_independent_heavy_kernels_share_the_pool_and_agree_with_numpy(monkeypatch):
    # the machine's load decides whether a core is free; here, say one is
    monkeypatch.setattr(kernel_pool, "spare_core", lambda: True)
    g, xp, out, x, want = _two_heavy_branches(0)
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            server.worker.reset_stats()
            got = [await sess.run(out, {xp: x}) for _ in range(4)]
            stats = server.worker.stats()
    for value in got:
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-3)
    # the first step learns which nodes are heavy; each later one puts one of
    # the two matmuls on the pool while the loop's thread runs the other
    assert stats["pool_kernels"] == 3


async def _pool_kernels_in_three_right_steps(seed: int) -> int:
    g, xp, out, x, want = _two_heavy_branches(seed)
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            server.worker.reset_stats()
            for _ in range(3):
                np.testing.assert_allclose(await sess.run(out, {xp: x}), want,
                                           rtol=1e-4, atol=1e-3)
            return server.worker.stats()["pool_kernels"]


async def test_no_kernel_goes_to_the_pool_while_every_core_is_busy(monkeypatch):
    monkeypatch.setattr(kernel_pool, "spare_core", lambda: False)
    assert await _pool_kernels_in_three_right_steps(3) == 0


@pytest.mark.skipif(not os.path.exists("/proc/loadavg"), reason="no /proc/loadavg here")
def test_the_spare_core_probe_reads_the_machine(monkeypatch):
    """The probe reads the machine's own /proc/loadavg: this thread is running while it
    reads, so at least one runnable thread, never more than the machine has; and the
    answer follows the count (one core: this thread takes it; many: one is spare)."""
    running = kernel_pool.runnable_threads()
    assert isinstance(running, int) and 1 <= running <= int(
        open("/proc/loadavg").read().split()[3].split("/")[1])
    monkeypatch.setattr(kernel_pool, "_CORES", 1)
    assert kernel_pool.spare_core() is False
    monkeypatch.setattr(kernel_pool, "_CORES", 1 << 20)
    assert kernel_pool.spare_core() is True


async def test_one_thread_runs_every_kernel_inline(monkeypatch):
    monkeypatch.setenv("DISTRIB_INTER_OP_THREADS", "1")
    monkeypatch.setattr(kernel_pool, "spare_core", lambda: True)
    assert await _pool_kernels_in_three_right_steps(1) == 0


async def test_a_long_kernel_leaves_the_loop_to_other_sessions():
    # 2048^3 multiply-adds (~0.1 s and more on one core): over the inline limit,
    # so it runs on the pool and a small step of another session finishes first
    rng = np.random.default_rng(2)
    big = rng.standard_normal((2048, 2048)).astype(np.float32)
    heavy, light = dt.Graph(), dt.Graph()
    with heavy.as_default():
        p = dt.placeholder(dt.float32, [2048, 2048])
        prod = dt.reduce_sum(dt.matmul(p, p))
    with light.as_default():
        small = dt.constant(2.0) * 21.0
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=heavy) as s1, \
                dt.Session(server.target, graph=light) as s2:
            await s2.run(small)                       # registered before the race
            order: list[str] = []

            async def run(sess, fetch, feed, name):
                value = await sess.run(fetch, feed)
                order.append(name)
                return value

            server.worker.reset_stats()
            big_task = asyncio.ensure_future(run(s1, prod, {p: big}, "big"))
            await asyncio.sleep(0)                    # the big step has started
            assert await run(s2, small, None, "small") == 42.0
            total = await big_task
            assert order == ["small", "big"]
            assert server.worker.stats()["pool_kernels"] >= 1
    np.testing.assert_allclose(total, float(np.sum(big.astype(np.float64) @ big)), rtol=1e-3)


# -- writing into dead inputs (TensorFlow's forward_input) ---------------------------

async def test_temporaries_are_reused_but_feeds_variables_and_fetches_never_change():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((64, 32)).astype(np.float32)
    wv = rng.standard_normal((32, 32)).astype(np.float32)
    bv = rng.standard_normal(32).astype(np.float32)
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None, 32])
        w = dt.Variable(wv, name="w")
        b = dt.Variable(bv, name="b")
        z = dt.matmul(x, w)               # a temporary: `add` may write into it
        h = dt.nn.relu(z + b)             # ... and relu into the sum
        fed = dt.nn.relu(x)               # a feed: never written
        read = dt.nn.relu(w.read_value())  # a variable's value: never written
        init = dt.global_variables_initializer()
    x_copy = xv.copy()
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            await sess.run(init)
            server.worker.reset_stats()
            for _ in range(2):
                hv, fv, rv = await sess.run([h, fed, read], {x: xv})
                zv, hv2 = await sess.run([z, h], {x: xv})   # z fetched: add must not touch it
                np.testing.assert_allclose(hv, np.maximum(xv @ wv + bv, 0), rtol=1e-5, atol=1e-5)
                np.testing.assert_array_equal(hv2, hv)
                np.testing.assert_allclose(zv, xv @ wv, rtol=1e-5, atol=1e-5)
                np.testing.assert_array_equal(fv, np.maximum(x_copy, 0))
                np.testing.assert_array_equal(rv, np.maximum(wv, 0))
                np.testing.assert_array_equal(xv, x_copy)
                np.testing.assert_array_equal(await sess.run(w), wv)
            assert server.worker.stats()["in_place_kernels"] > 0


async def test_a_training_step_writes_its_activations_in_place_and_still_learns():
    rng = np.random.default_rng(5)
    xv = rng.standard_normal((128, 16)).astype(np.float32)
    yv = np.eye(4, dtype=np.float32)[(xv[:, 0] > 0).astype(int) + 2 * (xv[:, 1] > 0)]
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None, 16])
        y = dt.placeholder(dt.float32, [None, 4])
        h = x
        for i, (a, b) in enumerate([(16, 32), (32, 4)]):
            h = dt.matmul(h, dt.Variable(rng.standard_normal((a, b)).astype(np.float32) * 0.3,
                                         name=f"w{i}")) + dt.Variable(np.zeros(b, np.float32),
                                                                      name=f"b{i}")
            if i == 0:
                h = dt.nn.relu(h)
        loss = dt.reduce_mean(dt.nn.softmax_cross_entropy_with_logits(labels=y, logits=h))
        train = dt.train.GradientDescentOptimizer(0.5).minimize(loss)
        init = dt.global_variables_initializer()
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            await sess.run(init)
            server.worker.reset_stats()
            first = await sess.run(loss, {x: xv, y: yv})
            for _ in range(60):
                await sess.run(train, {x: xv, y: yv})
            last = await sess.run(loss, {x: xv, y: yv})
            # bias adds, relu and its gradient ran in place in the training steps
            assert server.worker.stats()["in_place_kernels"] >= 60 * 3
    assert last < 0.5 * first


async def test_an_add_that_cannot_broadcast_fails_the_same_in_place_or_not():
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None, None])
        y = dt.placeholder(dt.float32, [None])
        bad = dt.matmul(x, x) + y             # the product is a temporary: a candidate
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            with pytest.raises(dt.errors.InvalidArgumentError, match="broadcast"):
                await sess.run(bad, {x: np.ones((3, 3), np.float32), y: np.ones(2, np.float32)})
            got = await sess.run(bad, {x: np.ones((3, 3), np.float32), y: np.ones(3, np.float32)})
            np.testing.assert_array_equal(got, np.full((3, 3), 4.0, np.float32))


async def test_of_two_ready_heavy_kernels_the_longer_runs_first(monkeypatch):
    # Two independent branches with nothing heavy after them: their bottom
    # levels are their own costs, so the longer runs first and the step's last
    # heavy kernel is a short one (whatever waits on its result, a ps
    # applying a gradient, waits less).
    import kernels
    monkeypatch.setenv("DISTRIB_INTER_OP_THREADS", "1")   # one at a time, inline
    matmul = kernels.get_kernel("MatMul", "CPU")
    order = []

    def recording(inputs, attrs):
        order.append(np.asarray(inputs[1]).shape[1])
        return matmul(inputs, attrs)
    monkeypatch.setitem(kernels.registry._registry["CPU"], "MatMul", recording)
    g, xp, out, x, want = _two_heavy_branches(3, width_b=1024)   # the first: half the work
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            for _ in range(3):   # the first step learns the costs
                np.testing.assert_allclose(await sess.run(out, {xp: x}), want,
                                           rtol=1e-4, atol=1e-2)
    assert order[-2:] == [1024, 512]


@pytest.mark.parametrize("consumer_weight_first", [False, True])
async def test_the_kernel_on_the_critical_path_keeps_the_loop_and_the_other_goes_to_the_pool(
        monkeypatch, consumer_weight_first):
    # a backward pass's shape: dX (more heavy work waits for it) beside dW (a
    # leaf, here costlier by itself): dX runs inline, where nothing waits for a
    # thread, and first. The order in which the graph's constants were made
    # (folded at compile time) must not change that.
    import threading

    import kernels
    monkeypatch.setattr(kernel_pool, "spare_core", lambda: True)
    matmul = kernels.get_kernel("MatMul", "CPU")
    where = []

    def recording(inputs, attrs):
        where.append((np.asarray(inputs[1]).shape[1], threading.current_thread() is main))
        return matmul(inputs, attrs)
    main = threading.current_thread()
    monkeypatch.setitem(kernels.registry._registry["CPU"], "MatMul", recording)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    w1, w2, w3 = (rng.standard_normal((512, n)).astype(np.float32) * 0.05 for n in (512, 768, 384))
    g = dt.Graph()
    with g.as_default():
        xp = dt.placeholder(dt.float32, [None, 512])
        c3 = dt.constant(w3) if consumer_weight_first else None
        a = dt.matmul(xp, dt.constant(w1))            # 8 units, then c: 14 in all
        b = dt.matmul(xp, dt.constant(w2))            # a leaf of 12
        c = dt.matmul(dt.nn.relu(a), c3 if c3 is not None else dt.constant(w3))
        out = dt.reduce_sum(c, axis=1) + dt.reduce_sum(b, axis=1)
    want = (np.maximum(x @ w1, 0) @ w3).sum(1) + (x @ w2).sum(1)
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            for _ in range(3):   # the first step learns the costs
                np.testing.assert_allclose(await sess.run(out, {xp: x}), want,
                                           rtol=1e-4, atol=1e-2)
    last = dict(where[-3:])
    assert last == {512: True, 768: False, 384: True}, where[-3:]


async def test_a_finished_pool_kernel_is_taken_before_the_next_inline_one(monkeypatch):
    # a backward pass's shape again: the short leaf (a weight's gradient, on
    # the pool) finishes while the long kernel holds the loop; its consumers
    # (its send to the ps) run before the next heavy kernel starts inline,
    # not after it
    import time as _time

    import kernels
    monkeypatch.setenv("DISTRIB_INTER_OP_THREADS", "2")
    monkeypatch.setattr(kernel_pool, "spare_core", lambda: True)
    matmul = kernels.get_kernel("MatMul", "CPU")
    reduce_sum = kernels.get_kernel("Sum", "CPU")
    events = []

    def recording_matmul(inputs, attrs):
        width = np.asarray(inputs[1]).shape[1]
        events.append(("matmul", width))
        if width == 512:
            _time.sleep(0.05)   # long enough for the leaf on the pool to finish
        return matmul(inputs, attrs)

    def recording_sum(inputs, attrs):
        events.append(("sum", np.asarray(inputs[0]).shape[1]))
        return reduce_sum(inputs, attrs)
    monkeypatch.setitem(kernels.registry._registry["CPU"], "MatMul", recording_matmul)
    monkeypatch.setitem(kernels.registry._registry["CPU"], "Sum", recording_sum)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((256, 512)).astype(np.float32)
    w1, w3 = (rng.standard_normal((512, n)).astype(np.float32) * 0.05 for n in (512, 384))
    w2 = rng.standard_normal((512, 64)).astype(np.float32)
    g = dt.Graph()
    with g.as_default():
        xp = dt.placeholder(dt.float32, [None, 512])
        a = dt.matmul(xp, dt.constant(w1))                   # 8 units, then c
        b = dt.matmul(xp, dt.constant(w2))                   # a leaf of 1
        c = dt.matmul(dt.nn.relu(a), dt.constant(w3))        # 6 units
        out = dt.reduce_sum(c, axis=1) + dt.reduce_sum(b, axis=1)
    want = (np.maximum(x @ w1, 0) @ w3).sum(1) + (x @ w2).sum(1)
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            for _ in range(3):   # the first step learns the costs
                events.clear()
                np.testing.assert_allclose(await sess.run(out, {xp: x}), want,
                                           rtol=1e-4, atol=1e-2)
    assert events.index(("sum", 64)) < events.index(("matmul", 384)), events


async def test_a_send_that_fails_while_its_connection_drains_is_an_error_of_that_op():
    # the send waits outside the op's own call: its failure must still name it
    from distrib.errors import OpError

    class Drowning:
        timeout = None

        def send(self, key, dst, value):
            async def fail():
                raise ConnectionResetError("peer went away")
            return fail()

        def flush(self, early=False):
            return None

    part = CompiledPartition([
        {"name": "c", "op": "Const", "inputs": [], "attrs": {"value": [1.0], "dtype": "float32"}},
        {"name": "_send/x", "op": "_Send", "inputs": ["c:0"],
         "attrs": {"key": "k", "dst_task": "/job:b/task:0"}},
    ], [])
    with pytest.raises(OpError, match="ConnectionResetError: peer went away") as info:
        await part.run({}, VariableStore(), Drowning())
    assert info.value.op == "_send/x"


# -- constants folded at compile time --------------------------------------------------

async def test_constants_are_evaluated_once_and_stay_what_the_graph_says():
    cv = np.array([[1.0, -2.0], [3.0, -4.0]], np.float32)
    g = dt.Graph()
    with g.as_default():
        c = dt.constant(cv, name="c")
        x = dt.placeholder(dt.float32, [2, 2])
        h = dt.nn.relu(c)            # an in-place candidate: its input is a constant
        s = c + x                    # so is this add
        view = dt.reshape(c, [4])    # a view of the constant, fetched
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            for _ in range(3):
                cf, hf, sf, vf = await sess.run([c, h, s, view], {x: np.ones((2, 2), np.float32)})
                np.testing.assert_array_equal(cf, cv)
                np.testing.assert_array_equal(hf, np.maximum(cv, 0))
                np.testing.assert_array_equal(sf, cv + 1)
                np.testing.assert_array_equal(vf, cv.reshape(4))
                # what a client gets is its own, writable, and writing it changes nothing
                cf += 100
                vf += 100
    part = CompiledPartition([
        {"name": "c", "op": "Const", "inputs": [], "attrs": {"value": [1.0, -1.0], "dtype": "float32"}},
        {"name": "r", "op": "Relu", "inputs": ["c:0"], "attrs": {}},
    ], ["r:0"])
    assert part.folded == [True, False] and part.sources == [1]
    assert not part.start_values[0][0].flags.writeable


async def test_views_of_read_only_feeds_are_fetched_beside_folded_constants(tmp_path):
    # a read-only array's memory may belong to bytes or an mmap, not an array
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    g = dt.Graph()
    with g.as_default():
        xp = dt.placeholder(dt.float32, [4])
        y = dt.reshape(xp, [2, 2])
        z = xp * dt.constant(2.0)   # a folded constant in the same partition
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target, graph=g) as sess:
            for feed in (np.frombuffer(np.arange(4, dtype=np.float32).tobytes(), np.float32),
                         np.load(tmp_path / "a.npy", mmap_mode="r")):
                yv, zv = await sess.run([y, z], {xp: feed})
                np.testing.assert_array_equal(yv, np.arange(4, dtype=np.float32).reshape(2, 2))
                np.testing.assert_array_equal(zv, np.arange(4, dtype=np.float32) * 2)


async def test_a_constant_sent_to_a_task_in_this_process_arrives_as_the_clients_own():
    # no wire in between: the receiver would otherwise hand the folded,
    # read-only array itself to the client
    from distrib.demo import free_ports
    ports = free_ports(2)
    spec = {"a": [f"localhost:{ports[0]}"], "b": [f"localhost:{ports[1]}"]}
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:a/task:0"):
            c = dt.constant(np.array([1.0, 2.0], np.float32))
        with dt.device("/job:b/task:0"):
            y = dt.reshape(c, [2])   # a view of what arrived
    async with dt.serve(spec, job_name="a", task_index=0) as a:
        async with dt.serve(spec, job_name="b", task_index=0):
            async with dt.Session(a.target, graph=g) as sess:
                for _ in range(2):
                    got = await sess.run(y)
                    np.testing.assert_array_equal(got, [1.0, 2.0])
                    got += 10   # the client's own array


async def test_a_receive_that_waits_too_long_names_the_tensor_and_the_sender():
    # each receive's deadline is kept by the step's one wait (no task per receive)
    recv = {"name": "r", "op": "_Recv", "inputs": [],
            "attrs": {"key": "k1", "src_task": "/job:x/task:0", "dtype": "float32"}}
    nodes = [recv, {"name": "y", "op": "Identity", "inputs": ["r:0"], "attrs": {}}]
    async with dt.serve({"local": ["localhost:0"]}) as server:
        w = server.worker
        w.register_partition("p", nodes, ["y:0"])
        with pytest.raises(DeadlineExceededError, match=r"0.2s waiting for tensor 'k1' from /job:x/task:0"):
            await asyncio.wait_for(w.run_partition("p", 7, {}, {}, {}, 0.2), GUARD_S)
        # a tensor that comes in time is taken, before and after the step began waiting
        w.recv_tensor(8, "k1", np.float32(5), "/job:x/task:0", 1)
        assert await asyncio.wait_for(w.run_partition("p", 8, {}, {}, {}, 5.0), GUARD_S) == [5.0]
        step = asyncio.ensure_future(w.run_partition("p", 9, {}, {}, {}, 5.0))
        await asyncio.sleep(0.05)
        w.recv_tensor(9, "k1", np.float32(6), "/job:x/task:0", 1)
        assert await asyncio.wait_for(step, GUARD_S) == [6.0]


# -- waiting for another task's message: spin while a core would idle ----------------

async def test_a_short_wait_spins_the_loop_until_its_message_comes(monkeypatch):
    monkeypatch.setattr(kernel_pool, "core_idle_while_waiting", lambda: True)
    monkeypatch.setattr(kernel_pool, "SPIN_S", 600.0)   # a loaded machine may pause us
    loop = asyncio.get_running_loop()
    came = loop.create_future()
    ticks = []

    def tick(n):   # other work on the loop keeps running while it spins
        ticks.append(n)
        if n == 5:
            came.set_result(None)
        else:
            loop.call_soon(tick, n + 1)
    loop.call_soon(tick, 0)
    await kernel_pool.spin_until(came.done, expected_s=0.0005)
    assert came.done() and ticks == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("expected_s,idle", [(None, True), (1.0, True), (0.0005, False)])
async def test_a_long_first_or_crowded_wait_never_spins(monkeypatch, expected_s, idle):
    # no history (the first step), a wait that took long last time (a ps
    # waiting for gradients), or no idle core: straight back to sleeping
    monkeypatch.setattr(kernel_pool, "core_idle_while_waiting", lambda: idle)
    loop = asyncio.get_running_loop()
    ran = []
    loop.call_soon(ran.append, 1)
    await kernel_pool.spin_until(lambda: False, expected_s)
    assert ran == []   # it never gave the loop a turn


async def test_a_spin_gives_up_when_another_thread_wants_the_core(monkeypatch):
    # only the probe can end this spin (no message comes, no time limit to
    # speak of): it stops at the first check after a third thread is runnable
    monkeypatch.setattr(kernel_pool, "SPIN_S", 600.0)
    answers = iter([True, True, False])
    monkeypatch.setattr(kernel_pool, "core_idle_while_waiting", lambda: next(answers, False))
    polls = []

    def done():
        polls.append(1)
        if len(polls) > 1000:
            raise AssertionError("the spin did not look at the machine again")
        return False
    await kernel_pool.spin_until(done, expected_s=0.0005)
    assert len(polls) < 20


@pytest.mark.parametrize("line,idle_core,spare_core", [
    (b"0.50 0.40 0.30 1/210 4321\n", True, True),     # only this thread runs
    (b"1.90 1.20 0.70 2/210 4321\n", True, False),    # this one and one other
    (b"2.50 2.00 1.00 3/210 4321\n", False, False),   # more than the cores
    (b"garbage\n", False, True),                       # unreadable: no spin, pool allowed
])
def test_the_core_probes_read_loadavg(monkeypatch, tmp_path, line, idle_core, spare_core):
    path = tmp_path / "loadavg"
    path.write_bytes(line)
    fd = os.open(path, os.O_RDONLY)
    try:
        monkeypatch.setattr(kernel_pool, "_LOADAVG", [fd])
        monkeypatch.setattr(kernel_pool, "_CORES", 2)
        assert kernel_pool.core_idle_while_waiting() is idle_core
        assert kernel_pool.spare_core() is spare_core
    finally:
        os.close(fd)


def test_without_loadavg_the_pool_is_allowed_and_no_wait_spins(monkeypatch):
    monkeypatch.setattr(kernel_pool, "_LOADAVG", [-1])
    assert kernel_pool.spare_core() is True
    assert kernel_pool.core_idle_while_waiting() is False


async def test_the_master_times_its_wait_from_when_its_own_part_ended(monkeypatch):
    # two other tasks answer 20 and 22 ms in, this task's part at once: the
    # wait to remember is the whole 20 ms, not the 2 ms between the answers
    # (a long wait must never spin on the next step)
    from distrib.runtime.step.master import MasterService
    from distrib.runtime.step.sessions import StepPlan
    loop = asyncio.get_running_loop()
    seen = []

    async def record(done, expected_s):
        seen.append(expected_s)
    monkeypatch.setattr("distrib.runtime.step.master.spin_until", record)
    master = MasterService.__new__(MasterService)
    master.task = "/job:worker/task:0"
    plan = StepPlan("k", {}, [])
    for _ in range(2):
        local = loop.create_future()
        local.set_result(["here"])
        calls = {master.task: local}
        for name, delay in (("/job:ps/task:0", 0.020), ("/job:ps/task:1", 0.022)):
            fut = calls[name] = loop.create_future()
            loop.call_later(delay, fut.set_result, [name])
        out = await master._gather_step(1, calls, plan)
        assert out["/job:ps/task:1"] == ["/job:ps/task:1"]
    assert plan.tail_s >= 0.019
    assert seen[0] is None and seen[1] >= 0.019


async def test_a_worker_learns_how_long_it_waits_for_the_ps():
    # the ps is another process: the worker's partition waits for w, and
    # remembers how long (the next step spins for it if that was short)
    spec = cluster_spec(ps=1, worker=1)
    with cli_flags_task(spec, "ps", 0) as ps_proc:
        async with dt.serve(spec, job_name="worker", task_index=0) as wk:
            g = dt.Graph()
            with g.as_default():
                with dt.device("/job:ps/task:0"):
                    w = dt.Variable(np.ones((4, 4), np.float32), name="w")
                with dt.device("/job:worker/task:0"):
                    out = dt.reduce_sum(dt.matmul(w, w))
                init = dt.global_variables_initializer()
            async with dt.Session(wk.target, graph=g) as sess:
                await sess.run(init)
                for _ in range(3):
                    assert await sess.run(out) == 64.0
                took = [p.recv_took for p in wk.worker._partitions.values() if p.recv_took]
                assert took and all(0 <= s < 60 for t in took for s in t.values())
        assert ps_proc.p.poll() is None


async def test_a_long_receive_never_spins_on_another_receives_history(monkeypatch):
    # x comes at once, y takes long: each receive keeps its own history, so
    # whichever order the waits fall in, the wait for y alone never spins
    loop = asyncio.get_running_loop()
    delays = {"x": 0.001, "y": 0.2}
    etas = []

    class Timed:
        timeout = None

        def expect(self, key, src):
            fut = loop.create_future()
            if delays[key] is None:   # already here when the step asks
                fut.set_result(np.ones(2, np.float32))
            else:
                loop.call_later(delays[key], fut.set_result, np.ones(2, np.float32))
            return fut

        def received(self, value):
            return value

        def send(self, key, dst, value):
            return None

        def flush(self, early=False):
            return None

    async def record(done, expected_s):
        etas.append((sorted(waiting), expected_s))
    monkeypatch.setattr(kernel_pool, "spin_until", record)
    recv = {"op": "_Recv", "inputs": []}
    part = CompiledPartition([
        {"name": "x", "attrs": {"key": "x", "src_task": "/job:ps/task:0", "dtype": "float32"},
         **recv},
        {"name": "y", "attrs": {"key": "y", "src_task": "/job:ps/task:0", "dtype": "float32"},
         **recv},
        {"name": "sum", "op": "Add", "inputs": ["x:0", "y:0"], "attrs": {}},
    ], ["sum:0"], task="/job:worker/task:0")
    names = {i: n["name"] for i, n in enumerate(part.nodes)}
    orig_eta = part._eta

    def eta(pending):
        waiting[:] = [names[i] for i in pending.since]
        return orig_eta(pending)
    waiting = []
    part._eta = eta
    for step in range(3):
        if step:
            delays["x"] = None
        (out,) = await part.run({}, VariableStore(), Timed())
        assert out.tolist() == [2.0, 2.0]
    # after the first step every wait has a history; the one for y alone
    # expects it a long way off
    alone = [e for names_, e in etas if names_ == ["y"] and e is not None]
    assert alone and all(e >= kernel_pool.SPIN_S for e in alone), etas


async def test_a_task_polls_for_a_remote_masters_next_step_when_it_came_quickly(monkeypatch):
    # A ps answers a worker's step, and that worker's next step came ~1 ms
    # after the last: the ps keeps its loop polling for it (a halted vCPU
    # costs 0.3-0.7 ms to wake) until it starts. A caller whose next step
    # came late, or whose steps it has not seen twice, leaves it asleep.
    from distrib.runtime.actors.system import CALLER
    from transports import PeerInfo
    seen = []

    async def record(done, expected_s):
        seen.append((done(), expected_s, done))
    monkeypatch.setattr(kernel_pool, "spin_until", record)
    monkeypatch.setattr(kernel_pool, "SPIN_S", 0.3)   # a busy machine may sleep 1 ms for 20
    nodes = [{"name": "c", "op": "Const", "inputs": [],
              "attrs": {"value": np.float32(3), "dtype": "float32"}},
             {"name": "y", "op": "Identity", "inputs": ["c:0"], "attrs": {}}]
    async with dt.serve({"local": ["localhost:0"]}) as server:
        w = server.worker
        w.register_partition("p", nodes, ["y:0"])
        assert await w.run_partition("p", 1, {}, {}, {}) == [3.0]   # a local master
        await asyncio.sleep(0.01)
        assert seen == []
        token = CALLER.set(PeerInfo("/job:worker/task:0", 7, "host"))
        try:
            await w.run_partition("p", 2, {}, {}, {})    # first seen: no history
            await asyncio.sleep(0)
            assert seen == []
            await asyncio.sleep(0.001)
            await w.run_partition("p", 3, {}, {}, {})    # came ~1 ms after the last
            await asyncio.sleep(0)
            assert len(seen) == 1
            done, expected, poll_done = seen[0]
            assert not done and 0 < expected < kernel_pool.SPIN_S
            await w.run_partition("p", 4, {}, {}, {})    # the next step ends the poll
            assert poll_done()
            await asyncio.sleep(0.4)
            seen.clear()
            await w.run_partition("p", 5, {}, {}, {})    # came 400 ms later: sleep
            await asyncio.sleep(0)
            assert seen == []
        finally:
            CALLER.reset(token)


async def test_a_ps_in_another_process_answers_over_the_workers_connection():
    # the worker's step opens the only connection between the two tasks: the
    # ps sends the variables back over it (no connection from the ps to the
    # worker), so the worker's release notices can ride with its gradients
    spec = cluster_spec(ps=1, worker=1)
    with cli_flags_task(spec, "ps", 0) as ps_proc:
        async with dt.serve(spec, job_name="worker", task_index=0) as wk:
            g = dt.Graph()
            with g.as_default():
                with dt.device("/job:ps/task:0"):
                    w = dt.Variable(np.ones((128, 256), np.float32), name="w")   # 128 KiB: shm
                with dt.device("/job:worker/task:0"):
                    loss = dt.reduce_sum(w * w)
                train = dt.train.GradientDescentOptimizer(0.25).minimize(loss)
                init = dt.global_variables_initializer()
            async with dt.Session(wk.target, graph=g) as sess:
                await sess.run(init)
                for _ in range(3):
                    await sess.run(train)
                # w -> w - 0.25 * 2w = w / 2, three times
                np.testing.assert_array_equal(await sess.run(w), np.full((128, 256), 0.125))
                assert wk.worker.stats()["tensors_received"] >= 3   # w, each step
                assert wk.system._inbound == set()
                assert list(wk.system._out) == [spec["ps"][0]]
        assert ps_proc.p.poll() is None
