"""``python -m distrib.launch`` as a user runs it: real processes on free
loopback ports, every one of them stopped at the end of its test.

Each launch is a real launcher process; its output (the tasks' prefixed lines
and its own ``[launch]`` lines, pids included) is read on a thread, so a test
waits for a line with a deadline and never hangs. The ``launches`` fixture
kills, by pid, any launcher or task a failed test left behind. Argument errors
are checked in-process through ``main()`` (nothing starts before them).
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from distrib.cluster import ClusterSpec
from distrib.launch import free_ports, loopback_cluster, select_tasks, tf_config
from distrib.launch.__main__ import main
from distrib.server import request_stop
from tests.helpers import ROOT, child_env
from tests.peers.scheduler_env import SCHEDULER_PREFIXES, free_port_base, no_scheduler_env, slurm_env

TRAINER = os.path.join(ROOT, "examples", "trainer.py")
STARTED = re.compile(r"^\[launch\] (\w+:\d+) started \(pid (\d+)\)$")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


class Launch:
    """A launcher process; its stdout and stderr lines, merged, as they come."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "distrib.launch", *args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  cwd=ROOT, env=env or child_env(OPENBLAS_NUM_THREADS="1"))
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    @property
    def output(self) -> str:
        with self._cv:
            return "\n".join(self.lines)

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 30) -> list[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                hits = [line for line in self.lines if rx.search(line)]
                if len(hits) >= count:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0 or (not self._reader.is_alive() and self.p.poll() is not None):
                    raise AssertionError(f"{count} line(s) matching {pattern!r} not seen:\n"
                                         + "\n".join(self.lines[-60:]))
                self._cv.wait(min(left, 0.2))

    def finish(self, timeout: float = 40) -> int:
        try:
            code = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("launcher did not exit:\n" + self.output[-4000:]) from None
        self._reader.join(5)
        return code

    def pids(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        with self._cv:
            for line in self.lines:
                if m := STARTED.match(line):
                    found.setdefault(m.group(1), []).append(int(m.group(2)))
        return found

    def all_pids(self) -> list[int]:
        return [pid for pids in self.pids().values() for pid in pids]

    def task_lines(self, name: str) -> list[str]:
        prefix = f"[{name}] "
        with self._cv:
            return [line[len(prefix):] for line in self.lines if line.startswith(prefix)]

    def cleanup(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)
        for pid in self.all_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launches():
    started: list[Launch] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Launch:
        started.append(Launch(*args, env=env))
        return started[-1]
    yield start
    for launch in started:
        launch.cleanup()


def assert_all_gone(launch: Launch, within: float = 5.0) -> None:
    pids = launch.all_pids()
    assert pids, launch.output
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], launch.output


def script(tmp_path, name: str, body: str) -> str:
    """A task program that knows its name from TF_CONFIG as ``NAME`` (job-index)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import json, os, signal, sys, time\n"
                    "TASK = json.loads(os.environ['TF_CONFIG'])['task']\n"
                    "NAME = f\"{TASK['type']}-{TASK['index']}\"\n" + textwrap.dedent(body))
    return str(path)


# -- bare servers and signals ------------------------------------------------

@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_bare_servers_serve_and_stop_on_signal(launches, sig, code, shm_snapshot):
    launch = launches("--ps", "1", "--workers", "2")
    for job, index in (("ps", 0), ("worker", 0), ("worker", 1)):
        launch.wait_for(rf"^\[{job}:{index}\] serving /job:{job}/task:{index} at 127\.0\.0\.1:\d+$")
    # distrib.server prints its serving line just before it installs its
    # SIGTERM handler: a signal in between kills it uncleanly (seen on a busy host)
    time.sleep(0.5)
    launch.p.send_signal(sig)
    assert launch.finish() == code, launch.output
    assert_all_gone(launch)
    # every bare server shut down cleanly: exit 0 on the launcher's SIGTERM
    assert len(launch.wait_for(r"^\[launch\] \w+:\d stopped \(exit code 0\)$", 3)) == 3
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


def test_signal_stops_workers_before_the_ps(launches, tmp_path):
    events = tmp_path / "events"
    task = script(tmp_path, "task", f"""
        def on_term(*_):
            with open({str(events)!r}, "a") as f:
                f.write("term " + NAME + "\\n")
            if TASK["type"] == "worker":
                time.sleep(0.5)   # the chief's final save, say
            with open({str(events)!r}, "a") as f:
                f.write("exit " + NAME + "\\n")
            sys.exit(0)
        signal.signal(signal.SIGTERM, on_term)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
        """)
    launch = launches("--ps", "1", "--workers", "2", "--", sys.executable, task)
    launch.wait_for(r"^\[\w+:\d\] ready$", 3)
    launch.p.send_signal(signal.SIGINT)
    assert launch.finish() == 130, launch.output
    order = events.read_text().split("\n")
    assert order.index("term ps-0") > max(order.index("exit worker-0"),
                                           order.index("exit worker-1")), order
    assert_all_gone(launch)


def test_children_die_with_a_killed_launcher(launches, tmp_path):
    task = script(tmp_path, "sleeper", """
        print("up", flush=True)
        time.sleep(60)
        """)
    launch = launches("--ps", "1", "--workers", "1", "--", sys.executable, task)
    launch.wait_for(r"^\[\w+:\d\] up$", 2)
    launch.p.kill()
    launch.p.wait(10)
    assert_all_gone(launch)


# -- commands, TF_CONFIG, restarts ---------------------------------------------

def test_each_task_gets_its_tf_config_and_a_log(launches, tmp_path):
    task = script(tmp_path, "show", """
        print("TF_CONFIG=" + os.environ["TF_CONFIG"])
        print("to stderr", file=sys.stderr)
        """)
    logdir = tmp_path / "logs"
    launch = launches("--ps", "1", "--workers", "2", "--logdir", str(logdir),
                      "--", sys.executable, task)
    assert launch.finish() == 0, launch.output
    cluster = None
    for job, index in (("ps", 0), ("worker", 0), ("worker", 1)):
        lines = launch.task_lines(f"{job}:{index}")
        assert "to stderr" in lines, launch.output
        config = json.loads(next(x for x in lines if x.startswith("TF_CONFIG="))[10:])
        assert config["task"] == {"type": job, "index": index}
        cluster = cluster or config["cluster"]
        assert config["cluster"] == cluster   # one cluster for all
        log = (logdir / f"{job}-{index}.log").read_text()
        assert "TF_CONFIG=" in log and "to stderr" in log
    assert sorted(cluster) == ["ps", "worker"] and len(cluster["worker"]) == 2
    assert all(a.startswith("127.0.0.1:") for a in cluster["ps"] + cluster["worker"])
    assert_all_gone(launch)


def test_a_task_that_crashes_once_is_restarted_alone(launches, tmp_path):
    task = script(tmp_path, "flaky", f"""
        marker = os.path.join({str(tmp_path)!r}, NAME + ".crashed")
        if NAME == "worker-1" and not os.path.exists(marker):
            open(marker, "w").close()
            print("crashing", flush=True)
            sys.exit(3)
        print("ok")
        """)
    launch = launches("--ps", "1", "--workers", "2", "--", sys.executable, task)
    assert launch.finish() == 0, launch.output
    assert launch.task_lines("worker:1") == ["crashing", "ok"]
    assert "[launch] worker:1 exit code 3; restart 1 of 3 in 1 s" in launch.lines
    pids = launch.pids()
    assert len(pids["worker:1"]) == 2 and len(pids["worker:0"]) == 1 and len(pids["ps:0"]) == 1
    assert_all_gone(launch)


def test_a_task_failing_past_its_restarts_stops_the_cluster(launches, tmp_path):
    task = script(tmp_path, "broken", """
        if NAME == "worker-1":
            for i in range(25):
                print(f"boom line {i}")
            sys.exit(5)
        print("up", flush=True)
        time.sleep(60)
        """)
    # the knobs through their environment twins
    env = child_env(DISTRIB_LAUNCH_MAX_RESTARTS="2", DISTRIB_LAUNCH_RESTART_BACKOFF="0.05")
    t0 = time.monotonic()
    launch = launches("--ps", "1", "--workers", "2", "--", sys.executable, task, env=env)
    assert launch.finish() == 1, launch.output
    assert time.monotonic() - t0 < 20
    assert len(launch.pids()["worker:1"]) == 3     # the first run and two restarts
    assert "[launch] worker:1 exit code 5; restart 2 of 2 in 0.1 s" in launch.lines
    message = launch.output.split("\nerror: ", 1)[1]
    assert message.startswith("/job:worker/task:1 (worker:1) failed: exit code 5"), message
    shown = [x for x in message.split("\n") if "boom line" in x]
    assert shown == [f"  [worker:1] boom line {i}" for i in range(5, 25)], message
    assert_all_gone(launch)


def test_only_starts_the_named_tasks(launches, tmp_path):
    task = script(tmp_path, "show", 'print("I am " + NAME)\n')
    launch = launches("--ps", "2", "--workers", "3", "--only", "ps, worker:1",
                      "--", sys.executable, task)
    assert launch.finish() == 0, launch.output
    assert sorted(launch.pids()) == ["ps:0", "ps:1", "worker:1"]
    assert launch.task_lines("worker:1") == ["I am worker-1"]
    assert launch.task_lines("ps:1") == ["I am ps-1"]
    assert_all_gone(launch)


def test_cluster_file_with_a_chief(launches, tmp_path):
    ports = free_ports(3)
    spec = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{p}" for p in ports[1:]]}
    (tmp_path / "cluster.json").write_text(json.dumps(spec))
    task = script(tmp_path, "show", 'print("TF_CONFIG=" + os.environ["TF_CONFIG"])\n')
    launch = launches("--cluster", str(tmp_path / "cluster.json"), "--", sys.executable, task)
    assert launch.finish() == 0, launch.output
    for job, index in (("chief", 0), ("worker", 0), ("worker", 1)):
        (line,) = launch.task_lines(f"{job}:{index}")
        config = json.loads(line[len("TF_CONFIG="):])
        assert config == {"cluster": spec, "task": {"type": job, "index": index}}
    assert_all_gone(launch)


def test_training_over_tells_a_serving_ps_to_stop(launches, tmp_path):
    # the ps runs a real server; the worker finishes once it can reach it
    task = script(tmp_path, "serve_or_finish", """
        import socket
        if TASK["type"] == "ps":
            os.execv(sys.executable, [sys.executable, "-m", "distrib.server"])
        cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
        host, port = cluster["ps"][0].rsplit(":", 1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        print("trained")
        """)
    launch = launches("--ps", "1", "--workers", "1", "--", sys.executable, task)
    assert launch.finish() == 0, launch.output
    assert "[launch] training is over: telling ps:0 to stop" in launch.lines
    assert "[launch] ps:0 stopped (exit code 0)" in launch.lines   # told, not terminated
    assert not any(x.startswith("[launch] stopping ps:0") for x in launch.lines), launch.output
    assert_all_gone(launch)


def test_trainer_end_to_end(launches, tmp_path, shm_snapshot):
    launch = launches("--ps", "1", "--workers", "2", "--", sys.executable, TRAINER,
                      "--train_steps", "300", "--logdir", str(tmp_path / "ckpt"),
                      "--save_model_secs", "60")
    assert launch.finish(90) == 0, launch.output[-4000:]
    for index in (0, 1):
        done = [x for x in launch.task_lines(f"worker:{index}") if x.startswith("done ")]
        assert len(done) == 1 and re.match(r"done global_step=\d+ accuracy=[0-9.]+$", done[0])
    assert re.search(r"^\[launch\] ps:0 (stopped|finished) \(exit code 0\)$", launch.output, re.M)
    assert_all_gone(launch)
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


# -- under a scheduler: this process's task, from the environment ----------------

def slurm_launch_env(rank: int, base: int, **extra: str) -> dict[str, str]:
    """What srun gives task ``rank`` of a ps:1,worker:1 step on one node."""
    return no_scheduler_env(**slurm_env("localhost", "2", rank), DISTRIB_SLURM_JOBS="ps:1,worker:1",
                            DISTRIB_SLURM_PORT_BASE=str(base), OPENBLAS_NUM_THREADS="1", **extra)


def test_under_slurm_the_launcher_runs_just_this_task(launches, tmp_path):
    base = free_port_base(2)
    task = script(tmp_path, "show", 'print("TF_CONFIG=" + os.environ["TF_CONFIG"])\n')
    launch = launches("--", sys.executable, task, env=slurm_launch_env(1, base))
    assert launch.finish() == 0, launch.output
    assert "[launch] the cluster from the slurm environment; this launcher runs worker:0" \
        in launch.lines
    assert list(launch.pids()) == ["worker:0"]
    (line,) = launch.task_lines("worker:0")
    assert json.loads(line[len("TF_CONFIG="):]) == {
        "cluster": {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}"]},
        "task": {"type": "worker", "index": 0}}
    assert_all_gone(launch)


def test_under_slurm_a_failed_task_is_restarted(launches, tmp_path):
    task = script(tmp_path, "flaky", f"""
        marker = os.path.join({str(tmp_path)!r}, NAME + ".crashed")
        if not os.path.exists(marker):
            open(marker, "w").close()
            print("crashing", flush=True)
            sys.exit(1)
        print("ok")
        """)
    env = slurm_launch_env(1, free_port_base(2), DISTRIB_LAUNCH_RESTART_BACKOFF="0.05")
    launch = launches("--", sys.executable, task, env=env)
    assert launch.finish() == 0, launch.output
    assert launch.task_lines("worker:0") == ["crashing", "ok"]
    assert "[launch] worker:0 exit code 1; restart 1 of 3 in 0.05 s" in launch.lines
    assert len(launch.pids()["worker:0"]) == 2
    assert_all_gone(launch)


def test_a_lone_ps_under_slurm_serves_until_its_chief_stops_it(launches):
    base = free_port_base(2)
    launch = launches(env=slurm_launch_env(0, base))      # no COMMAND: a bare server
    launch.wait_for(rf"^\[ps:0\] serving /job:ps/task:0 at 127\.0\.0\.1:{base}$")
    # no chief/worker task here: that is not "training is over"
    time.sleep(1.0)
    assert launch.p.poll() is None, launch.output
    asyncio.run(request_stop(f"localhost:{base}"))       # what the chief does at the end
    assert launch.finish() == 0, launch.output
    assert "[launch] ps:0 finished (exit code 0)" in launch.lines
    assert not any(x.startswith("[launch] stopping") for x in launch.lines), launch.output
    assert_all_gone(launch)


# -- errors: one line, exit 2 --------------------------------------------------

@pytest.fixture
def no_scheduler(monkeypatch):
    """This process's environment without TF_CONFIG or a scheduler's variables."""
    for name in [k for k in os.environ if k.startswith(SCHEDULER_PREFIXES) or k == "TF_CONFIG"]:
        monkeypatch.delenv(name)

def run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("argv,says", [
    ([], "no cluster"),
    (["--cluster", "{tmp}/missing.json"], "does not exist"),
    (["--cluster", "{tmp}/bad.json"], "not valid JSON"),
    (["--cluster", "{tmp}/noport.json"], "port"),
    (["--cluster", "{tmp}/empty.json"], "no tasks"),
    (["--cluster", "{tmp}/empty.json", "--ps", "1"], "not both"),
    (["--ps", "0", "--workers", "0"], "no tasks"),
    (["--ps", "1", "--workers", "2", "--only", "evaluator"], "no job 'evaluator'"),
    (["--ps", "1", "--workers", "2", "--only", "worker:2"], "has no task '2'"),
    (["--ps", "1", "--max_restarts", "-1"], "must be >= 0"),
    (["--ps", "1", "--bogus"], "unrecognized"),
    (["--ps", "1", "--", "no-such-command-xyz"], "command not found"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, says, tmp_path, capsys, no_scheduler):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "noport.json").write_text('{"worker": ["localhost"]}')
    (tmp_path / "empty.json").write_text("{}")
    code, err = run_main([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err


def test_no_cluster_and_no_scheduler_names_every_way_to_give_one():
    r = subprocess.run([sys.executable, "-m", "distrib.launch", "--", "true"], capture_output=True,
                       text=True, cwd=ROOT, env=no_scheduler_env(), timeout=30)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    for word in ("error: no cluster", "--cluster", "--ps", "--workers", "TF_CONFIG", "SLURM",
                 "DISTRIB_K8S_JOBS"):
        assert word in r.stderr, r.stderr


@pytest.mark.parametrize("env,says", [
    ({"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "node[1-", "SLURM_STEP_TASKS_PER_NODE": "1"},
     "SLURM_STEP_NODELIST"),
    ({**slurm_env("localhost", "2", 0), "DISTRIB_SLURM_JOBS": "ps:1,worker:3"}, "ask for 4 tasks"),
    ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "worker-0"}, "DISTRIB_K8S_JOBS"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1"]}})}, "--only"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1"]},
                               "task": {"type": "worker", "index": 3}})}, "task index 3"),
])
def test_a_bad_scheduler_environment_is_one_line_and_exit_2(env, says, monkeypatch, capsys,
                                                           no_scheduler):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, err = run_main(["--", "true"], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err


def test_a_bad_environment_twin_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("DISTRIB_LAUNCH_MAX_RESTARTS", "many")
    code, err = run_main(["--ps", "1"], capsys)
    assert code == 2 and "--max_restarts" in err and err.count("\n") == 1


def test_the_cli_exits_2_on_an_unknown_only_name():
    r = subprocess.run([sys.executable, "-m", "distrib.launch", "--ps", "1", "--only", "chief"],
                       capture_output=True, text=True, cwd=ROOT, env=child_env(), timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: --only 'chief'") and r.stderr.count("\n") == 1, r.stderr


# -- the pieces ----------------------------------------------------------------

def test_select_tasks_and_tf_config():
    cluster = ClusterSpec({"ps": ["h:1", "h:2"], "worker": ["h:3", "h:4"], "chief": ["h:5"]})
    assert select_tasks(cluster) == [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0),
                                     ("worker", 1)]
    assert select_tasks(cluster, "worker:1,ps,worker:1") == [("ps", 0), ("ps", 1), ("worker", 1)]
    config = json.loads(tf_config(cluster, "ps", 1))
    assert config == {"cluster": cluster.as_dict(), "task": {"type": "ps", "index": 1}}
    sparse = ClusterSpec({"worker": {3: "h:9"}})
    assert json.loads(tf_config(sparse, "worker", 3))["cluster"] == {"worker": {"3": "h:9"}}
    local = loopback_cluster(1, 2)
    assert local.num_tasks("ps") == 1 and local.num_tasks("worker") == 2
    assert "ps" not in loopback_cluster(0, 1).jobs


def test_trainer_takes_cluster_and_task_from_tf_config(monkeypatch):
    from examples.trainer import parse_args
    cluster = {"ps": ["h:1"], "worker": ["h:2", "h:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster,
                                                "task": {"type": "worker", "index": 1}}))
    args = parse_args(["--train_steps", "5"])
    assert (args.ps_hosts, args.worker_hosts, args.job_name, args.task_index) == \
        ("h:1", "h:2,h:3", "worker", 1)
    assert args.save_model_secs == 600 and args.train_steps == 5
    flags = parse_args(["--ps_hosts=a:1", "--worker_hosts=b:2", "--job_name=ps",
                        "--task_index=0", "--save_model_secs=5"])   # flags win
    assert (flags.ps_hosts, flags.job_name, flags.save_model_secs) == ("a:1", "ps", 5)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": dict(cluster, chief=["h:4"]),
                                                "task": {"type": "chief", "index": 0}}))
    with pytest.raises(SystemExit) as e:
        parse_args([])
    assert e.value.code == 2
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(SystemExit) as e:
        parse_args([])
    assert e.value.code == 2


def test_a_task_that_keeps_exiting_42_is_crash_looping_not_preempted(monkeypatch, capsys):
    """Exit 42 (a preemption, its checkpoint saved) is restarted uncounted only
    up to MAX_PREEMPTIONS times per task; past that it counts as a failure, so
    a task that always exits 42 ends the launch instead of restarting forever."""
    from distrib.launch import launcher
    monkeypatch.setattr(launcher, "MAX_PREEMPTIONS", 2)
    code, err = run_main(["--ps", "0", "--workers", "1", "--max_restarts", "1",
                          "--restart_backoff", "0.01", "--", sys.executable, "-c",
                          "import sys; sys.exit(42)"], capsys)
    assert code == 1, err
    assert err.count("not counted against --max_restarts") == 2, err
    assert "restart 1 of 1" in err and "no restarts left" in err, err
