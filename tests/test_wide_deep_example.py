"""examples/wide_deep.py as a user runs it: through ``python -m distrib.launch``
with 2 ps and 2 workers (real processes, free ports), a sparse wide & deep model
trained asynchronously; every task exits 0 and both workers report the same
held-out accuracy within the band the model reaches (chance: about 0.5)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, child_env

EXAMPLE = os.path.join(ROOT, "examples", "wide_deep.py")


@pytest.mark.slow
def test_wide_deep_trains_sparse_tables_on_ps_tasks_through_the_launcher():
    out = subprocess.run([sys.executable, "-m", "distrib.launch", "--ps", "2", "--workers", "2",
                          "--max_restarts", "0", "--", sys.executable, EXAMPLE],
                         capture_output=True, text=True, timeout=240, cwd=ROOT,
                         env=child_env(OPENBLAS_NUM_THREADS="1"))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    done = re.findall(r"^\[worker:(\d)\] done global_step=(\d+) accuracy=([0-9.]+)$", text, re.M)
    assert sorted(w for w, _, _ in done) == ["0", "1"], text[-4000:]
    steps = {int(s) for _, s, _ in done}
    assert min(steps) >= 1200, done
    assert all(0.80 <= float(a) <= 1.0 for _, _, a in done), done
    worker_steps = [int(s) for s in re.findall(r"worker steps=(\d+)", text)]
    assert len(worker_steps) == 2 and all(s > 0 for s in worker_steps)   # both trained
