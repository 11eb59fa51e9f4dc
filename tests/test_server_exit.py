"""A program that ends with a server still running (one a strategy started, and
nobody stopped) ends cleanly: the exit hooks stop the server and its loop
thread before the interpreter finalizes. A uvloop loop left running on a
daemon thread can crash a finished program with SIGSEGV when an event (a
peer's connection closing) wakes it during finalization: a worker of the
preemption example died that way after its done line, and the launcher's
restart of it could never finish (its peer had ended). A session left open
leaves no task pending on its loop (asyncio's "Task was destroyed but it is
pending!" at exit)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT, child_env

# the check is registered before distrib is imported, so it runs after distrib's hooks
CHILD = textwrap.dedent("""
    import atexit, threading

    def check():
        left = sorted(t.name for t in threading.enumerate()
                      if t.name.startswith(("distrib-server", "distrib-client")) and t.is_alive())
        print("loop threads left:", left, flush=True)
    atexit.register(check)

    import distrib as dt
    a = dt.train.Server.create_local_server()
    b = dt.train.Server.create_local_server()
    stopped = dt.train.Server.create_local_server()
    stopped.stop()
    with dt.SyncSession(a.target) as sess:      # a's connections stay open at exit
        print("sum", sess.run(dt.constant(2.0) + dt.constant(3.0)), flush=True)
    print("servers", a.is_stopped, b.is_stopped, flush=True)
""")


def test_servers_still_running_at_exit_are_stopped_before_the_interpreter_finalizes():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "sum 5.0" in lines and "servers False False" in lines, out.stdout
    assert lines[-1] == "loop threads left: []", out.stdout + out.stderr[-2000:]



# a session left open, then the program ends (or stops the server first)
OPEN_SESSION = textwrap.dedent("""
    import sys
    import distrib as dt
    server = dt.Server.create_local_server()
    sess = dt.SyncSession(server.target)
    print("sum", sess.run(dt.constant([1.0, 2.0]) * 2.0).sum(), flush=True)
    if sys.argv[1] == "stop":
        server.stop()
""")


@pytest.mark.parametrize("how", ["stop", "end"])
def test_a_session_left_open_leaves_no_pending_task_behind(how):
    # issue 36: the session's channel kept its heartbeat task pending on the
    # client loop, destroyed with it at exit: "Task was destroyed but it is pending!"
    out = subprocess.run([sys.executable, "-X", "dev", "-c", OPEN_SESSION, how], cwd=ROOT,
                         env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sum 6.0" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "Task was destroyed" not in out.stderr, out.stderr[-3000:]
    assert "was never awaited" not in out.stderr, out.stderr[-3000:]
