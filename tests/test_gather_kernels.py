"""The embeddings' GPU kernels under the CUDA simulator, in a fresh
interpreter (numba reads ``NUMBA_ENABLE_CUDASIM`` once, at import):
``tests/test_gather_cudasim.py`` against the CPU kernels."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gather_gpu_kernels_match_cpu_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          "tests/test_gather_cudasim.py"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout.splitlines()[-1]
