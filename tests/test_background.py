"""tests/background.py, the suite's early children: a queued child that has
started is waited for, one still queued is run by the test itself, a child is
niced, its failure and output are the test's, and the end of the session
kills (by pid) what still runs."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.background import ENV_SWITCH, Runner, Spec


def spec(code: str, timeout: float = 30) -> Spec:
    return Spec([sys.executable, "-c", code], dict(os.environ), timeout)


@pytest.fixture
def runner():
    r = Runner(nice=5)
    yield r
    r.stop_all()


def wait_started(r: Runner, key: str) -> None:
    deadline = time.monotonic() + 10
    while not r.started(key):
        assert time.monotonic() < deadline, f"{key} never started"
        time.sleep(0.01)


def test_a_started_child_is_waited_for_and_its_output_is_the_tests(runner):
    code = ("import os, sys; print(os.nice(0), os.environ['" + ENV_SWITCH + "']); "
            "sys.stderr.write('err'); sys.exit(3)")
    runner.schedule("a", spec(code))
    wait_started(runner, "a")
    out = runner.run("a", spec(code))
    assert (out.returncode, out.stdout.split(), out.stderr) == (3, ["5", "0"], "err")


def test_a_child_still_queued_is_run_by_the_test_itself_at_normal_priority(runner):
    slow = spec("import time; time.sleep(20)")
    runner.schedule("slow", slow)
    runner.schedule("b", spec("import os; print(os.nice(0))"))
    wait_started(runner, "slow")
    t0 = time.monotonic()
    out = runner.run("b", spec("import os; print(os.nice(0))"))
    assert out.stdout.split() == ["0"] and time.monotonic() - t0 < 15
    assert not runner.started("b")      # taken off the queue: the runner never starts it


def test_a_waited_child_past_its_timeout_is_killed(runner):
    runner.schedule("stuck", spec("import time; time.sleep(60)"))
    wait_started(runner, "stuck")
    with pytest.raises(subprocess.TimeoutExpired):
        runner.run("stuck", spec("import time; time.sleep(60)", timeout=0.5))
    proc = runner._children["stuck"].proc   # noqa: SLF001
    assert proc.wait(5) is not None


def test_the_session_end_kills_running_children_and_drops_the_queue(runner):
    runner.schedule("stuck", spec("import time; time.sleep(60)"))
    runner.schedule("never", spec("print(1)"))
    wait_started(runner, "stuck")
    scratch = runner.scratch_dir()
    proc = runner._children["stuck"].proc   # noqa: SLF001
    runner.stop_all()
    assert proc.poll() is not None and not runner.started("never")
    assert not os.path.exists(scratch)
    runner.schedule("late", spec("print(1)"))     # closed: nothing more starts
    assert not runner.started("late")
