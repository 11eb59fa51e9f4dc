"""SyncReplicasOptimizer: averaged updates, stale gradients dropped, backup replicas,
waiting ops released by timeouts and aborts, and synchronous training on real processes.

The in-process tests run a real cluster on the test's loop (one ``dt.serve`` per
task: a ps and up to three workers); each replica builds its own graph and
session, as between-graph replication does.
"""
from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.errors import DeadlineExceededError
from distrib.train.optimizers.global_step import get_or_create_global_step
from distrib.train.optimizers.optimizer import OptimizerArgumentError

W0 = np.array([1.0, -2.0, 3.0], dtype=np.float32)
LR = 0.5   # one exact step of GD lands on the target of sum((w - x)^2)
GUARD = 30.0


@contextlib.asynccontextmanager
async def cluster(workers: int):
    ports = free_ports(1 + workers)
    spec = {"ps": [f"localhost:{ports[0]}"],
            "worker": [f"localhost:{p}" for p in ports[1:]]}
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(dt.serve(spec, job_name="ps", task_index=0))
        for i in range(workers):
            await stack.enter_async_context(dt.serve(spec, job_name="worker", task_index=i))
        yield spec


class Replica:
    """One worker's graph: loss = sum((w - x)^2), so the gradient 2(w - x) is known in numpy."""

    def __init__(self, spec: dict, task: int, aggregate: int, total: int,
                 opt: dt.train.Optimizer | None = None) -> None:
        self.task = task
        self.graph = dt.Graph()
        with self.graph.as_default(), dt.device(dt.train.replica_device_setter(
                cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
            self.w = dt.Variable(W0, name="w")
            self.gs = get_or_create_global_step()
            self.x = dt.placeholder(dt.float32, [3], name="x")
            loss = dt.reduce_sum(dt.square(self.w - self.x))
            self.opt = dt.train.SyncReplicasOptimizer(
                opt or dt.train.GradientDescentOptimizer(LR),
                replicas_to_aggregate=aggregate, total_num_replicas=total)
            self.train = self.opt.minimize(loss, global_step=self.gs)
            self.init = dt.global_variables_initializer()
            self.init_tokens = self.opt.get_init_tokens_op()
            self.queue_size = self.opt.sync_token_queue.size()
            self.local_step = self.opt._local_step
        self.target = f"distrib://{spec['worker'][task]}"

    def session(self, **config) -> dt.Session:
        return dt.Session(self.target, graph=self.graph, config=dt.ConfigProto(**config))

    async def start(self, sess, chief: bool = False) -> None:
        if chief:
            await sess.run(self.init)
            await sess.run(self.opt.chief_init_op)
            await sess.run(self.init_tokens)
        else:
            await sess.run(self.opt.local_step_init_op)

    async def step(self, sess, x: np.ndarray) -> None:
        await sess.run(self.train, {self.x: x})


def grad(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return 2 * (w - x)


async def test_one_aggregation_applies_the_average_of_the_replicas_gradients():
    async with cluster(2) as spec:
        r0, r1 = Replica(spec, 0, 2, 2), Replica(spec, 1, 2, 2)
        x0, x1 = np.array([0.0, 1.0, 2.0], np.float32), np.array([4.0, -1.0, 0.5], np.float32)
        async with r0.session() as s0, r1.session() as s1:
            await r0.start(s0, chief=True)
            await r1.start(s1)
            await asyncio.wait_for(asyncio.gather(r0.step(s0, x0), r1.step(s1, x1)), GUARD)
            assert await s0.run(r0.opt.num_accumulated()) == [2]
            runner = r0.opt.get_chief_queue_runner()
            await asyncio.wait_for(s0.run(runner.step_op), GUARD)
            w, gs, size, acc = await s0.run([r0.w, r0.gs, r0.queue_size, r0.opt.num_accumulated()])
            want = W0 - LR * (grad(W0, x0) + grad(W0, x1)) / 2
            np.testing.assert_allclose(w, want, rtol=1e-6)
            assert gs == 1
            assert size == 2   # the two new tokens, one per replica, carrying step 1
            assert acc == [0]
            # each replica takes a token and moves its local step to the new global step
            await asyncio.wait_for(asyncio.gather(r0.step(s0, x0), r1.step(s1, x1)), GUARD)
            assert await s0.run(r0.local_step) == 1 and await s1.run(r1.local_step) == 1


async def test_a_replica_with_an_old_local_step_has_its_gradient_dropped():
    async with cluster(2) as spec:
        r0, r1 = Replica(spec, 0, 1, 2), Replica(spec, 1, 1, 2)
        x0, x1 = np.array([0.0, 0.0, 0.0], np.float32), np.array([10.0, 10.0, 10.0], np.float32)
        async with r0.session() as s0, r1.session() as s1:
            await r0.start(s0, chief=True)
            await r1.start(s1)          # r1's local step: 0
            await asyncio.wait_for(r0.step(s0, x0), GUARD)
            runner = r0.opt.get_chief_queue_runner()
            await asyncio.wait_for(s0.run(runner.step_op), GUARD)   # global step 1
            w1 = await s0.run(r0.w)
            np.testing.assert_allclose(w1, W0 - LR * grad(W0, x0), rtol=1e-6)
            # r1 is late: its gradient belongs to step 0, so it is accepted and ignored;
            # it then takes one of the chief's new tokens (step 1)
            await asyncio.wait_for(r1.step(s1, x1), GUARD)
            assert await s0.run(r0.opt.num_accumulated()) == [0]
            assert await s1.run(r1.local_step) == 1
            # r0's next gradient was computed at its local step 0: stale as well
            await asyncio.wait_for(r0.step(s0, x0), GUARD)
            assert await s0.run(r0.opt.num_accumulated()) == [0]
            assert await s0.run(r0.local_step) == 1
            # now current: it counts, and its token comes from the next aggregation
            await asyncio.wait_for(asyncio.gather(r0.step(s0, x0), s0.run(runner.step_op)), GUARD)
            w2, gs = await s0.run([r0.w, r0.gs])
            assert gs == 2
            np.testing.assert_allclose(w2, w1 - LR * grad(w1, x0), rtol=1e-6)


async def test_backup_replica_training_advances_without_the_third_replica():
    async with cluster(3) as spec:
        reps = [Replica(spec, i, 2, 3) for i in range(3)]   # replica 2 never runs
        target = np.array([1.0, 1.0, 1.0], np.float32)
        async with reps[0].session() as s0, reps[1].session() as s1:
            await reps[0].start(s0, chief=True)
            await reps[1].start(s1)
            runner = reps[0].opt.get_chief_queue_runner()
            done = asyncio.Event()
            chief = runner.start(s0, done.is_set)

            async def train(rep: Replica, sess) -> int:
                steps = 0
                with contextlib.suppress(dt.errors.OutOfRangeError):   # the queue closed
                    while not done.is_set():
                        await rep.step(sess, target)
                        steps += 1
                return steps

            replicas = asyncio.gather(train(reps[0], s0), train(reps[1], s1))
            async with asyncio.timeout(GUARD):
                while await s0.run(reps[0].gs) < 5:
                    await asyncio.sleep(0.01)
                # training is over: stop aggregating, release replicas waiting for a token
                done.set()
                await chief
                await s0.run(reps[0].opt.sync_token_queue.close())
                steps = await replicas
            gs, w = await s0.run([reps[0].gs, reps[0].w])
            assert gs >= 5 and min(steps) >= 1
            # every aggregation averaged gradients of w - target computed at the current w,
            # so w approaches the target geometrically: |w - t| shrinks by |1 - 2 LR| = 0
            np.testing.assert_allclose(w, target, atol=1e-6)


async def test_waiting_dequeue_times_out_with_a_typed_error_and_keeps_no_token():
    async with cluster(1) as spec:
        r0 = Replica(spec, 0, 1, 1)
        # the deadline covers the whole step: long enough that the ops before the wait
        # finish in it on a loaded machine too (0.3 s timed out in the gradient, once)
        async with r0.session(operation_timeout_s=2.0) as s0:
            await s0.run(r0.init)
            await s0.run(r0.opt.chief_init_op)
            # no init tokens: the dequeue waits, and the deadline releases it
            with pytest.raises(DeadlineExceededError, match="QueueDequeue.*sync_token_q"):
                await asyncio.wait_for(r0.step(s0, W0), GUARD)
            # the gradient was accumulated before the wait; the chief's take is there to use
            await asyncio.wait_for(s0.run(r0.opt.get_chief_queue_runner().step_op), GUARD)
            assert await s0.run(r0.queue_size) == 1   # the timed-out dequeue did not eat it


async def test_waiting_take_times_out_and_an_aborted_dequeue_is_released():
    async with cluster(2) as spec:
        r0 = Replica(spec, 0, 2, 2)
        async with r0.session(operation_timeout_s=0.3) as s0:
            await s0.run(r0.init)
            await s0.run(r0.opt.chief_init_op)
            with pytest.raises(DeadlineExceededError, match="AccumulatorTakeGradient"):
                await asyncio.wait_for(s0.run(r0.opt.get_chief_queue_runner().step_op), GUARD)
            assert await s0.run(r0.gs) == 0
        # A step whose worker partition fails (an uninitialized variable) while the ps
        # partition waits on the empty queue: the abort releases the wait at once
        # (no deadline here), and the aborted dequeue must not swallow a later token.
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:worker/task:1"):
                missing = dt.Variable(1.0, name="never_initialized")
            with dt.device("/job:ps/task:0"):
                gs = get_or_create_global_step()
                from distrib.train.replicas.sync_replicas import TokenQueue
                q = TokenQueue(gs)
                token = q.dequeue()
                size = q.size()
                put = q.enqueue_many(dt.constant(np.array([7], np.int64)))
            with dt.device("/job:worker/task:1"):
                both = dt.cast(token, dt.float32) + missing
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as sess:
            with pytest.raises(dt.errors.FailedPreconditionError, match="never_initialized"):
                await asyncio.wait_for(sess.run(both), GUARD)
            await sess.run(put)
            assert await sess.run(size) == 1


async def test_an_aborted_take_is_released_and_leaves_the_gradients_to_the_next_take():
    from distrib.train.replicas.sync_replicas import _Accumulator
    async with cluster(1) as spec:
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                v = dt.Variable(np.zeros(2, np.float32), name="v")
                acc = _Accumulator(v, dt.float32, [2])
                step = dt.constant(np.int64(0))
                grad = dt.placeholder(dt.float32, [2], name="grad")
                apply = acc.apply_grad(grad, step)
                take = acc.take_grad(2)
            with dt.device("/job:worker/task:0"):
                missing = dt.Variable(1.0, name="never_initialized")
                both = take + missing
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as sess:
            # no operation_timeout_s: only the abort (the worker's partition failed) ends the wait
            with pytest.raises(dt.errors.FailedPreconditionError, match="never_initialized"):
                await asyncio.wait_for(sess.run(both), GUARD)
            await sess.run(apply, {grad: np.ones(2, np.float32)})
            await sess.run(apply, {grad: 3 * np.ones(2, np.float32)})
            # had the aborted take stayed registered, it would have swallowed these two
            assert await sess.run(acc.num_accumulated()) == 2
            out = await asyncio.wait_for(sess.run(take), GUARD)
            np.testing.assert_allclose(out, [2.0, 2.0])


async def test_closing_a_session_fails_its_waiting_dequeue_and_frees_its_place():
    # a step blocked in a QueueDequeue (on the ps, fetched through a worker) when its
    # session closes fails with CancelledError saying so (TF's class; ours was
    # UnavailableError), and its waiter is gone:
    # a token enqueued later stays in the queue for the next dequeue
    from distrib.train.replicas.sync_replicas import TokenQueue
    async with cluster(1) as spec:
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                q = TokenQueue(get_or_create_global_step())
                token, size = q.dequeue(), q.size()
                put = q.enqueue_many(dt.constant(np.array([7], np.int64)))
            with dt.device("/job:worker/task:0"):
                doubled = token * 2
        sess = dt.Session(f"distrib://{spec['worker'][0]}", graph=g)
        waiting = asyncio.create_task(sess.run(doubled))
        await asyncio.sleep(0.3)
        assert not waiting.done(), "the dequeue must wait: the queue is empty"
        await asyncio.wait_for(sess.close(), GUARD)
        with pytest.raises(dt.errors.CancelledError, match="closed while the step waited"):
            await asyncio.wait_for(waiting, 10)
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as again:
            await again.run(put)
            assert await again.run(size) == 1   # the closed step's waiter did not take it
            assert await asyncio.wait_for(again.run(doubled), GUARD) == 14


async def test_closing_a_session_fails_its_waiting_take_on_a_server_thread(server):
    # the same for an AccumulatorTakeGradient on a blocking dt.Server (its own loop
    # thread, reached over a connection): the error names the close, not the channel
    from distrib.train.replicas.sync_replicas import _Accumulator
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(np.zeros(2, np.float32), name="v")
        acc = _Accumulator(v, dt.float32, [2])
        grad = dt.placeholder(dt.float32, [2], name="grad")
        apply = acc.apply_grad(grad, dt.constant(np.int64(0)))
        take, count = acc.take_grad(2), acc.num_accumulated()
    sess = dt.Session(server.target, graph=g)
    waiting = asyncio.create_task(sess.run(take))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "the take must wait: no gradient was applied"
    await asyncio.wait_for(sess.close(), GUARD)
    with pytest.raises(dt.errors.CancelledError,
                       match="AccumulatorTakeGradient.*closed while the step waited"):
        await asyncio.wait_for(waiting, 10)
    async with dt.Session(server.target, graph=g) as again:
        await again.run(apply, {grad: np.ones(2, np.float32)})
        await again.run(apply, {grad: 3 * np.ones(2, np.float32)})
        assert await again.run(count) == 2   # the closed step's take did not swallow them
        np.testing.assert_allclose(await asyncio.wait_for(again.run(take), GUARD), [2.0, 2.0])


def test_argument_checks_follow_tf():
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(W0, name="w")
        gs = get_or_create_global_step()
        opt = dt.train.SyncReplicasOptimizer(dt.train.GradientDescentOptimizer(0.1), 3, 2)
        with pytest.raises(OptimizerArgumentError, match="after apply_gradients"):
            opt.get_chief_queue_runner()
        loss = dt.reduce_sum(w * w)
        with pytest.raises(OptimizerArgumentError, match="Global step is required"):
            opt.minimize(loss)
        opt.minimize(loss, global_step=gs)
        with pytest.raises(OptimizerArgumentError, match="Too few tokens"):
            opt.get_init_tokens_op(0)   # 3 to aggregate, 2 replicas: 1 extra token needed
        assert opt.get_init_tokens_op(1).type == "QueueEnqueueMany"
        assert opt._local_step in dt.local_variables()
        assert opt._local_step not in dt.global_variables()


# -- synchronous training on a real ps/worker cluster of processes ----------------------

@pytest.mark.slow
async def test_synchronous_training_on_processes_decreases_the_loss(ps_worker_cluster):
    spec = ps_worker_cluster
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(4, 1)).astype(np.float32)
    data = []
    for _ in range(2):   # each replica has its own shard
        x = rng.normal(size=(32, 4)).astype(np.float32)
        data.append((x, x @ w_true))

    def build(task: int):
        graph = dt.Graph()
        with graph.as_default(), dt.device(dt.train.replica_device_setter(
                cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
            w = dt.Variable(np.zeros((4, 1), np.float32), name="w")
            gs = get_or_create_global_step()
            x = dt.placeholder(dt.float32, [None, 4], name="x")
            y = dt.placeholder(dt.float32, [None, 1], name="y")
            loss = dt.reduce_mean(dt.square(dt.matmul(x, w) - y))
            opt = dt.train.SyncReplicasOptimizer(dt.train.GradientDescentOptimizer(0.1), 2, 2)
            train = opt.minimize(loss, global_step=gs)
            init = dt.global_variables_initializer()
            tokens = opt.get_init_tokens_op()
        return graph, w, gs, x, y, loss, opt, train, init, tokens

    r = [build(0), build(1)]
    done = asyncio.Event()
    sessions = [dt.Session(f"distrib://{spec['worker'][i]}", graph=r[i][0]) for i in (0, 1)]
    try:
        s0, s1 = sessions
        _, w, gs, x, y, loss, opt, _, init, tokens = r[0]
        feed_all = {x: np.concatenate([d[0] for d in data]), y: np.concatenate([d[1] for d in data])}
        await s0.run(init)
        await s0.run(opt.chief_init_op)
        await s0.run(tokens)
        before = await s0.run(loss, feed_all)
        await s1.run(r[1][6].local_step_init_op)
        chief = opt.get_chief_queue_runner().start(s0, done.is_set)

        async def replica(i: int) -> int:
            _, _, _, xi, yi, _, _, train, _, _ = r[i]
            steps = 0
            with contextlib.suppress(dt.errors.OutOfRangeError):
                while not done.is_set():
                    await sessions[i].run(train, {xi: data[i][0], yi: data[i][1]})
                    steps += 1
            return steps

        replicas = asyncio.gather(replica(0), replica(1))
        async with asyncio.timeout(GUARD):
            while await s0.run(gs) < 10:
                await asyncio.sleep(0.02)
            done.set()
            await chief
            await s0.run(opt.sync_token_queue.close())
            steps = await replicas
        after = await s0.run(loss, feed_all)
        # both replicas took part; how many steps each ran is the scheduler's (TF's
        # accumulator takes any replicas_to_aggregate gradients: a fast replica may
        # give both of a step's; one suite run saw 2 of 11 on one replica)
        assert await s0.run(gs) >= 10 and min(steps) >= 1
        assert after < 0.5 * before
    finally:
        for s in sessions:
            await s.close()


async def test_supervisor_runs_the_chief_queue_runner_for_sync_training(tmp_path):
    """TF1's recipe: the chief's Supervisor starts the aggregation loop with
    start_queue_runners; both replicas train synchronously until told to stop."""
    async with cluster(2) as spec:
        replicas = [Replica(spec, t, aggregate=2, total=2) for t in (0, 1)]
        svs = [dt.train.Supervisor(
            graph=r.graph, is_chief=(r.task == 0), init_op=r.init,
            local_init_op=r.opt.local_step_init_op,
            ready_for_local_init_op=r.opt.ready_for_local_init_op,
            global_step=r.gs, logdir=str(tmp_path / "logs") if r.task == 0 else None,
            recovery_wait_secs=0.05) for r in replicas]

        async def replica(r: Replica, sv) -> int:
            async with sv.managed_session(r.target) as sess:
                if sv.is_chief:
                    await sess.run(r.opt.chief_init_op)
                    await sess.run(r.init_tokens)
                    sv.start_queue_runners(sess, [r.opt.get_chief_queue_runner()])
                step = 0
                while not sv.should_stop() and step < 6:
                    await sess.run(r.train, {r.x: np.zeros(3, np.float32)})
                    step = int(await sess.run(r.gs))
                return step

        async def run_chief_last():
            # the non-chief stops once it reaches the goal; the chief then stops
            # its runner (the Supervisor does) and saves a final checkpoint
            return await asyncio.gather(replica(replicas[0], svs[0]),
                                        replica(replicas[1], svs[1]))

        steps = await asyncio.wait_for(run_chief_last(), GUARD)
    assert min(steps) >= 5
    assert dt.train.latest_checkpoint(str(tmp_path / "logs")) is not None


async def test_the_chief_queue_runner_moves_with_the_chief_role(tmp_path, monkeypatch):
    """Every worker registers the chief queue runner; only the chief runs it.
    When the chief dies, the new chief runs it: training goes on (without it
    the survivors would wait for tokens for ever)."""
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    async with cluster(2) as spec:
        replicas = [Replica(spec, t, aggregate=1, total=2) for t in (0, 1)]
        svs = [dt.train.Supervisor(
            graph=r.graph, is_chief=(r.task == 0), init_op=r.init,
            local_init_op=r.opt.local_step_init_op,
            ready_for_local_init_op=r.opt.ready_for_local_init_op,
            global_step=r.gs, logdir=str(tmp_path / "logs"), save_model_secs=0,
            recovery_wait_secs=0.05) for r in replicas]
        r0, r1 = replicas
        x = np.zeros(3, np.float32)
        async with svs[0].managed_session(r0.target) as s0, \
                svs[1].managed_session(r1.target) as s1:
            await s0.run(r0.opt.chief_init_op)
            await s0.run(r0.init_tokens)
            for sv, sess, r in ((svs[0], s0, r0), (svs[1], s1, r1)):
                sv.start_queue_runners(sess, [r.opt.get_chief_queue_runner()])
            assert not svs[1]._runners.running_chief_runners and svs[0]._runners.running_chief_runners
            for _ in range(3):
                await asyncio.wait_for(r0.step(s0, x), GUARD)
                await asyncio.wait_for(r1.step(s1, x), GUARD)
            svs[0]._role.election._task.cancel()      # the chief dies (white-box)
            for _ in range(int(GUARD / 0.05)):
                if svs[1].is_chief:
                    break
                await asyncio.sleep(0.05)
            assert svs[1].is_chief
            before = int(await s1.run(r1.gs))
            for _ in range(8):                         # worker 1 alone, its own runner
                await asyncio.wait_for(r1.step(s1, x), GUARD)
            # (a gradient computed before the move may be stale: it is dropped)
            assert int(await s1.run(r1.gs)) >= before + 4
            assert svs[1]._runners.running_chief_runners
