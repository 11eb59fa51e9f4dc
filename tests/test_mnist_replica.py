"""TF's mnist_replica.py as written (issue 39): examples/mnist_replica/, run
through the launcher with a ps and two workers, asynchronously and with
``--sync_replicas``, on the generated MNIST-shaped set (input_data.py writes
it in MNIST's file format when the real files are absent); and the pieces it
needed: ``ConfigProto(device_filters=...)`` and the launcher's ``{job_name}``,
``{task_index}``, ``{ps_hosts}``, ``{worker_hosts}`` in a task's command.

Each run is its own processes on free loopback ports, bounded in time; every
assertion reads what the finished processes printed.
"""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.launch.tasks import free_ports, task_argv
from tests.helpers import ROOT, child_env

BOUND_S = 240
SCRIPT = os.path.join(ROOT, "examples", "mnist_replica", "mnist_replica.py")
RESULT = re.compile(r"\[worker:(\d)\] After (\d+) training step\(s\), validation cross "
                    r"entropy = (\S+)")
GLOBAL = re.compile(r"\[worker:(\d)\] \S+: Worker \d: training step \d+ done \(global step: (\d+)\)")


def run_replicas(data_dir: str, *flags: str) -> str:
    """mnist_replica.py under ``distrib.launch --ps 1 --workers 2``; its output once
    the launcher exited 0."""
    cmd = [sys.executable, "-m", "distrib.launch", "--ps", "1", "--workers", "2",
           "--ps_grace", "1", "--", sys.executable, SCRIPT, "--job_name={job_name}",
           "--task_index={task_index}", "--ps_hosts={ps_hosts}",
           "--worker_hosts={worker_hosts}", "--num_gpus=0", f"--data_dir={data_dir}", *flags]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = proc.communicate(timeout=BOUND_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)   # the launcher stops its tasks, workers first
        try:
            text, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, _ = proc.communicate()
        raise AssertionError(f"the replicas did not finish in {BOUND_S}s:\n{text[-4000:]}")
    assert proc.returncode == 0, text[-4000:]
    return text


def _check_trained(out: str, steps: int) -> None:
    results = RESULT.findall(out)
    assert sorted(r[0] for r in results) == ["0", "1"], out[-3000:]
    # untrained: -sum(y_ log y) over 5000 validation images is about 5000 ln 10 = 11513
    for _, n, xent in results:
        assert int(n) == steps and np.isfinite(float(xent)) and float(xent) < 1500.0, results
    seen = [int(s) for _, s in GLOBAL.findall(out)]
    assert max(seen) >= steps   # each worker ran until the global step reached train_steps


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mnist_replica_trains_asynchronously_through_the_launcher(tmp_path):
    out = run_replicas(str(tmp_path / "data"), "--train_steps=40")
    _check_trained(out, 40)
    assert "Worker 1: Waiting for session to be initialized..." in out
    assert os.path.exists(tmp_path / "data" / "train-images-idx3-ubyte.gz")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mnist_replica_trains_with_sync_replicas_through_the_launcher(tmp_path):
    # as written: replicas_to_aggregate defaults to the 2 workers; a worker whose last
    # step waits for a round its partner (gone: it reached train_steps) will never send
    # gets the chief runner's last token (test_a_replica_waiting_...) instead of hanging
    out = run_replicas(str(tmp_path / "data"), "--train_steps=20", "--sync_replicas")
    _check_trained(out, 20)
    # synchronous: each step's gradients wait for the chief's aggregation and token
    assert "Worker 0: Session initialization complete." in out


def test_launcher_writes_each_tasks_place_into_its_command():
    cluster = dt.ClusterSpec({"ps": ["h:1"], "worker": ["h:2", "h:3"]})
    argv = ["prog", "--job_name={job_name}", "--task_index={task_index}",
            "--ps_hosts={ps_hosts}", "--worker_hosts={worker_hosts}", "{other}"]
    assert task_argv(argv, cluster, "worker", 1) == [
        "prog", "--job_name=worker", "--task_index=1", "--ps_hosts=h:1",
        "--worker_hosts=h:2,h:3", "{other}"]


def test_device_filters_keep_a_session_off_the_tasks_they_leave_out():
    p0, p1, p2 = free_ports(3)
    cluster = dt.ClusterSpec({"ps": [f"127.0.0.1:{p0}"],
                              "worker": [f"127.0.0.1:{p1}", f"127.0.0.1:{p2}"]})
    ps = dt.Server(cluster, job_name="ps", task_index=0)
    w0 = dt.Server(cluster, job_name="worker", task_index=0)   # worker 1 never starts
    try:
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                v = dt.Variable(3.0, name="v")
            with dt.device("/job:worker/task:0"):
                y = v * 2.0
            with dt.device("/job:worker/task:1"):
                z = v + 1.0
        config = dt.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
        sess = dt.SyncSession(w0.target, graph=g, config=config)
        try:
            sess.run(v.initializer)
            assert sess.run(y) == 6.0
            # refused at once, naming the filters, instead of waiting for worker 1
            with pytest.raises(dt.errors.InvalidArgumentError, match="device_filters"):
                sess.run(z)
        finally:
            sess.close()
        with pytest.raises(TypeError, match="device_filters"):
            dt.ConfigProto(device_filters="/job:ps")
    finally:
        w0.stop()
        ps.stop()


async def test_a_replica_waiting_for_a_round_ends_when_the_chief_stops():
    # mnist_replica.py with 2 of 2: one worker ends its loop (global step >= train_steps)
    # while the other's last step waits for a round nobody will aggregate; it waited
    # forever, and the launcher with it. The chief's runner, ending (stopped, or cancelled
    # when its program exits), gives each replica a last token of the current step.
    from tests.test_sync_replicas import GUARD, Replica, cluster

    async with cluster(2) as spec:
        r0, r1 = Replica(spec, 0, 2, 2), Replica(spec, 1, 2, 2)
        x = np.zeros(3, np.float32)
        async with r0.session() as s0, r1.session() as s1:
            await r0.start(s0, chief=True)
            await r1.start(s1)
            runner = r0.opt.get_chief_queue_runner()
            # the two initial tokens go to r0's two steps (one round: global step 1)
            chief = runner.start(s0, lambda: False)
            await asyncio.wait_for(r0.step(s0, x), GUARD)
            await asyncio.wait_for(r0.step(s0, x), GUARD)
            # r1: the two tokens of round 1 are there, r1 takes one; r0's is left
            await asyncio.wait_for(r1.step(s1, x), GUARD)
            await asyncio.wait_for(r0.step(s0, x), GUARD)   # the queue is empty now
            assert await s0.run(r0.queue_size) == 0
            last = asyncio.ensure_future(r1.step(s1, x))     # waits for round 2's tokens
            await asyncio.sleep(0.3)
            assert not last.done()
            chief.cancel()                                   # the chief's program exits
            with pytest.raises(asyncio.CancelledError):
                await chief
            await asyncio.wait_for(last, GUARD)              # released, not hung
            assert await s1.run(r1.local_step) == await s0.run(r0.gs)
