"""Which GPU a node runs on, and GPU variable reads without a snapshot copy,
under numba's CUDA simulator (in child processes: the simulator must be chosen
before numba is imported).

- Device selection: the simulator shows one GPU, so the child makes
  ``kernels.cuda.devices.gpu_devices`` (what a server lists) report two and records,
  at the boundary where a thread's GPU is switched (``kernels.cuda.devices._select``)
  and at every launch, allocation and copy in, which GPU the thread had
  current (``kernels.cuda.devices.current_gpu``). A node on GPU:1 launches,
  allocates and copies with GPU 1 current, one on GPU:0 with GPU 0, on the
  event loop's thread and on the kernel pool's (a first run goes there). A real
  machine with two GPUs still has to show that the memory is really GPU 1's
  and that the copy between the two GPUs is ordered with both streams.
- Reads in place: a GPU read of a variable (its ``Identity``) uses the
  variable's device buffer when every op that reads that buffer runs before
  every update of the variable in the partition; else it copies.
- Another step's update of a variable a running step reads in place writes
  into a fresh copy (the store's copy on write, for device arrays); an update
  already writing on the kernel pool when a reader step starts is done before
  that step takes the buffer, and two updates behind a reader both land.
  (The simulator runs one GPU op at a time, so the child holds an update and
  a reader back around the real kernels, in the kernel registry.)
"""
from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import simulated_json

_TWO_GPUS = r"""
import asyncio, json, threading
import numpy as np
from kernels.cuda import devices
import distrib as dt

events = []
_real_select = devices._select
def select(index):
    events.append(["select", index, threading.get_ident()])
    _real_select(index)
devices._select = select
_real_list = devices.gpu_devices
def two_gpus(order=None):
    found = _real_list(order)
    return found + [{**found[0], "name": "GPU:1"}] if found else found
devices.gpu_devices = two_gpus

from numba.cuda.simulator.kernel import FakeCUDAKernel
from kernels.cuda import memory as cuda_memory
_getitem = FakeCUDAKernel.__getitem__
def getitem(self, cfg):
    bound = _getitem(self, cfg)
    def call(*args):
        events.append(["launch", self.fn.__qualname__.split(".")[0], devices.current_gpu(),
                       threading.get_ident()])
        return bound(*args)
    return call
FakeCUDAKernel.__getitem__ = getitem
for name in ("device_empty", "to_device"):
    def wrap(real, name=name):
        def f(*a, **k):
            events.append([name, devices.current_gpu(), threading.get_ident()])
            return real(*a, **k)
        return f
    setattr(cuda_memory, name, wrap(getattr(cuda_memory, name)))

x_np = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
g = dt.Graph()
with g.as_default():
    x = dt.placeholder(dt.float32, [2, 3], name="x")
    with dt.device("/gpu:0"):
        a = x * 2.0                                  # Mul against a scalar: binary_bcast
    with dt.device("/gpu:1"):
        w = dt.Variable(np.ones(3, np.float32), name="w")
        y = dt.nn.relu(a)                            # unary
        s = dt.reduce_sum(y, axis=0)                 # reduce_axis
        upd = w.assign_add(s)                        # binary_same
    init = dt.global_variables_initializer()

async def main():
    out = {}
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            out["devices"] = [d["name"] for d in await sess.list_devices()]
            await sess.run(init)
            del events[:]
            out["w"] = [(await sess.run(upd, feed_dict={x: x_np})).tolist() for _ in range(2)]
    out["events"] = events
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.mark.slow
def test_each_node_launches_allocates_and_copies_with_its_own_gpu_current():
    res = simulated_json(["-c", _TWO_GPUS], timeout=240)
    assert any(d.endswith("/device:GPU:1") for d in res["devices"]), res["devices"]
    step = np.maximum(np.arange(6, dtype=np.float32).reshape(2, 3) * 2 - 4, 0).sum(axis=0)
    np.testing.assert_allclose(res["w"], [1 + step, 1 + 2 * step])
    events = res["events"]
    launches: dict[str, set] = {}
    for e in events:
        if e[0] == "launch":
            launches.setdefault(e[1], set()).add(e[2])
    assert launches["binary_bcast"] == {0}, launches          # the Mul on GPU:0
    for kernel in ("unary", "reduce_axis", "binary_same"):    # relu, sum, assign_add on GPU:1
        assert launches[kernel] == {1}, launches
    # GPU 1 was made current (the kernel pool's threads too: both steps' events
    # include a select of 1), and every allocation and copy in saw the same GPU
    # as the launch its thread made next (its op's)
    assert any(e[0] == "select" and e[1] == 1 for e in events)
    for k, e in enumerate(events):
        if e[0] in ("device_empty", "to_device"):
            nxt = next((f for f in events[k + 1:] if f[0] == "launch" and f[3] == e[2]), None)
            if nxt is not None:
                assert e[1] == nxt[2], (e, nxt)
    assert {e[1] for e in events if e[0] in ("device_empty", "to_device")} == {0, 1}


_READS = r"""
import json
from distrib.runtime.step.partition_graph import PartitionGraph

def node(name, op, inputs=(), dev="/device:GPU:0", **attrs):
    return {"name": name, "op": op, "inputs": list(inputs), "device": dev, "attrs": attrs}

def graph(reader_inputs=("read",), reader_dev="/device:GPU:0", reader_op="MatMul",
          after_update=False, view_fetched=False, update=True):
    nodes = [node("x", "Placeholder"), node("w", "VariableV2", var="w"),
             node("read", "Identity", ["w"])]
    nodes.append(node("r", reader_op, ["x", *reader_inputs] if reader_op == "MatMul"
                      else list(reader_inputs), reader_dev)
                 if reader_op != "Reshape" else node("r", "Reshape", ["read", "shape"]))
    if reader_op == "Reshape":
        nodes.insert(0, node("shape", "Const", value=[-1]))
        nodes.append(node("r2", "Neg", ["r"]))
    nodes.append(node("lr", "Const", value=0.1))
    if update:
        nodes.append(node("upd", "ApplyGradientDescent", ["lr", "x"], var="w"))
    if after_update:   # the reader waits for the update
        nodes[3]["inputs"].append("^upd")
    fetches = ["r2:0" if reader_op == "Reshape" and view_fetched != "view" else "r:0"]
    return nodes, fetches + (["read:0"] if view_fetched == "read" else [])

def in_place(nodes, fetches, gpus=1):
    p = PartitionGraph(nodes, fetches, gpu_count=gpus, feeds=["x:0"])
    i = [n["name"] for n in p.nodes].index("read")
    return [p.alias[i], p.read_var[i]]

res = {
    "before_update": in_place(*graph()),
    "no_update": in_place(*graph(update=False)),
    "host_reader": in_place(*graph(reader_dev="/device:CPU:0", reader_op="Neg")),
    "fetched": in_place(*graph(view_fetched="read")),
    "after_update": in_place(*graph(reader_op="Neg", after_update=True)),
    "other_gpu": in_place(*graph(reader_dev="/device:GPU:1", reader_op="Neg"), gpus=2),
    "view_read": in_place(*graph(reader_op="Reshape")),
    "view_fetched": in_place(*graph(reader_op="Reshape", view_fetched="view")),
}
print(json.dumps(res))
"""


@pytest.mark.slow
def test_a_gpu_variable_read_uses_its_buffer_only_where_no_update_can_race_it():
    res = simulated_json(["-c", _READS], timeout=120)
    assert res["before_update"] == [True, "w"], res     # the matmul runs before the update
    assert res["no_update"] == [True, "w"], res
    assert res["host_reader"] == [True, "w"], res       # a host op copies it out when it runs
    assert res["fetched"] == [False, None], res         # a fetch is taken after the update
    assert res["after_update"] == [False, None], res    # its reader runs after the update
    assert res["other_gpu"] == [False, None], res       # another GPU: another stream
    assert res["view_read"] == [True, "w"], res         # a reshape's reader, before the update
    assert res["view_fetched"] == [False, None], res    # a view of the buffer, fetched


_OTHER_STEP = r"""
import asyncio, json
import numpy as np
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from kernels.cuda import devices

def node(name, op, inputs=(), **attrs):
    return {"name": name, "op": op, "inputs": list(inputs), "device": "/device:GPU:0",
            "attrs": attrs}

store = VariableStore()
old = devices.to_device(np.arange(4, dtype=np.float32), 0)
store.set("w", old)
reader = CompiledPartition([node("w", "VariableV2", var="w"), node("read", "Identity", ["w"]),
                            node("neg", "Neg", ["read"])], ["neg:0"], gpu_count=1)
writer = CompiledPartition([node("add", "AssignAdd", ["d"], var="w")], [], gpu_count=1,
                           feeds=["d:0"])

async def main():
    # the reader's Neg runs on the kernel pool (a first run): its step waits
    # for it while the writer's step updates w
    got, _ = await asyncio.gather(reader.run({}, store),
                                  writer.run({"d:0": np.full(4, 10, np.float32)}, store))
    return got

got = asyncio.run(main())
print(json.dumps({"in_place": reader.read_var[1], "neg": devices.to_host(got[0]).tolist(),
                  "w": devices.to_host(store.get("w")).tolist(),
                  "copied": store.get("w") is not old,
                  "old": devices.to_host(old).tolist()}))
"""


@pytest.mark.slow
def test_another_steps_update_writes_into_a_copy_while_a_step_reads_in_place():
    res = simulated_json(["-c", _OTHER_STEP], timeout=120)
    assert res["in_place"] == "w", res
    assert res["neg"] == [0.0, -1.0, -2.0, -3.0], res     # the value it read
    assert res["w"] == [10.0, 11.0, 12.0, 13.0], res
    assert res["copied"] and res["old"] == [0.0, 1.0, 2.0, 3.0], res


_RACES = r"""
import asyncio, json, os, threading, time
os.environ["DISTRIB_INTER_OP_THREADS"] = "4"   # a reader held on the pool beside two updates
import numpy as np
import kernels
from kernels import registry
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from kernels.cuda import devices

# the simulator runs one GPU op at a time: an update waits, and a reader
# waits, around the real kernels (outside that lock), in the kernel registry
writing = threading.Event()    # an update has started (on the pool, under update_lock)
write_s = [0.0]                # how long it then waits before it writes
reading = threading.Event()    # a Neg is about to read
read_gate = threading.Event()  # ... and reads once this is set
gated = [False]
kernels.get_kernel("Neg", kernels.GPU)   # (loads the GPU kernels)
gpu = registry._registry[kernels.GPU]
real_add, real_neg = gpu["AssignAdd"], gpu["Neg"]
def add(inputs, attrs):
    if write_s[0]:
        writing.set()
        time.sleep(write_s[0])
    return real_add(inputs, attrs)
def neg(inputs, attrs):
    if gated[0]:
        reading.set()
        read_gate.wait(30)
    return real_neg(inputs, attrs)
gpu["AssignAdd"], gpu["Neg"] = add, neg

def node(name, op, inputs=(), **attrs):
    return {"name": name, "op": op, "inputs": list(inputs), "device": "/device:GPU:0",
            "attrs": attrs}

W0 = np.arange(4, dtype=np.float32)

def setup(store=None):
    store = store or VariableStore()
    store.set("w", devices.to_device(W0, 0))
    reader = CompiledPartition([node("w", "VariableV2", var="w"), node("read", "Identity", ["w"]),
                                node("neg", "Neg", ["read"]), node("relu", "Relu", ["read"])],
                               ["neg:0", "relu:0"], gpu_count=1)
    return store, reader

def writer():
    return CompiledPartition([node("add", "AssignAdd", ["d"], var="w")], [], gpu_count=1,
                             feeds=["d:0"])

def d(v):
    return {"d:0": np.full(4, v, np.float32)}

async def wait(ev):
    await asyncio.to_thread(ev.wait, 30)

def host(xs):
    return [devices.to_host(x).tolist() for x in xs]

async def writer_first():
    # an update already writes (off the loop: a first run) when a reader step
    # starts; the step's Neg reads after the update is done, its Relu at once
    store, reader = setup()
    writing.clear(), reading.clear(), read_gate.clear()
    gated[0], write_s[0] = True, 0.5
    upd = asyncio.ensure_future(writer().run(d(10), store))
    await wait(writing)
    r = asyncio.ensure_future(reader.run({}, store))
    await upd
    read_gate.set()
    got = await r
    gated[0], write_s[0] = False, 0.0
    return {"read": host(got), "w": devices.to_host(store.get("w")).tolist()}

async def reader_first_two_writers():
    # a reader holds w; an update writes into a copy, and a second one queues behind it
    store, reader = setup()
    writing.clear(), reading.clear(), read_gate.clear()
    gated[0], write_s[0] = True, 0.3
    r = asyncio.ensure_future(reader.run({}, store))
    await wait(reading)
    first = asyncio.ensure_future(writer().run(d(10), store))
    await wait(writing)
    await asyncio.gather(first, writer().run(d(100), store))
    gated[0], write_s[0] = False, 0.0
    read_gate.set()
    got = await r
    return {"read": host(got), "w": devices.to_host(store.get("w")).tolist()}

class CountingLock:   # update_lock, counting who takes it
    def __init__(self):
        self.lock, self.taken = threading.Lock(), 0
    def __enter__(self):
        self.taken += 1
        return self.lock.__enter__()
    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)

async def apart():
    # steps that do not overlap, once warm: no copy, no lock
    store, reader = setup()
    store.update_lock = CountingLock()
    upd = writer()
    await reader.run({}, store)
    await upd.run(d(1), store)       # (first runs: on the pool, the update under the lock)
    cold_locked, store.update_lock.taken = store.update_lock.taken, 0
    buf = store.get("w")
    reads = []
    for _ in range(2):
        reads.append(host(await reader.run({}, store)))
        await upd.run(d(1), store)
    return {"read": reads, "w": devices.to_host(store.get("w")).tolist(),
            "same_buffer": store.get("w") is buf, "locked": store.update_lock.taken,
            "cold_locked": cold_locked, "in_place": reader.read_var[1],
            "offloop": store.offloop_updates}

async def main():
    return {"writer_first": await writer_first(),
            "reader_first": await reader_first_two_writers(),
            "apart": await apart()}

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.slow
def test_an_update_already_writing_is_neither_lost_nor_seen_half_by_a_step_reading_in_place():
    res = simulated_json(["-c", _RACES], timeout=120)
    w0 = [0.0, 1.0, 2.0, 3.0]
    # the writer first: the reader step's Neg (held until the update is done)
    # and Relu (at once) read one value, the updated one
    first = res["writer_first"]
    assert first["read"] == [[-10.0, -11.0, -12.0, -13.0], [10.0, 11.0, 12.0, 13.0]], first
    assert first["w"] == [10.0, 11.0, 12.0, 13.0], first
    # the reader first, then an update writing (into a copy) and another one
    # behind it: both land, the reader keeps the value it read
    second = res["reader_first"]
    assert second["w"] == [110.0, 111.0, 112.0, 113.0], second
    assert second["read"] == [[-0.0, -1.0, -2.0, -3.0], w0], second
    # steps that do not overlap, once warm: in place, no copy, no lock
    apart = res["apart"]
    assert apart["in_place"] == "w" and apart["same_buffer"], apart
    assert apart["cold_locked"] >= 1 and apart["locked"] == 0 and apart["offloop"] == 0, apart
    assert apart["read"] == [[[-1.0, -2.0, -3.0, -4.0], [1.0, 2.0, 3.0, 4.0]],
                             [[-2.0, -3.0, -4.0, -5.0], [2.0, 3.0, 4.0, 5.0]]], apart
    assert apart["w"] == [3.0, 4.0, 5.0, 6.0], apart
