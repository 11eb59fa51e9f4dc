"""Per-step device counters (kernels.counters) of a warm GPU training step,
under numba's CUDA simulator (in a child process: the simulator must be
chosen before numba is imported): the bench model's graph (bench/train.py's
MLP and SGD step, small sizes) on /gpu:0 makes no driver allocation (the
caching allocator), one copy in per fed tensor and one copy out per fetched
one, synchronizes only for that fetch, and launches no more kernels than it
runs ops after the GPU fusion (kernels.cuda.fusion: bias add + relu); its
losses are the CPU's. The counters come from the step's run
metadata (``RunOptions(trace_level=FULL_TRACE)``), see tests/peers/gpu_counters.py.

The pool and the copy helpers also run here, in-process, on the simulator's
module (kernels.cuda.memory imports numba only when used)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kernels.counters import StepCounters, counting, note
from tests.helpers import ROOT, child_env, simulated_json, simulated_spec

BACKGROUND = {"gpu_counters": lambda: simulated_spec(["tests/peers/gpu_counters.py"], 300)}


@pytest.mark.slow
@pytest.mark.background("gpu_counters")
def test_a_warm_gpu_step_allocates_nothing_and_copies_only_feeds_and_fetches():
    res = simulated_json(["tests/peers/gpu_counters.py"], timeout=300, key="gpu_counters")
    gpu, cpu = res["gpu"], res["cpu"]
    assert any(d.endswith("/device:GPU:0") for d in gpu["devices"])
    np.testing.assert_allclose(gpu["losses"], cpu["losses"], rtol=1e-5)
    assert len(gpu["steps"]) == 2
    for step in gpu["steps"]:
        assert step["via"] == "run_metadata", step
        assert step["allocations"] == 0, step
        assert step["h2d_copies"] == 2, step      # x and y, each copied once
        assert step["h2d_bytes"] == 8 * 24 * 4 + 8 * 8, step
        assert step["d2h_copies"] == 1, step      # the loss
        assert step["d2h_bytes"] == 4, step
        assert step["syncs"] == 1, step           # only where the loss reaches the host
        # the step's GPU ops after fusion (its trace's rows), two relu layers fused
        assert step["fused_run"] == 2 and gpu["fused"] == 2, step
        assert 0 < step["launches"] <= step["ops_run"] <= gpu["gpu_ops"], step
        # the six variable reads use the variables' buffers in place: 28 launches
        # for 42 ops run (34 when each read made a snapshot copy)
        assert step["launches"] <= 28, step


def test_counters_count_only_inside_a_scope_and_follow_copied_contexts():
    import contextvars
    import threading
    note("launches")   # no scope: nothing to count into, no error
    c = StepCounters()
    with counting(c):
        note("launches", 3)
        note("h2d_copies", 1, 100)
        ctx = contextvars.copy_context()
        t = threading.Thread(target=ctx.run, args=(note, "d2h_copies", 1, 8))
        t.start()
        t.join()
        bare = threading.Thread(target=note, args=("syncs",))   # no context copied
        bare.start()
        bare.join()
    note("allocations")
    assert c.as_dict() == {"launches": 3, "allocations": 0, "h2d_copies": 1, "d2h_copies": 1,
                           "syncs": 0, "h2d_bytes": 100, "d2h_bytes": 8}


def test_size_classes_round_up_and_stay_bounded():
    from kernels.cuda.memory import size_class
    assert size_class(1) == 512 and size_class(512) == 512 and size_class(513) == 1024
    assert size_class(3 << 20) == 4 << 20
    assert size_class((16 << 20) + 1) == 18 << 20   # above 16 MiB: 2 MiB steps
    for n in (1, 777, 1 << 20, 5 << 20, 100 << 20):
        assert n <= size_class(n) <= max(2 * n, 512)


_POOL = r"""
import gc, json
import numpy as np
from kernels.constants import mark_constant
from kernels.counters import StepCounters, counting
from kernels.cuda import memory as cm
c = StepCounters()
host = np.arange(300, dtype=np.float32).reshape(3, 100)
with counting(c):
    a = cm.to_device(host)
    view = a.reshape(300)
    del a
    gc.collect()
    b = cm.device_empty((300,), np.float32)   # a's buffer is still in use by view
    back = cm.to_host(view)
    del view, b
    gc.collect()
    warm = StepCounters()
    with counting(warm):
        d = cm.to_device(host)                 # both buffers free again: no allocation
        e = cm.device_empty((10, 30), np.float32)
const = mark_constant(np.ones(4, np.float32))
k = StepCounters()
with counting(k):
    c1 = cm.cached_to_device(const)
    c2 = cm.cached_to_device(const)
    w = cm.cached_to_device(np.ones(4, np.float32))   # writable: copied every time
print(json.dumps({"cold": c.as_dict(), "warm": warm.as_dict(), "same": bool((back == host.ravel()).all()),
                  "d": cm.to_host(d).tolist() == host.tolist(), "const": k.as_dict(),
                  "cached": c1 is c2}))
"""


def test_the_simulator_pool_reuses_a_buffer_once_its_last_view_dies():
    res = simulated_json(["-c", _POOL], timeout=120)
    assert res["cold"]["allocations"] == 2, res    # the view kept the first buffer busy
    assert res["cold"]["h2d_copies"] == 1 and res["cold"]["d2h_copies"] == 1
    assert res["warm"]["allocations"] == 0, res
    assert res["same"] and res["d"]
    assert res["const"]["h2d_copies"] == 2 and res["cached"], res   # the constant once


_KEPT = r"""
import json
import numpy as np
from kernels.constants import is_constant
from kernels.counters import StepCounters, counting
from kernels.cuda import memory as cm
from kernels.registry import CPU, get_kernel
res = {"current": cm.current_device()}
# a read-only array the runtime did not mark (a user's feed): its owner can make it
# writable, change it, and make it read-only again, under the same id
feed = np.ones(4, np.float32)
feed.setflags(write=False)
first = cm.to_host(cm.cached_to_device(feed)).tolist()
feed.setflags(write=True)
feed[:] = 7
feed.setflags(write=False)
res["feed"] = [first, cm.to_host(cm.cached_to_device(feed)).tolist()]
# a Const's value (the CPU kernel's, folded or not) is the runtime's: copied in once
value = get_kernel("Const", CPU)([], {"value": np.arange(3, dtype=np.float32)})[0]
res["marked"] = [is_constant(value), is_constant(feed), is_constant(np.ones(2))]
c = StepCounters()
with counting(c):
    a = cm.cached_to_device(value)
    b = cm.cached_to_device(value, 0)
    g1 = cm.cached_to_device(value, 1)        # another GPU: a copy of its own
    g1b = cm.cached_to_device(value, 1)
    s0 = cm.device_scalar(0.5, np.float32)
    s0b = cm.device_scalar(0.5, np.float32, 0)
    s1 = cm.device_scalar(0.5, np.float32, 1)
res["const"] = {"copies": c.h2d_copies, "same0": a is b, "same1": g1 is g1b, "apart": a is not g1,
                "scalar_same0": s0 is s0b, "scalar_apart": s0 is not s1,
                "values": [cm.to_host(g1).tolist(), cm.to_host(s1).tolist()]}
# pinned staging buffers (numba's pinned arrays: the simulator's are host memory)
pool = cm.StagingPool(max_bytes=64 << 10)
held = [pool.take(cm.size_class(n)) for n in (1000, 2000, 4000, 8000, 16000) for _ in range(4)]
for buf in held:
    pool.give(buf.nbytes, buf)
kept = pool.kept_bytes
out = {}
for n in (3000, 16000, 40000):                 # 40000 bytes: over a quarter of 64 KiB
    host = np.arange(n // 4, dtype=np.float32)
    dev = cm.device_empty(host.shape, host.dtype)
    before = pool.allocations
    cm.staged_copy(dev, host, pool)
    out[n] = [cm.to_host(dev).tolist() == host.tolist(), pool.allocations - before]
res["staging"] = {"kept": kept, "allocated": len(held), "copies": out,
                  "stages": [pool.stages(16 << 10), pool.stages(40000)]}
print(json.dumps(res))
"""


def test_device_copies_are_kept_per_gpu_and_only_for_the_runtimes_constants():
    res = simulated_json(["-c", _KEPT], timeout=120)
    assert res["current"] == 0                                  # the simulator's one GPU
    assert res["feed"] == [[1.0] * 4, [7.0] * 4], res           # not a stale copy
    assert res["marked"] == [True, False, False], res
    const = res["const"]
    # once for GPU 0, once for GPU 1 (the simulator has one: the keys are what differ),
    # the scalar likewise
    assert const["copies"] == 4, const
    assert const["same0"] and const["same1"] and const["apart"], const
    assert const["scalar_same0"] and const["scalar_apart"], const
    assert const["values"] == [[0.0, 1.0, 2.0], [0.5]], const
    staging = res["staging"]
    assert staging["allocated"] == 20 and staging["kept"] <= 64 << 10, staging
    assert staging["stages"] == [True, False], staging
    assert staging["copies"]["3000"][0] and staging["copies"]["16000"][0], staging
    assert staging["copies"]["40000"] == [True, 0], staging     # straight, no pinned buffer


def _node(name: str, op: str, inputs: list[str], device: str = "/device:GPU:0") -> dict:
    return {"name": name, "op": op, "inputs": inputs, "device": device, "attrs": {}}


def test_gpu_fusion_takes_bias_add_relu_only_where_the_sum_has_no_other_reader():
    from kernels.cuda.fusion import fuse_gpu_nodes
    nodes = [_node("x", "Placeholder", []), _node("b", "Const", []),
             _node("add", "Add", ["x", "b"]), _node("relu", "Relu", ["add"]),
             _node("add2", "BiasAdd", ["x:0", "b:0"]), _node("relu2", "Relu", ["add2:0"]),
             _node("other", "Neg", ["add2"]),                      # a second reader: not fused
             _node("add3", "Add", ["x", "b"], "/device:CPU:0"),
             _node("relu3", "Relu", ["add3"], "/device:CPU:0")]    # on the CPU: not fused
    out = fuse_gpu_nodes(nodes, ["relu:0"], gpu_count=1)
    ops = {n["name"]: n["op"] for n in out}
    assert "add" not in ops and ops["relu"] == "_FusedBiasRelu"
    assert next(n for n in out if n["name"] == "relu")["inputs"] == ["x", "b"]
    assert ops["relu2"] == "Relu" and ops["add2"] == "BiasAdd"
    assert ops["relu3"] == "Relu" and ops["add3"] == "Add"
    assert fuse_gpu_nodes(nodes, [], gpu_count=0) is nodes          # no GPU: untouched
    assert ops == {n["name"]: n["op"] for n in fuse_gpu_nodes(nodes, ["relu:0"], 1)}
    fetched = fuse_gpu_nodes(nodes, ["add:0"], gpu_count=1)          # the sum is fetched
    assert {n["name"]: n["op"] for n in fetched}["relu"] == "Relu"
    fed = fuse_gpu_nodes(nodes, ["relu:0"], 1, feeds=["add:0"])     # the sum is fed: relu reads it
    assert {n["name"]: n["op"] for n in fed}["relu"] == "Relu"


_LAUNCH = r"""
import json
import numpy as np
from kernels.cuda import launch as cuda_launch
from kernels.counters import StepCounters, counting

class Compiled:                       # what numba's dispatcher compiled for some types
    def __init__(self): self.calls = []
    def launch(self, args, grid, block, stream, shared): self.calls.append((grid, block, args))

class Config:                         # numba's bound launch configuration
    def __init__(self, kernel, grid, block):
        self.kernel, self.griddim, self.blockdim, self.stream, self.sharedmem = kernel, grid, block, 0, 0
    def __call__(self, *args):
        self.kernel.dispatched += 1
        self.kernel.overloads[tuple(self.kernel.typeof_pyval(a) for a in args)] = self.kernel.compiled

class Kernel:                         # a numba dispatcher, as far as launch() uses one
    def __init__(self):
        self.overloads, self.compiled, self.dispatched, self.bound = {}, Compiled(), 0, 0
    def __getitem__(self, cfg):
        self.bound += 1
        return Config(self, *cfg)
    def typeof_pyval(self, a):
        return (type(a).__name__, str(getattr(a, "dtype", "")))

class Arr:                            # a contiguous device array's attributes
    def __init__(self, dtype, strides=(4,)): self.dtype, self.ndim, self.strides = np.dtype(dtype), 1, strides
    def is_c_contiguous(self): return 0 not in self.strides

k, c = Kernel(), StepCounters()
with counting(c):
    for _ in range(3):
        cuda_launch.launch(k, 4, 64, Arr("float32"), Arr("float32"), 2)
    cuda_launch.launch(k, 4, 64, Arr("float64"), Arr("float64"), 2)   # other kinds: dispatched
    cuda_launch.launch(k, 4, 64, Arr("float32", (0,)), Arr("float32"), 2)  # broadcast: always
    cuda_launch.launch(k, 4, 64, Arr("float32", (0,)), Arr("float32"), 2)
print(json.dumps({"sim": cuda_launch.SIM, "dispatched": k.dispatched, "bound": k.bound,
                  "direct": len(k.compiled.calls), "launches": c.launches}))
"""


def test_a_launch_binds_its_configuration_once_then_skips_the_dispatcher():
    out = subprocess.run([sys.executable, "-c", _LAUNCH], cwd=ROOT,
                         env=child_env(NUMBA_ENABLE_CUDASIM="0", CUDA_VISIBLE_DEVICES=""),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout)
    assert res["sim"] is False
    assert res["launches"] == 6
    assert res["bound"] == 1                      # one (kernel, grid, block): bound once
    # the first float32 launch, the float64 one, both broadcast ones go through
    # the dispatcher; the two later float32 launches call the compiled kernel
    assert res["dispatched"] == 4 and res["direct"] == 2, res
