"""``python -m distrib.status``: one row per task, from real servers.

CLI-started tasks (their own processes) for what crosses processes: exit
codes, the JSON's shape, a down task's reason, the transport of each
connection, the cluster secret. In-process servers where a process of its
own adds nothing: the global step, the chief's lease, 16 tasks at once.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.status import StatusClient, human_bytes, human_seconds, query_cluster, render_table
from distrib.train.checkpoints.file_format import write_checkpoint
from distrib.train.checkpoints.state_file import update_checkpoint_state
from distrib.train.optimizers.global_step import get_or_create_global_step
from tests.helpers import ROOT, Proc, child_env
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster
from tests.peers.scheduler_env import free_port_base, no_scheduler_env, slurm_env

GUARD = 60.0
SECRET = "status-secret"
KEYS = ["job", "task", "address", "state", "reason", "incarnation", "uptime_s", "role", "term",
        "global_step", "steps_per_s", "last_loss", "last_checkpoint", "checkpoint_age_s",
        "sessions", "rss_bytes", "membership_version", "peers"]


def status_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = child_env(**env)
    for key in [k for k, v in env.items() if v is None]:
        environ.pop(key, None)
    return subprocess.run([sys.executable, "-m", "distrib.status", *args], capture_output=True,
                          text=True, env=environ, cwd=ROOT, timeout=GUARD)


def by_task(out: str) -> dict[str, dict]:
    return {f"/job:{t['job']}/task:{t['task']}": t for t in json.loads(out)["tasks"]}


@pytest.fixture(scope="module")
def ps_worker(tmp_path_factory):
    """1 ps + 1 worker, CLI-started; the cluster file also names a worker:1
    that is never started (a down task). Started once for the tests that
    only query it (the one that pauses the worker resumes it)."""
    spec = cluster_spec(ps=1, worker=2)
    cfg = write_cluster(tmp_path_factory.mktemp("ps_worker"), spec)
    with cli_task(cfg, "ps", 0), cli_task(cfg, "worker", 0) as worker:
        yield spec, cfg, worker


def test_all_up_exits_0_and_json_has_the_contract_keys(ps_worker, tmp_path):
    spec, _, _ = ps_worker
    up = write_cluster(tmp_path, {"ps": spec["ps"], "worker": spec["worker"][:1]}, "up.json")
    res = status_cli("--cluster", up, "--json")
    assert res.returncode == 0, res.stderr
    tasks = json.loads(res.stdout)["tasks"]
    assert [(t["job"], t["task"]) for t in tasks] == [("ps", 0), ("worker", 0)]
    for t, address in zip(tasks, [spec["ps"][0], spec["worker"][0]]):
        assert list(t) == KEYS
        assert t["address"] == address and t["state"] == "up" and t["reason"] is None
        assert isinstance(t["task"], int) and isinstance(t["incarnation"], int)
        assert isinstance(t["uptime_s"], float) and 0 <= t["uptime_s"] < GUARD
        assert t["sessions"] == 0 and t["rss_bytes"] > 1 << 20
        assert t["peers"] == [] and t["global_step"] is None and t["steps_per_s"] is None
        assert t["last_checkpoint"] is None and t["checkpoint_age_s"] is None
    assert tasks[0]["incarnation"] != tasks[1]["incarnation"]
    # one ps and one worker: nothing to elect, the chief is TF's fixed worker 0
    assert [t["role"] for t in tasks] == [None, "chief"]


def test_down_task_shows_refused_and_exit_1(ps_worker):
    _, cfg, _ = ps_worker
    res = status_cli("--cluster", cfg, "--json")
    assert res.returncode == 1, res.stderr
    rows = by_task(res.stdout)
    down = rows["/job:worker/task:1"]
    assert down["state"] == "down" and down["reason"] == "refused"
    assert all(down[k] is None for k in KEYS[6:-1]) and down["peers"] == []
    assert rows["/job:worker/task:0"]["state"] == "up"
    table = status_cli("--cluster", cfg)
    assert table.returncode == 1
    assert "down (refused)" in table.stdout and "2 of 3 tasks up" in table.stdout


async def test_hung_task_times_out_without_slowing_the_others(ps_worker):
    spec, _, proc = ps_worker
    cluster = {"ps": spec["ps"], "worker": spec["worker"][:1]}
    worker = proc.p.pid
    os.kill(worker, signal.SIGSTOP)   # listening, but answers nothing
    try:
        t0 = time.perf_counter()
        rows = await query_cluster(cluster, timeout=1.0)
        took = time.perf_counter() - t0
    finally:
        os.kill(worker, signal.SIGCONT)
    assert [(r.state, r.reason) for r in rows] == [("up", None), ("down", "timed out")]
    assert took < 1.0 + 2.0   # its deadline, once (a hang guard: not a timing assertion)


def graph_across_tasks() -> tuple[dt.Graph, dt.Tensor]:
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:1"):
            a = dt.constant(np.arange(6.0).reshape(2, 3))
        with dt.device("/job:worker/task:0"):
            b = dt.reduce_sum(a * 2.0)
    return g, b


@pytest.mark.parametrize("transport", ["auto", "tcp"])
async def test_peers_name_the_transport_of_each_connection(tmp_path, transport):
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0, DISTRIB_TRANSPORT=transport), \
            cli_task(cfg, "worker", 1, DISTRIB_TRANSPORT=transport):
        g, b = graph_across_tasks()
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            assert await sess.run(b) == 30.0
            rows = {r.name: r for r in await query_cluster(spec)}
            assert rows["/job:worker/task:0"].sessions == 1
    kind = "shm" if transport == "auto" else "tcp"
    for me, other in (("0", "1"), ("1", "0")):
        peers = rows[f"/job:worker/task:{me}"].peers
        # the session's client and the status client are not tasks: not listed
        assert peers and all(p == {"task": f"/job:worker/task:{other}", "transport": kind}
                             for p in peers), peers
    assert "1 " + kind in render_table(list(rows.values()))


@pytest.fixture
def secured(tmp_path):
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0, DISTRIB_CLUSTER_TOKEN=SECRET), \
            cli_task(cfg, "worker", 1, DISTRIB_CLUSTER_TOKEN=SECRET):
        yield cfg


def test_cluster_secret_is_read_from_the_environment(secured):
    ok = status_cli("--cluster", secured, "--json", DISTRIB_CLUSTER_TOKEN=SECRET)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert all(t["state"] == "up" for t in json.loads(ok.stdout)["tasks"])
    for token in (None, "wrong"):
        bad = status_cli("--cluster", secured, "--json", DISTRIB_CLUSTER_TOKEN=token,
                         DISTRIB_CLUSTER_TOKEN_FILE=None)
        assert bad.returncode == 1
        assert [(t["state"], t["reason"]) for t in json.loads(bad.stdout)["tasks"]] == \
            [("down", "unauthenticated")] * 2


@contextlib.asynccontextmanager
async def in_process(jobs: dict[str, int]):
    """Servers of the test's own loop (``dt.serve``): no process each."""
    ports = iter(free_ports(sum(jobs.values())))
    spec = {job: [f"localhost:{next(ports)}" for _ in range(n)] for job, n in jobs.items()}
    async with contextlib.AsyncExitStack() as stack:
        for job, n in jobs.items():
            for i in range(n):
                await stack.enter_async_context(dt.serve(spec, job_name=job, task_index=i))
        yield spec


async def test_global_step_and_steps_per_s_on_the_ps_that_holds_it():
    async with in_process({"ps": 1, "worker": 1}) as spec:
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                gs = get_or_create_global_step()
                w = dt.Variable(np.ones(3, np.float32), name="w")
            with dt.device("/job:worker/task:0"):
                loss = dt.reduce_sum(dt.square(w))
            train = dt.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
            init = dt.global_variables_initializer()
        async with StatusClient(dt.ClusterSpec(spec)) as client, \
                dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            await sess.run(init)
            for _ in range(3):
                await sess.run(train)
            first = {r.name: r for r in await client.query()}
            await asyncio.sleep(0.6)
            for _ in range(4):
                await sess.run(train)
            second = {r.name: r for r in await client.query()}
    ps, worker = first["/job:ps/task:0"], first["/job:worker/task:0"]
    assert ps.global_step == 3 and worker.global_step is None
    assert second["/job:ps/task:0"].global_step == 7
    assert second["/job:ps/task:0"].steps_per_s > 0   # 4 steps over >= 0.6 s


async def test_chief_is_the_task_the_lease_names():
    async with in_process({"ps": 1, "worker": 2}) as spec:
        cluster = dt.ClusterSpec(spec)
        async with StatusClient(cluster) as client:
            rows = await client.query()
            # ps job and two workers with no election running: no chief to show
            assert [r.role for r in rows] == [None, None, None]
            lease = client._system.ref(spec["ps"][0], "chief_lease")
            granted = await lease.call("campaign", "/job:worker/task:1", 7, 0, False, True)
            assert granted["granted"]
            rows = {r.name: r for r in await client.query()}
    chief = rows["/job:worker/task:1"]
    assert (chief.role, chief.term) == ("chief", granted["term"])
    assert rows["/job:worker/task:0"].role is None
    assert rows["/job:ps/task:0"].term == granted["term"]   # the arbiter saw it


async def test_checkpoint_dir_shows_the_newest_checkpoint(tmp_path):
    path = write_checkpoint(str(tmp_path / "model.ckpt"), {"w": np.ones(2)}, global_step=5)
    update_checkpoint_state(str(tmp_path), path)
    async with in_process({"worker": 1}) as spec:
        rows = await query_cluster(spec, checkpoint_dir=str(tmp_path))
    assert rows[0].role == "chief" and rows[0].last_checkpoint == path
    assert 0 <= rows[0].checkpoint_age_s < GUARD


def test_sixteen_tasks_answer_at_once():
    ports = free_ports(16)
    spec = {"ps": [f"localhost:{p}" for p in ports[:2]],
            "worker": [f"localhost:{p}" for p in ports[2:]]}
    servers = []
    try:
        for job, addrs in spec.items():
            servers.extend(dt.Server(spec, job_name=job, task_index=i) for i in range(len(addrs)))
        t0 = time.perf_counter()
        rows = asyncio.run(query_cluster(spec))
        took = time.perf_counter() - t0
    finally:
        for s in servers:
            s.stop()
    assert len(rows) == 16 and all(r.up for r in rows)
    print(f"status of 16 tasks (in-process servers, TCP): {took * 1000:.0f} ms")
    assert took < 5.0   # a hang guard only: timings are not asserted


def test_watch_refreshes_count_times(ps_worker, tmp_path):
    spec, _, _ = ps_worker
    up = write_cluster(tmp_path, {"ps": spec["ps"]}, "ps.json")
    res = status_cli("--cluster", up, "--watch", "0.2", "--count", "3", "--json")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["tasks"][0]["state"] == "up" for x in lines)
    table = status_cli("--cluster", up, "--watch", "0.2", "--count", "2")
    assert table.returncode == 0 and table.stdout.count("1 of 1 tasks up") == 2


def test_cluster_from_tf_config_else_usage_error(ps_worker):
    spec, _, _ = ps_worker
    tf_config = json.dumps({"cluster": {"ps": spec["ps"]}, "task": {"type": "ps", "index": 0}})
    res = status_cli("--json", TF_CONFIG=tf_config)
    assert res.returncode == 0 and by_task(res.stdout)["/job:ps/task:0"]["state"] == "up"
    res = subprocess.run([sys.executable, "-m", "distrib.status"], capture_output=True, text=True,
                         env=no_scheduler_env(), cwd=ROOT, timeout=GUARD)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr
    for word in ("error: no cluster given", "--cluster", "TF_CONFIG", "SLURM", "DISTRIB_K8S_JOBS"):
        assert word in res.stderr, res.stderr
    res = status_cli("--cluster", "/nonexistent/cluster.json")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_cluster_from_a_slurm_environment(tmp_path):
    """srun's variables give the cluster, as they give the tasks theirs: the
    ps that runs is up, the worker that does not is down (exit 1)."""
    base = free_port_base(2)

    def env(rank: int) -> dict[str, str]:
        return no_scheduler_env(**slurm_env("localhost", "2", rank),
                                DISTRIB_SLURM_JOBS="ps:1,worker:1",
                                DISTRIB_SLURM_PORT_BASE=str(base))
    with Proc(["-m", "distrib.server", "--log_level", "WARNING"], env=env(0),
              ready_prefix="serving"):
        res = subprocess.run([sys.executable, "-m", "distrib.status", "--json"],
                             capture_output=True, text=True, env=env(1), cwd=ROOT, timeout=GUARD)
    assert res.returncode == 1, res.stderr
    tasks = by_task(res.stdout)
    assert list(tasks) == ["/job:ps/task:0", "/job:worker/task:0"]
    ps, worker = tasks.values()
    assert (ps["address"], ps["state"]) == (f"localhost:{base}", "up")
    assert (worker["address"], worker["state"], worker["reason"]) == \
        (f"localhost:{base + 1}", "down", "refused")


def test_human_units():
    assert [human_seconds(s) for s in (None, 5, 125, 7260, 180000)] == \
        ["-", "5s", "2m05s", "2h01m", "2d02h"]
    assert [human_bytes(n) for n in (None, 812, 3 << 20, 5 << 30)] == \
        ["-", "812 B", "3.0 MiB", "5.0 GiB"]
