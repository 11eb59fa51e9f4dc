"""In-graph towers as TF1 programs build them (issue 38, item 4): a session
with no target runs on a server of its own, ``ConfigProto(device_count=...)``
gives it CPU devices for the towers, ``log_device_placement`` logs where each
node runs, and a shape's known dimension has TF1's ``.value``.
"""
from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.errors import FailedPreconditionError, InvalidArgumentError
from tests.helpers import ROOT, child_env


def towers(n: int):
    """Each tower's matmul on ``/cpu:i`` with a variable of its own, summed on /cpu:0."""
    with dt.device("/cpu:0"):
        x = dt.constant([[1.0, 2.0]])
    outs, variables = [], []
    for i in range(n):
        with dt.device(f"/cpu:{i}"), dt.name_scope(f"tower_{i}"):
            w = dt.Variable(np.full((2, 2), i + 1.0, np.float32), name="w")
            variables.append(w)
            outs.append(dt.matmul(x, w))
    with dt.device("/cpu:0"):
        return dt.add_n(outs), variables


async def test_a_session_without_target_has_the_cpu_devices_its_config_asks_for(fresh_graph, caplog):
    total, _ = towers(2)
    init = dt.global_variables_initializer()
    config = dt.ConfigProto(device_count={"CPU": 2}, log_device_placement=True)
    with caplog.at_level(logging.INFO, logger="distrib.placement"):
        async with dt.Session(config=config) as sess:
            await sess.run(init)
            assert (await sess.run(total)).tolist() == [[9.0, 9.0]]   # 1*3 + 2*3
            names = [d.name for d in await sess.list_devices()]
    assert names == ["/job:localhost/replica:0/task:0/device:CPU:0",
                     "/job:localhost/replica:0/task:0/device:CPU:1"]
    placed = {r.getMessage() for r in caplog.records if r.name == "distrib.placement"}
    # TF's line: "name: (Op): /job:J/replica:0/task:T/device:CPU:i", as the task places it
    assert "tower_1/MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:1" in placed
    assert "tower_0/MatMul: (MatMul): /job:localhost/replica:0/task:0/device:CPU:0" in placed


async def test_a_gpu_the_server_lacks_is_refused_unless_placement_is_soft(fresh_graph):
    with dt.device("/gpu:0"):
        x = dt.constant(2.0) * 3.0
    async with dt.Session(config=dt.ConfigProto(device_count={"GPU": 0})) as sess:
        with pytest.raises(InvalidArgumentError, match="pinned to GPU:0, which this task does "
                                                       "not have .devices: CPU:0."):
            await sess.run(x)
    config = dt.ConfigProto(device_count={"GPU": 0}, allow_soft_placement=True)
    async with dt.Session(config=config) as sess:
        assert await sess.run(x) == 6.0
    total, _ = towers(2)   # a CPU it lacks: the host's CPU runs it (TF would refuse)
    async with dt.Session() as sess:
        await sess.run(dt.global_variables_initializer())
        assert (await sess.run(total)).tolist() == [[9.0, 9.0]]


async def test_each_session_without_target_has_variables_of_its_own(fresh_graph):
    total, (w0,) = towers(1)
    async with dt.Session() as first:
        await first.run(dt.global_variables_initializer())
        await first.run(w0.assign(np.zeros((2, 2), np.float32)))
        assert (await first.run(total)).tolist() == [[0.0, 0.0]]
        async with dt.Session() as second:   # a DirectSession of its own: nothing initialized
            with pytest.raises(FailedPreconditionError):
                await second.run(total)


def test_device_count_takes_cpu_and_gpu_counts_only():
    assert dt.ConfigProto(device_count={"cpu": 4}).device_count == {"CPU": 4}
    for bad in ({"TPU": 1}, {"CPU": -1}, {"CPU": 1.5}, ["CPU"]):
        with pytest.raises(TypeError, match="device_count maps 'CPU' and 'GPU'"):
            dt.ConfigProto(device_count=bad)


def test_a_known_dimension_is_an_int_with_tf1s_value(fresh_graph):
    x = dt.placeholder(dt.float32, [None, 24, 24, 3])
    shape = x.get_shape()
    assert shape[1].value == 24 and shape[1] == 24 and shape[1] * 2 == 48
    assert isinstance(shape[1], int) and repr(shape[1]) == "Dimension(24)"
    assert str(shape[1]) == "24" and f"{shape[1]}:{shape[1]:03d}" == "24:024"
    assert shape[0] is None   # unknown: TF2's None
    assert dt.dimension_value(shape[3]) == 3 and dt.dimension_value(shape[0]) is None
    assert dt.dimension_value(7) == 7
    reshaped = dt.reshape(x, [-1, shape[1].value * shape[2].value * shape[3].value])
    assert reshaped.get_shape().as_list() == [None, 1728]


async def test_a_servers_kernels_use_its_intra_op_threads(fresh_graph):
    from kernels.cpu import jit_loader
    before = jit_loader.intra_op_threads()
    x = dt.constant(1.0) + 1.0
    try:
        async with dt.Session(config=dt.ConfigProto(intra_op_parallelism_threads=3)) as sess:
            await sess.run(x)
            assert jit_loader.intra_op_threads() == 3
        async with dt.Session() as sess:   # a later default config leaves the choice alone
            await sess.run(x)
            assert jit_loader.intra_op_threads() == 3
    finally:
        jit_loader.set_intra_op_threads(before)
    # a task the launcher started with one BLAS thread: its first server takes that
    probe = ("import asyncio, distrib as dt\n"
             "from kernels.cpu import jit_loader\n"
             "async def main():\n"
             "    async with dt.Session() as s:\n"
             "        await s.run(dt.constant(1.0))\n"
             "    print(jit_loader.intra_op_threads())\n"
             "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, env=child_env(OMP_NUM_THREADS="1"), cwd=ROOT)
    assert out.returncode == 0 and out.stdout.split() == ["1"], out.stderr[-2000:]


async def test_steps_started_together_share_one_opening_and_a_close_while_opening_leaks_nothing(
        fresh_graph):
    from distrib.process import runtime
    c = dt.constant(2.0) * 3.0
    sess = dt.Session()
    assert await asyncio.gather(sess.run(c), sess.run(c), sess.run(c)) == [6.0, 6.0, 6.0]
    await sess.close()
    sess = dt.Session()
    step = asyncio.ensure_future(sess.run(c))
    await asyncio.sleep(0)   # its opening is under way
    await sess.close()
    with pytest.raises(InvalidArgumentError, match="closed while it opened"):
        await step
    assert runtime().clients.live() == []   # every lease given back, once
