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
- A worker that dies: above MIN it leaves the membership (not restarted);
  at MIN, or as the membership's source (no ps), it is restarted in place.
- ``DISTRIB_ELASTIC=1``: a lone worker campaigns for the chief role, so the
  role can move to a worker that joined later.
- examples/trainer.py under ``--workers 1:3``: worker:0 alone (elected),
  grown to 2, then killed (-9): the job shrinks to worker:1, which is
  elected chief and ends with its done line; the steps count exactly.
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
from distrib.launch.control import NoLauncherError, ScaleRefusedError, request_scale
from distrib.launch.elastic import parse_workers
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
KILL_STEPS = 1500   # the kill -9 run: mostly one worker (fixed 1-worker runs: 0.9666 at 1500)


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


def test_a_record_keeps_generations_and_a_service_keeps_recent_versions():
    from distrib.runtime.chief.membership import HISTORY, MembershipService
    cluster = ClusterSpec({"worker": ["127.0.0.1:2", "127.0.0.1:3"]})
    record = Membership(2, cluster, (), (("/job:worker/task:1", 2),))
    back = Membership.from_wire(json.loads(json.dumps(record.to_wire())))
    assert back == record and back.generation("/job:worker/task:1") == 2
    assert back.generation("/job:worker/task:0") == 0

    class Beat:   # the one thing the service touches on its system: the heartbeat
        version = 0
        on_version = None

    class System:
        heartbeat = Beat()

    service = MembershipService(System(), "/job:worker/task:0", cluster)
    held = [service.update(Membership(v, cluster).to_wire()) for v in (1, 3, 2)]
    assert held == [1, 3, 3]   # 2 arrives late: kept for a reader of 2, not taken
    assert service.version == 3 and System.heartbeat.version == 3
    assert service.get(2)["version"] == 2 and service.at(1).version == 1
    assert service.get() == service.get(3) and service.get(7) is None
    for v in range(4, 4 + HISTORY):
        service.update(Membership(v, cluster).to_wire())
    assert service.get(3) is None and service.at(3 + HISTORY).version == 3 + HISTORY
    assert len(service.history) == HISTORY


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
                {"version": 1, "cluster": {}, "left": [3]},
                {"version": 1, "cluster": {}, "generations": {"/job:worker/task:0": -1}},
                {"version": 1, "cluster": {}, "generations": ["/job:worker/task:0"]}):
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


# -- a lost worker: the job shrinks, or (at MIN, or the source) restarts it ------


CRASHER = """\
import json, os, sys, time
config = json.loads(os.environ["TF_CONFIG"])
i = config["task"]["index"]
folder, mode = sys.argv[1], sys.argv[2]
print("elastic=" + os.environ.get("DISTRIB_ELASTIC", ""), flush=True)
marker = os.path.join(folder, f"ran-{i}")
again = os.path.exists(marker)
open(marker, "a").close()
deadline = time.monotonic() + 20      # hang guards


def wait_for(name):
    while time.monotonic() < deadline and not os.path.exists(os.path.join(folder, name)):
        time.sleep(0.05)


if again:                             # a restart: done
    open(os.path.join(folder, f"again-{i}"), "a").close()
    if mode == "source" and i == 0:   # the restarted source: a server, given the record
        import distrib as dt
        server = dt.Server(dt.ClusterSpec(config["cluster"]), job_name="worker", task_index=0)
        listening = time.monotonic()
        while time.monotonic() < deadline:
            record = server.membership_record()
            if record is not None and record.generation("/job:worker/task:0"):
                break
            time.sleep(0.01)
        held = "none" if record is None else f"{record.version} {dict(record.generations)}"
        print(f"held {held} after {time.monotonic() - listening:.2f} s", flush=True)
        server.stop()
        open(os.path.join(folder, "held-0"), "a").close()
    elif mode == "source":            # stays until worker:0 (the source) came back
        wait_for("held-0")
    sys.exit(0)
if mode == "ps" and i == 0:           # dies once worker:1 left the cluster, at MIN
    while time.monotonic() < deadline:
        with open(os.path.join(folder, "cluster.json")) as f:
            if len(json.load(f)["worker"]) == 1:   # a list, or a dict with gaps
                break
        time.sleep(0.05)
elif mode == "source" and i == 1:     # preempted: restarted in place, whatever MIN
    sys.exit(42)
elif mode == "source":                # dies once worker:1 came back
    wait_for("again-1")
sys.exit(3)
"""


async def test_a_dead_worker_leaves_above_min_and_restarts_in_place_at_min_or_as_the_source(
        logdir, tmp_path, monkeypatch):
    """With a ps (the source, a real server here) and MIN 1: worker:1 dies
    with two live, so it is removed (not restarted; version 2, cluster.json
    without it, no generation counted); worker:0 then dies as the last live
    worker: restarted in place, the launcher says why, and version 3, given
    to the ps before the restart, counts worker:0 generation 1 (cluster.json
    unchanged: it names the live tasks only). Without a ps, worker:0 is the
    source of the record: worker:1 exits 42 (preempted: restarted in place,
    generation 1, version 2), then worker:0 dies: restarted in place although
    two are live, version 3; its new process, a server, holds version 3 with
    both generations within a second or so of listening (the launcher's
    keeper). Every task is told DISTRIB_ELASTIC=1."""
    import distrib as dt

    monkeypatch.setenv("DISTRIB_CONNECT_TIMEOUT_S", "1")   # no worker listens: pushes fail fast
    path = tmp_path / "crasher.py"
    path.write_text(CRASHER)
    ports = free_ports(3)
    cluster = ClusterSpec({"ps": [f"127.0.0.1:{ports[0]}"],
                           "worker": [f"127.0.0.1:{p}" for p in ports[1:]]})
    out = io.StringIO()
    launcher = Launcher(cluster, [("worker", 0), ("worker", 1)],
                        [sys.executable, str(path), logdir, "ps"],
                        LaunchConfig(logdir=logdir, restart_backoff_s=0), stdout=out, stderr=out,
                        elastic_workers=(1, 3))
    ps = dt.Server(cluster, job_name="ps", task_index=0)
    try:
        result = await asyncio.wait_for(launcher.run(), 60)
        held, shrunk = ps.membership_record(), ps.membership_record(2)
    finally:
        ps.stop()
    text = out.getvalue()
    assert result.exit_code == 0, text
    w0, w1 = launcher.tasks
    assert w1.state == "left" and w1.restarts == 0 and w1.returncode == 3, text
    assert text.count("worker:1 started") == 1
    assert re.search(r"\[launch\] worker:1 exit code 3; removed from the cluster, not restarted: "
                     r"more than MIN 1 workers were live \(membership version 2, 1 workers\)$",
                     text, re.M), text
    assert w0.state == "done" and w0.restarts == 1, text
    assert re.search(r"\[launch\] worker:0 exit code 3; restart 1 of 3 in 0 s \(in place, not "
                     r"removed: 1 live worker\(s\), this launch's MIN\); membership version 3, "
                     r"worker:0 generation 1$", text, re.M), text
    assert launcher.elastic.left == ["/job:worker/task:1"]
    # the source holds the restart's version; the shrink before it counted no generation
    assert shrunk is not None and shrunk.left == ("/job:worker/task:1",), shrunk
    assert shrunk.generations == (), shrunk
    assert held is not None and held.version == 3 == launcher.elastic.version, held
    assert held.generations == (("/job:worker/task:0", 1),) and held.left == shrunk.left, held
    assert held.tasks() == ["/job:worker/task:0"]
    with open(os.path.join(logdir, "cluster.json")) as f:
        assert json.load(f) == {"ps": [cluster.task_address("ps", 0)],
                                "worker": [cluster.task_address("worker", 0)]}
    assert text.count("] elastic=1") == 3, text

    # no ps: worker:0 serves the membership, so its death restarts it in place
    for name in os.listdir(logdir):
        os.unlink(os.path.join(logdir, name))
    cluster = ClusterSpec({"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]})
    out = io.StringIO()
    launcher = Launcher(cluster, [("worker", 0), ("worker", 1)],
                        [sys.executable, str(path), logdir, "source"],
                        LaunchConfig(logdir=logdir, restart_backoff_s=0), stdout=out, stderr=out,
                        elastic_workers=(1, 2))
    result = await asyncio.wait_for(launcher.run(), 60)
    text = out.getvalue()
    assert result.exit_code == 0, text
    assert [t.state for t in launcher.tasks] == ["done", "done"], text
    assert launcher.tasks[0].restarts == 1 and launcher.elastic.left == []
    assert launcher.tasks[1].restarts == 0 and launcher.tasks[1].preemptions == 1, text
    assert re.search(r"\[launch\] worker:1 exit code 42 \(preempted, its checkpoint saved\); "
                     r"restarting it in 0 s, not counted against --max_restarts \(preemption 1\); "
                     r"membership version 2, worker:1 generation 1$", text, re.M), text
    assert re.search(r"\[launch\] worker:0 exit code 3; restart 1 of 3 in 0 s \(in place, not "
                     r"removed: it serves the cluster's membership .*\); membership version 3, "
                     r"worker:0 generation 1$", text, re.M), text
    m = re.search(r"^\[worker:0\] held (.*) after ([0-9.]+) s$", text, re.M)
    assert m and m.group(1) == "3 {'/job:worker/task:0': 1, '/job:worker/task:1': 1}", text
    assert float(m.group(2)) <= 1.5, text   # the keeper's tries: about half a second at most


async def test_a_lone_elastic_worker_campaigns_and_hands_the_role_over(monkeypatch):
    """A ps and one worker: a fixed cluster's lone worker has its role fixed
    (nothing elected); with DISTRIB_ELASTIC=1 (an elastic launch) it
    campaigns and holds term 1, so a worker that joins later takes the role
    in a newer term once the first one is gone (here: it resigns)."""
    import distrib as dt
    from distrib.train.chief.role import ChiefRole

    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")
    p, w0, w1 = free_ports(3)
    one = dt.ClusterSpec({"ps": [f"localhost:{p}"], "worker": [f"localhost:{w0}"]})
    two = dt.ClusterSpec({"ps": [f"localhost:{p}"],
                          "worker": [f"localhost:{w0}", f"localhost:{w1}"]})
    servers = [dt.Server(one, job_name="ps", task_index=0),
               dt.Server(one, job_name="worker", task_index=0)]
    roles: list[ChiefRole] = []
    try:
        fixed = ChiefRole(True)
        roles.append(fixed)
        assert await fixed.start(servers[1].target) is True
        assert fixed.election is None and fixed.term is None
        await fixed.stop()

        monkeypatch.setenv("DISTRIB_ELASTIC", "1")
        first = ChiefRole(True)
        roles.append(first)
        assert await first.start(servers[1].target) is True
        assert first.election is not None and first.term == 1

        servers.append(dt.Server(two, job_name="worker", task_index=1))   # joins later
        changes: list[bool] = []
        second = ChiefRole(False, on_change=changes.append)
        roles.append(second)
        assert await second.start(servers[2].target) is False
        deadline = time.monotonic() + 10
        while second.election.holder is None:
            assert time.monotonic() < deadline, "worker:1 never learned who holds the role"
            await asyncio.sleep(0.05)
        assert second.election.holder == "/job:worker/task:0" and not second.is_chief
        await first.stop()                      # the first worker goes
        deadline = time.monotonic() + 10
        while not second.is_chief:
            assert time.monotonic() < deadline, "the role never moved to worker:1"
            await asyncio.sleep(0.05)
        assert second.term >= 2 and changes == [True]
    finally:
        for role in roles:
            await role.stop()
        for s in servers:
            s.stop()


@pytest.mark.slow
def test_trainer_shrinks_when_its_chief_is_killed_and_the_survivor_is_elected(logdir, capsys):
    """``--ps 1 --workers 1:3``: worker:0 starts alone and is elected chief
    (term 1: an elastic launch's lone worker campaigns); grown to 2, worker:1
    joins; worker:0 is killed (-9) mid-training: with 2 live > MIN 1 the job
    shrinks to worker:1 (launcher line, cluster.json, status), which is
    elected chief once the lease runs out, trains on, releases the ps and
    ends with its done line in the band. worker:0 is not restarted. Steps
    count exactly: every worker logs each of its steps (``--log_every=1``),
    so worker:0's logged steps plus worker:1's own add up to the final global
    step, give or take the one step worker:0 may have had in flight when it
    died (applied at the ps, never logged)."""
    # each step >= 10 ms: the survivor's remaining steps (>= 500: the kill comes by
    # step ~1000) outlast the election (2 x 3 heartbeats = 3 s) on any machine
    launch = Launch("--ps", "1", "--workers", "1:3", "--logdir", logdir, "--stop_timeout", "15",
                    "--", sys.executable, TRAINER, f"--train_steps={KILL_STEPS}", "--log_every=1",
                    "--wait_workers_secs=30", "--min_step_ms=10",
                    env=child_env(OPENBLAS_NUM_THREADS="1", DISTRIB_HEARTBEAT_S="0.5"))
    try:
        launch.wait_for(r"^\[worker:0\] .*/job:worker/task:0: became chief \(term 1\)$", timeout=40)
        launch.wait_for(r"^\[worker:0\] .*worker 0: global step \d+,", count=20, timeout=40)
        code, out, err = scale(logdir, 2, capsys)
        assert code == 0 and "worker:1" in out, err
        launch.wait_for(r"^\[worker:1\] .*worker 1: global step \d+,", count=50, timeout=40)
        with open(os.path.join(logdir, "cluster.json")) as f:
            before = json.load(f)["worker"]
        assert len(before) == 2, before
        os.kill(launch.pids()["worker:0"][0], signal.SIGKILL)
        launch.wait_for(r"^\[launch\] worker:0 killed by SIGKILL; removed from the cluster, not "
                        r"restarted: more than MIN 1 workers were live \(membership version 3, "
                        r"1 workers\)$", timeout=20)
        with open(os.path.join(logdir, "cluster.json")) as f:
            assert json.load(f)["worker"] == {"1": before[1]}   # worker:0 gone
        wait_versions(logdir, {"ps:0": 3, "worker:1": 3}, capsys)
        launch.wait_for(r"^\[worker:1\] .*/job:worker/task:1: became chief \(term [2-9]\)$",
                        timeout=20)
        assert launch.finish(60) == 0, launch.output[-4000:]
    finally:
        launch.cleanup()

    done = [x for x in launch.task_lines("worker:1") if x.startswith("done ")]
    assert len(done) == 1 and not [x for x in launch.task_lines("worker:0")
                                   if x.startswith(("done ", "left "))], launch.output[-4000:]
    m = re.fullmatch(r"done global_step=(\d+) accuracy=([0-9.]+)", done[0])
    assert m, done
    final = int(m.group(1))
    assert ACCURACY_BAND[0] <= float(m.group(2)) <= ACCURACY_BAND[1], done
    own = [int(m.group(1)) for x in launch.task_lines("worker:1")
           if (m := re.fullmatch(r"worker steps=(\d+)", x))]
    logged0 = [x for x in launch.task_lines("worker:0") if re.search(r"worker 0: global step ", x)]
    assert len(own) == 1 and final >= KILL_STEPS, (own, final)
    assert final - (own[0] + len(logged0)) in (0, 1), (own, len(logged0), final)
    # the death shrank the job: not a failure, worker:0 never started again
    assert len(launch.pids()["worker:0"]) == 1 and len(launch.pids()["worker:1"]) == 1
    assert not re.search(r"restart \d+ of", launch.output)
    assert_all_gone(launch)
    assert not os.path.exists(os.path.join(logdir, "launch.sock"))

