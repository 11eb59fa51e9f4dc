"""Faults mid-training, through the launcher: examples/trainer.py on 1 ps + 3
workers with a checkpoint every second, and one of: kill -9 of a non-chief,
kill -9 of the chief, kill -9 of the ps, SIGSTOP then SIGCONT of the chief.

Each run must reach the requested global step and exit 0; every checkpoint
on disk reads back; no worker sees the global step go backwards, except once
right after a ps restore (and then at most to the checkpoint it restored);
no two tasks are chief in the same term; the accuracy is within a point of a
fault-free run; no process is left and nothing is left in /dev/shm.

These are among the slowest tests of the suite (a quarter of a minute each).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from distrib.train.checkpoints import file_format
from tests.helpers import ROOT, child_env

pytestmark = pytest.mark.slow

STEPS = 3000            # past the accuracy's plateau (0.966 here; 0.972 at 6000 steps)
FAULT_AT = 1000          # global step at which the fault is injected
LIMIT_S = 240            # hang guard for one run

PROGRESS = re.compile(r"^\[worker:(\d+)\] .*global step (\d+),")
DONE = re.compile(r"^\[worker:(\d+)\] done global_step=(\d+) accuracy=([0-9.]+)")
STARTED = re.compile(r"^\[launch\] (\w+):(\d+) started \(pid (\d+)\)")
CHIEF = re.compile(r"^\[worker:(\d+)\] .*became chief \(term (\d+)\)")
RESTORED = re.compile(r"restored /job:ps/task:0 from .*model\.ckpt-(\d+)")


class Run:
    """One launch of the trainer cluster, its output read line by line."""

    def __init__(self, tmp_path, *trainer_flags: str) -> None:
        self.logdir = str(tmp_path / "logs")
        self.out = open(tmp_path / "launch.log", "w+")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "distrib.launch", "--ps", "1", "--workers", "3",
             "--max_restarts", "3", "--", sys.executable, "examples/trainer.py",
             f"--train_steps={STEPS}", f"--logdir={self.logdir}", "--save_model_secs=1",
             "--log_every=250", *trainer_flags],
            stdout=self.out, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            env=child_env(DISTRIB_HEARTBEAT_S="0.5"), start_new_session=True)
        self.lines: list[str] = []
        self._pos = 0

    def read(self) -> list[str]:
        self.out.flush()
        with open(self.out.name) as f:
            f.seek(self._pos)
            chunk = f.read()
        whole, _, _rest = chunk.rpartition("\n")
        if whole:
            self._pos += len(whole) + 1
            self.lines.extend(whole.split("\n"))
        return self.lines

    def pid(self, job: str, index: int) -> int:
        pids = [int(m.group(3)) for m in map(STARTED.match, self.read())
                if m and (m.group(1), int(m.group(2))) == (job, index)]
        return pids[-1]

    def wait_step(self, step: int) -> None:
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            if any(m and int(m.group(2)) >= step for m in map(PROGRESS.match, self.read())):
                return
            assert self.p.poll() is None, "\n".join(self.lines[-40:])
            time.sleep(0.05)
        raise AssertionError("training never reached step %d" % step)

    def wait_chief(self, term: int) -> bool:
        """Whether some worker became chief in ``term`` (within the hang guard)."""
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            if any(m and int(m.group(2)) >= term for m in map(CHIEF.match, self.read())):
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def finish(self) -> int:
        try:
            return self.p.wait(LIMIT_S)
        finally:
            self.read()
            if self.p.poll() is None:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()


def started_pids(lines: list[str]) -> list[int]:
    return [int(m.group(3)) for m in map(STARTED.match, lines) if m]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def check(run: Run, code: int, ps_restored: bool = False) -> float:
    text = "\n".join(run.lines[-60:])
    assert code == 0, text
    done = {int(m.group(1)): (int(m.group(2)), float(m.group(3)))
            for m in map(DONE.match, run.lines) if m}
    assert sorted(done) == [0, 1, 2], text
    assert all(step >= STEPS for step, _ in done.values()), done
    # every checkpoint on disk reads back intact
    files = [f for f in os.listdir(run.logdir) if f.startswith("model.ckpt-")]
    assert files
    for f in files:
        file_format.verify_checkpoint(os.path.join(run.logdir, f))
    # no two tasks chief in one term
    terms: dict[int, int] = {}
    for m in map(CHIEF.match, run.lines):
        if m:
            assert terms.setdefault(int(m.group(2)), int(m.group(1))) == int(m.group(1))
    # each worker's global step never goes back, except once after a ps restore
    restored = [int(m.group(1)) for line in run.lines if (m := RESTORED.search(line))]
    last: dict[int, int] = {}
    drops = 0
    for m in map(PROGRESS.match, run.lines):
        if not m:
            continue
        worker, step = int(m.group(1)), int(m.group(2))
        if step < last.get(worker, -1):
            drops += 1
            assert ps_restored and restored and step >= min(restored), (worker, step, last)
        last[worker] = step
    assert drops <= 3, drops     # at most once per worker
    # nothing is left running
    assert not [p for p in started_pids(run.lines) if alive(p)]
    return done[min(done)][1]


@pytest.fixture(scope="module")
def baseline_accuracy(tmp_path_factory) -> float:
    run = Run(tmp_path_factory.mktemp("baseline"))
    return check(run, run.finish())


@pytest.fixture
def no_shm_left():
    before = set(os.listdir("/dev/shm"))
    yield
    assert set(os.listdir("/dev/shm")) - before == set()


def test_kill_9_of_a_non_chief(tmp_path, baseline_accuracy, no_shm_left) -> None:
    run = Run(tmp_path)
    run.wait_step(FAULT_AT)
    os.kill(run.pid("worker", 2), signal.SIGKILL)
    accuracy = check(run, run.finish())
    assert abs(accuracy - baseline_accuracy) <= 0.01


# A survivor's remaining steps must outlast the election (a lease of 1.5 s here) on any
# machine, or training ends before another worker becomes chief: each step takes >= 4 ms
# (1000 steps a survivor, >= 4 s), however fast the machine.
OUTLAST_ELECTION = "--min_step_ms=4"


def test_kill_9_of_the_chief(tmp_path, baseline_accuracy, no_shm_left) -> None:
    run = Run(tmp_path, OUTLAST_ELECTION)
    run.wait_step(FAULT_AT)
    os.kill(run.pid("worker", 0), signal.SIGKILL)
    accuracy = check(run, run.finish())
    assert abs(accuracy - baseline_accuracy) <= 0.01
    assert any(m and m.group(2) == "2" for m in map(CHIEF.match, run.lines))


def test_kill_9_of_the_ps(tmp_path, baseline_accuracy, no_shm_left) -> None:
    run = Run(tmp_path)
    run.wait_step(FAULT_AT)
    os.kill(run.pid("ps", 0), signal.SIGKILL)
    accuracy = check(run, run.finish(), ps_restored=True)
    assert abs(accuracy - baseline_accuracy) <= 0.01
    assert any(RESTORED.search(line) for line in run.lines), "\n".join(run.lines[-40:])


def test_sigstop_then_sigcont_of_the_chief(tmp_path, baseline_accuracy, no_shm_left) -> None:
    run = Run(tmp_path, OUTLAST_ELECTION)
    run.wait_step(FAULT_AT)
    chief = run.pid("worker", 0)
    os.kill(chief, signal.SIGSTOP)
    try:
        taken_over = run.wait_chief(2)   # past its lease: another worker takes over
    finally:
        os.kill(chief, signal.SIGCONT)
    assert taken_over, "\n".join(run.lines[-40:])
    accuracy = check(run, run.finish())
    assert abs(accuracy - baseline_accuracy) <= 0.01
    assert any(m and m.group(2) == "2" for m in map(CHIEF.match, run.lines))
