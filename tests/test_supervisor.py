"""Supervisor: chief init and checkpoints, restart from checkpoints, non-chief waiting, stopping.

Every test runs real local servers and sessions; the clusters are restarted
by stopping a server and starting a fresh one (empty variable store).
"""
from __future__ import annotations

import asyncio
import os
import socket

import numpy as np
import pytest

import distrib as dt
from distrib.errors import FailedPreconditionError, OutOfRangeError
from distrib.train.checkpoints import file_format, state_file
from distrib.train.checkpoints.saver import latest_checkpoint
from distrib.train.chief.supervisor import Supervisor
from distrib.train.optimizers.global_step import get_or_create_global_step
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer

W_INIT = np.array([4.0, -2.0])
BOUND_S = 30  # no test waits longer than this for a condition


class Model:
    """``w`` pulled towards 0 by gradient descent, counted by a global step; its own graph."""

    def __init__(self, device: str | None = None) -> None:
        self.graph = dt.Graph()
        with self.graph.as_default(), dt.device(device):
            self.w = dt.Variable(W_INIT, name="w")
            self.gs = get_or_create_global_step()
            loss = dt.reduce_sum(dt.square(self.w))
            self.train = GradientDescentOptimizer(0.1).minimize(loss, global_step=self.gs)

    def supervisor(self, **kwargs) -> Supervisor:
        kwargs.setdefault("global_step", self.gs)
        return Supervisor(graph=self.graph, **kwargs)


def steps_on_disk(logdir: str) -> list[int]:
    state = state_file.get_checkpoint_state(logdir)
    if state is None:
        return []
    return [int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths]


async def test_chief_initializes_saves_periodically_and_at_the_end(server, tmp_path):
    logdir = str(tmp_path / "logs")
    model = Model()
    sv = model.supervisor(logdir=logdir, save_model_secs=0.05)
    assert sv.is_chief and sv.global_step is model.gs and sv.saver is not None
    async with asyncio.timeout(BOUND_S):
        async with sv.managed_session(server.target) as sess:
            np.testing.assert_array_equal(await sess.run(model.w), W_INIT)  # init_op ran
            step = 0
            while not sv.should_stop():
                await sess.run(model.train)
                step = await sess.run(model.gs)
                if len({s for s in steps_on_disk(logdir) if s > 0}) >= 2:
                    sv.request_stop()  # at least two periodic saves during training
                await asyncio.sleep(0.005)
            w_final = await sess.run(model.w)
    # the final save happened before the block was left, at the last step
    assert latest_checkpoint(logdir) == os.path.join(logdir, f"model.ckpt-{step}")
    restored = file_format.read_checkpoint(latest_checkpoint(logdir))
    np.testing.assert_array_equal(restored["w"], w_final)
    assert restored["global_step"] == step
    with pytest.raises(RuntimeError, match="finalized"):
        with model.graph.as_default():
            dt.constant(1.0)


async def test_whole_cluster_restart_resumes_from_the_checkpoint(tmp_path):
    logdir = str(tmp_path / "logs")
    first = Model()
    with dt.Server.create_local_server() as srv:
        sv = first.supervisor(logdir=logdir, save_model_secs=3600)
        async with sv.managed_session(srv.target) as sess:
            for _ in range(5):
                await sess.run(first.train)
            w_before, gs_before = await sess.run([first.w, first.gs])
    assert gs_before == 5
    second = Model()  # a restarted chief: new process state, new server, same logdir
    with dt.Server.create_local_server() as srv:
        sv = second.supervisor(logdir=logdir, save_model_secs=3600)
        async with sv.managed_session(srv.target) as sess:
            w_after, gs_after = await sess.run([second.w, second.gs])
            await sess.run(second.train)
    np.testing.assert_array_equal(w_after, w_before)
    assert gs_after == 5
    assert latest_checkpoint(logdir).endswith("model.ckpt-6")


async def test_restart_falls_back_past_a_corrupted_newest_checkpoint(tmp_path):
    logdir = str(tmp_path / "logs")
    first = Model()
    with dt.Server.create_local_server() as srv:
        sv = first.supervisor(logdir=logdir, save_model_secs=3600)
        async with sv.managed_session(srv.target) as sess:
            await sess.run(first.train)
            older = await sv.saver.save(sess, os.path.join(logdir, "model.ckpt"), global_step=first.gs)
            w_older = await sess.run(first.w)
            await sess.run(first.train)
    newest = latest_checkpoint(logdir)
    assert newest.endswith("model.ckpt-2") and older.endswith("model.ckpt-1")
    with open(newest, "r+b") as f:  # corrupt tensor data: the header still reads
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x55]))
    second = Model()
    with dt.Server.create_local_server() as srv:
        sv = second.supervisor(logdir=logdir, save_model_secs=3600)
        async with sv.managed_session(srv.target) as sess:
            w, gs = await sess.run([second.w, second.gs])
    assert gs == 1
    np.testing.assert_array_equal(w, w_older)


async def test_non_chief_waits_until_the_chief_has_initialized(server):
    events: list[str] = []
    # between-graph replication: one graph each; a replica's variables are pinned (TF's rule)
    chief_model, worker_model = Model(), Model(device="/job:local/task:0")
    worker_sv = worker_model.supervisor(is_chief=False, recovery_wait_secs=0.02)
    chief_sv = chief_model.supervisor()  # no logdir: no checkpoints

    async def non_chief() -> np.ndarray:
        async with worker_sv.managed_session(server.target) as sess:
            events.append("worker ready")
            return await sess.run(worker_model.w)

    async with asyncio.timeout(BOUND_S):
        waiting = asyncio.create_task(non_chief())
        done, _ = await asyncio.wait([waiting], timeout=0.5)
        assert not done, "the non-chief must wait: nothing has initialized the variables"
        async with chief_sv.managed_session(server.target) as sess:
            events.append("chief ready")
            await sess.run(chief_model.train)
            value = await waiting
    assert events == ["chief ready", "worker ready"]
    assert value.shape == (2,)
    assert np.allclose(value, W_INIT) or np.allclose(value, W_INIT * 0.8)  # before or after the step


async def test_error_in_the_block_is_reraised_after_the_final_save(server, tmp_path):
    logdir = str(tmp_path / "logs")
    model = Model()
    sv = model.supervisor(logdir=logdir, save_model_secs=3600)
    with pytest.raises(ZeroDivisionError):
        async with sv.managed_session(server.target) as sess:
            await sess.run(model.train)
            await sess.run(model.train)
            1 / 0
    assert sv.should_stop()
    assert latest_checkpoint(logdir).endswith("model.ckpt-2")


async def test_out_of_range_just_stops(server, tmp_path):
    model = Model()
    sv = model.supervisor(logdir=str(tmp_path), save_model_secs=3600)
    async with sv.managed_session(server.target) as sess:
        await sess.run(model.train)
        raise OutOfRangeError("input exhausted")
    assert sv.should_stop()
    assert latest_checkpoint(str(tmp_path)).endswith("model.ckpt-1")


async def test_chief_without_init_op_or_checkpoint_is_not_ready(server):
    model = Model()
    sv = model.supervisor(init_op=None)
    with pytest.raises(FailedPreconditionError, match="'w'"):
        async with sv.managed_session(server.target):
            pass


# -- between-graph replication on a real ps/worker cluster of processes ----------------

def replica_graph(spec: dict, task: int):
    """Replica ``task``'s own graph: variables on the ps, Adam updates there, math on the worker."""
    graph = dt.Graph()
    with graph.as_default(), dt.device(dt.train.replica_device_setter(
            cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
        w = dt.Variable(W_INIT, name="w")
        gs = get_or_create_global_step()
        opt = dt.train.AdamOptimizer(0.1)
        train = opt.minimize(dt.reduce_sum(dt.square(w)), global_step=gs)
    assert opt.get_slot(w, "m").device == w.device == "/job:ps/task:0"
    return graph, w, gs, train


@pytest.mark.slow
async def test_between_graph_training_with_supervisor_on_a_ps_cluster(ps_worker_cluster, tmp_path):
    spec, logdir, steps = ps_worker_cluster, str(tmp_path / "logs"), 10
    done: list[int] = []

    async def replica(task: int) -> None:
        graph, w, gs, train = replica_graph(spec, task)
        sv = Supervisor(graph=graph, is_chief=task == 0, logdir=logdir if task == 0 else None,
                        global_step=gs, recovery_wait_secs=0.05, save_model_secs=3600)
        async with sv.managed_session(f"distrib://{spec['worker'][task]}") as sess:
            for _ in range(steps):
                await sess.run(train)
            done.append(task)
            while len(done) < 2:  # the chief's final save waits for the other replica
                await asyncio.sleep(0.02)

    async with asyncio.timeout(60):
        await asyncio.gather(replica(1), replica(0))
    saved = file_format.read_checkpoint(latest_checkpoint(logdir))
    assert saved["global_step"] == 2 * steps  # both replicas incremented the one step on the ps
    assert {"w", "w/Adam", "w/Adam_1", "beta1_power", "beta2_power"} <= set(saved)
    # beta1_power advanced with the steps (its read-multiply-assign may race between replicas, as in TF)
    assert 0.9 ** (2 * steps + 1) * (1 - 1e-6) <= saved["beta1_power"] <= 0.9 ** (steps + 1) * (1 + 1e-6)
    assert np.all(np.abs(saved["w"]) < np.abs(W_INIT))


async def test_services_started_later_share_the_stop_signal(server, tmp_path, caplog):
    # start_queue_runners after the session opened (the SyncReplicas recipe)
    # must not leave the checkpoint loop waiting on a signal nobody sets:
    # leaving the block stops it at once, with no stop_grace_secs timeout
    model = Model()
    sv = model.supervisor(logdir=str(tmp_path), save_model_secs=3600, stop_grace_secs=BOUND_S)
    async with asyncio.timeout(BOUND_S):
        async with sv.managed_session(server.target) as sess:
            while latest_checkpoint(str(tmp_path)) is None:   # the loop's first save is done
                await asyncio.sleep(0.01)
            sv.start_queue_runners(sess, [])
            await sess.run(model.train)
    assert "did not stop within" not in caplog.text
    assert latest_checkpoint(str(tmp_path)).endswith("model.ckpt-1")   # the final save


async def test_save_model_secs_zero_writes_no_checkpoint(server, tmp_path):
    model = Model()
    sv = model.supervisor(logdir=str(tmp_path), save_model_secs=0)
    async with sv.managed_session(server.target) as sess:
        await sess.run(model.train)
    # the chief's summary writer has an event file there (TF's too), nothing else
    assert [f for f in os.listdir(tmp_path) if not f.startswith("events.out.tfevents.")] == []


async def test_a_second_managed_session_runs_the_checkpoint_loop_again(server, tmp_path):
    # the first session's stop must not stop the second one's periodic saves
    model = Model()
    sv = model.supervisor(logdir=str(tmp_path), save_model_secs=0.05)
    async with asyncio.timeout(BOUND_S):
        for want in (1, 2):
            async with sv.managed_session(server.target) as sess:
                await sess.run(model.train)
                assert await sess.run(model.gs) == want
                while want not in steps_on_disk(str(tmp_path)):   # a periodic save, in the block
                    await asyncio.sleep(0.01)


async def test_a_failing_queue_runner_stops_training_with_its_error(server):
    # TF: a QueueRunner reports its exception to the coordinator; should_stop()
    # turns true and leaving the block raises it
    from distrib.train.replicas.sync_replicas import ChiefQueueRunner
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(np.ones(2, np.float32), name="w")
        p = dt.placeholder(dt.float32, [2], name="p")
        bad = w.assign(p, read_value=False)   # its step fails: p is never fed
        init = dt.global_variables_initializer()
    sv = Supervisor(graph=g, init_op=init)
    with pytest.raises(dt.errors.InvalidArgumentError, match="'p:0'"):
        async with asyncio.timeout(BOUND_S):
            async with sv.managed_session(server.target) as sess:
                sv.start_queue_runners(sess, [ChiefQueueRunner(bad)])
                while not sv.should_stop():
                    await asyncio.sleep(0.01)


# -- TF 1.x compatibility ---------------------------------------------------------------

def _refused(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2.0)
        return sock.connect_ex((host, port)) != 0


async def test_an_empty_master_runs_on_an_in_process_server(tmp_path, shm_snapshot):
    # TF: managed_session("") is an in-process session. Here: a local server made on
    # first use and stopped when the managed session ends; the next one restores
    logdir = str(tmp_path / "logs")
    model = Model()
    sv = model.supervisor(logdir=logdir, save_model_secs=3600)
    async with asyncio.timeout(BOUND_S):
        async with sv.managed_session("") as sess:
            for _ in range(3):
                await sess.run(model.train)
            assert await sess.run(model.gs) == 3
            host, _, port = sess.target.removeprefix("distrib://").rpartition(":")
        assert _refused(host, int(port)), "the in-process server must stop with the session"
        assert latest_checkpoint(logdir).endswith("model.ckpt-3")
        async with sv.managed_session("") as sess:   # a fresh in-process server
            assert await sess.run(model.gs) == 3      # restored from logdir
            await sess.run(model.train)
    assert latest_checkpoint(logdir).endswith("model.ckpt-4")
    assert set(os.listdir("/dev/shm")) - shm_snapshot == set()


async def test_an_empty_master_server_stops_also_when_the_block_fails():
    model = Model()
    sv = model.supervisor()
    with pytest.raises(ZeroDivisionError):
        async with asyncio.timeout(BOUND_S):
            async with sv.managed_session("") as sess:
                await sess.run(model.train)
                host, _, port = sess.target.removeprefix("distrib://").rpartition(":")
                1 / 0
    assert _refused(host, int(port))


def test_a_non_chief_refuses_variables_without_a_device():
    # TF's _verify_setup: "When using replicas, all Variables must have their device set"
    model = Model()
    with pytest.raises(ValueError, match=r"must have their device set.*'w'.*'global_step'"):
        model.supervisor(is_chief=False)
    with pytest.raises(dt.errors.InvalidArgumentError, match="replica_device_setter"):
        Supervisor(graph=Model().graph, is_chief=False)
    Model().supervisor(is_chief=True)                              # the chief may leave them unpinned
    Model(device="/job:ps/task:0").supervisor(is_chief=False)      # pinned: fine


async def test_a_global_step_of_shape_one_numbers_the_supervisors_checkpoints(server, tmp_path):
    # TF's Supervisor takes the GLOBAL_STEP collection's first ("an integer Tensor of
    # size 1"); the checkpoints are named by its value
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(W_INIT, name="w")
        gs = dt.Variable(np.array([0], np.int64), trainable=False, name="global_step",
                         collections=[dt.GraphKeys.GLOBAL_VARIABLES, dt.GraphKeys.GLOBAL_STEP])
        train = dt.group(GradientDescentOptimizer(0.1).minimize(dt.reduce_sum(dt.square(w))),
                         gs.assign_add(np.array([1], np.int64)))
    sv = Supervisor(graph=g, logdir=str(tmp_path), save_model_secs=3600)
    assert sv.global_step is gs
    async with asyncio.timeout(BOUND_S):
        async with sv.managed_session(server.target) as sess:
            for _ in range(2):
                await sess.run(train)
    assert latest_checkpoint(str(tmp_path)) == os.path.join(str(tmp_path), "model.ckpt-2")
    np.testing.assert_array_equal(
        file_format.read_checkpoint(latest_checkpoint(str(tmp_path)))["global_step"], [2])


async def test_save_checkpoint_steps_saves_every_n_global_steps(tmp_path) -> None:
    # a distrib extension: the bound on what a ps restart loses, in steps
    g = dt.Graph()
    with g.as_default():
        gs = dt.train.get_or_create_global_step()
        step = gs.assign_add(1)
    sv = dt.train.Supervisor(graph=g, logdir=str(tmp_path), save_model_secs=0,
                             save_checkpoint_steps=4)
    async with sv.managed_session("") as sess:
        for _ in range(14):
            await sess.run(step)
            await asyncio.sleep(0.15)   # the service reads the global step twice a second
    saved = sorted(int(f.rsplit("-", 1)[1]) for f in os.listdir(tmp_path)
                   if f.startswith("model.ckpt-"))
    # one as the service starts (the first step may have run by then), the final one
    assert saved[0] <= 1 and saved[-1] == 14, saved
    periodic = saved[1:-1]
    # with save_model_secs=0 every save between is a step-triggered one, 4 or more apart
    assert periodic and all(b - a >= 4 for a, b in zip(saved, periodic)), saved
