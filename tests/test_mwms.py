"""MultiWorkerMirroredStrategy across real worker processes (TF_CONFIG, free
loopback ports): two workers train examples/custom_loop.py to the same losses
as MirroredStrategy over the same number of replicas in one process (the
weights of every worker equal after every step: their loss lines agree);
workers with two logical CPUs each make four replicas; a worker killed
mid-training fails the other one's step with UnavailableError naming it,
within the heartbeat bound, instead of a hang; so does a worker that never
starts (after the registration bound), or dies before its first collective
(tests/peers/mwms_first_use.py): the chief's first collective, the
variables' broadcast, fails naming it; a worker started later than the
connect deadline after the chief joins it (TF's workers start in any
order), and so does a chief started after the worker; a worker that exits
without saving fails the chief's save (its own group) naming it.
Every process is stopped by its pid."""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from distrib.launch.tasks import free_ports
from tests.helpers import ROOT, child_env, worker_tf_config
from tests.helpers import run_workers as run_processes

pytestmark = pytest.mark.slow
BOUND_S = 90


tf_config = worker_tf_config


def run_workers(n: int, extra: list[str], **env: str) -> list[str]:
    return run_processes(["examples/custom_loop.py", "--strategy", "mwms", *extra], n,
                         BOUND_S, **env)


def run_local(extra: list[str]) -> str:
    out = subprocess.run([sys.executable, "examples/custom_loop.py", *extra], cwd=ROOT,
                         capture_output=True, text=True, timeout=BOUND_S, env=child_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def losses(out: str) -> list[str]:
    return re.findall(r"epoch \d+: loss (\S+)", out)


def accuracy(out: str) -> float:
    return float(re.search(r"accuracy=(\S+)", out).group(1))


def test_two_workers_train_as_mirrored_does_on_two_replicas() -> None:
    args = ["--epochs", "3", "--batch_size", "16"]
    workers = run_workers(2, args)
    local = run_local(["--strategy", "mirrored", "--replicas", "2", *args])
    want = losses(local)
    assert len(want) == 3 and float(want[-1]) < float(want[0])
    for out in workers:
        assert losses(out) == want
        assert "replicas=2" in out
    assert accuracy(workers[0]) == accuracy(workers[1]) == accuracy(local)


def test_two_workers_of_two_logical_cpus_make_four_replicas() -> None:
    args = ["--epochs", "2", "--batch_size", "8"]
    workers = run_workers(2, ["--replicas", "2", *args])
    local = run_local(["--strategy", "mirrored", "--replicas", "4", *args])
    for out in workers:
        assert "replicas=4" in out
        assert losses(out) == losses(local)


def test_a_killed_worker_fails_the_others_step_within_the_heartbeat_bound() -> None:
    ports = free_ports(2)
    env = dict(DISTRIB_HEARTBEAT_S="0.2")
    procs = [subprocess.Popen([sys.executable, "examples/custom_loop.py", "--strategy", "mwms",
                               "--epochs", "1000", "--batch_size", "8"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=child_env(TF_CONFIG=tf_config(ports, i), **env))
             for i in range(2)]
    try:
        # both train: wait for a first epoch line from worker 0
        deadline = time.monotonic() + BOUND_S
        seen = ""
        while "epoch 1:" not in seen and time.monotonic() < deadline:
            line = procs[0].stdout.readline()
            if not line:
                break
            seen += line
        assert "epoch 1:" in seen, seen[-2000:]
        procs[1].kill()
        killed_at = time.monotonic()
        out, _ = procs[0].communicate(timeout=30)
        took = time.monotonic() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
    assert procs[0].returncode != 0
    assert "UnavailableError" in out and "worker/task:1" in out, out[-3000:]
    assert took < 10.0, f"worker 0 took {took:.1f}s to fail"


def _first_use(ports: list[int], index: int, mode: str, *args: str,
               **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "tests/peers/mwms_first_use.py", "--mode", mode,
                             *args], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=child_env(TF_CONFIG=tf_config(ports, index), **env))


def _read_until(proc: subprocess.Popen, text: str) -> str:
    """``proc``'s output up to the line holding ``text`` (all of it if it ends first)."""
    deadline = time.monotonic() + BOUND_S
    seen = ""
    while text not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    return seen


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_a_worker_that_never_starts_fails_the_chiefs_first_broadcast_naming_it() -> None:
    ports = free_ports(2)
    # the chief alone: its broadcast waits for worker 1, which nobody can reach
    chief = _first_use(ports, 0, "train", DISTRIB_CONNECT_TIMEOUT_S="1",
                       DISTRIB_REGISTER_TIMEOUT_S="3")
    try:
        out, _ = chief.communicate(timeout=BOUND_S)
    finally:
        _stop([chief])
    assert "error UnavailableError" in out and "/job:worker/task:1 " in out, out[-3000:]
    assert "DISTRIB_REGISTER_TIMEOUT_S" in out and "start every task" in out, out[-3000:]


@pytest.mark.parametrize("late", ["worker", "chief"])
def test_a_task_started_long_after_the_other_joins_and_the_step_runs(late: str) -> None:
    # TF's workers start by hand, in any order: the one that started first waits
    # for the other (within DISTRIB_REGISTER_TIMEOUT_S), whatever the connect deadline
    ports = free_ports(2)
    env = dict(DISTRIB_CONNECT_TIMEOUT_S="1")
    first, second = (0, 1) if late == "worker" else (1, 0)
    procs = [_first_use(ports, first, "train", **env)]
    try:
        # its first probe of the other failed (a connect deadline passed): it says
        # whom it waits for; the other starts two more connect deadlines later
        seen = _read_until(procs[0], f"waits for /job:worker/task:{second} to start")
        assert "waits for" in seen, seen[-2000:]
        time.sleep(2.0)
        procs.append(_first_use(ports, second, "train", **env))
        outs = [p.communicate(timeout=BOUND_S)[0] for p in procs]
    finally:
        _stop(procs)
    for out in outs:
        assert "result 3.0" in out, out[-3000:]


def test_a_worker_that_exits_without_saving_fails_the_chiefs_save_naming_it(tmp_path) -> None:
    # the save's agreement has a group of its own (9): the chief must not wait
    # for ever for a worker that left
    ports = free_ports(2)
    env = dict(DISTRIB_HEARTBEAT_S="0.2")
    procs = [_first_use(ports, i, "save", "--dir", str(tmp_path), **env) for i in (1, 0)]
    worker, chief = procs
    try:
        out1, _ = worker.communicate(timeout=BOUND_S)
        assert worker.returncode == 0 and "result 3.0" in out1, out1[-3000:]
        seen = _read_until(chief, "result")
        chief.stdin.write("save\n")
        chief.stdin.flush()
        seen += _read_until(chief, "saving")
        assert "saving" in seen, seen[-2000:]
        started = time.monotonic()
        out, _ = chief.communicate(timeout=BOUND_S)
        took = time.monotonic() - started
    finally:
        _stop(procs)
    assert "error UnavailableError" in out and "/job:worker/task:1" in out, out[-3000:]
    assert took < 15.0, f"the chief's save took {took:.1f}s to fail"


def test_a_worker_killed_before_its_first_collective_fails_the_chief_naming_it() -> None:
    ports = free_ports(2)
    env = dict(DISTRIB_HEARTBEAT_S="0.2", DISTRIB_COLLECTIVE_STALL_S="0.5")
    procs = [_first_use(ports, 1, "wait", **env), _first_use(ports, 0, "train", **env)]
    worker, chief = procs
    try:
        # the chief waits in its broadcast for worker 1 to join (its stall warning says so)
        deadline = time.monotonic() + BOUND_S
        seen = ""
        while "has waited" not in seen and time.monotonic() < deadline:
            line = chief.stdout.readline()
            if not line:
                break
            seen += line
        assert "has waited" in seen, seen[-2000:]
        worker.kill()
        out, _ = chief.communicate(timeout=BOUND_S)
    finally:
        _stop(procs)
    assert "error UnavailableError" in out and "/job:worker/task:1 " in out, out[-3000:]


def test_all_reduce_gradient_is_the_all_reduce_of_every_workers_upstream_gradient() -> None:
    # issue 36: d/dx of all_reduce(SUM, x) * c is the sum of c over the workers
    # (2, 3 on worker 0 and 20, 30 on worker 1), as TF's, on every worker
    for out in run_processes(["tests/peers/mwms_saves.py", "--mode", "grad"], 2, BOUND_S):
        assert "grad [22.0, 33.0]" in out, out[-3000:]
