"""Pruning, placement and partitioning on plain GraphDef nodes."""
from __future__ import annotations

import pytest

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.runtime.step.plan import parse_device, partition, place, prune


def node(name, op="Add", inputs=(), device=""):
    return {"name": name, "op": op, "inputs": list(inputs), "device": device, "attrs": {},
            "output_dtypes": ["float32"], "output_shapes": [[2]]}


def graph(*nodes):
    return {n["name"]: n for n in nodes}


TASKS = {"ps": [0], "worker": [0, 1]}


def test_prune_keeps_only_what_fetches_need_in_topological_order():
    g = graph(node("a", "Const"), node("b", "Const"), node("c", inputs=["a:0", "b:0"]),
              node("unused", inputs=["a:0"]))
    order = prune(g, ["c:0"], [], [])
    assert set(order) == {"a", "b", "c"}
    assert order.index("c") > order.index("a") and order.index("c") > order.index("b")


def test_prune_keeps_creation_order_where_edges_allow():
    # a train op listing its updates last-layer first: a depth-first walk from it
    # would reach w2 first; the order keeps w0 (created first) first, so a ps
    # sends the first layer's weights first
    g = graph(node("w0", "VariableV2"), node("w1", "VariableV2"), node("w2", "VariableV2"),
              node("u2", inputs=["w2:0"]), node("u1", inputs=["w1:0"]),
              node("u0", inputs=["w0:0"]), node("train", "NoOp", ["^u2", "^u1", "^u0"]))
    order = prune(g, [], ["train"], [])
    assert order == ["w0", "w1", "w2", "u2", "u1", "u0", "train"]


def test_feeding_a_tensor_cuts_its_producer():
    g = graph(node("a", "Const"), node("b", inputs=["a:0"]), node("c", inputs=["b:0"]))
    assert prune(g, ["c:0"], [], ["b:0"]) == ["c"]


def test_control_inputs_are_kept():
    g = graph(node("init", "NoOp"), node("a", "Const", inputs=["^init"]))
    assert prune(g, ["a:0"], [], []) == ["init", "a"]


def test_unknown_fetch_is_not_found():
    with pytest.raises(NotFoundError, match="nope"):
        prune(graph(node("a", "Const")), ["nope:0"], [], [])


def test_cycle_is_an_error():
    g = graph(node("a", inputs=["b:0"]), node("b", inputs=["a:0"]))
    with pytest.raises(InvalidArgumentError, match="cycle"):
        prune(g, ["a:0"], [], [])


@pytest.mark.parametrize("spec,expect", [
    ("/job:ps/task:0", ("ps", None, 0, None, None)),
    ("/job:worker/replica:0/task:1/device:GPU:0", ("worker", 0, 1, "GPU", 0)),
    ("/gpu:1", (None, None, None, "GPU", 1)),
    ("/cpu:0", (None, None, None, "CPU", 0)),
    ("GPU:2", (None, None, None, "GPU", 2)),
    ("", (None, None, None, None, None)),
])
def test_parse_device_forms(spec, expect):
    d = parse_device(spec)
    assert (d.job, d.replica, d.task, d.device_type, d.device_index) == expect


def test_bad_device_string_names_it():
    with pytest.raises(InvalidArgumentError, match="/job:ps/tusk:0"):
        parse_device("/job:ps/tusk:0")


def test_unpinned_ops_go_to_the_master_task_and_bad_tasks_are_named():
    g = graph(node("a", "Const"), node("b", "Const", device="/job:worker/task:1"))
    placed = place(g, ["a", "b"], default_job="ps", default_task=0, tasks=TASKS)
    assert placed["a"].canonical() == "/job:ps/replica:0/task:0/device:CPU:0"
    assert placed["b"].canonical() == "/job:worker/replica:0/task:1/device:CPU:0"
    g2 = graph(node("c", "Const", device="/job:worker/task:7"))
    with pytest.raises(InvalidArgumentError, match=r"task:7.*valid tasks: /job:ps/task:0"):
        place(g2, ["c"], default_job="ps", default_task=0, tasks=TASKS)


def test_partition_inserts_one_send_recv_per_tensor_and_task():
    g = graph(node("a", "Const", device="/job:worker/task:0"),
              node("b", inputs=["a:0", "a:0"], device="/job:worker/task:1"),
              node("c", inputs=["a:0", "b:0"], device="/job:worker/task:1"),
              node("d", inputs=["^a", "c:0"], device="/job:ps/task:0"))
    order = prune(g, ["d:0"], [], [])
    placed = place(g, order, default_job="ps", default_task=0, tasks=TASKS)
    parts = partition(g, order, placed, ["d:0"], [])
    w0, w1, ps = (parts["/job:worker/task:0"], parts["/job:worker/task:1"],
                  parts["/job:ps/task:0"])
    sends0 = [n for n in w0.nodes if n["op"] == "_Send"]
    recvs1 = [n for n in w1.nodes if n["op"] == "_Recv"]
    # a:0 goes to worker 1 once (used 3 times there) and a control edge to ps
    assert sorted(n["attrs"]["dst_task"] for n in sends0) == ["/job:ps/task:0", "/job:worker/task:1"]
    assert len(recvs1) == 1
    b = next(n for n in w1.nodes if n["name"] == "b")
    assert b["inputs"] == [recvs1[0]["name"] + ":0"] * 2
    d = next(n for n in ps.nodes if n["name"] == "d")
    assert any(i.startswith("^_recv/") for i in d["inputs"])
    assert ps.fetches == ["d:0"]
    keys_sent = {n["attrs"]["key"] for p in parts.values() for n in p.nodes if n["op"] == "_Send"}
    keys_recv = {n["attrs"]["key"] for p in parts.values() for n in p.nodes if n["op"] == "_Recv"}
    assert keys_sent == keys_recv


def test_fed_tensors_go_to_each_consuming_partition():
    g = graph(node("x", "Placeholder"), node("y", inputs=["x:0"], device="/job:worker/task:0"),
              node("z", inputs=["x:0"], device="/job:worker/task:1"))
    order = prune(g, ["y:0", "z:0"], [], ["x:0"])
    placed = place(g, order, default_job="ps", default_task=0, tasks=TASKS)
    parts = partition(g, order, placed, ["y:0", "z:0"], ["x:0"])
    assert parts["/job:worker/task:0"].feeds == ["x:0"]
    assert parts["/job:worker/task:1"].feeds == ["x:0"]
    assert "/job:ps/task:0" not in parts
