"""Sessions on a real local server (actor system, master, worker on a free
loopback port), through the same master path remote tasks use."""
from __future__ import annotations

import asyncio
from collections import namedtuple

import numpy as np
import pytest

import distrib as dt
from distrib.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError


@pytest.fixture(scope="module")
def server():
    s = dt.Server.create_local_server()
    yield s
    s.stop()


@pytest.fixture
def graph():
    g = dt.Graph()
    with g.as_default():
        yield g


def test_readme_hello_world(server, graph):
    c = dt.constant("Hello, distributed world!")
    sess = dt.SyncSession(server.target)
    try:
        assert sess.run(c) == "Hello, distributed world!"
    finally:
        sess.close()


async def test_async_twin_of_hello_world(server, graph):
    c = dt.constant("Hello, distributed world!")
    async with dt.Session(server.target) as sess:
        assert await sess.run(c) == "Hello, distributed world!"


async def test_serve_runs_on_the_callers_loop(graph):
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        assert srv.target.startswith("distrib://localhost:")
        assert not srv.target.endswith(":0")
        async with dt.Session(srv.target) as sess:
            assert (await sess.run(dt.constant(2.0) * 3.0)) == 6.0


Pair = namedtuple("Pair", "a b")


async def test_nested_fetches_keep_their_structure(server, graph):
    a = dt.constant([1.0, 2.0])
    b = a * 2.0
    op = dt.no_op()
    async with dt.Session(server.target) as sess:
        out = await sess.run({"x": [a, (b, op)], "p": Pair(a, b), "name": b.name})
    assert set(out) == {"x", "p", "name"}
    assert isinstance(out["x"], list) and isinstance(out["x"][1], tuple)
    np.testing.assert_array_equal(out["x"][0], [1.0, 2.0])
    np.testing.assert_array_equal(out["x"][1][0], [2.0, 4.0])
    assert out["x"][1][1] is None
    assert isinstance(out["p"], Pair)
    np.testing.assert_array_equal(out["p"].b, out["name"])


async def test_make_callable_feeds_in_order_and_keeps_the_fetch_structure(server, graph):
    a = dt.placeholder(dt.float32, [2], name="a")
    b = dt.placeholder(dt.float32, [], name="b")
    total = dt.reduce_sum(a) * b
    counter = dt.Variable(0.0)
    bump = counter.assign_add(1.0)
    async with dt.Session(server.target) as sess:
        await sess.run(counter.initializer)
        step = sess.make_callable({"total": total, "pair": (a, total)}, [a, b])
        got = await step(np.array([1.0, 2.0], np.float32), 10.0)
        assert got["total"] == 30.0 and got["pair"][1] == 30.0
        np.testing.assert_array_equal(got["pair"][0], [1.0, 2.0])
        assert (await step([3.0, 4.0], 0.5))["total"] == 3.5
        with pytest.raises(TypeError, match="feeds 2 tensors"):
            await step([1.0, 2.0])
        with pytest.raises(InvalidArgumentError, match="shape"):
            await step([1.0, 2.0, 3.0], 1.0)
        with pytest.raises(TypeError, match="accept_options"):
            await step([1.0, 2.0], 1.0, options={"operation_timeout_s": 5.0})
        run_bump = sess.make_callable(bump, accept_options=True)
        assert await run_bump(options={"operation_timeout_s": 5.0}, run_metadata=None) == 1.0
        assert await run_bump() == 2.0
    sync = dt.SyncSession(server.target)
    try:
        assert sync.make_callable(total, [a, b])([1.0, 1.0], 2.0) == 4.0
    finally:
        sync.close()


async def test_operators_dtypes_and_broadcasting(server, graph):
    c = dt.constant([[1.0, 2.0], [3.0, 4.0]], dtype=dt.float32)
    i = dt.constant([1, 2], dtype=dt.int64)
    exprs = [100 + c, 2.0 * c, c @ c, -c, c / 2.0, c - [1.0, 1.0], dt.reduce_sum(c, axis=0),
             i * 3, dt.argmax(c, axis=1), dt.equal(c, 2.0), dt.cast(c, dt.int32)]
    async with dt.Session(server.target) as sess:
        vals = await sess.run(exprs)
    ref = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    expect = [100 + ref, 2 * ref, ref @ ref, -ref, ref / 2, ref - 1, ref.sum(0),
              np.array([3, 6]), ref.argmax(1), ref == 2.0, ref.astype(np.int32)]
    for got, want in zip(vals, expect):
        np.testing.assert_allclose(got, want)
        assert got.dtype == want.dtype or (got.dtype.kind == want.dtype.kind == "f"
                                           and got.dtype == np.float32)


async def test_feeds_are_checked_and_name_the_tensor(server, graph):
    x = dt.placeholder(dt.float32, shape=[None, 3], name="x")
    y = dt.reduce_sum(x * 2.0)
    async with dt.Session(server.target) as sess:
        assert await sess.run(y, {x: [[1, 2, 3]]}) == 12.0
        assert await sess.run(y, {"x:0": np.ones((4, 3), np.float64)}) == 24.0
        with pytest.raises(InvalidArgumentError, match=r"shape \[2\].*'x:0'.*\[\?, 3\]"):
            await sess.run(y, {x: [1.0, 2.0]})
        with pytest.raises(InvalidArgumentError, match="x"):
            await sess.run(y)  # unfed placeholder
        with pytest.raises(InvalidArgumentError, match="dtype"):
            await sess.run(y, {x: [["a", "b", "c"]]})
        # the session still works after every error
        assert await sess.run(y, {x: [[0, 0, 1]]}) == 2.0


async def test_feeding_an_intermediate_tensor_replaces_it(server, graph):
    a = dt.constant(1.0)
    b = a + 1.0
    c = b * 10.0
    async with dt.Session(server.target) as sess:
        assert await sess.run(c) == 20.0
        assert await sess.run(c, {b: 5.0}) == 50.0


async def test_a_fed_tensor_is_fed_even_where_its_producer_runs_too(server, graph, monkeypatch):
    # its producer runs as a target or a control input: its readers still get the feed
    c = dt.constant(2.0)
    y = c * 3.0 + 1.0
    with dt.control_dependencies([c]):
        z = dt.identity(dt.constant(7.0))
    for optimizer in ("on", "off"):
        monkeypatch.setenv("DISTRIB_GRAPH_OPTIMIZER", optimizer)
        async with dt.Session(server.target) as sess:
            assert await sess.run([y, z], {c: 5.0}) == [16.0, 7.0]
            assert (await sess.run([y, c.op], {c: 5.0}))[0] == 16.0
            assert await sess.run(y) == 7.0


async def test_many_concurrent_runs_on_one_session(server, graph):
    x = dt.placeholder(dt.float32, shape=[])
    y = x * x
    async with dt.Session(server.target) as sess:
        outs = await asyncio.gather(*(sess.run(y, {x: float(i)}) for i in range(64)))
    assert [float(o) for o in outs] == [float(i * i) for i in range(64)]


async def test_seeded_random_ops_go_on_with_their_sequence_and_restart_in_a_new_session(graph):
    # TF: each run of a seeded random op draws the next numbers of its
    # sequence (a dropout mask or noise must change every step); a new
    # session reproduces the sequence from the start
    r = dt.random_normal([6], seed=7)
    u = dt.random_uniform([6], seed=8)
    async with dt.serve({"local": ["localhost:0"]}) as server:
        async with dt.Session(server.target) as s1:
            first = [await s1.run([r, u]) for _ in range(3)]
        async with dt.Session(server.target) as s2:
            again = [await s2.run([r, u]) for _ in range(3)]
        for k in (0, 1):
            assert not np.array_equal(first[0][k], first[1][k])
            assert not np.array_equal(first[1][k], first[2][k])
            for a, b in zip(first, again):
                assert np.array_equal(a[k], b[k])
        # the sequence is the one numpy's generator gives for the seed
        gen = np.random.default_rng(7)
        for a in first:
            np.testing.assert_array_equal(a[0], gen.standard_normal(6, dtype=np.float32))
        # one sequence per op and session, whatever else a run fetches
        gen = np.random.default_rng(7)
        async with dt.Session(server.target) as s3:
            for fetches in (r, [r, u], [u, r * 2.0], r):
                out = await s3.run(fetches)
                got = out if fetches is r else out[0] if fetches[0] is r else out[1] / 2.0
                np.testing.assert_array_equal(got, gen.standard_normal(6, dtype=np.float32))
            assert server.worker._generators
        assert not server.worker._generators   # closed sessions' sequences are dropped


async def test_unseeded_random_ops_differ_from_run_to_run(server, graph):
    r = dt.random_uniform([16])
    async with dt.Session(server.target) as sess:
        a, b = await sess.run(r), await sess.run(r)
    assert not np.array_equal(a, b)


async def test_a_tensor_of_another_graph_is_an_error_not_a_namesake(server):
    # TF: "... is not an element of this graph"; by name it would fetch (or
    # feed) the session graph's own node called "x", another value
    g1, g2 = dt.Graph(), dt.Graph()
    with g1.as_default():
        x1 = dt.constant(1.0, name="x")
    with g2.as_default():
        x2 = dt.constant(42.0, name="x")
        p2 = dt.placeholder(dt.float32, [], name="p")
    async with dt.Session(server.target, graph=g1) as sess:
        with pytest.raises(InvalidArgumentError, match="not an element of this graph"):
            await sess.run(x2)
        with pytest.raises(InvalidArgumentError, match="not an element of this graph"):
            await sess.run(x1, {p2: 1.0})
        assert await sess.run(x1) == 1.0   # the session still works


async def test_fetching_an_output_the_op_does_not_have_is_invalid_argument(server, graph):
    dt.constant([1.0, 2.0], name="c")
    async with dt.Session(server.target) as sess:
        with pytest.raises(InvalidArgumentError, match="has 1 output"):
            await sess.run("c:7")
        np.testing.assert_array_equal(await sess.run("c:0"), [1.0, 2.0])


async def test_variables_live_on_the_server_and_are_shared_across_sessions(server):
    g1, g2 = dt.Graph(), dt.Graph()
    with g1.as_default():
        v1 = dt.Variable(10.0, name="shared_counter")
        init = v1.initializer
        inc = v1.assign_add(5.0)
    with g2.as_default():
        v2 = dt.Variable(0.0, name="shared_counter")
        read = v2.read_value()
    async with dt.Session(server.target, graph=g1) as s1, \
            dt.Session(server.target, graph=g2) as s2:
        await s1.run(init)
        await s1.run(inc)
        assert await s2.run(read) == 15.0


async def test_uninitialized_variable_is_failed_precondition_naming_it(server, graph):
    v = dt.Variable([1.0, 2.0], name="never_initialized_v")
    async with dt.Session(server.target) as sess:
        with pytest.raises(FailedPreconditionError, match="never_initialized_v"):
            await sess.run(v)
        await sess.run(v.initializer)
        np.testing.assert_array_equal(await sess.run(v), [1.0, 2.0])


async def test_graph_changes_are_sent_and_old_fetches_still_work(server, graph):
    a = dt.constant(3.0)
    async with dt.Session(server.target) as sess:
        assert await sess.run(a) == 3.0
        b = a * a  # the graph grows after the session opened
        assert await sess.run(b) == 9.0
        assert await sess.run(a) == 3.0


async def test_runtime_errors_are_typed_and_the_server_keeps_working(server, graph):
    x = dt.placeholder(dt.float32, shape=None)
    y = dt.reshape(x, [2, 2])
    async with dt.Session(server.target) as sess:
        with pytest.raises(InvalidArgumentError) as ei:
            await sess.run(y, {x: np.arange(3.0)})
        assert ei.value.op is not None and "Reshape" in ei.value.op
        with pytest.raises(NotFoundError, match="no_such_op"):
            await sess.run("no_such_op:0")
        np.testing.assert_array_equal(await sess.run(y, {x: np.arange(4.0)}),
                                      np.arange(4.0).reshape(2, 2))


def test_static_shape_errors_at_build_time_name_op_and_shapes(graph):
    a = dt.constant(np.ones((2, 3)))
    with pytest.raises(InvalidArgumentError, match=r"\[2, 3\].*\[2, 3\]"):
        dt.matmul(a, a)


async def test_list_devices_shows_the_cpu(server, graph):
    async with dt.Session(server.target) as sess:
        devs = await sess.list_devices()
    assert any(d["name"].endswith("/device:CPU:0") for d in devs)
    cpu = next(d for d in devs if d.device_type == "CPU")   # TF's attributes too
    assert cpu.name == cpu["name"] and cpu.memory_limit_bytes >= 0


def test_sync_session_list_devices_and_context_manager(server, graph):
    with dt.SyncSession(server.target) as sess:
        names = [d["name"] for d in sess.list_devices()]
        assert names and all(n.startswith("/job:local/replica:0/task:0/device:") for n in names)


async def test_closed_session_refuses_runs(server, graph):
    sess = dt.Session(server.target)
    assert await sess.run(dt.constant(1)) == 1
    await sess.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        await sess.run(dt.constant(1))


def test_bad_target_is_a_clear_error(graph):
    with pytest.raises(InvalidArgumentError, match="port"):
        dt.SyncSession("distrib://localhost")


def test_server_stop_frees_the_port_at_once():
    s = dt.Server.create_local_server()
    port = int(s.target.rsplit(":", 1)[1])
    s.stop()
    assert s.join(timeout=1)
    s2 = dt.Server({"local": [f"localhost:{port}"]})
    try:
        assert s2.target.endswith(f":{port}")
    finally:
        s2.stop()


def test_unreachable_target_is_unavailable(graph, monkeypatch):
    import socket
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "0.5")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    sess = dt.SyncSession(f"distrib://127.0.0.1:{port}")
    try:
        with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
            sess.run(dt.constant(1.0))
    finally:
        sess.close()


async def test_a_server_told_training_is_over_returns_from_join():
    import threading

    from distrib.server import request_stop
    s = dt.Server.create_local_server()
    joined = threading.Event()
    t = threading.Thread(target=lambda: (s.join(), joined.set()), daemon=True)
    t.start()
    assert not joined.wait(0.2)
    await request_stop(s.target)
    assert await asyncio.get_running_loop().run_in_executor(None, joined.wait, 10)
    t.join(5)


def test_a_server_stopped_while_its_worker_lingers_leaves_no_pending_task(graph, monkeypatch,
                                                                          caplog):
    import gc

    from distrib.runtime.core import kernel_pool
    # after each remote step the worker polls for the next (WorkerService._linger);
    # a long poll on a core said to be idle makes sure one is under way at stop
    monkeypatch.setattr(kernel_pool, "SPIN_S", 2.0)
    monkeypatch.setattr(kernel_pool, "core_idle_while_waiting", lambda: True)
    out = dt.constant([1.0, 2.0]) * 3.0
    s = dt.Server.create_local_server()
    loop = s._loop.loop
    try:
        with dt.SyncSession(s.target) as sess:   # on the client loop: a remote caller
            for _ in range(5):
                sess.run(out)
        assert s._core.worker._lingering, "no linger under way: the test proves nothing"
        s.stop()
    finally:
        s.stop()
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    assert not pending, pending
    del s, loop, pending
    gc.collect()   # a task still pending now would be "destroyed but pending"
    assert "Task was destroyed but it is pending" not in caplog.text
