"""examples/trainer.py as a user runs it: 1 ps + 2 workers as processes,
async between-graph training on the digits, every process exits 0, and the
chief reports an accuracy on held-out data; a restarted chief resumes from
its checkpoint."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from distrib.demo import free_ports
from tests.helpers import ROOT, child_env

TRAINER = os.path.join(ROOT, "examples", "trainer.py")


def run_cluster(tmp_path, steps: int, workers: int = 2,
                extra: tuple[str, ...] = ()) -> list[subprocess.CompletedProcess]:
    ports = free_ports(1 + workers)
    flags = [f"--ps_hosts=localhost:{ports[0]}",
             "--worker_hosts=" + ",".join(f"localhost:{p}" for p in ports[1:]),
             f"--train_steps={steps}", f"--logdir={tmp_path / 'logs'}", *extra]
    env = child_env(OPENBLAS_NUM_THREADS="1")
    roles = [("ps", 0)] + [("worker", i) for i in range(workers)]
    procs = [subprocess.Popen([sys.executable, TRAINER, f"--job_name={j}", f"--task_index={i}",
                               *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for j, i in roles]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode, o) for p, o in zip(procs, outs)]


def done_line(out: str) -> tuple[int, float]:
    m = re.search(r"^done global_step=(\d+) accuracy=([0-9.]+)$", out, re.M)
    assert m, out[-2000:]
    return int(m.group(1)), float(m.group(2))


@pytest.mark.slow
def test_async_between_graph_training_reaches_target_accuracy(tmp_path):
    results = run_cluster(tmp_path, steps=600)
    for r in results:
        assert r.returncode == 0, r.stdout[-3000:]
    step, acc = done_line(results[1].stdout)
    assert step >= 600
    assert acc >= 0.9
    done_line(results[2].stdout)  # the other worker reports too
    # the chief's final checkpoint is on disk, and a new cluster resumes from it
    from distrib.train import latest_checkpoint
    ckpt = latest_checkpoint(str(tmp_path / "logs"))
    assert ckpt is not None and int(ckpt.rsplit("-", 1)[1]) >= 600
    # the chief (only) wrote the batch's loss and accuracy as summaries TensorBoard reads
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    assert len(glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))) == 1
    acc = EventAccumulator(str(tmp_path / "logs"))
    acc.Reload()
    assert {"loss", "accuracy"} <= set(acc.Tags()["tensors"])
    assert acc.Tensors("accuracy")[-1].step > acc.Tensors("accuracy")[0].step
    again = run_cluster(tmp_path, steps=700, workers=1)
    for r in again:
        assert r.returncode == 0, r.stdout[-3000:]
    assert "restored" in again[1].stdout.lower(), again[1].stdout[-2000:]
    step2, acc2 = done_line(again[1].stdout)
    assert step2 >= 700 and acc2 >= 0.9


def test_progress_is_due_once_per_multiple_the_global_step_reaches():
    from examples.trainer import Progress
    progress = Progress(10)
    # a worker's view of the shared global step: the others' steps come between
    steps = [0, 2, 5, 9, 11, 12, 17, 21, 22, 26, 29, 33, 41, 42]
    assert [s for s in steps if progress.due(s)] == [0, 11, 21, 33, 41]


async def test_the_chief_polls_the_live_workers_through_one_client():
    """The chief asks the membership for the live workers every half second
    while it waits for them: every ask goes through the same client actor
    system (one per ask would start and shut down a system each time)."""
    import distrib as dt
    from distrib.cluster import ClusterSpec
    from distrib.runtime.chief.membership import Membership, MembershipReader, push_membership
    from examples.trainer import live_workers
    ports = free_ports(4)
    spec = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}
    cluster = ClusterSpec(spec)
    async with dt.serve(spec, job_name="ps", task_index=0):
        own = cluster.task_address("ps", 0)
        async with MembershipReader() as members:
            assert await live_workers(members, own, cluster) == 3   # no record: the cluster's
            system = members.system
            assert system is not None
            left = ClusterSpec({"ps": spec["ps"], "worker": spec["worker"][:2]})
            await push_membership(system, own, Membership(2, left, ("/job:worker/task:2",)))
            for _ in range(5):
                assert await live_workers(members, own, cluster) == 2
                assert members.system is system
        assert members.system is None


def test_two_workers_log_progress_once_every_log_every_global_steps(tmp_path):
    every = 100   # far more than the steps one worker makes while the other makes one
    results = run_cluster(tmp_path, steps=600, extra=(f"--log_every={every}",))
    for r in results:
        assert r.returncode == 0, r.stdout[-3000:]
        # a clean stop leaves no task of the ps or the workers pending on a loop
        assert "Task was destroyed but it is pending" not in r.stdout, r.stdout[-3000:]
    for i, r in enumerate(results[1:]):
        steps = [int(s) for s in re.findall(
            rf"worker {i}: global step (\d+), loss [0-9.]+, \d+ examples/s$", r.stdout, re.M)]
        # one line per multiple of log_every that the global step passes, none skipped
        assert steps, r.stdout[-3000:]
        buckets = [s // every for s in steps]
        assert buckets == list(range(buckets[0], buckets[0] + len(buckets))), steps
        assert buckets[-1] >= 600 // every, steps


def test_in_graph_replication_example_trains_one_tower_per_worker():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "in_graph.py"),
                          "--train_steps=200"], capture_output=True, text=True, timeout=120,
                         env=child_env(OPENBLAS_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    step, acc = done_line(out.stdout)
    assert step == 200 and acc >= 0.85


def _start(role: tuple[str, int], flags: list[str], out_path, sigint_ignored: bool = False,
           **env: str) -> subprocess.Popen:
    job, i = role
    # a background job of a non-interactive shell starts with SIGINT ignored
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    with open(out_path, "w") as out:
        return subprocess.Popen([sys.executable, TRAINER, f"--job_name={job}", f"--task_index={i}",
                                 *flags], stdout=out, stderr=subprocess.STDOUT, text=True,
                                env=child_env(OPENBLAS_NUM_THREADS="1", **env),
                                preexec_fn=ignore)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.mark.parametrize("flags, says", [
    (["--job_name=worker", "--task_index=5"], "task index 5 is not in job 'worker'"),
    (["--job_name=worker", "--task_index=0", "--ps_hosts=localhost"], "has no port"),
    (["--job_name=ps", "--task_index=0", "--ps_hosts=localhost:abc"], "bad port 'abc'"),
])
def test_bad_flags_are_one_line_errors(flags, says):
    base = ["--ps_hosts=localhost:1", "--worker_hosts=localhost:2"]
    out = subprocess.run([sys.executable, TRAINER, *base, *flags], capture_output=True,
                         text=True, timeout=60, env=child_env())
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_chief_started_before_its_ps_waits_for_it(tmp_path):
    ps, w0 = free_ports(2)
    flags = [f"--ps_hosts=localhost:{ps}", f"--worker_hosts=localhost:{w0}", "--train_steps=50"]
    # a short connect deadline: the first attempt fails while the ps is not there yet
    chief = _start(("worker", 0), flags, tmp_path / "chief.log", DISTRIB_CONNECT_TIMEOUT_S="1")
    procs = [chief]
    try:
        log = tmp_path / "chief.log"
        for _ in range(600):   # until the chief has given up on a first connect
            if "waiting for the tasks of the model's variables" in log.read_text():
                break
            assert chief.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        procs.append(_start(("ps", 0), flags, tmp_path / "ps.log"))
        assert chief.wait(timeout=120) == 0, log.read_text()[-3000:]
        assert procs[1].wait(timeout=60) == 0
        step, _ = done_line(log.read_text())
        assert step >= 50
    finally:
        _stop(procs)


@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_sigterm_to_the_chief_still_writes_its_final_checkpoint(tmp_path, sigint_ignored):
    # also when started as a background job (SIGINT ignored): the SIGTERM
    # handler's SIGINT was lost then, and the chief trained on
    from distrib.train import latest_checkpoint
    ps, w0 = free_ports(2)
    logdir = tmp_path / "logs"
    flags = [f"--ps_hosts=localhost:{ps}", f"--worker_hosts=localhost:{w0}",
             "--train_steps=1000000", "--log_every=50", f"--logdir={logdir}"]
    procs = [_start(("ps", 0), flags, tmp_path / "ps.log")]
    try:
        chief = _start(("worker", 0), flags, tmp_path / "chief.log", sigint_ignored)
        procs.append(chief)
        log = tmp_path / "chief.log"
        for _ in range(1200):   # training is under way past the first checkpoint (step 0)
            if re.search(r"global step [1-9]\d*,", log.read_text()):
                break
            assert chief.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        chief.send_signal(signal.SIGTERM)
        assert chief.wait(timeout=60) == 130, log.read_text()[-3000:]
        ckpt = latest_checkpoint(str(logdir))
        assert ckpt is not None and int(ckpt.rsplit("-", 1)[1]) > 0, log.read_text()[-3000:]
    finally:
        _stop(procs)
