"""MonitoredTrainingSession and its hooks: init/restore, checkpoints, waiting, hooks, recovery.

Every test runs real servers: an in-process local server, an in-process
cluster (``dt.serve``), or CLI tasks in processes (the ps restart and the
sync-replicas tests). Each test is bounded with ``asyncio.timeout`` as a
hang guard. The model is ``w`` pulled towards 0 by gradient descent on
sum(w^2) with rate 0.1, so after ``k`` steps ``w == W_INIT * 0.8**k`` exactly
(in float64): a restored or re-initialized ``w`` shows in the final value.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.errors import AbortedError, DeadlineExceededError, UnavailableError
from distrib.train.checkpoints import file_format, state_file
from distrib.train.sessions import monitored_session as ms
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

W_INIT = np.array([4.0, -2.0])
BOUND_S = 60  # hang guard for a whole test


def w_after(steps: int) -> np.ndarray:
    w = W_INIT.copy()
    for _ in range(steps):
        w = w - 0.1 * 2 * w
    return w


class Model:
    """``w`` and a global step in their own graph; ``device_fn`` places them (replica_device_setter)."""

    def __init__(self, device_fn=None) -> None:
        self.graph = dt.Graph()
        with self.graph.as_default(), dt.device(device_fn):
            self.w = dt.Variable(W_INIT, name="w")
            self.gs = dt.train.get_or_create_global_step()
            self.loss = dt.reduce_sum(dt.square(self.w), name="loss")
            self.train = dt.train.GradientDescentOptimizer(0.1).minimize(self.loss,
                                                                        global_step=self.gs)

    def mts(self, **kwargs) -> dt.train.MonitoredSession:
        with self.graph.as_default():   # the session's graph is the default one when made
            return dt.train.MonitoredTrainingSession(**kwargs)


async def train(sess, op) -> int:
    runs = 0
    while not sess.should_stop():
        await sess.run(op)
        runs += 1
    return runs


def steps_on_disk(logdir: str) -> list[int]:
    state = state_file.get_checkpoint_state(logdir)
    if state is None:
        return []
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


class Recorder(dt.train.SessionRunHook):
    """Records the hook calls; its after_create_session reads the global step (async)."""

    def __init__(self, gs) -> None:
        self.gs = gs
        self.calls: list[str] = []
        self.session_starts: list[int] = []

    def begin(self) -> None:
        self.calls.append("begin")

    async def after_create_session(self, session, coord) -> None:
        self.calls.append("after_create_session")
        self.session_starts.append(int(await session.run(self.gs)))

    def before_run(self, run_context):
        self.calls.append("before_run")

    async def after_run(self, run_context, run_values) -> None:
        self.calls.append("after_run")

    def end(self, session) -> None:
        self.calls.append("end")


# -- training, checkpoints, resuming ---------------------------------------------------

async def test_trains_to_last_step_and_unfinalizes_the_graph(server) -> None:
    model = Model()
    rec = Recorder(model.gs)
    mts = model.mts(master=server.target, hooks=[dt.train.StopAtStepHook(last_step=7), rec])
    async with asyncio.timeout(BOUND_S):
        async with mts as sess:
            assert model.graph.finalized
            assert await train(sess, model.train) == 7
        async with dt.Session(server.target, graph=model.graph) as plain:
            gs, w = await plain.run([model.gs, model.w])
    assert gs == 7
    np.testing.assert_allclose(w, w_after(7))
    assert rec.calls[:3] == ["begin", "after_create_session", "before_run"]
    assert rec.calls[-1] == "end" and rec.calls.count("after_run") == 7
    assert not model.graph.finalized   # it was not finalized before: TF unfinalizes it
    assert sess.should_stop()


async def test_num_steps_counts_from_the_session_start(server) -> None:
    model = Model()
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target,
                             hooks=[dt.train.StopAtStepHook(last_step=4)]) as sess:
            await train(sess, model.train)
        # no checkpoint_dir: the chief initializes again, then runs num_steps more
        async with model.mts(master=server.target,
                             hooks=[dt.train.StopAtStepHook(num_steps=3)]) as sess:
            assert await train(sess, model.train) == 3
        async with dt.Session(server.target, graph=model.graph) as plain:
            assert await plain.run(model.gs) == 3


async def test_await_opens_it_and_close_is_idempotent(server) -> None:
    model = Model()
    async with asyncio.timeout(BOUND_S):
        sess = await model.mts(master=server.target, hooks=[dt.train.StopAtStepHook(num_steps=2)])
        assert await train(sess, model.train) == 2
        await sess.close()
        await sess.close()
    assert sess.should_stop()
    with pytest.raises(RuntimeError, match="not open"):
        await sess.run(model.train)


async def test_chief_checkpoints_every_n_steps_and_at_the_end(server, tmp_path) -> None:
    logdir = str(tmp_path / "logs")
    model = Model()
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, checkpoint_dir=logdir, save_checkpoint_steps=3,
                             hooks=[dt.train.StopAtStepHook(last_step=10)]) as sess:
            await train(sess, model.train)
    # one at the start (the state it starts from), every 3 steps, and the last one
    assert steps_on_disk(logdir) == [0, 3, 6, 9, 10]
    newest = file_format.read_checkpoint(dt.train.latest_checkpoint(logdir))
    assert newest["global_step"] == 10
    np.testing.assert_allclose(newest["w"], w_after(10))


async def test_chief_checkpoints_every_n_secs_and_by_default_at_start_and_end(server,
                                                                              tmp_path) -> None:
    logdir = str(tmp_path / "secs")
    model = Model()
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, checkpoint_dir=logdir,
                             save_checkpoint_secs=0.2) as sess:
            while len(steps_on_disk(logdir)) < 3:   # step 0 and two periodic saves
                await sess.run(model.train)
                await asyncio.sleep(0.02)
            last = await sess.run(model.gs)
        assert steps_on_disk(logdir)[-1] == last   # the final save
        # the default (600 s): a checkpoint at the start and one at the end only
        default_dir = str(tmp_path / "default")
        again = Model()
        async with again.mts(master=server.target, checkpoint_dir=default_dir,
                             hooks=[dt.train.StopAtStepHook(last_step=5)]) as sess:
            await train(sess, again.train)
    assert steps_on_disk(default_dir) == [0, 5]


async def test_a_new_session_on_the_checkpoint_dir_resumes_at_the_saved_step(
        tmp_path, shm_snapshot) -> None:
    # master="": a local server made for the session and stopped with it, so the
    # second session starts from an empty server: only the checkpoint carries the state
    logdir = str(tmp_path / "logs")
    first = Model()
    async with asyncio.timeout(BOUND_S):
        async with first.mts(checkpoint_dir=logdir,
                             hooks=[dt.train.StopAtStepHook(last_step=5)]) as sess:
            await train(sess, first.train)
            target = sess._inner.session.target
        assert target.startswith("distrib://")
        second = Model()
        rec = Recorder(second.gs)
        async with second.mts(checkpoint_dir=logdir,
                              hooks=[dt.train.StopAtStepHook(last_step=8), rec]) as sess:
            assert rec.session_starts == [5]
            np.testing.assert_allclose(await sess.run(second.w), w_after(5))
            assert await train(sess, second.train) == 3   # steps 6, 7, 8
            assert sess._inner.session.target != target
        # already at last_step: it stops at once instead of running a step more
        third = Model()
        async with third.mts(checkpoint_dir=logdir,
                             hooks=[dt.train.StopAtStepHook(last_step=8)]) as sess:
            assert sess.should_stop()
    assert steps_on_disk(logdir)[-1] == 8
    np.testing.assert_allclose(file_format.read_checkpoint(dt.train.latest_checkpoint(logdir))["w"],
                               w_after(8))
    assert set(os.listdir("/dev/shm")) - shm_snapshot == set()


async def test_the_chief_falls_back_past_a_corrupt_newest_checkpoint(server, tmp_path) -> None:
    logdir = str(tmp_path / "logs")
    first = Model()
    async with asyncio.timeout(BOUND_S):
        async with first.mts(master=server.target, checkpoint_dir=logdir, save_checkpoint_steps=2,
                             hooks=[dt.train.StopAtStepHook(last_step=3)]) as sess:
            await train(sess, first.train)
        newest = dt.train.latest_checkpoint(logdir)
        assert newest.endswith("model.ckpt-3")
        with open(newest, "r+b") as f:   # flip the last byte of tensor data
            f.seek(-1, os.SEEK_END)
            byte = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0x55]))
        second = Model()
        rec = Recorder(second.gs)
        async with second.mts(master=server.target, checkpoint_dir=logdir, hooks=[rec]) as sess:
            np.testing.assert_allclose(await sess.run(second.w), w_after(2))
    assert rec.session_starts == [2]


# -- a non-chief waits for the chief ------------------------------------------------------

@contextlib.asynccontextmanager
async def in_process_cluster(workers: int):
    ports = free_ports(1 + workers)
    spec = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}
    async with contextlib.AsyncExitStack() as stack:
        for job, n in (("ps", 1), ("worker", workers)):
            for i in range(n):
                await stack.enter_async_context(dt.serve(spec, job_name=job, task_index=i))
        yield spec


def replica(spec: dict, task: int) -> Model:
    return Model(dt.train.replica_device_setter(cluster=dt.ClusterSpec(spec),
                                                worker_device=f"/job:worker/task:{task}"))


async def test_a_non_chief_waits_until_the_chief_has_initialized() -> None:
    async with asyncio.timeout(BOUND_S), in_process_cluster(2) as spec:
        chief, other = replica(spec, 0), replica(spec, 1)
        opened = asyncio.Event()

        async def non_chief() -> tuple[int, np.ndarray]:
            async with other.mts(master=f"distrib://{spec['worker'][1]}", is_chief=False) as sess:
                opened.set()
                return await sess.run([other.gs, other.w])

        waiting = asyncio.ensure_future(non_chief())
        await asyncio.sleep(1.0)
        assert not opened.is_set() and not waiting.done()   # no chief yet: it waits
        async with chief.mts(master=f"distrib://{spec['worker'][0]}", is_chief=True,
                             hooks=[dt.train.StopAtStepHook(last_step=2)]) as sess:
            await train(sess, chief.train)
            gs, w = await waiting
    assert gs >= 0
    np.testing.assert_allclose(w, w_after(int(gs)))


async def test_a_non_chief_gives_up_after_max_wait_secs(server) -> None:
    model = Model()
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(DeadlineExceededError, match="not ready after waiting"):
            async with model.mts(master=server.target, is_chief=False, max_wait_secs=0.5):
                pass
    assert not model.graph.finalized


# -- hooks -------------------------------------------------------------------------------

class FeedAndFetch(dt.train.SessionRunHook):
    """Feeds ``bias`` and fetches ``w`` in the caller's step; asks to stop after ``stop_after``."""

    def __init__(self, bias, w, stop_after: int) -> None:
        self.bias, self.w, self.stop_after = bias, w, stop_after
        self.seen: list[np.ndarray] = []

    async def before_run(self, run_context):   # async methods are awaited
        assert run_context.original_args.fetches is not None
        return dt.train.SessionRunArgs({"w": self.w}, feed_dict={self.bias: 10.0})

    def after_run(self, run_context, run_values) -> None:
        self.seen.append(run_values.results["w"])
        if len(self.seen) >= self.stop_after:
            run_context.request_stop()


async def test_hook_fetches_and_feeds_ride_in_the_callers_step_and_request_stop(server) -> None:
    model = Model()
    with model.graph.as_default():
        x = dt.placeholder(dt.float64, [], name="x")
        bias = dt.placeholder(dt.float64, [], name="bias")
        out = x + bias
    hook = FeedAndFetch(bias, model.w, stop_after=3)
    master = server._core.master   # white-box: count the steps the master runs
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, hooks=[hook]) as sess:
            before = master.counters["steps"]
            results = []
            while not sess.should_stop():
                results.append(await sess.run([out, model.train], feed_dict={x: 1.0}))
            assert master.counters["steps"] - before == 3   # one step per run, hooks included
            with pytest.raises(RuntimeError, match="should_stop"):
                await sess.run(out, feed_dict={x: 1.0})
    assert [r[0] for r in results] == [11.0, 11.0, 11.0]
    assert len(hook.seen) == 3 and all(w.shape == (2,) for w in hook.seen)


async def test_a_tensor_fed_by_a_hook_and_the_caller_is_an_error(server) -> None:
    model = Model()
    with model.graph.as_default():
        bias = dt.placeholder(dt.float64, [], name="bias")
        out = bias * 2.0
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target,
                             hooks=[FeedAndFetch(bias, model.w, stop_after=9)]) as sess:
            assert await sess.run(out) == 20.0
            with pytest.raises(RuntimeError, match="fed by a SessionRunHook and user"):
                await sess.run(out, feed_dict={bias: 1.0})


async def test_logging_tensor_hook_and_step_counter_log(server, caplog) -> None:
    caplog.set_level(logging.INFO, logger="distrib.train.sessions.session_run_hooks")
    model = Model()
    hooks = [dt.train.StopAtStepHook(last_step=5),
             dt.train.LoggingTensorHook({"step": model.gs, "loss": "loss:0"}, every_n_iter=2,
                                        at_end=True),
             dt.train.LoggingTensorHook([model.gs], every_n_iter=100,
                                        formatter=lambda v: f"custom {sorted(v.values())}"),
             dt.train.StepCounterHook(every_n_steps=2)]
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, hooks=hooks) as sess:
            await train(sess, model.train)
    lines = [r.getMessage() for r in caplog.records]
    tensors = [m for m in lines if m.startswith("loss = ")]
    assert len(tensors) == 4, lines   # iterations 0, 2, 4, and at the end
    assert all(", step = " in m for m in tensors)   # sorted tags
    assert tensors[-1].startswith(f"loss = {float(np.sum(w_after(5) ** 2))}, step = 5")
    assert any(m.startswith("custom [") for m in lines)
    rates = [m for m in lines if m.startswith("global_step/sec: ")]
    assert rates and all(float(m.split(": ")[1]) > 0 for m in rates)


def test_hook_arguments_follow_tf() -> None:
    with pytest.raises(ValueError, match="num_steps or last_step"):
        dt.train.StopAtStepHook()
    with pytest.raises(ValueError, match="Only one"):
        dt.train.StopAtStepHook(num_steps=1, last_step=2)
    with pytest.raises(ValueError, match="exactly one"):
        dt.train.LoggingTensorHook(["a:0"], every_n_iter=1, every_n_secs=1)
    with pytest.raises(ValueError, match="both"):
        dt.train.CheckpointSaverHook("d", save_secs=1, save_steps=1)
    with pytest.raises(ValueError, match="exactly one"):
        dt.train.StepCounterHook(every_n_steps=1, every_n_secs=1)
    timer = dt.train.SecondOrStepTimer(every_steps=3)
    assert timer.should_trigger_for_step(0)
    assert timer.update_last_triggered_step(0) == (None, None)
    assert not timer.should_trigger_for_step(2) and timer.should_trigger_for_step(3)


# -- recovery ----------------------------------------------------------------------------

class FailOnce(dt.train.SessionRunHook):
    """Raises ``error`` from before_run at the ``at``-th run (counting from 1), ``times`` times."""

    def __init__(self, error: Exception, at: int, times: int = 1) -> None:
        self.error, self.at, self.times = error, at, times
        self.runs = 0

    def before_run(self, run_context):
        self.runs += 1
        if self.runs >= self.at and self.times > 0:
            self.times -= 1
            raise self.error


async def test_a_recoverable_error_recreates_the_session_which_restores(server, tmp_path,
                                                                        caplog) -> None:
    caplog.set_level(logging.WARNING, logger="distrib.train.sessions.monitored_session")
    logdir = str(tmp_path / "logs")
    model = Model()
    rec = Recorder(model.gs)
    hooks = [FailOnce(AbortedError("the ps restarted"), at=4), rec,
             dt.train.StopAtStepHook(last_step=8)]
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, checkpoint_dir=logdir,
                             save_checkpoint_steps=2, hooks=hooks) as sess:
            await train(sess, model.train)
        async with dt.Session(server.target, graph=model.graph) as plain:
            w, gs = await plain.run([model.w, model.gs])
    # steps 1-3 ran; the 4th failed: the chief restored step 2, then went on to 8
    assert rec.session_starts == [0, 2]
    assert gs == 8
    np.testing.assert_allclose(w, w_after(8))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("AbortedError" in m and "the ps restarted" in m for m in warnings), warnings


async def test_recovery_gives_up_after_consecutive_failures(server, caplog) -> None:
    model = Model()
    rec = Recorder(model.gs)
    failing = FailOnce(UnavailableError("the ps is gone"), at=2, times=10 ** 6)
    async with asyncio.timeout(BOUND_S):
        async with model.mts(master=server.target, hooks=[failing, rec]) as sess:
            await sess.run(model.train)
            with pytest.raises(UnavailableError, match="the ps is gone"):
                await sess.run(model.train)
    assert len(rec.session_starts) == 1 + ms.MAX_CONSECUTIVE_RECOVERIES
    assert any("giving up" in r.getMessage() for r in caplog.records)


async def test_a_failed_background_task_stops_training_with_its_error(server) -> None:
    class Background(dt.train.SessionRunHook):
        def after_create_session(self, session, coord) -> None:
            async def fail() -> None:
                await asyncio.sleep(0.05)
                raise ValueError("the runner broke")
            coord.register_thread(asyncio.ensure_future(fail()))

    model = Model()
    async with asyncio.timeout(BOUND_S):
        with pytest.raises(ValueError, match="the runner broke"):
            async with model.mts(master=server.target, hooks=[Background()]) as sess:
                while not sess.should_stop():   # the task's error stops training...
                    await asyncio.sleep(0.01)
                with pytest.raises(ValueError):   # ...fails the next step...
                    await sess.run(model.train)
            # ...and leaving the block re-raises it


@pytest.fixture
def short_connect_deadline(monkeypatch) -> None:
    # read by every actor system created after this (ours and the children's)
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "1")


class _Flag(logging.Handler):
    """Sets ``event`` at the first record whose message contains ``text``."""

    def __init__(self, text: str, event: threading.Event) -> None:
        super().__init__()
        self.text, self.event = text, event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.mark.slow
async def test_a_ps_restarted_mid_training_is_restored_from_the_checkpoint(
        tmp_path, short_connect_deadline, shm_snapshot, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="distrib.train.sessions.monitored_session")
    spec = cluster_spec(ps=1, worker=1)
    cfg = write_cluster(tmp_path, spec)
    procs = [cli_task(cfg, "ps", 0)]
    failed = threading.Event()
    flag = _Flag("in a step", failed)
    logging.getLogger("distrib.train.sessions.monitored_session").addHandler(flag)
    restarter = None
    server = dt.Server(dt.ClusterSpec(spec), job_name="worker", task_index=0)
    try:
        def restart() -> None:   # once the step failed: the ps comes back on its port, empty
            if failed.wait(BOUND_S):
                procs.append(cli_task(cfg, "ps", 0))

        class KillPs(dt.train.SessionRunHook):
            def __init__(self, gs) -> None:
                self.gs, self.done = gs, False

            async def after_run(self, run_context, run_values) -> None:
                nonlocal restarter
                if not self.done and await run_context.session.run(self.gs) >= 12:
                    self.done = True
                    procs[0].kill()
                    restarter = threading.Thread(target=restart, daemon=True)
                    restarter.start()

        model = replica(spec, 0)
        rec = Recorder(model.gs)
        hooks = [KillPs(model.gs), rec, dt.train.StopAtStepHook(last_step=20)]
        async with asyncio.timeout(BOUND_S):
            async with model.mts(master=server.target, checkpoint_dir=str(tmp_path / "logs"),
                                 save_checkpoint_steps=5, hooks=hooks) as sess:
                await train(sess, model.train)
            async with dt.Session(server.target, graph=model.graph) as plain:
                w, gs = await plain.run([model.w, model.gs])
        assert rec.session_starts == [0, 10]   # the new session restored step 10
        assert gs == 20
        np.testing.assert_allclose(w, w_after(20))
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("in a step" in m and ("UnavailableError" in m or "AbortedError" in m)
                   for m in warnings), warnings
    finally:
        failed.set()
        logging.getLogger("distrib.train.sessions.monitored_session").removeHandler(flag)
        if restarter is not None:
            restarter.join(BOUND_S)
        server.stop()
        for p in procs:
            p.stop()
    assert set(os.listdir("/dev/shm")) - shm_snapshot == set()


async def test_session_creation_gives_up_after_max_wait_secs(tmp_path,
                                                             short_connect_deadline) -> None:
    spec = cluster_spec(ps=1, worker=1)   # the ps never starts
    server = dt.Server(dt.ClusterSpec(spec), job_name="worker", task_index=0)
    try:
        model = replica(spec, 0)
        async with asyncio.timeout(BOUND_S):
            with pytest.raises(UnavailableError, match="/job:ps/task:0"):
                async with model.mts(master=server.target, max_wait_secs=2):
                    pass
    finally:
        server.stop()


# -- SyncReplicasOptimizer.make_session_run_hook -------------------------------------------

class SyncReplica:
    """loss = sum((w - 1)^2) with rate 0.1 on every replica: each aggregation (the average of
    two equal-rule gradients at the current w) moves w - 1 by a factor 0.8."""

    def __init__(self, spec: dict, task: int) -> None:
        self.graph = dt.Graph()
        with self.graph.as_default(), dt.device(dt.train.replica_device_setter(
                cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
            self.w = dt.Variable(np.array([3.0, -1.0, 5.0], np.float32), name="w")
            self.gs = dt.train.get_or_create_global_step()
            loss = dt.reduce_sum(dt.square(self.w - 1.0))
            self.opt = dt.train.SyncReplicasOptimizer(dt.train.GradientDescentOptimizer(0.1),
                                                      replicas_to_aggregate=2,
                                                      total_num_replicas=2)
            self.train = self.opt.minimize(loss, global_step=self.gs)
            self.close_queue = self.opt.sync_token_queue.close()   # built before finalize
        self.target = f"distrib://{spec['worker'][task]}"


@pytest.mark.slow
async def test_make_session_run_hook_trains_two_replicas_synchronously(ps_worker_cluster,
                                                                      tmp_path) -> None:
    spec = ps_worker_cluster
    chief, other = SyncReplica(spec, 0), SyncReplica(spec, 1)
    logdir = str(tmp_path / "logs")
    chief_done = asyncio.Event()
    runner = chief.opt.get_chief_queue_runner()

    async def run_chief() -> int:
        with chief.graph.as_default():
            mts = dt.train.MonitoredTrainingSession(
                master=chief.target, is_chief=True, checkpoint_dir=logdir,
                hooks=[chief.opt.make_session_run_hook(is_chief=True),
                       dt.train.StopAtStepHook(last_step=6)])
        try:
            async with mts as sess:
                return await train(sess, chief.train)
        finally:
            chief_done.set()

    async def run_other() -> int:
        # trains until the chief is done, so the chief's last aggregation gets its gradients
        with other.graph.as_default():
            mts = dt.train.MonitoredTrainingSession(
                master=other.target, is_chief=False,
                hooks=[other.opt.make_session_run_hook(is_chief=False)])
        steps = 0
        async with mts as sess:   # a dequeue released by the closed queue ends it (OutOfRange)
            while not sess.should_stop() and not chief_done.is_set():
                await sess.run(other.train)
                steps += 1
        return steps

    async with asyncio.timeout(BOUND_S):
        other_task = asyncio.ensure_future(run_other())
        chief_steps = await run_chief()
        async with dt.Session(chief.target, graph=chief.graph) as plain:
            await plain.run(chief.close_queue)   # releases a replica waiting for a token
            other_steps = await other_task
            w, gs = await plain.run([chief.w, chief.gs])
    assert chief_steps >= 1 and other_steps >= 1
    assert gs >= 6 and runner.steps >= 6
    # every aggregation averaged the two replicas' gradients at the current w
    np.testing.assert_allclose(w - 1.0, np.array([2.0, -2.0, 4.0]) * 0.8 ** int(gs), rtol=1e-4)
    assert steps_on_disk(logdir)[0] == 0 and steps_on_disk(logdir)[-1] >= 6


async def test_make_session_run_hook_needs_apply_gradients_first() -> None:
    g = dt.Graph()
    with g.as_default():
        dt.Variable(1.0, name="v")
        dt.train.get_or_create_global_step()
        opt = dt.train.SyncReplicasOptimizer(dt.train.GradientDescentOptimizer(0.1), 1)
        hook = opt.make_session_run_hook(is_chief=True)
        with pytest.raises(ValueError, match="apply_gradient"):
            hook.begin()
