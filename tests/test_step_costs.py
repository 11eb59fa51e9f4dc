"""What a training step costs the runtime: variable reads without copies (the
store copies on write), control edges merged across tasks, the counters that
bench/train.py reports. Each test also pins the behaviour the saving must
not change (a read is a snapshot, a fetched value is the caller's own)."""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.executor import CompiledPartition
from distrib.runtime.step.local_eval import evaluate
from distrib.runtime.step.plan import partition, place, prune
from transports.shm import ARENA, shared_empty


@contextlib.asynccontextmanager
async def _ps_and_worker():
    """A ps and a worker task served in this process, on free ports."""
    ports = free_ports(2)
    spec = {"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    async with dt.serve(spec, job_name="ps", task_index=0) as ps:
        async with dt.serve(spec, job_name="worker", task_index=0) as wk:
            yield spec, ps, wk


@pytest.fixture
def store():
    return VariableStore()


def test_an_update_copies_a_stored_array_only_while_someone_holds_it(store):
    store.set("w", np.zeros(3))
    first = store.get("w")
    store.writable("w")[0] = 1.0                  # `first` still holds it: copy on write
    assert first.tolist() == [0, 0, 0] and store.get("w").tolist() == [1, 0, 0]
    del first
    stored = id(store.get("w"))
    store.writable("w")[1] = 2.0                  # nobody else holds it: in place
    assert id(store.get("w")) == stored
    view = store.get("w")[1:]
    store.writable("w")[2] = 3.0                  # a view counts as a holder
    assert view.tolist() == [2, 0] and store.get("w").tolist() == [1, 2, 3]
    assert store.owns(store.get("w")) and store.owns(store.get("w")[1:])
    assert not store.owns(np.zeros(3)) and not store.owns(view)   # the old array is not stored


def test_fetched_reads_are_snapshots_the_caller_may_write(store):
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(np.array([1.0, 2.0]), name="w")
        read = w.read_value()
        step = w.assign_add(np.array([10.0, 10.0]))
        init = dt.global_variables_initializer()
    evaluate(init, graph=g, variables=store)
    before = evaluate(read, graph=g, variables=store)
    evaluate(step, graph=g, variables=store)
    assert before.tolist() == [1.0, 2.0]          # the update did not reach the snapshot
    before[0] = -99.0                              # nor does the caller's write reach the store
    assert evaluate(read, graph=g, variables=store).tolist() == [11.0, 12.0]
    together = evaluate([read, step], graph=g, variables=store)
    # the read in the same step happens before the update (it is ordered first)
    assert together[0].tolist() == [11.0, 12.0] and together[1].tolist() == [21.0, 22.0]


def test_sgd_update_of_a_held_variable_writes_a_new_version_once(store):
    """ApplyGradientDescent on a variable someone holds writes var - lr*grad
    into a new array (no copy first); a bad gradient leaves the variable as
    it was."""
    from distrib.runtime.state.stateful import run_stateful
    from kernels import KernelError
    node = {"op": "ApplyGradientDescent", "attrs": {"var": "w"}, "name": "w/apply"}
    value = shared_empty((256, 128), np.float32)        # as Assign stores 64 KiB and more
    value[...] = 1.0
    assert ARENA.lookup(value) is not None
    store.set("w", value)
    del value
    held = store.get("w")
    with pytest.raises(KernelError, match="gradient shape"):
        run_stateful(node, [np.float32(0.5), np.ones(3, np.float32)], store, True, ("CPU", 0))
    assert store.get("w") is held and (held == 1).all()
    new, = run_stateful(node, [np.float32(0.5), np.ones((256, 128), np.float32)], store,
                         True, ("CPU", 0))
    assert new is store.get("w") and new is not held
    assert (held == 1).all() and (new == 0.5).all()
    stored = id(new)
    del held, new
    run_stateful(node, [np.float32(0.5), np.ones((256, 128), np.float32)], store, False,
                  ("CPU", 0))
    assert id(store.get("w")) == stored                 # nobody else held it: in place
    assert (store.get("w") == 0).all()


def test_a_peer_loan_of_an_arena_variable_makes_the_update_copy(store):
    # What a co-located worker holds is counted through the buffer (the
    # connection keeps a reference to it per loan, as here), not the array.
    value = shared_empty((256, 128), np.float32)
    value[...] = 1.0
    store.set("w", value)
    del value
    loan = ARENA.lookup(store.get("w")).root
    peer_view = np.frombuffer(loan, np.float32, 256 * 128)  # what the peer maps
    before = id(store.get("w"))
    store.writable("w")[...] = 2.0
    assert id(store.get("w")) != before and (peer_view == 1.0).all()
    del loan, peer_view
    before = id(store.get("w"))
    store.writable("w")[...] = 3.0                # no loan now: in place
    assert id(store.get("w")) == before


def test_a_forked_child_never_writes_its_parents_arena_variables(store):
    value = shared_empty((256, 128), np.float32)
    value[...] = 1.0
    store.set("w", value)
    del value
    pid = os.fork()
    if pid == 0:   # the child: an update must copy, the mapping is shared with the parent
        ok = False
        try:
            store.writable("w")[...] = 42.0
            ok = (store.get("w") == 42.0).all()
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (store.get("w") == 1.0).all()


def test_training_step_reads_weights_without_copying_them(store):
    """After warm-up, a step of an MLP with SGD leaves each variable in the
    same array: no copy on read, none on write (the reads finish first)."""
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None, 8])
        w1 = dt.Variable(dt.random_normal([8, 16], seed=1), name="w1")
        w2 = dt.Variable(dt.random_normal([16, 4], seed=2), name="w2")
        logits = dt.matmul(dt.nn.relu(dt.matmul(x, w1)), w2)
        loss = dt.reduce_mean(dt.nn.softmax_cross_entropy_with_logits(
            labels=np.eye(4, dtype=np.float32)[[0, 1, 2, 3]], logits=logits))
        train = dt.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = dt.global_variables_initializer()
    feed = {x: np.ones((4, 8), np.float32)}
    evaluate(init, graph=g, variables=store)
    evaluate(train, feed, graph=g, variables=store)
    ids = {n: id(store.get(n)) for n in ("w1", "w2")}
    losses = [evaluate([loss, train], feed, graph=g, variables=store)[0] for _ in range(5)]
    assert {n: id(store.get(n)) for n in ("w1", "w2")} == ids
    assert losses[-1] < losses[0]


def test_update_waits_for_a_reader_that_is_unordered_with_it():
    # dx = dy @ w.T and w's update both only need dy: the executor orders the
    # reader first (an extra edge), which it must not do when that is a cycle
    nodes = [
        {"name": "w", "op": "VariableV2", "inputs": [], "attrs": {"var": "w"}},
        {"name": "w/read", "op": "Identity", "inputs": ["w:0"], "attrs": {}},
        {"name": "dy", "op": "Const", "inputs": [], "attrs": {"value": [[1.0]], "dtype": "float32"}},
        {"name": "dx", "op": "MatMul", "inputs": ["dy:0", "w/read:0"], "attrs": {}},
        {"name": "upd", "op": "ApplyGradientDescent", "inputs": ["lr:0", "dy:0"],
         "attrs": {"var": "w"}},
        {"name": "lr", "op": "Const", "inputs": [], "attrs": {"value": 0.1, "dtype": "float32"}},
        {"name": "after", "op": "Identity", "inputs": ["w/read:0", "^upd"], "attrs": {}},
    ]
    part = CompiledPartition(nodes, ["dx:0"])
    idx = {n["name"]: i for i, n in enumerate(nodes)}
    assert idx["upd"] in part.consumers[idx["dx"]]          # dx reads before the update
    assert idx["upd"] not in part.consumers[idx["after"]]   # `after` runs after it: no cycle


def test_control_edges_from_one_task_into_one_op_cross_as_one_message():
    def n(name, op, inputs=(), device=""):
        return {"name": name, "op": op, "inputs": list(inputs), "device": device, "attrs": {},
                "output_dtypes": ["float32"], "output_shapes": [[]]}
    g = {x["name"]: x for x in [
        n("u1", "NoOp", device="/job:ps/task:0"), n("u2", "NoOp", device="/job:ps/task:0"),
        n("u3", "NoOp", device="/job:ps/task:0"),
        n("done", "NoOp", ["^u1", "^u2", "^u3"], device="/job:worker/task:0")]}
    order = prune(g, [], ["done"], [])
    placed = place(g, order, default_job="worker", default_task=0,
                   tasks={"ps": [0], "worker": [0]})
    parts = partition(g, order, placed, [], [])
    sends = [x for x in parts["/job:ps/task:0"].nodes if x["op"] == "_Send"]
    recvs = [x for x in parts["/job:worker/task:0"].nodes if x["op"] == "_Recv"]
    assert len(sends) == 1 and len(recvs) == 1
    group = next(x for x in parts["/job:ps/task:0"].nodes if x["name"].startswith("_ctrl_group"))
    assert sorted(group["inputs"]) == ["^u1", "^u2", "^u3"]
    assert placed["u1"].task_name == "/job:ps/task:0"   # the caller's placement is not changed
    assert "_ctrl_group/done//job:ps/task:0" not in placed


async def test_worker_and_master_count_what_a_step_moves():
    spec = {"ps": ["localhost:0"], "worker": ["localhost:0"]}
    async with dt.serve(spec, job_name="ps", task_index=0) as ps:
        spec["ps"] = [ps.target.split("//")[1]]
        async with dt.serve(spec, job_name="worker", task_index=0) as wk:
            g = dt.Graph()
            with g.as_default():
                with dt.device("/job:ps/task:0"):
                    v = dt.Variable(np.arange(4.0, dtype=np.float32), name="v")
                with dt.device("/job:worker/task:0"):
                    x = dt.placeholder(dt.float32, [4])
                    out = v * x
                init = dt.global_variables_initializer()
            async with dt.Session(wk.target, graph=g) as sess:
                await sess.run(init)
                for svc in (ps.worker, wk.worker, wk.master):
                    svc.reset_stats()
                got = await sess.run(out, {x: np.ones(4, np.float32)})
            assert got.tolist() == [0.0, 1.0, 2.0, 3.0]
            assert ps.worker.stats()["tensors_sent"] == 1            # v, once
            assert ps.worker.stats()["bytes_sent"] == 16
            assert wk.worker.stats()["tensors_received"] == 1
            m = wk.master.stats()
            assert m["steps"] == 1 and m["remote_calls"] == 1
            assert m["feed_bytes"] == 16 and m["fetch_bytes"] == 16
            assert wk.worker.stats()["partitions_run"] == 1
            assert wk.worker.stats()["kernel_s"] > 0


async def test_partitions_are_registered_once_per_graph_version():
    async with _ps_and_worker() as (spec, ps, wk):
        g = dt.Graph()
        with g.as_default(), dt.device("/job:ps/task:0"):
            y = dt.constant([1.0, 2.0]) * 2.0
        async with dt.Session(wk.target, graph=g) as sess:
            for _ in range(3):
                assert (await sess.run(y)).tolist() == [2.0, 4.0]
            assert ps.worker.stats()["partitions_registered"] == 1
            with g.as_default():
                dt.constant(0.0)          # a new graph version
            for _ in range(3):
                await sess.run(y)
            assert ps.worker.stats()["partitions_registered"] == 2
            assert ps.worker.stats()["partitions_run"] == 6


async def test_tensors_ready_together_for_one_task_travel_in_one_message():
    async with _ps_and_worker() as (spec, ps, wk):
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                big = dt.Variable(np.ones((1024, 1024), np.float32), name="big")   # 4 MiB
                small = [dt.Variable(np.full(3, i, np.float32), name=f"s{i}") for i in range(4)]
            with dt.device("/job:worker/task:0"):
                total = dt.add_n([dt.reduce_sum(v) for v in small])
                both = total + dt.reduce_sum(big)
            init = dt.global_variables_initializer()
        async with dt.Session(wk.target, graph=g) as sess:
            await sess.run(init)
            ps.worker.reset_stats()
            assert await sess.run(total) == 18.0
            st = ps.worker.stats()
            assert st["tensors_sent"] == 4 and st["messages_sent"] == 1
            ps.worker.reset_stats()
            assert await sess.run(both) == 18.0 + 1024 * 1024
            st = ps.worker.stats()
            # the big one (created, so read and sent, first) is over the flush
            # size and goes at once; the small ones follow together
            assert st["tensors_sent"] == 5 and st["messages_sent"] == 2
        # a malformed batch is a typed error and the worker keeps serving
        ref = wk.system.ref(spec["ps"][0], "worker")
        with pytest.raises(dt.errors.InvalidArgumentError, match=r"\[key, value\]"):
            await ref.call("recv_tensors", 7, [["k"]], "/job:worker/task:0", 1)
        assert await ref.call("ping") == "/job:ps/task:0"


async def test_a_train_op_after_remote_updates_needs_no_message_from_them():
    async with _ps_and_worker() as (spec, ps, wk):
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:ps/task:0"):
                a = dt.Variable(np.zeros(2, np.float32), name="a")
                b = dt.Variable(np.zeros(2, np.float32), name="b")
                ups = [a.assign_add(np.ones(2, np.float32)),
                       b.assign_sub(np.ones(2, np.float32))]
            with dt.device("/job:worker/task:0"):
                train = dt.group(*ups, name="train")
            init = dt.global_variables_initializer()
        async with dt.Session(wk.target, graph=g) as sess:
            await sess.run(init)
            ps.worker.reset_stats()
            for _ in range(3):
                await sess.run(train)
            # the step returned after the ps's partition ran: both updates are in
            assert ps.worker.stats()["partitions_run"] == 3
            assert ps.worker.stats()["tensors_sent"] == 0      # no control trigger
            got = await sess.run([a, b])
            assert got[0].tolist() == [3.0, 3.0] and got[1].tolist() == [-3.0, -3.0]


async def test_a_matmul_whose_result_only_leaves_the_task_writes_it_into_shared_memory():
    # a weight's gradient on its way to a ps on this host: the send lends the
    # arena buffer instead of copying the result into a segment
    class Capture:
        timeout = None

        def __init__(self):
            self.sent = {}

        def send(self, key, dst, value):
            self.sent[key] = value

        def flush(self, early=False):
            return None

    a = np.arange(256 * 128, dtype=np.float32).reshape(256, 128) / 1e4
    b = np.ones((128, 96), np.float32)
    mm = {"op": "MatMul", "attrs": {"transpose_a": False, "transpose_b": False}}
    part = CompiledPartition([
        {"name": "a", "op": "Placeholder", "inputs": [], "attrs": {"dtype": "float32"}},
        {"name": "b", "op": "Placeholder", "inputs": [], "attrs": {"dtype": "float32"}},
        {"name": "away", "inputs": ["a:0", "b:0"], **mm},
        {"name": "_send/away", "op": "_Send", "inputs": ["away:0"],
         "attrs": {"key": "g", "dst_task": "/job:ps/task:0"}},
        {"name": "kept", "inputs": ["a:0", "b:0"], **mm},   # fetched too: ordinary memory
        {"name": "_send/kept", "op": "_Send", "inputs": ["kept:0"],
         "attrs": {"key": "k", "dst_task": "/job:ps/task:0"}},
    ], ["kept:0"], task="/job:worker/task:0")
    channel = Capture()
    (kept,) = await part.run({"a:0": a, "b:0": b}, VariableStore(), channel)
    assert ARENA.lookup(channel.sent["g"]) is not None
    np.testing.assert_allclose(channel.sent["g"], a @ b, rtol=1e-6)
    assert ARENA.lookup(channel.sent["k"]) is None and ARENA.lookup(kept) is None
    np.testing.assert_allclose(kept, a @ b, rtol=1e-6)


async def test_a_result_in_shared_memory_reaches_a_task_in_this_process_read_only():
    # a matmul result for other tasks is computed into the arena, which may
    # lend it to a process on this host at the same time: a task in this
    # process gets it read-only (no copy), an ordinary result as it is
    async with _ps_and_worker() as (spec, ps, wk):
        lent = shared_empty((256, 128), np.float32)
        lent[...] = 1.0
        got = wk.worker.detached(lent)
        assert not got.flags.writeable and np.shares_memory(got, lent)
        with pytest.raises(ValueError):
            got[0, 0] = 7.0
        plain = np.ones((256, 128), np.float32)
        assert wk.worker.detached(plain) is plain
