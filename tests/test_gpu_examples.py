"""The examples as GPU checks: ``examples/custom_loop.py`` and
``examples/keras_fit.py`` under MirroredStrategy with one replica, whose
device is the task's only GPU, print the CPU's losses and accuracy (issue
27's check with the default heartbeat). On a machine whose CUDA driver
gives numba a GPU the run is on that real device (its sums may round
otherwise than the CPU's: the figures agree to a tolerance); elsewhere on
numba's CUDA simulator (the same figures exactly), with small settings
and few steps (two for the custom loop, one an epoch for Keras): the
simulator runs every CUDA thread as a Python thread. Whether a GPU is there is asked of a child process (a broken
driver fails that child, not this one)."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT, child_env

SMALL = ["--strategy", "mirrored", "--replicas", "1", "--epochs", "1", "--hidden", "8",
         "--batch_size", "32"]
# two steps of the custom loop; one step an epoch for Keras: its seed example's two
# epochs still take a second step on the weights the first updated on the device
SCRIPTS = (("examples/custom_loop.py", ("--steps_per_epoch", "2")),
           ("examples/keras_fit.py", ("--steps_per_epoch", "1", "--verbose", "0")))

_PROBE = ("import json; from kernels.cuda.devices import backend, gpu_devices; "
          "print(json.dumps({'backend': backend(), 'gpus': len(gpu_devices())}))")


@functools.cache
def real_gpu() -> bool:
    """Whether numba finds a real, usable GPU here (never under the simulator)."""
    if not os.path.exists("/dev/nvidiactl") or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return False
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env=child_env(NUMBA_ENABLE_CUDASIM="0"))
    except subprocess.TimeoutExpired:
        return False
    if out.returncode != 0:
        return False
    try:
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False
    return found.get("backend") == "cuda" and found.get("gpus", 0) > 0


def _env(mode: str) -> dict[str, str]:
    """``gpu``: the real device; ``sim``: the simulator's; ``cpu``: no GPU at all."""
    env = child_env(NUMBA_ENABLE_CUDASIM="1" if mode == "sim" else "0")
    if mode == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _start(script: str, mode: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, script, *SMALL, *extra], cwd=ROOT, env=_env(mode),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(proc: subprocess.Popen) -> list[str]:
    out, err = proc.communicate(timeout=200)
    assert proc.returncode == 0, err[-3000:]
    # every printed figure but the elapsed time
    return [re.sub(r" in [0-9.]+s$", "", line) for line in out.strip().splitlines()]


_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def agree(device: list[str], cpu: list[str], exact: bool) -> bool:
    """Whether two runs printed the same lines: exactly, or (a real GPU) the
    same words with every figure within 2e-3 of the CPU's (relative, or
    absolute near zero): float sums taken in another order."""
    if exact or len(device) != len(cpu):
        return device == cpu
    for d, c in zip(device, cpu):
        if _NUMBER.sub("#", d) != _NUMBER.sub("#", c):
            return False
        for x, y in zip(_NUMBER.findall(d), _NUMBER.findall(c)):
            if abs(float(x) - float(y)) > 2e-3 * max(1.0, abs(float(y))):
                return False
    return True


def test_agree_is_exact_for_the_simulator_and_tolerant_for_a_real_gpu():
    cpu = ["epoch 1: loss 2.2927", "done accuracy=0.1421 test_loss=2.2489"]
    near = ["epoch 1: loss 2.2929", "done accuracy=0.1421 test_loss=2.2488"]
    assert agree(cpu, cpu, exact=True) and agree(near, cpu, exact=False)
    assert not agree(near, cpu, exact=True)
    assert not agree(["epoch 1: loss 2.3927", cpu[1]], cpu, exact=False)     # off by 0.1
    assert not agree(["epoch 2: loss 2.2927", cpu[1]], cpu, exact=False)     # other words
    assert not agree(cpu[:1], cpu, exact=False)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_examples_under_mirrored_on_a_gpu_print_the_cpus_numbers():
    mode = "gpu" if real_gpu() else "sim"
    runs = {(script, m): _start(script, m, *extra) for script, extra in SCRIPTS
            for m in (mode, "cpu")}
    try:
        got = {key: _lines(proc) for key, proc in runs.items()}
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for script, _extra in SCRIPTS:
        device, cpu = got[(script, mode)], got[(script, "cpu")]
        assert any("accuracy=" in line for line in cpu), cpu
        assert any(line.startswith("epoch 1: loss") for line in cpu), cpu
        assert agree(device, cpu, exact=mode == "sim"), (script, mode, device, cpu)
