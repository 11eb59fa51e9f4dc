"""GPU variables and first GPU steps through real servers, under numba's CUDA
simulator (in child processes: the simulator must be chosen before numba
is imported).

- A variable on /gpu:0 is a device array: Assign, AssignAdd and AssignSub
  (keras's ``iterations`` counter among them) and the optimizers' updates
  write into it and match /cpu:0; an update with no GPU kernel runs its CPU
  kernel on host copies (numpy's ufuncs cannot write into device memory:
  ``AssignAdd failed: return arrays must be of ArrayType`` was the error).
- A GPU kernel's first launch compiles it (seconds for a step's worth on a
  real GPU): that runs off the task's event loop, which keeps answering
  heartbeats and calls, so a client with fast heartbeats does not declare
  its server dead during a first step whose every kernel "compiles" for a
  second (a stand-in that spins in Python: tests/peers/gpu_slow_compile.py).
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import distrib as dt
from tests.helpers import Proc, child_env, simulated_json, simulated_spec
from tests.peers.cli_cluster import cluster_spec, write_cluster

HEARTBEAT_S = 0.2   # a silent peer is dead after three: 0.6 s
COMPILE_S = 1.0     # each GPU op's first run "compiles" this long: > 3 heartbeats


STATE_RUNS = {"gpu_state": (), "gpu_state_host_momentum": ("--no-gpu-momentum",)}
BACKGROUND = {key: (lambda f=flags: simulated_spec(["tests/peers/gpu_state.py", *f], 300))
              for key, flags in STATE_RUNS.items()}


def _state_run(key: str) -> dict:
    return simulated_json(["tests/peers/gpu_state.py", *STATE_RUNS[key]], timeout=300, key=key)


@pytest.fixture(scope="module")
def state_runs():
    """The two runs of the state peer, started together (a process each: two cores);
    each test waits for its own."""
    with ThreadPoolExecutor(2) as pool:
        yield {key: pool.submit(_state_run, key) for key in STATE_RUNS}


def _assert_same(res: dict) -> None:
    gpu, cpu = res["gpu"], res["cpu"]
    assert any(d.endswith("/device:GPU:0") for d in gpu["devices"])
    for key in ("fetched", "trained"):
        assert len(gpu[key]) == len(cpu[key])
        for g, c in zip(gpu[key], cpu[key]):
            np.testing.assert_allclose(np.asarray(g), np.asarray(c), rtol=1e-5, atol=1e-6,
                                       err_msg=key)
    assert gpu["reassigned"] == cpu["reassigned"]


@pytest.mark.slow
@pytest.mark.background(*STATE_RUNS)
def test_assign_ops_and_updates_of_gpu_variables_match_cpu(state_runs):
    res = state_runs["gpu_state"].result()
    _assert_same(res)
    assert res["gpu"]["fetched"][2] == 1 and res["gpu"]["fetched"][5] == 2   # the counter
    assert res["gpu"]["trained"][4] == 3                                      # the global step


@pytest.mark.slow
@pytest.mark.background(*STATE_RUNS)
def test_an_update_without_a_gpu_kernel_runs_on_host_copies(state_runs):
    _assert_same(state_runs["gpu_state_host_momentum"].result())


def _graph(task: str):
    rng = np.random.default_rng(5)
    g = dt.Graph()
    with g.as_default(), dt.device(f"{task}/device:GPU:0"):
        x = dt.constant(rng.standard_normal((4, 3)).astype(np.float32))
        w = dt.Variable(rng.standard_normal((3, 2)).astype(np.float32), name="w")
        counter = dt.Variable(0, dtype=dt.int64, trainable=False, name="iterations")
        total = dt.reduce_sum(dt.nn.relu(dt.matmul(x, w)))
        step = counter.assign_add(np.int64(1))
        init = dt.global_variables_initializer()
    return g, init, total, step


async def test_first_gpu_kernels_compile_off_the_loop(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", str(HEARTBEAT_S))
    spec = cluster_spec(worker=1)
    cfg = write_cluster(tmp_path, spec)
    server = Proc(["tests/peers/gpu_slow_compile.py", "--cluster", cfg, "--job_name", "worker",
                   "--task_index", "0", "--log_level", "WARNING"],
                  env=child_env(NUMBA_ENABLE_CUDASIM="1", DISTRIB_HEARTBEAT_S=str(HEARTBEAT_S),
                                STANDIN_COMPILE_S=str(COMPILE_S)),
                  ready_prefix="serving", timeout=60)
    try:
        g, init, total, step = _graph("/job:worker/task:0")
        target = "distrib://" + spec["worker"][0]
        async with dt.Session(target, graph=g) as sess, dt.Session(target) as other:
            await asyncio.wait_for(sess.run(init), 60)
            t0 = time.perf_counter()
            first = asyncio.ensure_future(sess.run([total, step]))
            answered = []   # another session's calls to the server meanwhile
            while not first.done():
                t = time.perf_counter()
                await asyncio.wait_for(other.list_devices(), 30)
                answered.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)
            total_1, step_1 = await first   # a server declared dead fails it (UnavailableError)
            took = time.perf_counter() - t0
            assert took > 3 * COMPILE_S, took   # the stand-in compiled: matmul, relu, sum, ...
            assert step_1 == 1 and total_1 >= 0
            assert len(answered) >= 5 and max(answered) < 10 * HEARTBEAT_S, answered
            # (a second step runs its simulated kernels inline, each slower than
            # a heartbeat under the simulator: not a step to time here)
    finally:
        server.stop()
