"""``make demo``: a small cluster on loopback, end to end.

1. Training, the main job: 1 ps and 2 workers of ``examples/trainer.py``
   started by ``python -m distrib.launch`` (async between-graph replication
   of an MLP on the 8x8 digits), their progress, a worker killed with
   SIGKILL partway and restarted by the launcher, the final accuracy and the
   wall time; the chief's loss and accuracy summaries are kept in
   ``$TMPDIR/distrib-demo-summaries`` and the ``tensorboard --logdir`` line printed.
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

import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack

from distrib.launch.tasks import free_ports  # noqa: F401  (tests take it from here too)


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
                  steps: int, kill_at: int = 600, limit_s: float = 600) -> None:
    """Run the trainer cluster through ``python -m distrib.launch`` (1 ps, 2
    workers), show worker 0's progress, and kill -9 worker 1 partway: the
    launcher restarts it and the run still finishes. When the launch fails,
    the demo shows the end of its output."""
    out_path = f"{logdir}.launch.log"
    with open(out_path, "w") as out:   # the child keeps its own descriptor
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distrib.launch", "--ps", "1", "--workers", "2", "--",
             sys.executable, TRAINER, f"--train_steps={steps}", "--log_every=250",
             f"--logdir={logdir}", "--save_model_secs=1"],
            stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT))
    launcher = procs[-1]
    print(f"  started python -m distrib.launch --ps 1 --workers 2 (pid {launcher.pid})")
    t0 = time.perf_counter()
    log = open(out_path)
    pids: dict[str, int] = {}
    results: list[str] = []
    killed = False
    partial = ""
    try:
        while True:
            *lines, partial = (partial + log.read()).split("\n")   # whole lines only
            for line in lines:
                killed = _show(line, pids, results, killed, kill_at) or killed
            if launcher.poll() is not None and not log.read(1):
                break
            if time.perf_counter() - t0 > limit_s:
                raise SystemExit(f"training did not end within {limit_s:g} s: stopping it")
            time.sleep(0.1)
    finally:
        log.close()
    if launcher.returncode != 0 or len(results) != 2:
        print(f"  the launch failed (exit code {launcher.returncode}); the end of its output:")
        with open(out_path) as f:
            for line in f.readlines()[-20:]:
                print("    | " + line.rstrip())
        raise SystemExit("training failed")
    print(f"  {results[-1]}; wall time {time.perf_counter() - t0:.1f}s; launcher exit 0")


def _show(line: str, pids: dict[str, int], results: list[str], killed: bool,
          kill_at: int) -> bool:
    """Print what the demo shows of one launcher line; kill worker 1 once the
    global step passes ``kill_at``. Returns whether it killed it now."""
    if line.startswith("[launch]"):
        words = line.split()
        if "started" in words and "(pid" in words:
            pids[words[1]] = int(words[-1].rstrip(")"))
        if killed and ("restart" in line or "worker:1" in line):
            print("  " + line)
        return False
    if "became chief" in line or "no longer chief" in line:
        print("  " + line.split(": ", 1)[-1] if ": " in line else line)
    if "] done global_step=" in line:
        results.append(line.split("] ", 1)[1])
        print("  " + line)
        return False
    if line.startswith("[worker:0]") and "examples/s" in line:
        print("  chief: " + line.split("trainer: ", 1)[-1])
        step = int(line.split("global step ", 1)[1].split(",", 1)[0])
        if not killed and step >= kill_at and "worker:1" in pids:
            os.kill(pids["worker:1"], signal.SIGKILL)
            print(f"  kill -9 /job:worker/task:1 (pid {pids['worker:1']}): "
                  "the launcher restarts it, training goes on")
            return True
    return False


def keep_summaries(logdir: str) -> None:
    """Copy the chief's event files out of the demo's temporary folder and say
    how to look at them (the loss and accuracy the trainer wrote)."""
    keep = os.path.join(tempfile.gettempdir(), "distrib-demo-summaries")
    shutil.rmtree(keep, ignore_errors=True)
    os.makedirs(keep)
    found = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    for path in found:
        shutil.copy(path, keep)
    if found:
        print(f"  the chief's loss and accuracy summaries: tensorboard --logdir {keep}")


def main() -> int:
    import distrib as dt
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs: list[subprocess.Popen] = []
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        stack.callback(stop, procs)
        print("1) training: 1 ps + 2 workers of examples/trainer.py through the launcher, "
              "async between-graph, one worker killed partway")
        train_cluster(env, procs, os.path.join(tmp, "logs"), steps=2000)
        keep_summaries(os.path.join(tmp, "logs"))
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
