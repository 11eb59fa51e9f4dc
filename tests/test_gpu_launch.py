"""``python -m distrib.launch --gpus_per_task N``: each task's own slice of
the host's GPUs through CUDA_VISIBLE_DEVICES (checked on the environment the
launched processes see; no GPU needed)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from distrib.cluster import ClusterSpec
from distrib.launch.tasks import gpu_slice
from tests.helpers import ROOT, child_env

_SHOW = "import os; print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>'))"


def _launch(*flags: str, visible: str | None) -> subprocess.CompletedProcess:
    env = child_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return subprocess.run([sys.executable, "-m", "distrib.launch", *flags, "--ps_grace", "1",
                           "--", sys.executable, "-c", _SHOW],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _seen(out: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"\[(\w+:\d+)\][^\n]*CVD=([^\n]*)", out)}


def test_each_task_sees_its_own_slice_of_the_launchers_gpus():
    res = _launch("--ps", "1", "--workers", "2", "--chief", "--gpus_per_task", "2",
                  visible="3,4,5,6,7,8")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _seen(res.stdout + res.stderr) == {"chief:0": "3,4", "worker:0": "5,6",
                                              "worker:1": "7,8", "ps:0": ""}


def test_without_a_list_the_slices_count_from_gpu_0_and_without_the_flag_nothing_changes():
    res = _launch("--workers", "2", "--gpus_per_task", "1", visible=None)
    assert res.returncode == 0, res.stderr[-2000:]
    assert _seen(res.stdout + res.stderr) == {"worker:0": "0", "worker:1": "1"}
    res = _launch("--workers", "1", visible="2")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _seen(res.stdout + res.stderr) == {"worker:0": "2"}


def test_too_few_gpus_is_a_usage_error_before_any_task_starts():
    res = _launch("--workers", "3", "--gpus_per_task", "2", visible="0,1,2,3")
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "gpus_per_task" in res.stderr and "worker:2" in res.stderr
    assert "CVD=" not in res.stdout


def test_gpu_slice_orders_chief_workers_then_other_jobs():
    cluster = ClusterSpec({"chief": ["a:1"], "worker": ["a:2", "a:3"], "evaluator": ["a:4"],
                           "ps": ["a:5"]})
    got = {(j, i): gpu_slice(cluster, j, i, 1, None)
           for j, i in (("chief", 0), ("worker", 0), ("worker", 1), ("evaluator", 0), ("ps", 0))}
    assert got == {("chief", 0): "0", ("worker", 0): "1", ("worker", 1): "2",
                   ("evaluator", 0): "3", ("ps", 0): ""}
    with pytest.raises(ValueError, match="lists 2"):
        gpu_slice(cluster, "worker", 1, 1, "5,6")
