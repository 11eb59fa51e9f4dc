"""Summaries where TF wires them: the Supervisor, MonitoredTrainingSession's
hooks, Keras' ``TensorBoard`` callback; written by the chief only, read back
by TensorBoard's own loader, and (slow) by a real ``tensorboard`` process
through its HTTP data API.
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import distrib as dt
from distrib.demo import free_ports
from distrib.train.chief.supervisor import Supervisor
from distrib.train.optimizers.global_step import get_or_create_global_step
from distrib.train.optimizers.gradient_descent import GradientDescentOptimizer

BOUND_S = 30


def event_files(logdir) -> list[str]:
    return glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))


def scalars(logdir, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    acc.Reload()
    if tag not in acc.Tags()["tensors"]:
        return []
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]


class Model:
    """``w`` pulled to 0 by gradient descent, its loss a summary; its own graph."""

    def __init__(self, device: str | None = None) -> None:
        self.graph = dt.Graph()
        with self.graph.as_default(), dt.device(device):
            self.w = dt.Variable(2.0, name="w")
            self.gs = get_or_create_global_step()
            self.loss = dt.square(self.w)
            dt.summary.scalar("loss", self.loss)
            self.train = GradientDescentOptimizer(0.1).minimize(self.loss, global_step=self.gs)


async def test_supervisor_chief_writes_summary_op_and_steps_per_second(server, tmp_path):
    model = Model()
    sv = Supervisor(graph=model.graph, logdir=str(tmp_path), global_step=model.gs,
                    save_summaries_secs=0.05, save_model_secs=0)
    assert sv.summary_op is not None and sv.summary_writer is not None   # merge_all, a FileWriter
    async with asyncio.timeout(BOUND_S):
        async with sv.managed_session(server.target) as sess:
            while len(scalars(tmp_path, "loss")) < 3:
                await sess.run(model.train)
                sv.summary_writer.flush()
                await asyncio.sleep(0.02)
            m = dt.summary.proto.messages()
            await sv.summary_computed(sess, m.Summary(value=[m.Summary.Value(tag="manual",
                                                                             simple_value=7.0)]))
            step = await sess.run(model.gs)
    assert scalars(tmp_path, "manual") == [(step, 7.0)]   # at the global step's value
    found = scalars(tmp_path, "loss")
    assert len(found) >= 3
    # loss = w^2 with w = 2 * 0.8^step: each value is the loss at its global step (a
    # training step may land between the reads of w and of the step: one off at most)
    assert all(any(v == pytest.approx((2.0 * 0.8 ** k) ** 2, rel=1e-4) for k in (s - 1, s, s + 1))
               for s, v in found)
    assert scalars(tmp_path, "global_step/sec")   # the step counter's summary


async def test_supervisor_non_chief_makes_no_writer(server, tmp_path):
    chief_dir, worker_dir = tmp_path / "chief", tmp_path / "worker"
    chief, worker = Model(), Model(device="/job:local/task:0")
    chief_sv = Supervisor(graph=chief.graph, logdir=str(chief_dir), global_step=chief.gs,
                          save_summaries_secs=0.05, save_model_secs=0)
    worker_sv = Supervisor(graph=worker.graph, logdir=str(worker_dir), is_chief=False,
                           global_step=worker.gs, save_summaries_secs=0.05,
                           recovery_wait_secs=0.02)
    assert worker_sv.summary_writer is None
    async with asyncio.timeout(BOUND_S):
        async with chief_sv.managed_session(server.target):
            async with worker_sv.managed_session(server.target) as sess:
                for _ in range(5):
                    await sess.run(worker.train)
                    await asyncio.sleep(0.03)
                with pytest.raises(dt.errors.FailedPreconditionError):
                    await worker_sv.summary_computed(sess, b"")
    assert event_files(chief_dir) and not event_files(worker_dir)


async def test_a_task_elected_chief_later_writes_the_summaries(server, tmp_path):
    """The role moves (an elected cluster's on_change, here called as the
    election calls it): the new chief makes its writer then and writes."""
    chief, worker = Model(), Model(device="/job:local/task:0")
    chief_sv = Supervisor(graph=chief.graph, logdir=None, global_step=chief.gs,
                          save_summaries_secs=0, save_model_secs=0)
    worker_dir = tmp_path / "worker"
    worker_sv = Supervisor(graph=worker.graph, logdir=str(worker_dir), is_chief=False,
                           global_step=worker.gs, save_summaries_secs=0.05, save_model_secs=0,
                           recovery_wait_secs=0.02)
    assert worker_sv.summary_writer is None
    async with asyncio.timeout(BOUND_S):
        async with chief_sv.managed_session(server.target):
            async with worker_sv.managed_session(server.target) as sess:
                worker_sv._role.preferred = True   # the role moved to this task
                await worker_sv._role_changed(True)
                assert worker_sv.summary_writer is not None
                for _ in range(3):
                    await sess.run(worker.train)
                    await asyncio.sleep(0.03)
                await worker_sv.summary_computed(sess, await sess.run(worker_sv.summary_op), 100)
    loss = scalars(worker_dir, "loss")
    assert 100 in [step for step, _ in loss] and len(loss) >= 2   # computed, and periodic


async def test_monitored_training_session_saves_summaries_on_the_chief(server, tmp_path):
    model = Model()
    async with asyncio.timeout(BOUND_S):
        with model.graph.as_default():
            async with dt.train.MonitoredTrainingSession(
                    master=server.target, checkpoint_dir=str(tmp_path), save_summaries_steps=5,
                    save_checkpoint_secs=0, log_step_count_steps=5) as sess:
                for _ in range(21):
                    await sess.run(model.train)
    steps = [s for s, _ in scalars(tmp_path, "loss")]
    # every 5 steps, at the global step read when it was written (the first at once)
    assert steps[0] == 1 and len(steps) >= 4 and all(4 <= b - a <= 6 for a, b in zip(steps, steps[1:]))
    assert [s for s, _ in scalars(tmp_path, "global_step/sec")]
    worker = Model(device="/job:local/task:0")
    worker_dir = tmp_path / "worker"
    async with asyncio.timeout(BOUND_S):
        with worker.graph.as_default():
            async with dt.train.MonitoredTrainingSession(
                    master=server.target, is_chief=False, checkpoint_dir=str(worker_dir),
                    save_summaries_steps=1) as sess:
                for _ in range(3):
                    await sess.run(worker.train)
    assert not event_files(worker_dir)   # a non-chief's hooks make no writer


async def test_summary_saver_hook_arguments_as_tf():
    with pytest.raises(ValueError):
        dt.train.SummarySaverHook(save_steps=1, output_dir="x")   # no scaffold or summary_op
    with pytest.raises(ValueError):
        dt.train.SummarySaverHook(save_steps=1, summary_op=dt.constant(b""))   # nowhere to write
    # MonitoredTrainingSession hands both intervals to the hook, whose timer refuses
    # them (TF's ValueError); one of them, or neither positive, is accepted
    with Model().graph.as_default():
        with pytest.raises(ValueError, match="both"):
            dt.train.MonitoredTrainingSession(checkpoint_dir="unused", save_summaries_steps=10,
                                              save_summaries_secs=30)
        for steps, secs in ((10, None), (None, 30), (0, None)):
            dt.train.MonitoredTrainingSession(checkpoint_dir="unused", save_summaries_steps=steps,
                                              save_summaries_secs=secs)


async def test_keras_tensorboard_callback_train_and_validation(tmp_path, fresh_keras):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32))
    model = dt.keras.Sequential([dt.keras.layers.Dense(1)])
    model.compile(optimizer=dt.keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    callback = dt.keras.callbacks.TensorBoard(log_dir=str(tmp_path), histogram_freq=1, update_freq=4)
    async with asyncio.timeout(60):
        history = await model.fit(x, y, epochs=3, batch_size=16, verbose=0,
                                  validation_data=(x[:32], y[:32]), callbacks=[callback])
    train, validation = tmp_path / "train", tmp_path / "validation"
    assert scalars(train, "epoch_loss") == [(e, pytest.approx(v, rel=1e-5))
                                            for e, v in enumerate(history.history["loss"])]
    assert [s for s, _ in scalars(validation, "epoch_loss")] == [0, 1, 2]
    assert scalars(validation, "epoch_mae")[-1][1] == pytest.approx(history.history["val_mae"][-1],
                                                                     rel=1e-5)
    assert [s for s, _ in scalars(train, "batch_loss")] == [4, 8, 12]   # 4 batches an epoch
    acc = EventAccumulator(str(train))
    acc.Reload()
    assert {"dense/kernel", "dense/bias"} <= set(acc.Tags()["tensors"])
    epoch_only = dt.keras.callbacks.TensorBoard(log_dir=str(tmp_path / "e"))
    assert not epoch_only._implements_train_batch_hooks()   # costs no batch hook


@pytest.mark.slow
def test_a_real_tensorboard_serves_our_scalars(tmp_path):
    """``tensorboard --logdir`` (a real process, a free port) reads our files:
    the scalars come back through its HTTP data API."""
    writer = dt.summary.create_file_writer(str(tmp_path / "run1"))
    with writer.as_default():
        for step in range(5):
            dt.summary.scalar("loss", 1.0 / (step + 1), step=step)
    writer.close()
    (port,) = free_ports(1)
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(tmp_path),
                             "--port", str(port), "--host", "127.0.0.1", "--load_fast=false",
                             "--reload_interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=run1&tag=loss"
        deadline, rows = time.monotonic() + 30, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:
                    rows = json.loads(reply.read())
                if len(rows) == 5:
                    break
            except (urllib.error.URLError, ConnectionError, ValueError):
                pass
            time.sleep(0.5)
        assert rows is not None, "tensorboard never answered"
        assert [(r[1], pytest.approx(r[2])) for r in rows] == [(s, 1.0 / (s + 1)) for s in range(5)]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
