"""Slow self-contained children started early, at a low CPU priority, while the
suite runs other tests.

A few tests spend most of the suite's single-core time in one child process
each (the CUDA simulator suites, the NVVM compiles of every kernel), with no
clock of their own to keep. When collection ends, the conftest queues the
children of the selected tests that declare one (``BACKGROUND``, a dict of
key -> :class:`Spec` in the test's module, and ``@pytest.mark.background(key,
...)``); one thread runs them one at a time under ``nice``, so they take the
cores the foreground leaves idle and yield to it (the timing-sensitive tests
see next to no extra load). The test that needs a child calls :func:`run`:
it waits for a child already running (its timeout counted from then), and
runs one still queued itself, at normal priority. Each child's output, exit
code and timeout are those of ``subprocess.run``; nothing is cached across
sessions. At the session's end every child still running is killed by its
pid. ``DISTRIB_TESTS_BACKGROUND=0`` turns this off (a child pytest inherits
it, so it never queues children of its own).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_SWITCH = "DISTRIB_TESTS_BACKGROUND"
NICE = 10           # CFS weight 110 against the foreground's 1024: about a tenth of a busy core
STARVED = 3         # a background child's bound: this many times its foreground timeout


@dataclass
class Spec:
    argv: list[str]
    env: dict[str, str]
    timeout: float
    cwd: str = ROOT


@dataclass
class _Child:
    spec: Spec
    proc: subprocess.Popen | None = None
    result: subprocess.CompletedProcess | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


def _env(spec: Spec) -> dict[str, str]:
    return {**spec.env, ENV_SWITCH: "0"}


def simulator_suite(path: str, timeout: float) -> Spec:
    """The child pytest of the CUDA simulator suite ``path`` (numba reads
    ``NUMBA_ENABLE_CUDASIM`` once, at import: a fresh interpreter)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    return Spec([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", path],
                env, timeout)


def assert_suite_passed(out: subprocess.CompletedProcess) -> None:
    """A child pytest's run passed, every test of it, none skipped."""
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, last


class Runner:
    """A queue of children run one at a time, niced, on a daemon thread."""

    def __init__(self, nice: int = NICE) -> None:
        self.nice = nice
        self._lock = threading.Lock()
        self._queue: list[str] = []
        self._children: dict[str, _Child] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self._tmp: str | None = None

    def scratch_dir(self) -> str:
        """A directory for this session's children, removed at its end."""
        with self._lock:
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="distrib-tests-bg-")
            return self._tmp

    def schedule(self, key: str, spec: Spec) -> None:
        """Queue ``spec`` under ``key`` (once); the runner thread starts when needed."""
        with self._lock:
            if self._closed or key in self._children:
                return
            self._children[key] = _Child(spec)
            self._queue.append(key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run_queue, name="tests-background",
                                                daemon=True)
                self._thread.start()

    def _run_queue(self) -> None:
        nice = shutil.which("nice")   # it execs the child: the pid is the child's
        while True:
            with self._lock:
                if self._closed or not self._queue:
                    self._thread = None
                    return
                key = self._queue.pop(0)
                child = self._children[key]
                argv = child.spec.argv
                try:
                    child.proc = subprocess.Popen(
                        [nice, "-n", str(self.nice), *argv] if nice and self.nice else argv,
                        cwd=child.spec.cwd, env=_env(child.spec), text=True,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                except BaseException as e:   # noqa: BLE001  (the test that needs it raises it)
                    child.error = e
                    child.done.set()
                    continue
            try:
                # starved by a busy foreground it may take longer than in the foreground;
                # the test that waits bounds it again from then
                out, err = child.proc.communicate(timeout=STARVED * child.spec.timeout)
                child.result = subprocess.CompletedProcess(argv, child.proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.communicate()
                child.error = subprocess.TimeoutExpired(argv, STARVED * child.spec.timeout)
            except BaseException as e:   # noqa: BLE001
                child.error = e
            child.done.set()

    def run(self, key: str, spec: Spec) -> subprocess.CompletedProcess:
        """``spec``'s child's outcome: the one queued under ``key`` if it started
        (waited for, ``spec.timeout`` from now), else run here and now."""
        with self._lock:
            child = self._children.get(key)
            queued = key in self._queue
            if queued:
                self._queue.remove(key)
        if child is None or queued:
            return subprocess.run(spec.argv, cwd=spec.cwd, env=_env(spec), capture_output=True,
                                  text=True, timeout=spec.timeout)
        if not child.done.wait(spec.timeout):
            if child.proc is not None:
                child.proc.kill()
            child.done.wait(10)
            raise subprocess.TimeoutExpired(spec.argv, spec.timeout)
        if child.error is not None:
            raise child.error
        assert child.result is not None
        return child.result

    def started(self, key: str) -> bool:
        with self._lock:
            child = self._children.get(key)
            return child is not None and child.proc is not None

    def stop_all(self) -> None:
        """Drop the queue, kill (by pid) every child still running."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            running = [c.proc for c in self._children.values() if c.proc is not None]
            thread = self._thread
        deadline = time.monotonic() + 10
        for proc in running:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if thread is not None:
            thread.join(10)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


_session = Runner()          # the session's: the conftest queues, the tests run
schedule = _session.schedule
run = _session.run
scratch_dir = _session.scratch_dir
stop_all = _session.stop_all
