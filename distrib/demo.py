"""``make demo``: a small cluster on loopback, end to end.

1. Training, the main job: 1 ps and 2 workers of ``examples/trainer.py`` as
   separate processes (async between-graph replication of an MLP on the 8x8
   digits), their progress, the final accuracy and the wall time.
2. The seed's config.json example: two worker servers started through the
   CLI (``python -m distrib.server --cluster config.json ...``), this process
   as the "host" task running matmuls pinned to each worker.
3. Tensors of growing size moving from worker 0 to worker 1, over shared
   memory (the default between co-located tasks) and over forced TCP.

Every process it starts is stopped at the end, also on Ctrl-C. Each child
uses one BLAS thread: several numpy processes on one small host otherwise
spin-wait against each other.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack



def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_worker(cfg: str, index: int, env: dict[str, str]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "distrib.server", "--cluster", cfg,
                          "--job_name", "worker", "--task_index", str(index),
                          "--log_level", "WARNING"],
                         stdout=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if line.startswith("serving"):
            print(f"  {line.strip()}  (pid {p.pid})")
            return p
        if not line and p.poll() is not None:
            break
    p.kill()
    raise SystemExit(f"worker {index} did not start")


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def cluster_files(tmp: str, name: str) -> tuple[str, dict]:
    a, b, c = free_ports(3)
    spec = {"worker": [f"localhost:{a}", f"localhost:{b}"], "host": [f"localhost:{c}"]}
    path = os.path.join(tmp, f"{name}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path, spec


def seed_graph():
    """The seeds' config.json example: (graph, d), with ``c`` on worker 0 and
    ``d`` on worker 1 (the tests run the same graph)."""
    import distrib as dt
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:0"):
            a = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
            b = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
            c = dt.matmul(a, b)
        with dt.device("/job:worker/task:1"):
            d = dt.matmul(a, b) + dt.log(100 + c)
    return g, d


def seed_example(dt, spec: dict) -> None:
    server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
    try:
        g, d = seed_graph()
        with dt.SyncSession(server.target, graph=g) as sess:
            print("  d =", sess.run(d).tolist())
    finally:
        server.stop()


def transfer_table(dt, spec: dict, transport: str) -> None:
    server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
    try:
        for mib in (1, 16, 64):
            n = mib * (1 << 20) // 4
            with dt.Graph().as_default():
                with dt.device("/job:worker/task:0"):
                    x = dt.ones([n], dtype=dt.float32)
                with dt.device("/job:worker/task:1"):
                    s = dt.reduce_sum(x)
                with dt.SyncSession(server.target) as sess:
                    sess.run(s)  # warm-up: plans, registrations, pooled segments
                    times = []
                    for _ in range(5):
                        t0 = time.perf_counter()
                        total = sess.run(s)
                        times.append(time.perf_counter() - t0)
            med = sorted(times)[len(times) // 2]
            assert total == n, total
            print(f"  {transport:>4}  {mib:>3} MiB worker0 -> worker1   step {med * 1e3:7.2f} ms"
                  f"   {mib / 1024 / med:6.2f} GB/s (incl. the ones+sum kernels)")
    finally:
        server.stop()


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAINER = os.path.join(ROOT, "examples", "trainer.py")


def train_cluster(env: dict[str, str], procs: list[subprocess.Popen], logdir: str,
                  steps: int) -> None:
    ps, w0, w1 = free_ports(3)
    flags = [f"--ps_hosts=localhost:{ps}", f"--worker_hosts=localhost:{w0},localhost:{w1}",
             f"--train_steps={steps}", "--log_every=250"]
    t0 = time.perf_counter()
    roles = [("ps", 0), ("worker", 1), ("worker", 0)]
    for job, i in roles:
        extra = [f"--logdir={logdir}"] if (job, i) == ("worker", 0) else []
        procs.append(subprocess.Popen(
            [sys.executable, TRAINER, f"--job_name={job}", f"--task_index={i}", *flags, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        print(f"  started /job:{job}/task:{i} (pid {procs[-1].pid})")
    chief = procs[-1]
    results = []
    for line in chief.stdout:
        line = line.rstrip()
        if "examples/s" in line or line.startswith("done"):
            print("  chief:", line.split(": ", 1)[-1] if "trainer:" in line else line)
        if line.startswith("done"):
            results.append(line)
    for p in procs[-3:]:
        p.wait(60)
    if not results:
        raise SystemExit("training did not finish: see the trainer's output above")
    print(f"  {results[-1]}; wall time {time.perf_counter() - t0:.1f}s; "
          f"ps exit {procs[-3].returncode}, workers exit {procs[-2].returncode}, "
          f"{procs[-1].returncode}")


def main() -> int:
    import distrib as dt
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs: list[subprocess.Popen] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        stack.callback(stop, procs)
        print("1) training: 1 ps + 2 workers of examples/trainer.py, async between-graph")
        train_cluster(env, procs, os.path.join(tmp, "logs"), steps=2000)
        print("2) the seed's config.json example: two workers via the CLI, this process as host")
        cfg, spec = cluster_files(tmp, "config")
        procs += [start_worker(cfg, i, env) for i in (0, 1)]
        seed_example(dt, spec)
        print("3) tensors crossing tasks, shared memory (auto) then TCP (forced)")
        transfer_table(dt, spec, "shm")
        cfg_tcp, spec_tcp = cluster_files(tmp, "config_tcp")
        tcp_env = dict(env, DISTRIB_TRANSPORT="tcp")
        procs += [start_worker(cfg_tcp, i, tcp_env) for i in (0, 1)]
        transfer_table(dt, spec_tcp, "tcp")
    print(f"done in {time.perf_counter() - t_start:.1f}s; all worker processes stopped")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
