"""The depthwise convolution's GPU kernels' simulator suite
(``tests/test_kernels_cuda_depthwise_sim.py``), run in its own interpreter
with ``NUMBA_ENABLE_CUDASIM=1`` (numba reads it once, at import), as
``tests/test_kernels_cuda_conv.py`` runs the other convolutional kernels'."""
from __future__ import annotations

import pytest

from tests import background


def _simulator_suite() -> background.Spec:
    return background.simulator_suite("tests/test_kernels_cuda_depthwise_sim.py", 120)


BACKGROUND = {"kernels_cuda_depthwise_sim": _simulator_suite}


@pytest.mark.background("kernels_cuda_depthwise_sim")
def test_depthwise_gpu_kernels_match_cpu_under_the_simulator():
    background.assert_suite_passed(background.run("kernels_cuda_depthwise_sim", _simulator_suite()))
