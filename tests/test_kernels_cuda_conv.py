"""The convolutional GPU kernels' simulator suite
(``tests/test_kernels_cuda_conv_sim.py``), run in its own interpreter with
``NUMBA_ENABLE_CUDASIM=1`` (numba reads it once, at import), as
``tests/test_kernels_cuda.py`` runs the other GPU kernels' suite."""
from __future__ import annotations

import os
import sys

import pytest

from tests import background


def _simulator_suite() -> background.Spec:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    return background.Spec([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                            "tests/test_kernels_cuda_conv_sim.py"], env, 170)


BACKGROUND = {"kernels_cuda_conv_sim": _simulator_suite}


@pytest.mark.background("kernels_cuda_conv_sim")
def test_convolutional_gpu_kernels_match_cpu_under_the_simulator():
    out = background.run("kernels_cuda_conv_sim", _simulator_suite())
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert " passed" in last and "skipped" not in last and "failed" not in last, last
