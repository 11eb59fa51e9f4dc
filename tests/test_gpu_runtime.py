"""GPU devices through the runtime: under the CUDA simulator a task has GPU:0
and an MLP pinned to it matches the CPU; without GPUs, pinning to one is a
clear error unless soft placement moves the op to the CPU."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from tests.helpers import ROOT, child_env, simulated_json, simulated_spec

BACKGROUND = {"gpu_mlp": lambda: simulated_spec(["tests/peers/gpu_mlp.py"], 300)}


@pytest.mark.slow
@pytest.mark.background("gpu_mlp")
def test_mlp_pinned_to_gpu_matches_cpu_under_the_simulator():
    res = simulated_json(["tests/peers/gpu_mlp.py"], timeout=300, key="gpu_mlp")
    assert any(d.endswith("/device:GPU:0") for d in res["devices"])
    for g, c in zip(res["gpu"], res["cpu"]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(c), rtol=1e-4, atol=1e-5)


_NO_GPU = r"""
import asyncio, json, sys
import distrib as dt
from distrib.errors import InvalidArgumentError

async def main():
    with dt.Graph().as_default():
        with dt.device("/gpu:0"):
            y = dt.constant([1.0, 2.0]) * 3.0
        async with dt.serve({"local": ["localhost:0"]}) as srv:
            async with dt.Session(srv.target) as sess:
                devs = [d["name"] for d in await sess.list_devices()]
                try:
                    await sess.run(y)
                    err = None
                except InvalidArgumentError as e:
                    err = str(e)
                ok = await sess.run(dt.constant(1.0) + 1.0)
            soft = dt.ConfigProto(allow_soft_placement=True)
            async with dt.Session(srv.target, config=soft) as sess:
                val = (await sess.run(y)).tolist()
    print(json.dumps({"devices": devs, "error": err, "after": float(ok), "soft": val}))
    print(json.dumps({"numba": "numba" in sys.modules}))

asyncio.run(main())
"""


def test_no_gpu_means_no_gpu_devices_a_clear_error_and_soft_placement():
    out = subprocess.run([sys.executable, "-c", _NO_GPU], cwd=ROOT,
                         env=child_env(CUDA_VISIBLE_DEVICES="", NUMBA_ENABLE_CUDASIM="0"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    res, mods = json.loads(lines[0]), json.loads(lines[1])
    assert not any("GPU" in d for d in res["devices"])
    assert res["error"] and "GPU:0" in res["error"] and "CPU:0" in res["error"]
    assert "allow_soft_placement" in res["error"]
    assert res["after"] == 2.0
    assert res["soft"] == [3.0, 6.0]
    assert mods["numba"] is False, "a CPU-only task must not import numba"


def test_gpu_pin_in_process_without_gpu_is_invalid_argument():
    with dt.Graph().as_default():
        with dt.device("/job:local/task:0/device:GPU:3"):
            y = dt.constant(1.0) + 1.0
        server = dt.Server.create_local_server()
        try:
            with dt.SyncSession(server.target) as sess:
                if any("GPU" in d["name"] for d in sess.list_devices()):
                    pytest.skip("this machine has a GPU")
                with pytest.raises(InvalidArgumentError, match="GPU:3"):
                    sess.run(y)
        finally:
            server.stop()
