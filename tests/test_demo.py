"""``make demo``'s promise: every process it started is stopped, also when it
is told to stop (SIGTERM, Ctrl-C) in the middle of training."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import child_env


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_training_stops_every_child(sig):
    demo = subprocess.Popen([sys.executable, "-m", "distrib.demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=child_env(OPENBLAS_NUM_THREADS="1"))
    kids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        for line in demo.stdout:   # the chief's first progress line: all the tasks run
            if "examples/s" in line:
                break
            assert time.monotonic() < deadline
        (launcher,) = _children(demo.pid)      # the demo trains through the launcher
        for _ in range(100):                     # its tasks: 1 ps + 2 workers
            kids = [launcher, *_children(launcher)]
            if len(kids) == 4:
                break
            time.sleep(0.05)
        assert len(kids) == 4, kids
        demo.send_signal(sig)
        rest = demo.communicate(timeout=60)[0]
        assert demo.returncode == 130, rest
        assert "every process the demo started is stopped" in rest
        assert not [k for k in kids if _alive(k)]
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        for k in kids:
            if _alive(k):
                os.kill(k, signal.SIGKILL)
