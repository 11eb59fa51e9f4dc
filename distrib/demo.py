"""``make demo``: a small cluster on loopback, end to end.

1. Training, the main job: 1 ps and 2 workers of ``examples/trainer.py`` as
   separate processes (async between-graph replication of an MLP on the 8x8
   digits), their progress, the final accuracy and the wall time.
2. The seed's config.json example: two worker servers started through the
   CLI (``python -m distrib.server --cluster config.json ...``), this process
   as the "host" task running matmuls pinned to each worker.
3. Tensors of growing size moving from worker 0 to worker 1, over shared
   memory (the default between co-located tasks) and over forced TCP.

Every process it starts is stopped at the end, also on Ctrl-C or SIGTERM,
and when one of them fails (the demo then shows the end of its output). Each child
uses one BLAS thread: several numpy processes on one small host otherwise
spin-wait against each other.
"""
from __future__ import annotations

import json
import os
import select
import signal
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


def start_worker(cfg: str, index: int, env: dict[str, str],
                 procs: list[subprocess.Popen]) -> None:
    p = subprocess.Popen([sys.executable, "-m", "distrib.server", "--cluster", cfg,
                          "--job_name", "worker", "--task_index", str(index),
                          "--log_level", "WARNING"],
                         stdout=subprocess.PIPE, text=True, env=env)
    procs.append(p)   # stopped with the others, whatever happens next
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # a bounded wait for each line: a child that hangs before its first
        # line must not hold the demo past the deadline
        if not select.select([p.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        line = p.stdout.readline()
        if line.startswith("serving"):
            print(f"  {line.strip()}  (pid {p.pid})")
            return
        if not line:
            break
    raise SystemExit(f"worker {index} of {cfg} did not start within 30 s "
                     f"(exit code {p.poll()})")


def stop(procs: list[subprocess.Popen]) -> None:
    """Stop the children, newest first: a trainer's chief then still reaches
    its ps for the final checkpoint it writes on SIGTERM."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


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
                  steps: int, limit_s: float = 600) -> None:
    """Run the trainer cluster; the chief's progress is shown as it comes.
    Each task's output goes to a log file beside ``logdir``: when a task
    fails, the demo shows the end of that log and stops the others at once."""
    ps, w0, w1 = free_ports(3)
    flags = [f"--ps_hosts=localhost:{ps}", f"--worker_hosts=localhost:{w0},localhost:{w1}",
             f"--train_steps={steps}", "--log_every=250"]
    t0 = time.perf_counter()
    tasks: list[tuple[str, subprocess.Popen, str]] = []
    for job, i in [("ps", 0), ("worker", 1), ("worker", 0)]:
        extra = [f"--logdir={logdir}"] if (job, i) == ("worker", 0) else []
        log_path = f"{logdir}.{job}{i}.log"
        with open(log_path, "w") as out:   # the child keeps its own descriptor
            procs.append(subprocess.Popen(
                [sys.executable, TRAINER, f"--job_name={job}", f"--task_index={i}", *flags, *extra],
                stdout=out, stderr=subprocess.STDOUT, text=True, env=env))
        tasks.append((f"/job:{job}/task:{i}", procs[-1], log_path))
        print(f"  started /job:{job}/task:{i} (pid {procs[-1].pid})")
    chief_log = open(tasks[-1][2])
    result = None
    partial = ""

    def show_chief() -> None:
        nonlocal partial, result
        *lines, partial = (partial + chief_log.read()).split("\n")   # whole lines only
        for line in lines:
            if "examples/s" in line or line.startswith("done"):
                print("  chief:", line.split(": ", 1)[-1] if "trainer:" in line else line)
            if line.startswith("done"):
                result = line

    try:
        while any(p.poll() is None for _, p, _ in tasks):
            show_chief()
            failed = [(name, p, path) for name, p, path in tasks if p.poll() not in (None, 0)]
            if failed:
                for name, p, path in failed:
                    print(f"  {name} failed (exit code {p.returncode}); the end of its output:")
                    with open(path) as f:
                        for line in f.readlines()[-15:]:
                            print("    | " + line.rstrip())
                raise SystemExit("training failed: stopping the cluster")
            if time.perf_counter() - t0 > limit_s:
                raise SystemExit(f"training did not end within {limit_s:g} s: stopping the cluster")
            time.sleep(0.1)
        partial += "\n"   # the chief has exited: its last line is whole
        show_chief()
    finally:
        chief_log.close()
    if result is None:
        raise SystemExit(f"the chief ended without its 'done' line: see {tasks[-1][2]}")
    codes = [p.returncode for _, p, _ in tasks]
    print(f"  {result}; wall time {time.perf_counter() - t0:.1f}s; "
          f"ps exit {codes[0]}, workers exit {codes[1]}, {codes[2]}")


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
        for i in (0, 1):
            start_worker(cfg, i, env, procs)
        seed_example(dt, spec)
        print("3) tensors crossing tasks, shared memory (auto) then TCP (forced)")
        transfer_table(dt, spec, "shm")
        cfg_tcp, spec_tcp = cluster_files(tmp, "config_tcp")
        tcp_env = dict(env, DISTRIB_TRANSPORT="tcp")
        for i in (0, 1):
            start_worker(cfg_tcp, i, tcp_env, procs)
        transfer_table(dt, spec_tcp, "tcp")
    print(f"done in {time.perf_counter() - t_start:.1f}s; all worker processes stopped")
    return 0


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM stops the demo as Ctrl-C does: the exit stack stops every child
    raise KeyboardInterrupt


if __name__ == "__main__":
    # Ctrl-C stops the demo even when it was started with SIGINT ignored (a
    # background job of a script): Python would keep the ignore
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: every process the demo started is stopped", file=sys.stderr)
        sys.exit(130)
