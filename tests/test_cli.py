"""``python -m distrib.server``: the command-line contract.

The ready line, a clean exit 0 on SIGTERM and SIGINT, exit code 2 with a
one-line error for bad configuration, and the three ways to give the cluster
(``--cluster FILE``, ``--ps_hosts/--worker_hosts``, ``TF_CONFIG``).
"""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import distrib as dt
from tests.helpers import ROOT, Proc, child_env
from tests.peers.cli_cluster import cli_flags_task, cli_task, cluster_spec, write_cluster

READY = re.compile(r"^serving (/job:\w+/task:\d+) at 127\.0\.0\.1:(\d+)$")


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distrib.server", *args], cwd=ROOT,
                          env=child_env(**env), capture_output=True, text=True, timeout=60)


def assert_usage_error(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def run_one_step(address: str, device: str) -> float:
    g = dt.Graph()
    with g.as_default(), dt.device(device):
        out = dt.constant([1.0, 2.0]) * 3.0
    with dt.SyncSession(f"distrib://{address}", graph=g) as sess:
        return float(np.sum(sess.run(out)))


# -- ready line and signals ----------------------------------------------------------

def test_ready_line_names_task_and_bound_address(tmp_path) -> None:
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 1) as p:
        m = READY.match(p.line)
        assert m is not None, p.line
        assert m.group(1) == "/job:worker/task:1"
        assert f"localhost:{m.group(2)}" == spec["worker"][1]
        assert run_one_step(spec["worker"][1], "/job:worker/task:1") == 9.0


def read_until_ready(p: subprocess.Popen, timeout: float = 30.0) -> list[str]:
    """The lines ``p`` wrote (stdout and stderr merged) up to its ready line.
    ``p.stdout`` is unbuffered bytes: a buffered reader could take the ready
    line in with the one before it, where select no longer sees it."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        if sel.select(timeout=0.1):
            lines.append(p.stdout.readline().decode().rstrip("\n"))
            if READY.match(lines[-1]):
                return lines
    raise AssertionError(f"no ready line within {timeout:g}s: {lines}")


@pytest.mark.parametrize("level", [None, "DEBUG"])
def test_ready_line_appears_once_on_stdout_and_stderr_together(level, tmp_path) -> None:
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    args = ["--cluster", cfg, "--job_name", "worker", "--task_index", "0"]
    if level is not None:
        args += ["--log_level", level]
    p = subprocess.Popen([sys.executable, "-m", "distrib.server", *args], cwd=ROOT,
                         env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         bufsize=0)
    try:
        lines = read_until_ready(p)
        run_one_step(spec["worker"][0], "/job:worker/task:0")
        p.send_signal(signal.SIGTERM)
        lines += p.communicate(timeout=30)[0].decode().splitlines()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, lines
    assert sum("serving /job:worker/task:0 at" in line for line in lines) == 1, lines


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_shuts_down_cleanly_with_exit_0(sig, tmp_path, shm_snapshot) -> None:
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0) as p:
        run_one_step(spec["worker"][0], "/job:worker/task:0")  # a live connection at exit
        p.p.send_signal(sig)
        assert p.p.wait(30) == 0
        err = p.p.stderr.read()
    assert "Traceback" not in err, err
    # the port is free again at once
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", int(spec["worker"][0].rpartition(":")[2])))
    finally:
        s.close()


# -- configuration errors: exit 2, one line ------------------------------------------------

def test_port_in_use_is_exit_2_naming_the_address(tmp_path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        cfg = write_cluster(tmp_path, {"worker": [f"localhost:{port}"]})
        res = run_cli("--cluster", cfg, "--job_name", "worker", "--task_index", "0")
    finally:
        holder.close()
    assert_usage_error(res, f"localhost:{port}", "/job:worker/task:0")


def test_task_index_outside_the_job_is_exit_2(tmp_path) -> None:
    cfg = write_cluster(tmp_path, cluster_spec(worker=2))
    res = run_cli("--cluster", cfg, "--job_name", "worker", "--task_index", "5")
    assert_usage_error(res, "5", "worker")


def test_missing_job_name_or_task_index_is_exit_2_when_ambiguous(tmp_path) -> None:
    cfg = write_cluster(tmp_path, cluster_spec(worker=2, ps=1))
    assert_usage_error(run_cli("--cluster", cfg, "--task_index", "0"), "job_name")
    assert_usage_error(run_cli("--cluster", cfg, "--job_name", "worker"), "task_index")


def test_unknown_job_is_exit_2_listing_jobs(tmp_path) -> None:
    cfg = write_cluster(tmp_path, cluster_spec(worker=1, ps=1))
    res = run_cli("--cluster", cfg, "--job_name", "chief", "--task_index", "0")
    assert_usage_error(res, "chief", "ps", "worker")


@pytest.mark.parametrize("text, word", [
    ("{\"worker\": [\"localhost:1\",", "JSON"),
    ("{\"worker\": [\"localhost\"]}", "port"),
    ("[\"localhost:1\"]", "object"),
])
def test_malformed_cluster_file_is_exit_2(text, word, tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    res = run_cli("--cluster", str(path), "--job_name", "worker", "--task_index", "0")
    assert_usage_error(res, word)


def test_missing_cluster_file_and_no_cluster_at_all_are_exit_2(tmp_path) -> None:
    res = run_cli("--cluster", str(tmp_path / "nope.json"), "--job_name", "worker",
                  "--task_index", "0")
    assert_usage_error(res, "nope.json")
    res = run_cli(TF_CONFIG="")
    assert_usage_error(res, "--cluster")


# -- the other ways to give the cluster ------------------------------------------------

def test_ps_and_worker_host_flags(tmp_path) -> None:
    spec = cluster_spec(ps=1, worker=2)
    with cli_flags_task(spec, "ps", 0) as ps, cli_flags_task(spec, "worker", 1) as w1:
        assert READY.match(ps.line).group(1) == "/job:ps/task:0"
        assert READY.match(w1.line).group(1) == "/job:worker/task:1"
        assert run_one_step(spec["ps"][0], "/job:worker/task:1") == 9.0


def test_tf_config_gives_cluster_and_task(tmp_path) -> None:
    spec = cluster_spec(chief=1, worker=2)
    tf_config = json.dumps({"cluster": spec, "task": {"type": "worker", "index": 1}})
    with Proc(["-m", "distrib.server", "--log_level", "WARNING"],
              env=child_env(TF_CONFIG=tf_config), ready_prefix="serving") as p:
        m = READY.match(p.line)
        assert m is not None and m.group(1) == "/job:worker/task:1"
        assert f"localhost:{m.group(2)}" == spec["worker"][1]
        assert run_one_step(spec["worker"][1], "/job:worker/task:1") == 9.0


def test_malformed_tf_config_is_exit_2() -> None:
    res = run_cli(TF_CONFIG="{not json")
    assert_usage_error(res, "TF_CONFIG")


def test_sigterm_during_a_step_still_exits_0_and_the_step_fails_naming_the_task(
        tmp_path) -> None:
    spec = cluster_spec(worker=1, host=1)
    cfg = write_cluster(tmp_path, spec)
    g = dt.Graph()
    with g.as_default(), dt.device("/job:worker/task:0"):
        x = dt.random_uniform([1500, 1500], seed=1, dtype=dt.float32)
        y = x
        for _ in range(100):   # seconds of CPU: the signal lands mid-step
            y = dt.matmul(y, x) * (1.0 / 1500)
        out = dt.reduce_sum(y)
    with cli_task(cfg, "worker", 0) as p:
        server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
        try:
            with dt.SyncSession(server.target, graph=g) as sess:
                killer = threading.Thread(target=signal_once_dispatched,
                                          args=(server, p, "/job:worker/task:0"))
                killer.start()
                try:
                    with pytest.raises(dt.errors.OpError, match=r"/job:worker/task:0"):
                        sess.run(out)
                finally:
                    killer.join(30)
        finally:
            server.stop()
        assert p.p.wait(30) == 0
        assert "Traceback" not in p.p.stderr.read()


def signal_once_dispatched(server: dt.Server, p: Proc, task: str) -> None:
    """SIGTERM ``p`` once the host's master has registered the step's plan on
    ``task`` (white-box: that master is in this process), then a little later."""
    master = server._core.master
    for _ in range(1200):
        st = master._tasks.get(task)
        if st is not None and st.registered:
            time.sleep(0.3)
            break
        time.sleep(0.025)
    p.p.send_signal(signal.SIGTERM)
