"""The convolutional GPU kernels' simulator suite
(``tests/test_kernels_cuda_conv_sim.py``), run in its own interpreter with
``NUMBA_ENABLE_CUDASIM=1`` (numba reads it once, at import), as
``tests/test_kernels_cuda.py`` runs the other GPU kernels' suite."""
from __future__ import annotations

import pytest

from tests import background


def _simulator_suite() -> background.Spec:
    return background.simulator_suite("tests/test_kernels_cuda_conv_sim.py", 170)


BACKGROUND = {"kernels_cuda_conv_sim": _simulator_suite}


@pytest.mark.background("kernels_cuda_conv_sim")
def test_convolutional_gpu_kernels_match_cpu_under_the_simulator():
    background.assert_suite_passed(background.run("kernels_cuda_conv_sim", _simulator_suite()))
