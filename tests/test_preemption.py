"""``dt.distribute.experimental.PreemptionCheckpointHandler``: TF's behaviour
(``failure_handling.py`` and its tests ``failure_handler_test.py``,
``gce_failure_handler_test.py``), stated test by test:

* a notice (SIGTERM, or a ``termination_watcher_fn``) to any worker makes
  every worker save a checkpoint at one step, then ``exit_fn``: by default
  ``sys.exit(42)`` (TF's local-mode test asserts ``exit_error.code == 42``);
* made again after the restart, the handler restores the checkpoint and
  ``total_run_calls`` goes on from the saved count; training ends with the
  value it would have had without the preemption (TF:
  ``model.v == num_replicas * EPOCHS * STEPS``);
* a ``Checkpoint`` without ``checkpoint_dir`` is ``InvalidArgumentError``; a
  cluster with ps tasks ``NotImplementedError``; a ``CheckpointManager``
  given is used as is (TF's ``input_arg='manager'``);
* ``save_checkpoint_if_preempted`` is ``run`` without a function (TF's
  ``api_wrapping_train=False``);
* with a ``grace_period`` it saves at once, trains on, and saves again
  before the end: two checkpoints (TF asserts ``ckpt-2``).

distrib's own rules, pinned too: by default the noticed worker tells its peers
by message and all save at the run after the one it was about to start (TF's
n+1), with no agreement collective before; with ``check_period_s`` the
agreement is at the run where the notice is seen, a peer's notice is acted on by a worker that
got none, the workers' run counts are checked at every agreement, a failed
save anywhere fails everywhere, the launcher restarts an exit 42 without
counting it, and ``examples/preemption.py`` under the launcher (two real
worker processes, one sent SIGTERM mid-epoch) ends exactly as a run without
the preemption: the same global step, the same examples trained on (a sum
of their ids), the same accuracy band. Every process is stopped by its pid;
nothing is left in /dev/shm.
"""
from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import distrib as dt
from distrib.cluster.exit_codes import RESTART_EXIT_CODE
from distrib.distribute.functions import def_function
from distrib.distribute.preemption import handler as preemption
from distrib.distribute.preemption import signals as preemption_signals
from distrib.errors import AbortedError, FailedPreconditionError, InvalidArgumentError
from distrib.server.control import PreemptionNotices
from tests.helpers import ROOT, child_env, reset_device_config

experimental = dt.distribute.experimental
EPOCHS, STEPS = 3, 5      # TF's test loop, smaller: epochs of STEPS runs
EXAMPLE = os.path.join(ROOT, "examples", "preemption.py")
EXAMPLE_EPOCHS = 4
LAUNCH_BOUND_S = 100


@pytest.fixture(autouse=True)
async def fresh():
    dt.reset_default_graph()
    previous = signal.getsignal(signal.SIGTERM)
    reset_device_config()
    cpu = dt.config.list_physical_devices("CPU")[0]
    dt.config.set_logical_device_configuration(cpu, [dt.config.LogicalDeviceConfiguration()] * 2)
    yield
    signal.signal(signal.SIGTERM, previous)   # whatever a test's handler left
    await def_function.close_sessions()
    dt.reset_default_graph()
    reset_device_config()


class Trainer:
    """TF's test model (a variable, SUM-aggregated, +1 per replica each step) under
    MirroredStrategy on two logical CPUs, and its handler; made again for a restart."""

    def __init__(self, directory, manager_dir=None, **handler_kwargs) -> None:
        dt.reset_default_graph()
        self.strategy = dt.distribute.MirroredStrategy()
        with self.strategy.scope():
            self.v = dt.Variable(0.0, aggregation=dt.VariableAggregation.SUM)
            self.ckpt = dt.train.Checkpoint(v=self.v)
            target = self.ckpt
            if manager_dir is not None:
                target = dt.train.CheckpointManager(self.ckpt, manager_dir, max_to_keep=3)
            self.handler = experimental.PreemptionCheckpointHandler(
                None, target, directory if manager_dir is None else None, **handler_kwargs)
        strategy, v = self.strategy, self.v

        @dt.function
        def step():
            strategy.run(lambda: v.assign_add(1.0))
        self.step = step

    async def train(self, notice_at: int | None = None, sleep_s: float = 0.0,
                    wrapped: bool = True, notice=None) -> None:
        """TF's loop: epochs and steps from total_run_calls; the notice before run
        ``notice_at`` (a real SIGTERM to this process unless ``notice`` says how)."""
        handler = await self.handler
        for epoch in range(handler.total_run_calls // STEPS, EPOCHS):
            for _ in range(handler.total_run_calls % STEPS, STEPS):
                if handler.total_run_calls == notice_at:
                    (notice or (lambda: os.kill(os.getpid(), signal.SIGTERM)))()
                if wrapped:
                    await handler.run(self.step_with_sleep, sleep_s)
                else:
                    await handler.save_checkpoint_if_preempted()
                    await self.step_with_sleep(sleep_s)

    async def step_with_sleep(self, sleep_s: float) -> None:
        if sleep_s:
            await asyncio.sleep(sleep_s)
        await self.step()

    async def value(self) -> float:
        with self.strategy.scope():
            return float(await self.ckpt.value_of(self.v))


def files(directory) -> list[str]:
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


# -- the handler in one process (TF's local mode) -----------------------------------------

def test_termination_config_keeps_tf_arguments() -> None:
    empty = experimental.TerminationConfig()
    assert (empty.termination_watcher_fn, empty.exit_fn, empty.grace_period,
            empty.save_fn) == (None, None, None, None)
    fns = [lambda: True, lambda: None, lambda: None]
    full = experimental.TerminationConfig(fns[0], fns[1], 30, fns[2])
    assert (full.termination_watcher_fn, full.exit_fn, full.grace_period,
            full.save_fn) == (fns[0], fns[1], 30, fns[2])


def test_a_peers_notice_is_held_until_taken_once() -> None:
    """What a server holds of its peers' notices: the earliest run named (two noticed
    at once name the same run; a later one is not acted on), taken by the training
    loop once, so a handler made later on the same server does not act on it again."""
    notices = PreemptionNotices()
    assert notices.take() is None
    notices.note(31, "/job:worker/task:1")
    notices.note(32, "/job:worker/task:0")
    assert notices.take() == (31, "/job:worker/task:1")
    assert notices.take() is None
    notices.note(40, "/job:worker/task:0")
    assert notices.take() == (40, "/job:worker/task:0")


def test_a_checkpoint_without_checkpoint_dir_is_invalid_argument() -> None:
    ckpt = dt.train.Checkpoint(v=dt.Variable(1.0))
    with pytest.raises(InvalidArgumentError, match="checkpoint_dir must be passed"):
        experimental.PreemptionCheckpointHandler(None, ckpt)


def test_a_cluster_with_ps_tasks_is_not_implemented(tmp_path) -> None:
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec({"ps": ["localhost:1"], "worker": ["localhost:2"]}),
        task_type="worker", task_id=0)
    with pytest.raises(NotImplementedError, match="ParameterServerStrategy"):
        experimental.PreemptionCheckpointHandler(
            resolver, dt.train.Checkpoint(v=dt.Variable(1.0)), str(tmp_path))


async def test_total_run_calls_before_the_restore_says_to_await_it(tmp_path) -> None:
    trainer = Trainer(str(tmp_path))
    with pytest.raises(FailedPreconditionError, match="await it once"):
        _ = trainer.handler.total_run_calls
    assert (await trainer.handler).total_run_calls == 0


async def test_sigterm_saves_at_that_run_exits_42_and_the_restart_resumes_there(tmp_path):
    """TF's local-mode test: SystemExit 42; made again, the handler restores and the
    loop ends with v == replicas * EPOCHS * STEPS (nothing lost, nothing twice)."""
    d = str(tmp_path / "fh_ckpt")
    first = Trainer(d)
    with pytest.raises(SystemExit) as exit_error:
        await first.train(notice_at=7)
    assert exit_error.value.code == 42 == RESTART_EXIT_CODE
    assert [runs for runs, _ in first.handler.saves] == [7]   # where it was seen
    assert files(d) == ["checkpoint", "ckpt-1"]
    assert signal.getsignal(signal.SIGTERM) is not first.handler._notice._on_sigterm

    again = Trainer(d)
    await again.handler
    assert again.handler.total_run_calls == 7 and again.handler.restored_from.endswith("ckpt-1")
    assert await again.value() == 2 * 7   # two replicas, +1 each per step
    await again.train()
    assert again.handler.total_run_calls == EPOCHS * STEPS
    assert await again.value() == 2 * EPOCHS * STEPS


async def test_a_checkpoint_manager_is_used_as_given(tmp_path) -> None:
    trainer = Trainer(None, manager_dir=str(tmp_path / "mine"))
    with pytest.raises(SystemExit):
        await trainer.train(notice_at=3, notice=lambda: trainer.handler._notice.note())
    assert files(tmp_path / "mine") == ["checkpoint", "ckpt-1"]
    again = Trainer(None, manager_dir=str(tmp_path / "mine"))
    await again.train()
    assert await again.value() == 2 * EPOCHS * STEPS


async def test_save_checkpoint_if_preempted_is_run_without_a_function(tmp_path) -> None:
    """TF's api_wrapping_train=False: check (and maybe save and exit), count one run."""
    d = str(tmp_path)
    first = Trainer(d)
    with pytest.raises(SystemExit):
        await first.train(notice_at=4, wrapped=False)
    assert [runs for runs, _ in first.handler.saves] == [4]
    again = Trainer(d)
    await again.train(wrapped=False)
    assert again.handler.total_run_calls == EPOCHS * STEPS
    assert await again.value() == 2 * EPOCHS * STEPS


async def test_grace_period_saves_at_once_trains_on_and_saves_again(tmp_path) -> None:
    """TF's test_grace_period_continue_training (local, grace 1 s): two checkpoints,
    the second made before the grace period ends."""
    d = str(tmp_path)
    grace = 1.5
    trainer = Trainer(d, termination_config=experimental.TerminationConfig(grace_period=grace))
    noticed: list[float] = []

    def notice() -> None:
        noticed.append(time.time())
        trainer.handler._notice.note()
    with pytest.raises(SystemExit) as exit_error:
        await trainer.train(notice_at=2, sleep_s=0.1, notice=notice)
    assert exit_error.value.code == 42
    (first, _), (second, _) = trainer.handler.saves
    assert first == 2 and second >= first + 3, (first, second)   # trained on in between
    assert time.time() - noticed[0] < grace                      # ... and ended within it
    assert files(d) == ["checkpoint", "ckpt-2"]
    again = Trainer(d)
    await again.handler
    assert again.handler.total_run_calls == second


@pytest.mark.parametrize("kind", ["function", "coroutine function"])
async def test_config_callables_may_be_coroutine_functions_and_exit_fn_may_return(
        tmp_path, kind, monkeypatch) -> None:
    """A polled watcher (a thread for a function, a task for a coroutine function),
    save_fn instead of the manager's save, an exit_fn that returns: training goes on,
    no longer watched (TF's in-process restart)."""
    monkeypatch.setattr(preemption_signals, "POLL_S", 0.02)   # TF polls every second
    fire = threading.Event()
    calls: list[str] = []
    if kind == "function":
        def watcher() -> bool:
            return fire.is_set()

        def save_fn() -> None:
            calls.append("save")

        def exit_fn() -> None:
            calls.append("exit")
    else:
        async def watcher() -> bool:
            return fire.is_set()

        async def save_fn() -> None:
            calls.append("save")

        async def exit_fn() -> None:
            calls.append("exit")
    trainer = Trainer(str(tmp_path), termination_config=experimental.TerminationConfig(
        termination_watcher_fn=watcher, exit_fn=exit_fn, save_fn=save_fn))
    assert signal.getsignal(signal.SIGTERM) is not trainer.handler._notice._on_sigterm
    await trainer.train(notice_at=2, sleep_s=0.05, notice=fire.set)
    assert calls == ["save", "exit"]
    assert trainer.handler.total_run_calls == EPOCHS * STEPS
    assert files(tmp_path) == []   # save_fn saved (nothing), not the manager


# -- the agreement, with a second worker played by the test -------------------------------

class Peer:
    """The other worker's side of every agreement (its vote, its runs, the interval it
    asks for) and of the save's barrier (whether its save failed)."""

    def __init__(self, handler, vote_at: dict[int, int] | None = None, interval: int = 100,
                 runs_offset: int = 0, save_fails: bool = False) -> None:
        self.seen: list[list[int]] = []
        self.barrier_next = False
        agreement = handler._agreement
        agreement.num_workers = 2   # a collective now: the exchange below is the network

        async def exchange(values: list[int]) -> np.ndarray:
            mine = np.asarray(values, dtype=np.int64)
            self.seen.append([int(x) for x in mine])
            runs = int(mine[1]) + runs_offset
            if self.barrier_next:   # after a decision to save: the save's barrier
                self.barrier_next = False
                theirs = [2 if save_fails else 0, runs, -runs, -1]   # 2: worker 1 failed
                return np.maximum(mine, np.asarray(theirs, np.int64))
            vote = (vote_at or {}).get(runs, 0)
            out = np.maximum(mine, np.asarray([vote, runs, -runs, -interval], np.int64))
            self.barrier_next = bool(out[0]) and int(out[1]) == -int(out[2])
            return out
        agreement.exchange = exchange


async def test_a_peers_notice_saves_and_exits_a_worker_that_got_none(tmp_path) -> None:
    """TF: 'If the signal comes from some other member ... checkpoint and exit'."""
    trainer = Trainer(str(tmp_path))
    peer = Peer(await trainer.handler, vote_at={6: preemption._SAVE_AND_EXIT}, interval=1)
    with pytest.raises(SystemExit):
        await trainer.train()
    assert [runs for runs, _ in trainer.handler.saves] == [6]
    assert [v[1] for v in peer.seen] == [0, 1, 2, 3, 4, 5, 6, 6]   # every run, then the barrier


async def test_the_workers_agree_every_few_runs_when_runs_are_short(tmp_path) -> None:
    """Runs of ~20 ms and check_period_s 0.5: this worker asks for an agreement every
    ~25 runs, the peer every 3; they agree every 3 (the fewest any asks for), at the
    same runs, and a notice is acted on at the first agreement after it."""
    trainer = Trainer(str(tmp_path), check_period_s=0.5)
    peer = Peer(await trainer.handler, vote_at={r: 2 for r in range(9, 15)}, interval=3)
    with pytest.raises(SystemExit):
        await trainer.train(sleep_s=0.01)
    checks = [v[1] for v in peer.seen]
    saved = trainer.handler.saves[0][0]
    assert checks[:2] == [0, 1] and checks[-1] == saved, checks   # the barrier last
    gaps = [b - a for a, b in zip(checks[1:-1], checks[2:-1])]
    assert gaps and all(g == 3 for g in gaps), checks
    assert saved == next(c for c in checks if c >= 9), checks


async def test_workers_at_different_runs_fail_at_the_agreement(tmp_path) -> None:
    """After a restart from different checkpoints (or a loop that skips handler.run)."""
    trainer = Trainer(str(tmp_path))
    Peer(await trainer.handler, runs_offset=1)
    with pytest.raises(FailedPreconditionError, match=r"different steps \(run calls 0 to 1"):
        await trainer.train()


async def test_a_failed_save_on_another_worker_fails_this_one_too(tmp_path) -> None:
    trainer = Trainer(str(tmp_path))
    Peer(await trainer.handler, vote_at={3: 2}, interval=1, save_fails=True)
    with pytest.raises(AbortedError, match="worker 1 failed to save the checkpoint of run 3"):
        await trainer.train()


def test_a_second_sigterm_ends_the_process(tmp_path) -> None:
    """The first is a notice, the training loop's to act on; the second gets the old
    handler (here the default: the process ends by SIGTERM)."""
    child = textwrap.dedent(f"""
        import asyncio, os, signal, time
        import distrib as dt
        async def main():
            with dt.distribute.MirroredStrategy().scope():
                ckpt = dt.train.Checkpoint(v=dt.Variable(1.0))
                handler = await dt.distribute.experimental.PreemptionCheckpointHandler(
                    None, ckpt, {str(tmp_path)!r})
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            print("noticed", handler._notice.received, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("still here", flush=True)
        asyncio.run(main())
        """)
    proc = subprocess.run([sys.executable, "-c", child], cwd=ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["noticed True"]


# -- the launcher and the example, real processes -----------------------------------------

def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class Launch:
    """``python -m distrib.launch ...``: its merged output read on a thread; ``stop``
    ends it and every task it started, by pid."""

    STARTED = re.compile(r"^\[launch\] (\w+:\d+) started \(pid (\d+)\)$")

    def __init__(self, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "distrib.launch", *args], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=child_env(OPENBLAS_NUM_THREADS="1", PYTHONFAULTHANDLER="1"))
        self.lines: list[str] = []
        self.cv = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def report(self, last: int = 60) -> str:
        """What a failure shows: every line of the launcher's own (each task's start,
        exit and restart) and every crash dump, then the last ``last`` lines."""
        with self.cv:
            lines = list(self.lines)
        events = [x for x in lines[:-last] if x.startswith("[launch]") or "Fatal Python" in x]
        return "\n".join(events + ["..."] + lines[-last:])

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        rx, deadline = re.compile(pattern), time.monotonic() + timeout
        with self.cv:
            while True:
                hit = next((x for x in self.lines if rx.search(x)), None)
                if hit is not None:
                    return hit
                if time.monotonic() > deadline or (self.p.poll() is not None
                                                   and not self.reader.is_alive()):
                    raise AssertionError(f"no line {pattern!r}:\n" + self.report())
                self.cv.wait(0.2)

    def finish(self, timeout: float = LAUNCH_BOUND_S) -> int:
        try:
            code = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("the launch did not end:\n" + self.report()) \
                from None
        self.reader.join(5)
        return code

    def pids(self, task: str) -> list[int]:
        with self.cv:
            return [int(m.group(2)) for x in self.lines
                    if (m := self.STARTED.match(x)) and m.group(1) == task]

    def task_lines(self, task: str, prefix: str = "") -> list[str]:
        head = f"[{task}] {prefix}"
        with self.cv:
            return [x[len(f"[{task}] "):] for x in self.lines if x.startswith(head)]

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)
        for task in ("worker:0", "worker:1"):
            for pid in self.pids(task):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def all_gone(self) -> bool:
        deadline = time.monotonic() + 5
        pids = self.pids("worker:0") + self.pids("worker:1")
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        return bool(pids) and not any(alive(p) for p in pids)


@pytest.fixture
def launches():
    started: list[Launch] = []

    def start(*args: str) -> Launch:
        started.append(Launch(*args))
        return started[-1]
    yield start
    for launch in started:
        launch.stop()


def test_the_launcher_restarts_an_exit_42_without_counting_it(launches, tmp_path) -> None:
    task = tmp_path / "task.py"
    task.write_text(textwrap.dedent(f"""
        import json, os, sys
        index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        marker = os.path.join({str(tmp_path)!r}, f"preempted-{{index}}")
        if index == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            print("preempted", flush=True)
            sys.exit({RESTART_EXIT_CODE})
        print("ok", flush=True)
        """))
    launch = launches("--workers", "2", "--max_restarts", "0", "--restart_backoff", "0.1",
                      "--", sys.executable, str(task))
    assert launch.finish() == 0, "\n".join(launch.lines)
    assert launch.task_lines("worker:1") == ["preempted", "ok"]
    assert ("[launch] worker:1 exit code 42 (preempted, its checkpoint saved); restarting it "
            "in 0.1 s, not counted against --max_restarts (preemption 1)") in launch.lines
    assert len(launch.pids("worker:1")) == 2 and len(launch.pids("worker:0")) == 1
    assert launch.all_gone()


DONE = re.compile(r"^done global_step=(\d+) accuracy=([0-9.]+) seen=(\d+)$")
START = re.compile(r"^start total_run_calls=(\d+) restored=(\S+)$")
SAVED = re.compile(r"checkpoint of run (\d+) saved")


def example(launches, directory, *flags: str) -> Launch:
    return launches("--workers", "2", "--", sys.executable, EXAMPLE, "--checkpoint_dir",
                    str(directory), "--epochs", str(EXAMPLE_EPOCHS), *flags)


def outcome(launch: Launch) -> dict[str, tuple[int, float, int]]:
    """Each worker's done line: (global step, accuracy, sum of the ids trained on)."""
    found = {}
    for task in ("worker:0", "worker:1"):
        lines = [m for x in launch.task_lines(task, "done ") if (m := DONE.match(x))]
        assert len(lines) == 1, launch.report()
        m = lines[0]
        found[task] = (int(m.group(1)), float(m.group(2)), int(m.group(3)))
    return found


@pytest.fixture(scope="module")
def unpreempted(tmp_path_factory):
    """The example run without a preemption: what a preempted run must end with."""
    launch = Launch("--workers", "2", "--", sys.executable, EXAMPLE, "--checkpoint_dir",
                    str(tmp_path_factory.mktemp("plain")), "--epochs", str(EXAMPLE_EPOCHS))
    try:
        assert launch.finish() == 0, launch.report()
        return outcome(launch)["worker:0"]
    finally:
        launch.stop()


def check_resumed(launch: Launch, unpreempted) -> int:
    """Both workers saved at one run S, exited 42, were restarted (not counted), resumed
    at S, and ended as the run without the preemption: the same global step, the same
    examples (their ids' sum), the same accuracy band. Returns S."""
    assert launch.finish() == 0, launch.report(80)
    saved = {task: [int(SAVED.search(x).group(1)) for x in launch.task_lines(task)
                    if SAVED.search(x)] for task in ("worker:0", "worker:1")}
    assert saved["worker:0"] == saved["worker:1"] and len(saved["worker:0"]) == 1, saved
    s = saved["worker:0"][0]
    for task in ("worker:0", "worker:1"):
        starts = [START.match(x).groups() for x in launch.task_lines(task, "start ")]
        assert starts[0] == ("0", "none") and int(starts[1][0]) == s, starts
        assert starts[1][1].endswith("ckpt-1") and len(starts) == 2, starts
        assert len(launch.pids(task)) == 2
        assert (f"[launch] {task} exit code 42 (preempted, its checkpoint saved); restarting "
                "it in 1 s, not counted against --max_restarts (preemption 1)") in launch.lines
    steps, accuracy, seen = unpreempted
    for task, (got_steps, got_accuracy, got_seen) in outcome(launch).items():
        assert got_steps == steps, task        # no step lost, none trained twice
        assert got_seen == seen, task          # and each on the batch it had without it
        assert abs(got_accuracy - accuracy) <= 0.02 and got_accuracy >= 0.85, task
    assert launch.all_gone()
    return s


@pytest.mark.slow
def test_example_a_worker_sigterm_mid_epoch_resumes_from_the_agreed_step(
        launches, tmp_path, unpreempted, shm_snapshot) -> None:
    """SIGTERM from outside (as a cluster manager sends it) to worker 1, mid-training,
    at a run the test chooses (the example holds there for it): worker 1 tells worker 0
    by message, and both save at the run after (TF's n+1), with no agreement before."""
    launch = example(launches, tmp_path, "--hold_at", "23")
    launch.wait_for(r"^\[worker:1\] holding before run 23 for a SIGTERM$",
                    timeout=LAUNCH_BOUND_S)
    os.kill(launch.pids("worker:1")[0], signal.SIGTERM)
    s = check_resumed(launch, unpreempted)
    assert s == 24, s
    for task in ("worker:0", "worker:1"):   # restarted, no notice: no agreement collective
        calls = launch.task_lines(task, "agreement calls=")
        assert len(calls) == 1 and calls[0].startswith("agreement calls=0 "), calls
    assert not set(os.listdir("/dev/shm")) - shm_snapshot


@pytest.mark.slow
@pytest.mark.parametrize("flags,saved_at", [
    (("--check_period", "0"), 30),        # an agreement every run: the run it is seen at
    (("--preempt_worker", "0"), 31)])     # by notice, the chief noticed: the run after
def test_example_preempted_at_a_run_saves_exactly_there(launches, tmp_path, unpreempted,
                                                        flags, saved_at) -> None:
    """The example's own flag: SIGTERM before run 30, the ninth step of the second epoch,
    and training resumes inside that epoch."""
    launch = example(launches, tmp_path, "--preempt_at", "30", *flags)
    s = check_resumed(launch, unpreempted)
    steps_per_epoch = unpreempted[0] // EXAMPLE_EPOCHS
    assert s == saved_at and s % steps_per_epoch != 0
