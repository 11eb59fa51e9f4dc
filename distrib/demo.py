"""``make demo``: a small cluster on loopback, end to end.

1. Two worker servers start as separate processes through the CLI
   (``python -m distrib.server --cluster config.json ...``), the seed's
   config.json example; this process is the "host" task.
2. The host runs the seed's graph: matmuls pinned to worker 0 and worker 1,
   the result fetched to the host.
3. Tensors of growing size move from worker 0 to worker 1 (over shared
   memory, the default between co-located tasks) and, with a second pair of
   workers started with ``DISTRIB_TRANSPORT=tcp``, over TCP; the demo prints
   sizes, the transport and the throughput of each step.

Every process it starts is stopped at the end, also on Ctrl-C.
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


def seed_example(dt, spec: dict) -> None:
    server = dt.Server(dt.ClusterSpec(spec), job_name="host", task_index=0)
    try:
        with dt.Graph().as_default():
            with dt.device("/job:worker/task:0"):
                a = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[2, 3], name="a")
                b = dt.constant([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], shape=[3, 2], name="b")
                c = dt.matmul(a, b)
            with dt.device("/job:worker/task:1"):
                d = dt.matmul(a, b) + dt.log(100 + c)
            with dt.SyncSession(server.target) as sess:
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


def main() -> int:
    import distrib as dt
    env = dict(os.environ)
    procs: list[subprocess.Popen] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        stack.callback(stop, procs)
        print("1) starting the seed's cluster: two workers as processes, this process as host")
        cfg, spec = cluster_files(tmp, "config")
        procs += [start_worker(cfg, i, env) for i in (0, 1)]
        print("2) the seed's config.json graph: matmul on worker 0, matmul + log on worker 1")
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
