"""GPU kernels and device discovery, each in a fresh interpreter.

numba reads ``NUMBA_ENABLE_CUDASIM`` and the driver reads
``CUDA_VISIBLE_DEVICES`` once, at import, so every case here starts its own
Python process with the environment it needs: the simulator suite
(``tests/test_kernels_cudasim.py``), a machine with no visible GPU, and the
lazy loading of numba.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import background

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(extra)
    return env


def _python(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(**env),
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def _simulator_suite() -> background.Spec:
    return background.simulator_suite("tests/test_kernels_cudasim.py", 110)


BACKGROUND = {"kernels_cudasim": _simulator_suite}


@pytest.mark.background("kernels_cudasim")
def test_gpu_kernels_match_cpu_under_the_simulator():
    background.assert_suite_passed(background.run("kernels_cudasim", _simulator_suite()))


def test_no_visible_gpu_means_no_devices_and_no_crash():
    code = ("import json, kernels\n"
            "from kernels.cuda import devices\n"
            "print(json.dumps([devices.backend(), devices.gpu_devices(),\n"
            "                  devices.is_device_array(devices.to_host([1.0]))]))")
    backend, devs, is_dev = json.loads(_python(code, CUDA_VISIBLE_DEVICES=""))
    assert backend == "none" and devs == [] and is_dev is False


def test_numba_loads_only_with_the_first_gpu_lookup():
    code = ("import sys, kernels\n"
            "before = 'numba' in sys.modules\n"
            "kernels.get_kernel('Add', 'CPU'); kernels.registered_ops('CPU')\n"
            "middle = 'numba' in sys.modules\n"
            "kernels_before = 'kernels.cuda.elementwise' in sys.modules\n"
            "gpu = kernels.has_kernel('MatMul', 'GPU')\n"
            "print(before, middle, kernels_before, gpu, 'numba' in sys.modules,\n"
            "      'kernels.cuda.elementwise' in sys.modules)")
    assert _python(code, CUDA_VISIBLE_DEVICES="") == "False False False True True True"
