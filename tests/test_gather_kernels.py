"""The embeddings' GPU kernels under the CUDA simulator, in a fresh
interpreter (numba reads ``NUMBA_ENABLE_CUDASIM`` once, at import):
``tests/test_gather_cudasim.py`` against the CPU kernels."""
from __future__ import annotations

from tests import background


def test_gather_gpu_kernels_match_cpu_under_the_simulator():
    spec = background.simulator_suite("tests/test_gather_cudasim.py", 120)
    background.assert_suite_passed(background.run("gather_cudasim", spec))
