"""Many hosts on one machine: each "host" a network namespace on a bridge
(``tests/netns.py``), its tasks real processes started inside it.

The seed's cluster example and the trainer run across hosts; tasks on
different hosts talk TCP and two tasks of one host shared memory (seen in
``python -m distrib.status --json``); a link taken down mid-training fails
the steps that need it with a typed error within the heartbeat bound, and
training resumes when it comes back; a host lost with its tasks is handled
as a kill -9. Inside our own namespaces any port is free: tasks listen on
2222 and 2223. Needs root (skipped, with the reason, where ``ip netns add``
is refused).
"""
from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.helpers import ROOT, child_env
from tests.netns import Network, netns, netns_task  # noqa: F401  (netns: the fixture)
from tests.peers.cli_cluster import write_cluster

HEARTBEAT_S = 0.2
MISSED = 3
BOUND_S = 10 * MISSED * HEARTBEAT_S   # a bound, not a speed (detection: 0.6-0.65 s here)
GUARD_S = 60                         # hang guard for whole processes


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


def run_in(net: Network, host: int, argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return net.run(host, argv, capture_output=True, text=True, timeout=GUARD_S, cwd=ROOT,
                   env=child_env(**env))


# ---- the seed's cluster example ---------------------------------------------------

CLUSTER_CLIENT = r"""
import json, sys
import distrib as dt

cluster = dt.ClusterSpec.from_json(sys.argv[1])
# hello world: a session from this host to a server on another
c = dt.constant("Hello, distributed world!")
hello = dt.SyncSession("distrib://" + cluster.task_address("worker", 0)).run(c)

# the README's cluster example: this process is the "host" task
server = dt.Server(cluster, job_name="host", task_index=0)
with dt.device("/job:worker/task:0"):
    a = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
    b = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
    c = dt.matmul(a, b)
with dt.device("/job:worker/task:1"):
    d = dt.matmul(a, b) + dt.log(100 + c)
with dt.SyncSession(server.target) as sess:
    out = sess.run(d)
server.stop()
print(json.dumps({"hello": hello, "d": out.tolist()}))
"""


def test_cluster_example_across_three_hosts(netns, tmp_path):
    net = netns(3)
    spec = {"worker": [f"{net.address(1)}:2222", f"{net.address(2)}:2222"],
            "host": [f"{net.address(0)}:2222"]}
    cfg = write_cluster(tmp_path, spec)
    with netns_task(net, 1, cfg, "worker", 0), netns_task(net, 2, cfg, "worker", 1):
        res = run_in(net, 0, py("-c", CLUSTER_CLIENT, cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["hello"] == "Hello, distributed world!"
    a = np.arange(1.0, 7.0).reshape(2, 3)
    b = np.arange(1.0, 7.0).reshape(3, 2)
    np.testing.assert_allclose(out["d"], a @ b + np.log(100 + a @ b), rtol=1e-6)


# ---- examples/trainer.py: 1 ps + 2 workers on three hosts -------------------------

def test_trainer_one_ps_two_workers_on_three_hosts(netns, tmp_path):
    net = netns(3)
    flags = [f"--ps_hosts={net.address(0)}:2222",
             f"--worker_hosts={net.address(1)}:2222,{net.address(2)}:2222",
             "--train_steps=200", "--log_every=100", f"--logdir={tmp_path / 'logs'}"]
    trainer = os.path.join(ROOT, "examples", "trainer.py")
    roles = [("ps", 0), ("worker", 0), ("worker", 1)]
    procs = [net.popen(host, py(trainer, f"--job_name={job}", f"--task_index={i}", *flags),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                       env=child_env(OPENBLAS_NUM_THREADS="1"))
             for host, (job, i) in enumerate(roles)]
    outs = [p.communicate(timeout=GUARD_S * 2)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    for out in outs[1:]:
        m = re.search(r"^done global_step=(\d+) accuracy=([0-9.]+)$", out, re.M)
        assert m, out[-2000:]
        assert int(m.group(1)) >= 200, out[-2000:]


# ---- transports: shared memory within a host, TCP between hosts --------------------

HOST_ID = "from transports import local_host_id; print(local_host_id())"


def test_the_host_id_is_one_per_network_namespace(netns):
    """Shared memory needs the peer's abstract Unix socket, which exists per
    network namespace: two namespaces are two hosts (no failed side-channel
    connect, then TCP), one namespace is one host."""
    net = netns(2)
    ids = [run_in(net, h, py("-c", HOST_ID)).stdout.strip() for h in (0, 0, 1)]
    here = subprocess.run(py("-c", HOST_ID), capture_output=True, text=True, cwd=ROOT,
                          env=child_env(), timeout=GUARD_S).stdout.strip()
    assert ids[0] and ids[0] == ids[1]
    assert len({ids[0], ids[2], here}) == 3, (ids, here)


STEP_CLIENT = r"""
import sys
import numpy as np
import distrib as dt

g = dt.Graph()
with g.as_default():
    with dt.device("/job:worker/task:0"):
        x = dt.constant(np.arange(6.0))
    with dt.device("/job:worker/task:1"):
        y = x * 2.0
    with dt.device("/job:worker/task:2"):
        z = dt.reduce_sum(y + x)
    with dt.device("/job:worker/task:0"):
        out = z + 1.0
with dt.SyncSession("distrib://" + sys.argv[1], graph=g) as sess:
    print(sess.run(out))
"""


def test_two_tasks_of_a_host_use_shm_and_tasks_of_two_hosts_tcp(netns, tmp_path):
    net = netns(2)
    a, b = net.address(0), net.address(1)
    spec = {"worker": [f"{a}:2222", f"{a}:2223", f"{b}:2222"]}
    cfg = write_cluster(tmp_path, spec)
    with netns_task(net, 0, cfg, "worker", 0), netns_task(net, 0, cfg, "worker", 1), \
            netns_task(net, 1, cfg, "worker", 2):
        step = run_in(net, 0, py("-c", STEP_CLIENT, spec["worker"][0]))
        assert step.returncode == 0, step.stderr[-3000:]
        assert float(step.stdout.split()[-1]) == 3 * 15.0 + 1.0
        status = run_in(net, 1, py("-m", "distrib.status", "--cluster", cfg, "--json"))
    assert status.returncode == 0, status.stdout + status.stderr
    peers = {f"/job:{t['job']}/task:{t['task']}": {(p["task"], p["transport"]) for p in t["peers"]}
             for t in json.loads(status.stdout)["tasks"]}
    w0, w1, w2 = (f"/job:worker/task:{i}" for i in range(3))
    assert peers == {w0: {(w1, "shm"), (w2, "tcp")},
                     w1: {(w0, "shm"), (w2, "tcp")},
                     w2: {(w0, "tcp"), (w1, "tcp")}}, peers


# ---- a link down mid-training, a host lost ------------------------------------------

TRAIN_LOOP = r"""
import asyncio, sys
import numpy as np
import distrib as dt
from distrib.errors import OpError

cluster = dt.ClusterSpec({"ps": [sys.argv[1]], "worker": [sys.argv[2]]})
server = dt.Server(cluster, job_name="worker", task_index=0)
g = dt.Graph()
with g.as_default(), dt.device(dt.train.replica_device_setter(
        worker_device="/job:worker/task:0", cluster=cluster)):
    x = dt.placeholder(dt.float32, shape=[None, 4], name="x")
    y = dt.placeholder(dt.float32, shape=[None], name="y")
    w = dt.Variable(dt.zeros([4]), name="w")
    loss = dt.reduce_mean(dt.square(dt.reduce_sum(x * w, axis=1) - y))
    gs = dt.train.get_or_create_global_step()
    train = dt.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    init = dt.global_variables_initializer()
rng = np.random.default_rng(0)
true_w = np.array([1.0, -2.0, 3.0, 0.5], np.float32)


async def main():
    async with dt.Session(server.target, graph=g) as sess:
        await sess.run(init)
        while True:
            xs = rng.normal(size=(32, 4)).astype(np.float32)
            try:
                _, step, l = await sess.run([train, gs, loss], {x: xs, y: xs @ true_w})
                print("step", int(step), float(l), flush=True)
                await asyncio.sleep(0.02)
            except OpError as e:
                print("error", type(e).__name__, str(e).replace("\n", " "), flush=True)
                await asyncio.sleep(0.1)

asyncio.run(main())
"""


class Lines:
    """A child's stdout lines, each with the monotonic time it was read."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.q: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.q.put((time.monotonic(), line.rstrip("\n")))
        self.q.put((time.monotonic(), None))

    def until(self, pred, timeout: float = GUARD_S) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                t, line = self.q.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such line in {timeout} s; last: {self.seen[-20:]}")
            if line is None:
                raise AssertionError(f"the process ended; last lines: {self.seen[-20:]}")
            self.seen.append(line)
            if pred(line):
                return t, line


def step_of(line: str) -> int | None:
    return int(line.split()[1]) if line.startswith("step ") else None


def start_training(net: Network, tmp_path) -> tuple[subprocess.Popen, Lines]:
    """ps on host 1, a worker training on it from host 0; returns once it trains."""
    ps, worker = f"{net.address(1)}:2222", f"{net.address(0)}:2222"
    cfg = write_cluster(tmp_path, {"ps": [ps], "worker": [worker]})
    netns_task(net, 1, cfg, "ps", 0, DISTRIB_HEARTBEAT_S=str(HEARTBEAT_S))
    with open(tmp_path / "worker.err", "w") as err:
        proc = net.popen(0, py("-c", TRAIN_LOOP, ps, worker), stdout=subprocess.PIPE,
                         stderr=err, text=True, cwd=ROOT,
                         env=child_env(DISTRIB_HEARTBEAT_S=str(HEARTBEAT_S)))
    lines = Lines(proc)
    lines.until(lambda s: (step_of(s) or 0) >= 5)
    return proc, lines


@pytest.mark.slow
def test_link_down_fails_steps_typed_within_the_heartbeat_bound_and_training_resumes(
        netns, tmp_path):
    net = netns(2)
    proc, lines = start_training(net, tmp_path)
    net.link_down(1)
    down = time.monotonic()
    t, line = lines.until(lambda s: s.startswith("error "))
    before = max(s for s in map(step_of, lines.seen) if s is not None)
    assert line.split()[1] in ("UnavailableError", "DeadlineExceededError"), line
    assert "/job:ps/task:0" in line, line
    assert t - down < BOUND_S, (t - down, line)
    time.sleep(2 * MISSED * HEARTBEAT_S)   # down a while longer: the retried step waits for it
    net.link_up(1)
    _, line = lines.until(lambda s: step_of(s) is not None)
    # the ps kept its variables: the global step goes on from where it was
    assert step_of(line) > before, (line, before)
    _, line = lines.until(lambda s: (step_of(s) or 0) >= step_of(line) + 5)
    errors = [s for s in lines.seen if s.startswith("error ")]
    assert all(s.split()[1] in ("UnavailableError", "DeadlineExceededError") for s in errors), errors
    assert proc.poll() is None


@pytest.mark.slow
def test_a_lost_host_is_handled_as_kill_9(netns, tmp_path):
    net = netns(2)
    proc, lines = start_training(net, tmp_path)
    lost = time.monotonic()
    net.lose_host(1)   # its link cut (no FIN reaches us), its ps SIGKILLed, namespace gone
    t, line = lines.until(lambda s: s.startswith("error "))
    assert line.split()[1] == "UnavailableError" and "/job:ps/task:0" in line, line
    assert t - lost < BOUND_S, (t - lost, line)
    # and it stays an error (a typed one, naming the task), not a hang
    _, line = lines.until(lambda s: s.startswith("error "), timeout=30)
    assert line.split()[1] == "UnavailableError" and "/job:ps/task:0" in line, line
    assert proc.poll() is None
