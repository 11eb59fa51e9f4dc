"""ParameterServerStrategy with ClusterCoordinator: variables round-robin (or
sharded) over the ps tasks, closures scheduled on whichever worker is free,
RemoteValues, join/done, an error in fn reaching the user at join with the
closures after it cancelled; and, with real server processes, a worker
killed mid-schedule (every closure still runs, the restarted worker takes
closures again) and a ps killed mid-training (restored from the checkpoint,
training finishes).

The ps and worker tasks are real servers (in this process for the fast
tests, `python -m distrib.server` processes for the kill tests); the
coordinator is this process, as TF's chief."""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function, local_target
from tests.helpers import shut_down_strategy
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

BOUND_S = 60


pytestmark = pytest.mark.usefixtures("fresh_graph")


@pytest.fixture
def in_process_cluster():
    spec = cluster_spec(chief=1, ps=2, worker=2)
    servers = [dt.Server(spec, job_name=j, task_index=i)
               for j, n in (("ps", 2), ("worker", 2)) for i in range(n)]
    try:
        yield spec
    finally:
        for s in servers:
            s.stop()


def strategy_for(spec: dict, partitioner=None) -> dt.distribute.ParameterServerStrategy:
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    return dt.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def linear_data(n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, x @ np.array([[1.0], [2.0], [-1.0], [0.5]], np.float32)


def linear_model(strategy, lr: float = 0.1):
    with strategy.scope():
        w = dt.Variable(np.zeros((4, 1), np.float32), name="w")
        b = dt.Variable(np.zeros(1, np.float32), name="b")
        opt = dt.train.GradientDescentOptimizer(lr)

    @dt.function
    def step(iterator):
        def replica_fn(inputs):
            x, y = inputs
            with dt.GradientTape() as tape:
                loss = dt.reduce_mean(dt.square(dt.matmul(x, w) + b - y))
            grads = tape.gradient(loss, [w, b])
            opt.apply_gradients(zip(grads, [w, b]))
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))
    return (w, b), step


async def test_variables_go_round_robin_and_closures_train_the_model(in_process_cluster) -> None:
    strategy = strategy_for(in_process_cluster)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        (w, b), step = linear_model(strategy)
        assert w.device.startswith("/job:ps/task:0") and b.device.startswith("/job:ps/task:1")
        x, y = linear_data()
        it = iter(coord.create_per_worker_dataset(
            lambda: dt.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()))
        async with asyncio.timeout(BOUND_S):
            results = [coord.schedule(step, args=(it,)) for _ in range(120)]
            assert not coord.done() or all(r.done() for r in results)
            await coord.join()
            assert coord.done()
            losses = [float(await r.fetch()) for r in results]
            assert losses[-1] < 1e-3 < losses[0]
            assert await coord.fetch(results[-1]) == losses[-1]

            @dt.function
            def read():
                return w.read_value()
            with strategy.scope():
                got = await read()
        np.testing.assert_allclose(got.ravel(), [1.0, 2.0, -1.0, 0.5], atol=1e-2)
        assert step.experimental_get_tracing_count() == 2   # one trace per worker
        # the step's compute runs on the worker that runs it, not on the chief
        matmuls = [op for op in dt.get_default_graph().get_operations() if op.type == "MatMul"]
        assert matmuls and {op.device.split("/device")[0] for op in matmuls} == {
            "/job:worker/task:0", "/job:worker/task:1"}
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


async def test_an_error_in_fn_reaches_join_and_cancels_what_was_queued(in_process_cluster) -> None:
    strategy = strategy_for(in_process_cluster)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            v = dt.Variable(0.0, name="v")

        @dt.function
        def ok():
            return v.assign_add(1.0)

        @dt.function
        def bad():
            return dt.reshape(dt.constant([1.0, 2.0, 3.0]), [2, 2])   # fails when it runs

        async with asyncio.timeout(BOUND_S):
            first = [coord.schedule(ok) for _ in range(5)]
            await coord.join()
            failing = coord.schedule(bad)
            later = [coord.schedule(ok) for _ in range(50)]
            with pytest.raises(dt.errors.InvalidArgumentError):
                await coord.join()
            with pytest.raises(dt.errors.InvalidArgumentError):
                await failing.fetch()
            cancelled = 0
            for r in later:
                try:
                    await r.fetch()
                except dt.errors.CancelledError:
                    cancelled += 1
            assert cancelled >= 1            # those still queued when bad failed
            assert coord.done()              # the error was raised once, at join
            again = coord.schedule(ok)       # and the coordinator goes on
            await coord.join()
            assert float(await again.fetch()) >= 6.0
            assert sorted([float(await r.fetch()) for r in first]) == [1.0, 2.0, 3.0, 4.0, 5.0]
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


async def test_each_worker_reads_its_own_dataset_and_values(in_process_cluster) -> None:
    strategy = strategy_for(in_process_cluster)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)

        def dataset_fn(ctx: dt.distribute.InputContext):
            return dt.data.Dataset.from_tensors(
                np.array([ctx.input_pipeline_id], np.int32)).repeat()
        it = iter(coord.create_per_worker_dataset(dataset_fn))
        ids = iter(range(2))
        # a second, independent view of which worker runs a closure: per-worker values
        me = coord.create_per_worker_values(lambda: np.array([next(ids)], np.int32))

        @dt.function
        def which(iterator, worker):
            return next(iterator), worker + 0

        async with asyncio.timeout(BOUND_S):
            results = [coord.schedule(which, args=(it, me)) for _ in range(40)]
            await coord.join()
            pairs = [tuple(int(v[0]) for v in await r.fetch()) for r in results]
        # each closure read the dataset of the worker that ran it
        assert pairs and all(data == worker for data, worker in pairs), pairs
        assert {w for _, w in pairs} <= {0, 1}
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


async def test_a_partitioner_shards_a_large_variable_over_the_ps_tasks(in_process_cluster) -> None:
    strategy = strategy_for(in_process_cluster,
                            dt.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            emb = dt.Variable(np.arange(10, dtype=np.float32).reshape(5, 2), name="emb")
            opt = dt.train.GradientDescentOptimizer(1.0)
        assert isinstance(emb, dt.distribute.ShardedVariable)
        shards = emb.variables
        assert [s.shape.as_list() for s in shards] == [[3, 2], [2, 2]]
        assert {s.device.split("/device")[0] for s in shards} == {"/job:ps/task:0",
                                                                  "/job:ps/task:1"}

        @dt.function
        def step():
            def replica_fn():
                with dt.GradientTape() as tape:
                    loss = dt.reduce_sum(emb * 1.0)
                grads = tape.gradient(loss, emb)
                opt.apply_gradients([(grads, emb)])
                return dt.reduce_sum(emb)
            return strategy.run(replica_fn)

        async with asyncio.timeout(BOUND_S):
            r = coord.schedule(step)
            await coord.join()
            await r.fetch()

            @dt.function
            def read():
                return emb.read_value()
            with strategy.scope():
                got = await read()
        np.testing.assert_allclose(got, np.arange(10, dtype=np.float32).reshape(5, 2) - 1.0)
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


def _gate(op_type: str, inputs=(), device: str | None = None):
    """An op of the queue ``gate`` (a FIFO of int64 on the task that runs it):
    ``QueueDequeue`` waits until something is enqueued there."""
    graph = dt.get_default_graph()
    specs = [(dt.int64, [])] if op_type == "QueueDequeue" else []
    return graph.create_op(op_type, list(inputs), {"queue": "gate", "dtype": "int64"}, op_type,
                           output_specs=specs, device=device)


async def test_a_worker_runs_one_closure_at_a_time_by_default() -> None:
    """TF's rule (it was two: staler gradients, the PS tutorial's loop diverged):
    with one worker, the closure that fills the worker's queue is not sent
    while the closure waiting on that queue runs; the queue filled from
    outside the coordinator, both run."""
    spec = cluster_spec(chief=1, ps=1, worker=1)
    servers = [dt.Server(spec, job_name=j, task_index=0) for j in ("ps", "worker")]
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        assert coord.closures_per_worker == 1

        @dt.function
        def wait():
            return _gate("QueueDequeue").outputs[0] + 0

        @dt.function
        def release(value):
            return _gate("QueueEnqueueMany", [value], device="/job:worker/task:0")

        async with asyncio.timeout(BOUND_S):
            waiting = coord.schedule(wait)
            releasing = coord.schedule(release, args=(np.array([7], np.int64),))
            while coord._inflight < 1:   # noqa: SLF001 (the test waits for the closure to start)
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)     # (time for a second closure to be sent, were it)
            assert not releasing.done() and not waiting.done()
            assert coord._inflight == 1   # noqa: SLF001
            with strategy.scope():
                await release(np.array([5], np.int64))   # from outside: the wait ends
            await coord.join()
            assert int(await waiting.fetch()) == 5
            assert await releasing.fetch() is None
        await coord.shutdown()
        with pytest.raises(ValueError, match="closures_per_worker"):
            dt.distribute.coordinator.ClusterCoordinator(strategy, closures_per_worker=0)
    finally:
        await shut_down_strategy(strategy)
        for s in servers:
            s.stop()


async def test_a_worker_holds_two_closures_at_once_when_asked() -> None:
    """``closures_per_worker=2`` (opt-in): with one worker, a closure that waits
    on the worker's queue finishes only because the next closure, which fills
    the queue, reached the worker while the first one ran."""
    spec = cluster_spec(chief=1, ps=1, worker=1)
    servers = [dt.Server(spec, job_name=j, task_index=0) for j in ("ps", "worker")]
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy, closures_per_worker=2)

        @dt.function
        def wait():
            return _gate("QueueDequeue").outputs[0] + 0

        @dt.function
        def release():
            return _gate("QueueEnqueueMany", [dt.constant(np.array([7], np.int64))])

        async with asyncio.timeout(BOUND_S):
            waiting = coord.schedule(wait)
            releasing = coord.schedule(release)
            await coord.join()
            assert int(await waiting.fetch()) == 7
            assert await releasing.fetch() is None
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)
        for s in servers:
            s.stop()


async def test_a_closure_whose_worker_fails_after_an_error_is_cancelled(monkeypatch) -> None:
    """fn failed on one closure while another waited on worker 1; worker 1 then
    stops: that closure is cancelled (TF's put_back), not queued again where no
    slot would take it, so its RemoteValue settles and a second join returns."""
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    spec = cluster_spec(chief=1, ps=1, worker=2)
    servers = [dt.Server(spec, job_name=j, task_index=i)
               for j, n in (("ps", 1), ("worker", 2)) for i in range(n)]
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)

        @dt.function
        def wait():
            return _gate("QueueDequeue", device="/job:worker/task:1").outputs[0] + 0

        @dt.function
        def release():
            return _gate("QueueEnqueueMany", [dt.constant(np.array([7], np.int64))],
                         device="/job:worker/task:1")

        @dt.function
        def bad():
            return dt.reshape(dt.constant([1.0, 2.0, 3.0]), [2, 2])   # fails when it runs

        async with asyncio.timeout(BOUND_S):
            warm = [coord.schedule(wait), coord.schedule(release)]   # the chief reaches worker 1
            await coord.join()
            assert int(await warm[0].fetch()) == 7
            waiting = coord.schedule(wait)
            while coord._inflight < 1:   # noqa: SLF001 (the test waits for the closure to start)
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)     # (its step reaches worker 1; only speed depends on it)
            failing = coord.schedule(bad)
            with pytest.raises(dt.errors.InvalidArgumentError):
                await failing.fetch()
            assert not waiting.done()
            await asyncio.to_thread(servers[2].stop)   # worker 1: the waiting step fails
            with pytest.raises(dt.errors.InvalidArgumentError):
                await coord.join()
            with pytest.raises(dt.errors.CancelledError):
                await waiting.fetch()
            await coord.join()                         # nothing left: returns at once
            assert coord.done()
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)
        for s in servers:
            s.stop()


# -- failures, with real server processes ----------------------------------------------------
@pytest.fixture
def process_cluster(tmp_path):
    spec = cluster_spec(chief=1, ps=1, worker=2)
    cfg = write_cluster(tmp_path, spec)
    env = {"DISTRIB_HEARTBEAT_S": "0.3"}
    procs = {("ps", 0): cli_task(cfg, "ps", 0, **env),
             ("worker", 0): cli_task(cfg, "worker", 0, **env),
             ("worker", 1): cli_task(cfg, "worker", 1, **env)}
    try:
        yield spec, cfg, procs, env
    finally:
        for p in procs.values():
            p.stop()


@pytest.mark.slow
async def test_a_killed_worker_loses_no_closure_and_comes_back(process_cluster,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    spec, cfg, procs, env = process_cluster
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            runs = dt.Variable(np.zeros(2, np.float32), name="runs")   # closures run, per worker

        def dataset_fn(ctx):
            onehot = np.eye(2, dtype=np.float32)[ctx.input_pipeline_id]
            return dt.data.Dataset.from_tensors(onehot).repeat()
        it = iter(coord.create_per_worker_dataset(dataset_fn))

        @dt.function
        def count(iterator):
            return runs.assign_add(next(iterator))

        async with asyncio.timeout(BOUND_S):
            results = [coord.schedule(count, args=(it,)) for _ in range(60)]
            while sum(r.done() for r in results) < 10:
                await asyncio.sleep(0.01)
            procs[("worker", 1)].kill()                       # kill -9, mid-schedule
            await coord.join()
            assert all(r.done() for r in results)
            for r in results:
                await r.fetch()                               # every closure ran
            before = await _read(strategy, runs)
            assert before.sum() >= 60
            procs[("worker", 1)] = cli_task(cfg, "worker", 1, **env)   # it comes back
            more = [coord.schedule(count, args=(it,)) for _ in range(200)]
            await coord.join()
            after = await _read(strategy, runs)
        assert after.sum() >= before.sum() + 200
        assert after[1] > before[1]                           # worker 1 took closures again
        assert all(r.done() for r in more)
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


@pytest.mark.slow
async def test_a_killed_worker_holding_two_closures_loses_none_and_runs_none_twice(
        process_cluster, monkeypatch) -> None:
    """Both workers hold two closures (``closures_per_worker=2``), each waiting on
    its worker's queue; worker 1 is killed: its two closures run again on
    worker 0, every RemoteValue holds its own closure's result, and no
    closure's update reached the ps twice (the killed ones never got past
    their wait)."""
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    spec, cfg, procs, env = process_cluster
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy, closures_per_worker=2)
        with strategy.scope():
            runs = dt.Variable(0.0, name="runs")

        @dt.function
        def gated(i):
            token = _gate("QueueDequeue").outputs[0]
            runs.assign_add(dt.cast(token, dt.float32))
            return i + 0

        @dt.function
        def release():
            return _gate("QueueEnqueueMany", [dt.constant(np.ones(4, np.int64))],
                         device="/job:worker/task:0")

        async with asyncio.timeout(BOUND_S):
            results = [coord.schedule(gated, args=(np.int64(i),)) for i in range(4)]
            while coord._inflight < 4:     # two on each worker, all waiting
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)
            procs[("worker", 1)].kill()                       # kill -9, two closures on it
            with strategy.scope():
                await release()                               # worker 0's queue: 4 tokens
            await coord.join()
            got = sorted([int(await r.fetch()) for r in results])
            total = float(await _read(strategy, runs))
        assert got == [0, 1, 2, 3]                            # each result, once
        assert total == 4.0                                   # each closure's update, once
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


@pytest.mark.slow
async def test_a_killed_ps_is_restored_from_the_checkpoint_and_training_finishes(
        process_cluster, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    spec, cfg, procs, env = process_cluster
    logdir = str(tmp_path / "ckpt")
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy, checkpoint_dir=logdir)
        (w, b), step = linear_model(strategy, lr=0.05)
        x, y = linear_data()
        it = iter(coord.create_per_worker_dataset(
            lambda: dt.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()))
        async with asyncio.timeout(BOUND_S):
            for _ in range(40):
                coord.schedule(step, args=(it,))
            await coord.join()
            session = await def_function.session_for(dt.get_default_graph(), strategy.target)
            with dt.get_default_graph().as_default():
                saver = dt.train.Saver()
            await saver.save(session, os.path.join(logdir, "model.ckpt"), global_step=40)
            saved = await _read(strategy, w)
            procs[("ps", 0)].kill()                            # kill -9 of the only ps
            procs[("ps", 0)] = cli_task(cfg, "ps", 0, **env)   # restarted, empty
            results = [coord.schedule(step, args=(it,)) for _ in range(80)]
            await coord.join()
            losses = [float(await r.fetch()) for r in results]
            got = await _read(strategy, w)
        assert np.isfinite(losses).all() and losses[-1] < 0.05
        # restored from the checkpoint (not from zeros), then trained on
        assert np.abs(got - saved).max() < np.abs(saved).max()
        np.testing.assert_allclose(got.ravel(), [1.0, 2.0, -1.0, 0.5], atol=0.1)
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)


async def _read(strategy, var) -> np.ndarray:
    @dt.function
    def read():
        return var.read_value()
    with strategy.scope():
        return await read()


def test_a_failure_is_blamed_on_the_task_it_names() -> None:
    class FakeStrategy:
        worker_devices = ["/job:worker/task:0", "/job:worker/task:1"]
        ps_devices = ["/job:ps/task:0", "/job:ps/task:1"]
    coord = dt.distribute.coordinator.ClusterCoordinator.__new__(
        dt.distribute.coordinator.ClusterCoordinator)
    coord.strategy, coord._devices = FakeStrategy(), FakeStrategy.worker_devices
    # the error's peer (the task whose failure caused it), then its task; never its text
    err = dt.errors.UnavailableError("/job:ps/task:0 is unavailable: connection lost",
                                     task="/job:chief/task:0", peer="/job:ps/task:0")
    assert coord._failed_task(err) == "/job:ps/task:0"
    err = dt.errors.UnavailableError("step aborted: /job:worker/task:1 missed 3 heartbeats",
                                     peer="/job:worker/task:1")
    assert coord._failed_task(err) == "/job:worker/task:1"
    err = dt.errors.FailedPreconditionError("attempting to use uninitialized value w",
                                            task="/job:ps/task:1")
    assert coord._failed_task(err) == "/job:ps/task:1"
    assert coord._failed_task(dt.errors.AbortedError("/job:worker/task:10 gone",
                                                     peer="/job:worker/task:10")) is None


async def test_code_outside_a_finished_strategy_runs_as_if_it_was_never_made() -> None:
    # issue 36: once a ParameterServerStrategy's cluster went away, a later
    # dt.function or Keras fit of no strategy ran on that strategy's chief
    # server and failed with "/job:ps/task:1 is unavailable"; and the server
    # it started could not be stopped but by a private attribute
    spec = cluster_spec(chief=1, ps=2, worker=2)
    servers = [dt.Server(spec, job_name=j, task_index=i)
               for j, n in (("ps", 2), ("worker", 2)) for i in range(n)]
    strategy = strategy_for(spec)
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        (w, b), step = linear_model(strategy)
        x, y = linear_data()
        it = iter(coord.create_per_worker_dataset(
            lambda: dt.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()))

        @dt.function
        def read_w():   # outside the scope, reads the strategy's variable: runs where it lives
            return w.read_value()
        async with asyncio.timeout(BOUND_S):
            for _ in range(4):
                coord.schedule(step, args=(it,))
            await coord.join()
            assert np.abs(await read_w()).sum() > 0
        with strategy.scope():   # one no step used (a metric, a slot): never initialized
            dt.Variable(np.zeros(3, np.float32), name="unused")
    finally:
        for s in servers:
            s.stop()   # the cluster goes away; this process's program goes on
    u = dt.Variable(np.float32(3.0), name="u")

    @dt.function
    def scaled(v):
        return u * v
    async with asyncio.timeout(BOUND_S):
        assert float(await scaled(np.float32(2.0))) == 6.0
        model = dt.keras.Sequential([dt.keras.layers.Dense(1)])
        model.compile(optimizer=dt.keras.optimizers.SGD(0.1), loss="mse")
        history = await model.fit(x, y, epochs=1, batch_size=64, verbose=0)
        assert np.isfinite(history.history["loss"][-1])
    address = spec["chief"][0]
    await def_function.close_sessions()   # (a session left open to a stopped server
    strategy.shutdown()                   # costs its close timeout at close_sessions)
    strategy.shutdown()
    with pytest.raises(dt.errors.FailedPreconditionError, match="shut down"):
        strategy.target
    import socket
    with socket.socket() as sock:   # the chief's port is free again
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("localhost", int(address.rpartition(":")[2])))
    async with asyncio.timeout(BOUND_S):
        assert float(await scaled(np.float32(4.0))) == 12.0


async def test_a_function_using_a_tensor_made_before_it_runs_where_the_variable_lives(
        in_process_cluster, monkeypatch) -> None:
    # a function outside the scope that reads a strategy's variable only through
    # a tensor built before the trace (y = v * 2 at top level) made no op naming
    # the variable: it ran on the local server, which failed ("op 'v' is pinned
    # to /job:ps/task:0, which is not in the cluster"); and deciding where to run
    # started the local server though the step ran on the strategy's
    strategy = strategy_for(in_process_cluster)

    def no_local_server():
        raise AssertionError("the local server was started for a step of the strategy's")
    monkeypatch.setattr(local_target, "local_server", no_local_server)
    try:
        with strategy.scope():
            v = dt.Variable(np.float32(3.0), name="v")

        @dt.function
        def set_v():
            v.assign(np.float32(5.0))
        with strategy.scope():
            await set_v()
        y = v * 2.0   # built before any trace, outside the scope

        @dt.function
        def use():
            return y + 1.0

        @dt.function
        def read():
            return v.read_value()
        async with asyncio.timeout(BOUND_S):
            assert float(await use()) == 11.0   # v's trained value, not a fresh copy
            assert float(await read()) == 5.0
    finally:
        await shut_down_strategy(strategy)
