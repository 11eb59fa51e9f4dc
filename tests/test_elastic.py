"""Elastic training (``python -m distrib.launch --workers MIN:MAX`` and
``python -m distrib.launch scale``): workers join and leave a running job.

- The requests a launcher refuses, typed, with their exit codes: no launcher
  at ``--logdir`` (3), N outside MIN..MAX (1), a malformed range or an
  elastic launch without ``--logdir`` (2, before anything starts).
- The membership record and the heartbeat that carries its version.
- examples/trainer.py under a real elastic launcher going 2 -> 3 -> 2 workers
  mid-training: the new worker trains from the live variables, the removed
  one leaves after its current step (not a failure, not restarted), every
  remaining worker prints its done line with an accuracy in the fixed run's
  band, and the steps count exactly: every worker prints the steps it ran
  itself (``worker steps=K``, or ``left ... steps=K``), and their sum is the
  final global step (a step lost, or applied twice, would break the sum).
  ``python -m distrib.status --json`` shows each task's membership version,
  and nothing is left running.
"""
from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import textwrap
import time

import pytest

from distrib.cluster import ClusterSpec
from distrib.errors import InvalidArgumentError
from distrib.launch.__main__ import main
from distrib.launch.elastic import NoLauncherError, ScaleRefusedError, parse_workers, request_scale
from distrib.launch.launcher import LaunchConfig, Launcher
from distrib.launch.tasks import free_ports
from distrib.runtime.actors.failure_detector import Heartbeat
from distrib.runtime.chief.membership import Membership, membership_source
from distrib.status.__main__ import main as status_main
from tests.helpers import child_env
from tests.test_launch import TRAINER, Launch, alive, assert_all_gone

# examples/trainer.py's accuracy at these settings on a fixed 2-worker job
# (measured: 0.961-0.967); an elastic run trains the same global steps
ACCURACY_BAND = (0.94, 0.99)
STEPS = 3000


@pytest.fixture
def logdir():
    # short: the control socket's path must fit a unix socket's name
    with tempfile.TemporaryDirectory(prefix="el-", dir="/tmp") as d:
        yield d


# -- requests that are refused ------------------------------------------------


def test_workers_range_parses_or_says_what_is_wrong():
    assert parse_workers("3") == (3, None)
    assert parse_workers("2:4") == (2, 4)
    for bad in ("3:2", "0:2", "a", "2:x", "-1"):
        with pytest.raises(ValueError, match="MIN:MAX|count"):
            parse_workers(bad)


def test_scale_without_a_launcher_exits_3(logdir, capsys):
    assert main(["scale", "--logdir", logdir, "--workers", "2"]) == 3
    err = capsys.readouterr().err
    assert "no launcher runs with --logdir" in err and err.count("\n") == 1
    assert issubclass(NoLauncherError, ConnectionError)
    assert issubclass(ScaleRefusedError, ValueError)


def test_a_dead_launchers_socket_is_no_launcher(logdir):
    path = os.path.join(logdir, "launch.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)          # bound, never listening, closed: what a killed launcher leaves
    dead.close()
    with pytest.raises(NoLauncherError, match="no launcher runs"):
        asyncio.run(request_scale(logdir, 2, timeout=5))
    with pytest.raises(NoLauncherError, match="longer than"):
        asyncio.run(request_scale("/tmp/" + "x" * 120, 2))


def test_an_elastic_launch_needs_logdir_and_a_sane_range(logdir, capsys):
    assert main(["--ps", "1", "--workers", "2:4"]) == 2
    assert "needs --logdir" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["--ps", "1", "--workers", "4:2", "--logdir", logdir])
    assert e.value.code == 2
    assert "MIN:MAX" in capsys.readouterr().err
    assert main(["--ps", "1", "--workers", "1:2", "--logdir", logdir, "--only", "ps"]) == 2
    assert not os.path.exists(os.path.join(logdir, "launch.sock"))


async def test_a_private_socket_a_rolled_back_grow_and_a_shrink_with_no_known_chief(
        logdir, monkeypatch):
    """The control socket is 0600 whatever the umask; a grow whose cluster.json
    cannot be written leaves no never-started worker in the cluster; a shrink
    is refused while the source cannot say which worker holds the chief lease
    (here: nothing listens at ps 0), instead of guessing that worker 0 is chief."""
    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "1")
    ports = free_ports(3)
    cluster = ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"],
                           "worker": [f"127.0.0.1:{p}" for p in ports[1:]]})
    out = io.StringIO()
    launcher = Launcher(cluster, [], [sys.executable, "-c", "pass"], LaunchConfig(logdir=logdir),
                        stdout=out, stderr=out, elastic_workers=(1, 3))
    elastic = launcher.elastic
    old = os.umask(0)
    try:
        await elastic.open()
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(os.stat(elastic.path).st_mode) == 0o600
        assert sorted(os.listdir(logdir)) == ["cluster.json", "launch.sock"]

        os.unlink(os.path.join(logdir, "cluster.json"))     # cluster.json cannot be replaced
        os.makedirs(os.path.join(logdir, "cluster.json", "x"))
        with pytest.raises(OSError):
            await elastic.scale(3)
        assert launcher.cluster.task_indices("worker") == [0, 1] and not launcher.tasks
        assert elastic.workers() == [0, 1]
        shutil.rmtree(os.path.join(logdir, "cluster.json"))

        with pytest.raises(ScaleRefusedError, match="which worker is chief"):
            await elastic.scale(1)
        assert elastic.left == [] and elastic.workers() == [0, 1]
    finally:
        await elastic.close()
    assert not os.path.exists(elastic.path)


async def test_a_leaving_task_that_ignores_sigterm_is_killed(tmp_path):
    """A leaving task still running stop_timeout after its leave gets SIGTERM,
    and SIGKILL one stop_timeout later (here it ignores SIGTERM): its exit is
    a leave, and the launch ends once the others are done."""
    path = tmp_path / "task.py"
    path.write_text(textwrap.dedent("""\
        import json, os, signal, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            time.sleep(0.5)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ignoring SIGTERM", flush=True)
            time.sleep(60)
        """))
    cluster = ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]})
    out = io.StringIO()
    launcher = Launcher(cluster, [("worker", 0), ("worker", 1)], [sys.executable, str(path)],
                        LaunchConfig(stop_timeout_s=0.5), stdout=out, stderr=out)
    run = asyncio.ensure_future(launcher.run())
    try:
        deadline = time.monotonic() + 20
        while "[worker:1] ignoring SIGTERM" not in out.getvalue():
            assert time.monotonic() < deadline and not run.done(), out.getvalue()
            await asyncio.sleep(0.05)
        launcher.leave_task("worker", 1)
        result = await asyncio.wait_for(asyncio.shield(run), 15)
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
    assert result.exit_code == 0, out.getvalue()
    leaver = launcher.tasks[1]
    assert leaver.state == "left" and leaver.returncode == -signal.SIGKILL, out.getvalue()
    assert "worker:1 did not stop within 0.5 s: killing it" in out.getvalue()
    assert leaver.leave_deadline is not None and leaver.leave_deadline.done()


# -- the record and its heartbeat ----------------------------------------------


def test_membership_record_round_trips_and_rejects_garbage():
    cluster = ClusterSpec({"ps": ["127.0.0.1:1"], "worker": {0: "127.0.0.1:2", 3: "127.0.0.1:5"}})
    record = Membership(4, cluster, ("/job:worker/task:1", "/job:worker/task:2"))
    back = Membership.from_wire(json.loads(json.dumps(record.to_wire())))
    assert back == record
    assert back.tasks() == ["/job:worker/task:0", "/job:worker/task:3"]
    assert back.num_workers == 2 and back.has_left("/job:worker/task:2")
    assert not back.has_left("/job:worker/task:3")
    assert membership_source(cluster) == ("ps", 0)
    assert membership_source(ClusterSpec({"worker": {2: "h:1", 5: "h:2"}})) == ("worker", 2)
    for bad in (None, {}, {"version": 0, "cluster": {}}, {"version": "2", "cluster": {}},
                {"version": 1, "cluster": {"worker": ["nope"]}},
                {"version": 1, "cluster": {}, "left": [3]}):
        with pytest.raises(InvalidArgumentError):
            Membership.from_wire(bad)


def test_a_heartbeat_carries_the_version_and_reports_only_a_newer_one():
    heard: list[int] = []
    beat = Heartbeat(4)
    assert beat.message() == [4]          # no membership: the plain heartbeat
    beat.on_version = heard.append
    beat.version = 2
    assert beat.message() == [4, 2]
    for msg in ([4], [4, 1], [4, 2], [4, "9"], [4, True], [4, 3]):
        beat.heard(msg)
    assert heard == [3]


# -- 2 -> 3 -> 2 workers under a real launcher ---------------------------------


def status_versions(logdir: str, capsys) -> dict[str, int | None]:
    """``python -m distrib.status --cluster DIR/cluster.json --json`` (its main,
    in-process: a subprocess's start-up alone would take a second of training)."""
    capsys.readouterr()
    status_main(["--cluster", os.path.join(logdir, "cluster.json"), "--json", "--timeout", "5"])
    rows = json.loads(capsys.readouterr().out)["tasks"]
    return {f"{r['job']}:{r['task']}": r["membership_version"] for r in rows if r["state"] == "up"}


def scale(logdir: str, n: int, capsys) -> tuple[int, str, str]:
    """``python -m distrib.launch scale --logdir DIR --workers N`` (in-process):
    its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(["scale", "--logdir", logdir, "--workers", str(n)])
    out = capsys.readouterr()
    return code, out.out, out.err


def wait_versions(logdir: str, want: dict[str, int], capsys, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        seen = status_versions(logdir, capsys)
        if all(seen.get(task) == v for task, v in want.items()):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"membership versions {seen}, wanted {want}")
        time.sleep(0.3)


@pytest.mark.slow
def test_trainer_goes_2_3_2_workers_without_losing_a_step(logdir, capsys):
    launch = Launch("--ps", "1", "--workers", "2:3", "--logdir", logdir, "--stop_timeout", "15",
                    "--", sys.executable, TRAINER, f"--train_steps={STEPS}", "--log_every=200",
                    "--wait_workers_secs=30",
                    env=child_env(OPENBLAS_NUM_THREADS="1", DISTRIB_HEARTBEAT_S="0.5"))
    try:
        launch.wait_for(r"^\[worker:\d\] .*global step ([2-9]\d\d|\d{4,}),", timeout=40)
        assert wait_versions(logdir, {"ps:0": 1, "worker:0": 1, "worker:1": 1}, capsys)

        # a second launcher on the same --logdir is refused before it starts anything
        second = Launch("--ps", "1", "--workers", "1:2", "--logdir", logdir)
        assert second.finish(30) == 2 and "another launcher runs" in second.output
        assert not second.all_pids()

        code, _, err = scale(logdir, 4, capsys)
        assert code == 1 and "outside this launch's 2:3" in err
        code, out, err = scale(logdir, 3, capsys)
        assert code == 0, err
        assert "worker:2" in out and "membership version 2" in out
        launch.wait_for(r"^\[worker:2\] .*worker 2: global step \d+,", timeout=40)
        wait_versions(logdir, {"ps:0": 2, "worker:0": 2, "worker:1": 2, "worker:2": 2}, capsys)
        status_main(["--cluster", os.path.join(logdir, "cluster.json"), "--timeout", "5"])
        header, *rows = capsys.readouterr().out.splitlines()
        assert header.split()[-1] == "MEMBERS" and rows[3].split()[-1] == "v2", rows

        code, out, err = scale(logdir, 2, capsys)
        assert code == 0, err
        assert "worker:2 leaving" in out and "version 3" in out
        launch.wait_for(r"^\[launch\] worker:2 left the cluster \(exit code 0\)$", timeout=30)
        assert launch.finish(60) == 0, launch.output[-4000:]
    finally:
        launch.cleanup()

    # the remaining workers end with their done lines, the leaver with its left line
    done = {i: [x for x in launch.task_lines(f"worker:{i}") if x.startswith("done ")]
            for i in range(3)}
    assert len(done[0]) == 1 and len(done[1]) == 1 and not done[2], launch.output[-4000:]
    left = [x for x in launch.task_lines("worker:2") if x.startswith("left ")]
    assert len(left) == 1, launch.output[-4000:]
    final = 0
    for i in (0, 1):
        m = re.fullmatch(r"done global_step=(\d+) accuracy=([0-9.]+)", done[i][0])
        assert m, done[i]
        final = max(final, int(m.group(1)))
        assert ACCURACY_BAND[0] <= float(m.group(2)) <= ACCURACY_BAND[1], done[i]
    # no step lost or repeated: every worker's own steps add up to the final global step
    own = [int(m.group(1)) for i in range(3) for x in launch.task_lines(f"worker:{i}")
           if (m := re.search(r"\bsteps=(\d+)$", x))]
    assert len(own) == 3 and all(n > 0 for n in own), own
    assert sum(own) == final >= STEPS, (own, final)
    # the leave is neither a failure nor restarted; the new worker started once
    assert len(launch.pids()["worker:2"]) == 1
    assert not re.search(r"restart \d+ of", launch.output)
    assert_all_gone(launch)
    assert not [p for p in launch.all_pids() if alive(p)]
    assert not os.path.exists(os.path.join(logdir, "launch.sock"))
