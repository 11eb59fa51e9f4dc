"""examples/trainer.py as a user runs it: 1 ps + 2 workers as processes,
async between-graph training on the digits, every process exits 0, and the
chief reports an accuracy on held-out data; a restarted chief resumes from
its checkpoint."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from distrib.demo import free_ports
from tests.helpers import ROOT, child_env

TRAINER = os.path.join(ROOT, "examples", "trainer.py")


def run_cluster(tmp_path, steps: int, workers: int = 2) -> list[subprocess.CompletedProcess]:
    ports = free_ports(1 + workers)
    flags = [f"--ps_hosts=localhost:{ports[0]}",
             "--worker_hosts=" + ",".join(f"localhost:{p}" for p in ports[1:]),
             f"--train_steps={steps}", f"--logdir={tmp_path / 'logs'}"]
    env = child_env(OPENBLAS_NUM_THREADS="1")
    roles = [("ps", 0)] + [("worker", i) for i in range(workers)]
    procs = [subprocess.Popen([sys.executable, TRAINER, f"--job_name={j}", f"--task_index={i}",
                               *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for j, i in roles]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode, o) for p, o in zip(procs, outs)]


def done_line(out: str) -> tuple[int, float]:
    m = re.search(r"^done global_step=(\d+) accuracy=([0-9.]+)$", out, re.M)
    assert m, out[-2000:]
    return int(m.group(1)), float(m.group(2))


@pytest.mark.slow
def test_async_between_graph_training_reaches_target_accuracy(tmp_path):
    results = run_cluster(tmp_path, steps=600)
    for r in results:
        assert r.returncode == 0, r.stdout[-3000:]
    step, acc = done_line(results[1].stdout)
    assert step >= 600
    assert acc >= 0.9
    done_line(results[2].stdout)  # the other worker reports too
    # the chief's final checkpoint is on disk, and a new cluster resumes from it
    from distrib.train import latest_checkpoint
    ckpt = latest_checkpoint(str(tmp_path / "logs"))
    assert ckpt is not None and int(ckpt.rsplit("-", 1)[1]) >= 600
    again = run_cluster(tmp_path, steps=700, workers=1)
    for r in again:
        assert r.returncode == 0, r.stdout[-3000:]
    assert "restored" in again[1].stdout.lower(), again[1].stdout[-2000:]
    step2, acc2 = done_line(again[1].stdout)
    assert step2 >= 700 and acc2 >= 0.9


def test_in_graph_replication_example_trains_one_tower_per_worker():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "in_graph.py"),
                          "--train_steps=200"], capture_output=True, text=True, timeout=120,
                         env=child_env(OPENBLAS_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    step, acc = done_line(out.stdout)
    assert step == 200 and acc >= 0.85
