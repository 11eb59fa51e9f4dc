"""The synchronous strategies on one process (MirroredStrategy and
CentralStorageStrategy over two logical CPUs), dt.function and GradientTape:
training reaches the same weights as one replica on the global batch, the
mirrored copies stay equal after every step, and the replica-context API
(all_reduce, all_gather, merge_call) and strategy.reduce/gather behave as TF's.

Steps run on this process's local server (on its own loop thread, reached by
direct calls: runtime/actors/in_process.py)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function

BOUND_S = 60


@pytest.fixture(autouse=True)
async def function_sessions():
    yield
    await def_function.close_sessions()


def data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.5).astype(np.float32)
    return x, y


OPTIMIZERS = {
    "momentum": lambda lr: dt.train.MomentumOptimizer(lr, 0.9),
    "adam": lambda lr: dt.train.AdamOptimizer(lr),
    "sgd": lambda lr: dt.train.GradientDescentOptimizer(lr),
}


async def reference_weights(x: np.ndarray, y: np.ndarray, batch: int, lr: float,
                            opt: str = "momentum") -> list:
    """One replica, plain TF1 graph, the whole global batch per step."""
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(np.full((3, 1), 0.1, np.float32))
        b = dt.Variable(np.zeros(1, np.float32))
        xp = dt.placeholder(dt.float32, [None, 3])
        yp = dt.placeholder(dt.float32, [None, 1])
        loss = dt.reduce_sum(dt.square(dt.matmul(xp, w) + b - yp)) / float(batch)
        train = OPTIMIZERS[opt](lr).minimize(loss)
        init = dt.global_variables_initializer()
    server = dt.Server.create_local_server()
    try:
        async with dt.Session(server.target, graph=g) as sess:
            await sess.run(init)
            for i in range(0, len(x), batch):
                await sess.run(train, {xp: x[i:i + batch], yp: y[i:i + batch]})
            return await sess.run([w, b])
    finally:
        server.stop()


async def train_with(strategy, x, y, batch: int, lr: float, check_equal: bool = True,
                     opt_name: str = "momentum"):
    with strategy.scope():
        w = dt.Variable(np.full((3, 1), 0.1, np.float32), name="w")
        b = dt.Variable(np.zeros(1, np.float32), name="b")
        opt = OPTIMIZERS[opt_name](lr)

    def step(inputs):
        xb, yb = inputs
        with dt.GradientTape() as tape:
            err = dt.matmul(xb, w) + b - yb
            loss = dt.nn.compute_average_loss(dt.reduce_sum(dt.square(err), axis=1),
                                              global_batch_size=batch)
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        return loss

    @dt.function
    def train(inputs):
        return strategy.reduce(dt.distribute.ReduceOp.SUM, strategy.run(step, args=(inputs,)),
                               axis=None)

    @dt.function
    def copies():
        return [list(strategy.experimental_local_results(v)) for v in (w, b)]

    ds = dt.data.Dataset.from_tensor_slices((x, y)).batch(batch)
    losses = []
    for inputs in strategy.experimental_distribute_dataset(ds):
        losses.append(float(await train(inputs)))
        if check_equal:
            ws, bs = await copies()
            for part in (ws, bs):
                for other in part[1:]:
                    np.testing.assert_array_equal(part[0], other)
    ws, bs = await copies()
    return [ws[0], bs[0]], losses, (w, b)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
async def test_mirrored_training_equals_one_replica_on_the_global_batch(two_cpus, opt) -> None:
    x, y = data()
    async with asyncio.timeout(BOUND_S):
        strategy = dt.distribute.MirroredStrategy()
        assert strategy.num_replicas_in_sync == 2
        got, losses, (w, _) = await train_with(strategy, x, y, batch=8, lr=0.05, opt_name=opt)
        want = await reference_weights(x, y, batch=8, lr=0.05, opt=opt)
    assert len(w.values) == 2 and w.values[1].name.startswith("w/replica_1")
    assert losses[-1] < losses[0] or opt == "adam"   # (4 steps of Adam need not descend)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


async def test_central_storage_keeps_one_copy_and_trains_the_same(two_cpus) -> None:
    x, y = data(seed=1)
    async with asyncio.timeout(BOUND_S):
        strategy = dt.distribute.experimental.CentralStorageStrategy()
        got, _, (w, _) = await train_with(strategy, x, y, batch=8, lr=0.05, check_equal=False)
        want = await reference_weights(x, y, batch=8, lr=0.05)
    assert isinstance(w, dt.Variable) and "CPU:0" in w.device
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


async def test_nccl_all_reduce_uses_collectives_between_local_replicas(two_cpus) -> None:
    x, y = data(seed=2)
    async with asyncio.timeout(BOUND_S):
        strategy = dt.distribute.MirroredStrategy(
            cross_device_ops=dt.distribute.NcclAllReduce())
        got, _, _ = await train_with(strategy, x, y, batch=8, lr=0.05)
        want = await reference_weights(x, y, batch=8, lr=0.05)
        ops = {op.type for op in dt.get_default_graph().get_operations()}
    assert "CollectiveReduce" in ops
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


async def test_replica_context_all_reduce_all_gather_and_merge_call(two_cpus) -> None:
    strategy = dt.distribute.MirroredStrategy()
    seen = {}

    def fn(v):
        ctx = dt.distribute.get_replica_context()
        seen[ctx.replica_id_in_sync_group] = ctx.num_replicas_in_sync
        total = ctx.all_reduce(dt.distribute.ReduceOp.SUM, v)
        mean = ctx.all_reduce("MEAN", v)
        gathered = ctx.all_gather(v, axis=0)
        merged = ctx.merge_call(lambda s, per: s.reduce("SUM", per, axis=None), args=(v * 10.0,))
        return total, mean, gathered, merged

    @dt.function
    def run(inputs):
        return strategy.run(fn, args=(inputs,))

    inputs = dt.distribute.PerReplica([np.array([1.0, 2.0], np.float32),
                                       np.array([3.0, 5.0], np.float32)])
    async with asyncio.timeout(BOUND_S):
        total, mean, gathered, merged = await run(inputs)
    assert seen == {0: 2, 1: 2}
    for r in range(2):
        np.testing.assert_allclose(total.values[r], [4.0, 7.0])
        np.testing.assert_allclose(mean.values[r], [2.0, 3.5])
        np.testing.assert_allclose(gathered.values[r], [1.0, 2.0, 3.0, 5.0])
        np.testing.assert_allclose(merged.values[r], [40.0, 70.0])


async def test_reduce_gather_and_local_results(two_cpus) -> None:
    strategy = dt.distribute.MirroredStrategy()

    @dt.function
    def run(inputs):
        per = strategy.run(lambda v: v * 2.0, args=(inputs,))
        return (strategy.reduce("SUM", per, axis=0), strategy.reduce("MEAN", per, axis=0),
                strategy.gather(per, axis=0), strategy.experimental_local_results(per))

    inputs = dt.distribute.PerReplica([np.array([[1.0], [2.0]], np.float32),
                                       np.array([[4.0]], np.float32)])
    async with asyncio.timeout(BOUND_S):
        total, mean, gathered, local = await run(inputs)
    with pytest.raises(ValueError, match="SUM"):
        strategy.reduce("SUM", dt.constant(1.0))
    with pytest.raises(ValueError, match="reduce_op"):
        strategy.reduce("MAX", inputs)
    np.testing.assert_allclose(total, [14.0])           # 2 + 4 + 8, over every row
    np.testing.assert_allclose(mean, [14.0 / 3.0])      # over all 3 rows of both replicas
    np.testing.assert_allclose(gathered.reshape(-1), [2.0, 4.0, 8.0])
    assert len(local) == 2


async def test_contexts_as_tf_defines_them(two_cpus) -> None:
    assert dt.distribute.get_replica_context() is not None     # the default replica context
    assert not dt.distribute.has_strategy()
    strategy = dt.distribute.MirroredStrategy()
    with strategy.scope():
        assert dt.distribute.get_replica_context() is None      # cross-replica
        assert dt.distribute.get_strategy() is strategy
        assert dt.distribute.in_cross_replica_context()
        v = dt.Variable(1.0)
        assert isinstance(v, dt.distribute.MirroredVariable) and len(v.values) == 2
        with pytest.raises(ValueError, match="Mixing"):
            with dt.distribute.MirroredStrategy().scope():
                pass
    with pytest.raises(ValueError, match="duplicates"):
        dt.distribute.MirroredStrategy(["/device:CPU:0", "/device:CPU:0"])
    with pytest.raises(RuntimeError, match="after being initialized"):
        dt.config.set_logical_device_configuration(
            dt.config.list_physical_devices("CPU")[0], [dt.config.LogicalDeviceConfiguration()])
    devices = [d.name for d in dt.config.list_logical_devices("CPU")]
    assert devices == ["/device:CPU:0", "/device:CPU:1"]


async def test_function_traces_once_per_signature_and_initializes_on_first_use() -> None:
    dt.reset_default_graph()
    v = dt.Variable(np.array([1.0, 2.0], np.float32), name="counter")
    traces = []

    @dt.function
    def bump(x, scale):
        traces.append(scale)
        v.assign_add(x * scale)
        return {"sum": dt.reduce_sum(x), "scale": scale}

    async with asyncio.timeout(BOUND_S):
        out = await bump(np.ones(2, np.float32), 2.0)     # v initialized on first use
        await bump(np.ones(2, np.float32), 2.0)
        await bump(np.zeros(2, np.float32), 2.0)           # same signature: no retrace
        await bump(np.ones(3, np.float32)[:2], 3.0)        # a new Python value: retrace
        with pytest.raises(dt.errors.InvalidArgumentError, match="shape"):
            await bump(np.ones((1, 2), np.float32), 2.0)   # a new shape: retraced (and refused)

        @dt.function
        def read():
            return v.read_value()
        value = await read()
    assert out == {"sum": np.float32(2.0), "scale": 2.0}
    assert traces == [2.0, 3.0, 2.0] and bump.experimental_get_tracing_count() == 2
    np.testing.assert_allclose(value, [1.0 + 2 + 2 + 3, 2.0 + 2 + 2 + 3])


def test_gradient_tape_follows_tf_rules() -> None:
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable([1.0, 2.0])
        u = dt.Variable(3.0)
        with dt.GradientTape() as tape:
            loss = dt.reduce_sum(w * w)
        grads = tape.gradient(loss, {"w": w, "u": u})
        assert grads["u"] is None and grads["w"] is not None
        with pytest.raises(RuntimeError, match="non-persistent"):
            tape.gradient(loss, [w])
        with dt.GradientTape(persistent=True) as tape2:
            loss2 = dt.reduce_sum(w) * 2.0
        zero = tape2.gradient(loss2, [u], unconnected_gradients="zero")
        again = tape2.gradient(loss2, (w,))
        assert isinstance(again, tuple) and zero[0] is not None


def test_gradient_tape_differentiates_what_it_recorded() -> None:
    """TF's rules: ops built before the tape, inside stop_recording() or
    behind stop_gradient are constants to it; a variable read is the variable."""
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable([1.0, 2.0])
        before = w * 2.0                              # built before the tape
        with dt.GradientTape(persistent=True) as tape:
            through_before = dt.reduce_sum(before * w)
            with tape.stop_recording():
                unrecorded = w * 5.0
            through_unrecorded = dt.reduce_sum(unrecorded * w)
            stopped = dt.reduce_sum(w * dt.stop_gradient(w * 3.0))
            full = dt.reduce_sum(w * w * 3.0)
        assert tape.gradient(dt.reduce_sum(before), w) is None
        grads = [tape.gradient(t, w) for t in (through_before, through_unrecorded, stopped, full)]
        with pytest.raises(ValueError, match="recording"):
            with tape.stop_recording():
                pass
        assert dt.gradients(dt.reduce_sum(before), [w])[0] is not None   # dt.gradients: every path
        again = dt.GradientTape(persistent=True)    # entered twice: records both blocks
        with again:
            first = w * w
            with pytest.raises(ValueError, match="still recording"):
                with again:
                    pass
        with again:
            second = dt.reduce_sum(first * w)            # d(w^3) = 3 w^2
        grads.append(again.gradient(second, w))
        again.reset()
        assert again.gradient(second, w) is None         # reset: nothing recorded
    server = dt.Server.create_local_server()
    try:
        with dt.SyncSession(server.target, graph=g) as sess:
            sess.run(w.initializer)
            got = sess.run(grads)
    finally:
        server.stop()
    np.testing.assert_allclose(got[0], [2.0, 4.0])     # y = 2w held constant
    np.testing.assert_allclose(got[1], [5.0, 10.0])
    np.testing.assert_allclose(got[2], [3.0, 6.0])
    np.testing.assert_allclose(got[3], [6.0, 12.0])    # d(3 w^2) = 6w
    np.testing.assert_allclose(got[4], [3.0, 12.0])


async def test_function_with_an_input_signature_traces_once() -> None:
    dt.reset_default_graph()

    @dt.function(input_signature=[dt.TensorSpec(shape=[None, 2], dtype=dt.float32)])
    def total(x):
        return dt.reduce_sum(x, axis=0)

    async with asyncio.timeout(BOUND_S):
        a = await total(np.ones((3, 2), np.float32))
        b = await total(np.ones((5, 2), np.float32))
        with pytest.raises(ValueError, match="input_signature"):
            await total(np.ones((5, 3), np.float32))
    np.testing.assert_allclose(a, [3.0, 3.0])
    np.testing.assert_allclose(b, [5.0, 5.0])
    assert total.experimental_get_tracing_count() == 1


async def test_mirrored_variable_updates_in_a_replica_context_need_an_aggregation(two_cpus) -> None:
    strategy = dt.distribute.MirroredStrategy()
    with strategy.scope():
        plain = dt.Variable(0.0, name="plain")
        total = dt.Variable(0.0, name="total", aggregation=dt.VariableAggregation.SUM)
        first = dt.Variable(0.0, name="first",
                            aggregation=dt.VariableAggregation.ONLY_FIRST_REPLICA)
    with pytest.raises(ValueError, match="aggregation"):
        strategy.run(lambda: plain.assign_add(1.0))

    def fn(v):
        return total.assign_add(v), first.assign(v)

    @dt.function
    def run(v):
        return strategy.run(fn, args=(v,))

    @dt.function
    def copies():
        return [list(strategy.experimental_local_results(x)) for x in (total, first)]

    inputs = dt.distribute.PerReplica([np.float32(2.0), np.float32(5.0)])
    async with asyncio.timeout(BOUND_S):
        await run(inputs)
        totals, firsts = await copies()
    assert [float(t) for t in totals] == [7.0, 7.0]
    assert [float(f) for f in firsts] == [2.0, 2.0]


async def test_function_reads_and_writes_in_program_order() -> None:
    dt.reset_default_graph()
    total = dt.Variable(np.zeros(1, np.float32), name="total")

    @dt.function
    def add(x):
        total.assign_add(dt.reshape(dt.reduce_sum(x), [1]))
        return total                          # sees the write above, as in TF2

    @dt.function
    def swap(x):
        before = total * 2.0                  # read before the write below
        total.assign(x)
        return before, total.read_value(), total

    async with asyncio.timeout(BOUND_S):
        seen = [float((await add(np.ones(3, np.float32)))[0]) for _ in range(3)]
        before, after, returned = await swap(np.array([100.0], np.float32))
    assert seen == [3.0, 6.0, 9.0]
    assert float(before[0]) == 18.0 and float(after[0]) == 100.0 and float(returned[0]) == 100.0


async def test_nested_functions_inline_and_a_restore_is_not_initialized_over(tmp_path) -> None:
    dt.reset_default_graph()
    w = dt.Variable(np.zeros(2, np.float32), name="w")

    @dt.function
    def double(x):
        return x * 2.0

    @dt.function
    def outer(x):
        return double(x) + w            # the inner function's ops join this graph

    # a job resuming: the Saver restores w before any dt.function runs
    server = dt.Server.create_local_server()
    try:
        async with dt.Session(server.target) as sess:
            await sess.run(w.assign([7.0, 7.0]))
            saver = dt.train.Saver([w])
            path = await saver.save(sess, str(tmp_path / "model"))
            await sess.run(w.assign([0.0, 0.0]))
            await saver.restore(sess, path)
    finally:
        server.stop()
    async with asyncio.timeout(BOUND_S):
        # the function runs on the process's local server: restore there too
        from distrib.distribute.functions.local_target import default_target
        async with dt.Session(default_target()) as sess:
            await sess.run(w.initializer)
            await saver.restore(sess, path)
        got = await outer(np.ones(2, np.float32))
    np.testing.assert_allclose(got, [9.0, 9.0])


async def test_communication_options_reach_the_collectives() -> None:
    dt.reset_default_graph()
    from distrib.launch.tasks import free_ports
    ports = free_ports(2)
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec({"worker": [f"localhost:{p}" for p in ports]}),
        task_type="worker", task_id=0)
    options = dt.distribute.experimental.CommunicationOptions(
        timeout_seconds=7.5, implementation=dt.distribute.experimental.CommunicationImplementation.RING)
    strategy = dt.distribute.MultiWorkerMirroredStrategy(resolver, communication_options=options)
    try:
        assert strategy.num_replicas_in_sync == 2
        per = strategy.run(lambda: dt.constant([1.0, 2.0]))
        strategy.reduce("SUM", per, axis=None)        # built only: worker 1 never starts
        reduces = [op for op in dt.get_default_graph().get_operations()
                   if op.type == "CollectiveReduce"]
        assert len(reduces) == 1
        attrs = reduces[0].attrs
        assert attrs["timeout_seconds"] == 7.5 and attrs["communication_hint"] == "ring"
        assert attrs["group_size"] == 2
    finally:
        strategy._server.stop()
        from distrib.distribute.functions.local_target import set_default_target
        set_default_target(None)


async def test_a_mirrored_checkpoint_is_one_replicas_checkpoint(two_cpus, tmp_path) -> None:
    """The Saver saves a mirrored variable, its optimizer slots and the
    optimizer's scalars once, under the single-replica names, and restores
    them into every copy: a checkpoint moves between one replica and two."""
    from distrib.distribute.functions.local_target import default_target
    from distrib.train.checkpoints import file_format
    strategy = dt.distribute.MirroredStrategy()
    with strategy.scope():
        w = dt.Variable(np.zeros(3, np.float32), name="w")
        opt = dt.train.AdamOptimizer(0.1)

    @dt.function
    def step(x):
        def fn(x):
            with dt.GradientTape() as tape:
                loss = dt.reduce_sum(w * x)
            grads = tape.gradient(loss, [w])
            opt.apply_gradients(zip(grads, [w]))
            return loss
        return strategy.run(fn, args=(x,))

    async with asyncio.timeout(BOUND_S):
        await step(np.ones(3, np.float32))
        saver = dt.train.Saver()
        names = {"w", "w/Adam", "w/Adam_1", "beta1_power", "beta2_power"}
        assert set(saver.var_list) == names
        copies = [v for v in dt.global_variables() if v.op.name not in names]
        assert {v.op.name for v in copies} == {"w/replica_1", "w/replica_1/Adam", "w/replica_1/Adam_1",
                                                "beta1_power_1", "beta2_power_1"}
        async with dt.Session(default_target()) as sess:
            path = await saver.save(sess, str(tmp_path / "mirrored"))
            saved = {v.op.name: await sess.run(v) for v in dt.global_variables()}
            assert set(file_format.list_checkpoint_tensors(path)) == names
            for v in dt.global_variables():                 # every copy, every slot
                await sess.run(v.assign(np.full(v.shape.as_list(), 9.0, np.float32)))
            await saver.restore(sess, path)
            for v in copies:                                # each copy equals its first copy
                first = v.mirror_primary.op.name
                np.testing.assert_array_equal(await sess.run(v), saved[first])
                np.testing.assert_array_equal(saved[v.op.name], saved[first])

    # the same checkpoint into one replica, and one replica's back into two
    g = dt.Graph()
    with g.as_default():
        w1 = dt.Variable(np.zeros(3, np.float32), name="w")
        loss = dt.reduce_sum(w1 * np.ones(3, np.float32))
        train = dt.train.AdamOptimizer(0.1).minimize(loss)
        single = dt.train.Saver()
        assert set(single.var_list) == names
    async with asyncio.timeout(BOUND_S):
        async with dt.Session(default_target(), graph=g) as sess:
            await single.restore(sess, path)
            np.testing.assert_allclose(await sess.run(w1), saved["w"])
            await sess.run(train)
            back = await single.save(sess, str(tmp_path / "single"))
            trained = await sess.run(w1)
        async with dt.Session(default_target()) as sess:
            await saver.restore(sess, back)
            for v in (w.values[0], w.values[1]):
                np.testing.assert_allclose(await sess.run(v), trained)


@pytest.mark.parametrize("cross_device", ["one_device", "nccl"])
async def test_all_reduce_gradient_is_the_all_reduce_of_the_upstream_gradients(
        two_cpus, cross_device) -> None:
    # issue 36: TF's ReplicaContext.all_reduce differentiates to the same
    # all-reduce of the replicas' upstream gradients: d/dx of all_reduce(SUM, x) * c
    # is c_0 + c_1 on every replica (each replica got its own c before), and of
    # all_reduce(MEAN, x) * c the mean of the c's
    ops = None if cross_device == "one_device" else dt.distribute.NcclAllReduce()
    strategy = dt.distribute.MirroredStrategy(cross_device_ops=ops)

    def fn(x, c):
        ctx = dt.distribute.get_replica_context()
        with dt.GradientTape(persistent=True) as tape:
            tape.watch(x)
            total = ctx.all_reduce("SUM", x)
            mean = ctx.all_reduce("MEAN", x * x)
            loss_sum, loss_mean = dt.reduce_sum(total * c), dt.reduce_sum(mean * c)
        return total, tape.gradient(loss_sum, x), tape.gradient(loss_mean, x)

    @dt.function
    def run(x, c):
        return strategy.run(fn, args=(x, c))

    xs = [np.array([1.0, 2.0], np.float32), np.array([3.0, -1.0], np.float32)]
    cs = [np.array([2.0, 3.0], np.float32), np.array([5.0, 7.0], np.float32)]
    async with asyncio.timeout(BOUND_S):
        total, d_sum, d_mean = await run(dt.distribute.PerReplica(xs),
                                         dt.distribute.PerReplica(cs))
    for r in range(2):
        np.testing.assert_allclose(total.values[r], xs[0] + xs[1])
        np.testing.assert_allclose(d_sum.values[r], cs[0] + cs[1])
        np.testing.assert_allclose(d_mean.values[r], 2.0 * xs[r] * (cs[0] + cs[1]) / 2.0)


async def test_all_reduce_differentiated_outside_run_follows_the_graph(two_cpus) -> None:
    # the replicas' losses summed and differentiated at once, in the
    # cross-replica context: no replica can meet the others at gradient time,
    # and the graph's own path gives the same sums
    strategy = dt.distribute.MirroredStrategy()
    g = dt.Graph()
    with g.as_default():
        xs = [dt.constant([1.0, 2.0]), dt.constant([3.0, -1.0])]
        cs = [np.array([2.0, 3.0], np.float32), np.array([5.0, 7.0], np.float32)]
        per = strategy.run(lambda x, c: dt.reduce_sum(
            dt.distribute.get_replica_context().all_reduce("SUM", x) * c),
            args=(dt.distribute.PerReplica(xs), dt.distribute.PerReplica(cs)))
        grads = dt.gradients(dt.add_n(list(per.values)), xs)
    server = dt.Server.create_local_server()
    try:
        async with dt.Session(server.target, graph=g) as sess:
            got = await asyncio.wait_for(sess.run(grads), BOUND_S)
    finally:
        server.stop()
    for r in range(2):
        np.testing.assert_allclose(got[r], cs[0] + cs[1])
