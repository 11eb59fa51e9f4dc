"""GraphDef: the format of docs/ops.md, msgpack-encodable, and exact round trips."""
from __future__ import annotations

import msgpack
import numpy as np
import pytest

from distrib.errors import InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.graph import Graph
from distrib.framework.graph_def import graph_from_def, import_graph_def
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.gradients import gradients
from distrib.ops.variables import Variable, global_variables_initializer


def _model() -> Graph:
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float32, [None, 4], name="x")
        labels = ops.placeholder(dtypes.int32, [None], name="labels")
        with g.device("/job:ps/task:0"):
            w = Variable(ops.random_normal([4, 3], seed=1), name="w")
            b = Variable(ops.zeros([3]), name="b")
        with g.device("/job:worker/task:0"), ops.name_scope("layer1"):
            logits = nn.bias_add(ops.matmul(x, w), b)
            loss = ops.reduce_mean(nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=logits), name="loss")
        gradients(loss, [w, b])
        init = global_variables_initializer()
        with g.control_dependencies([init]):
            ops.constant(["a", "b"], name="names")
    return g


def _same(a, b) -> bool:
    """Deep equality that compares numpy arrays by dtype and value."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.all(a == b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def test_node_format_matches_the_catalogue():
    g = _model()
    gd = g.as_graph_def()
    assert gd["version"] == g.version
    nodes = {n["name"]: n for n in gd["nodes"]}
    mm = nodes["layer1/MatMul"]
    assert mm == {"name": "layer1/MatMul", "op": "MatMul", "inputs": ["x:0", "w/read:0"],
                  "device": "/job:worker/task:0",
                  "attrs": {"transpose_a": False, "transpose_b": False},
                  "output_dtypes": ["float32"], "output_shapes": [[None, 3]]}
    assert nodes["w"]["attrs"] == {"var": "w", "dtype": "float32", "shape": [4, 3]}
    assert nodes["w"]["device"] == "/job:ps/task:0"
    assert nodes["names"]["inputs"] == ["^init"]
    assert nodes["x"]["attrs"] == {"dtype": "float32", "shape": [None, 4]}


def test_graph_def_is_msgpack_encodable_apart_from_const_arrays():
    gd = _model().as_graph_def()

    def default(obj):
        if isinstance(obj, np.ndarray):  # the runtime ships Const values as raw buffers
            return {"nd": obj.tolist(), "dtype": str(obj.dtype)}
        raise TypeError(type(obj))

    assert msgpack.unpackb(msgpack.packb(gd, default=default))["version"] == gd["version"]


def test_round_trip_is_exact():
    g = _model()
    gd = g.as_graph_def()
    g2 = graph_from_def(gd)
    assert _same(g2.as_graph_def(), gd)
    assert g2.version == g.version
    t = g2.get_tensor_by_name("layer1/loss:0")
    assert t.dtype == dtypes.float32 and t.shape.as_list() == []
    assert g2.get_operation_by_name("names").control_inputs[0].name == "init"


def test_import_accepts_nodes_in_any_order_and_unknown_op_types():
    gd = {"version": 3, "nodes": [
        {"name": "send", "op": "_Send", "inputs": ["c:0", "^n"], "device": "/job:a/task:0",
         "attrs": {"key": "k"}, "output_dtypes": [], "output_shapes": []},
        {"name": "c", "op": "Const", "inputs": [], "device": "",
         "attrs": {"value": np.ones(2), "dtype": "float64"},
         "output_dtypes": ["float64"], "output_shapes": [[2]]},
        {"name": "n", "op": "NoOp", "inputs": [], "device": "", "attrs": {},
         "output_dtypes": [], "output_shapes": []},
    ]}
    g = graph_from_def(gd)
    send = g.get_operation_by_name("send")
    assert send.type == "_Send" and send.inputs[0].name == "c:0"
    assert [c.name for c in send.control_inputs] == ["n"]
    assert g.version == 3


def test_bad_graph_defs_are_rejected_with_the_node_named():
    with pytest.raises(InvalidArgumentError, match="'b'.*'missing'"):
        graph_from_def({"version": 0, "nodes": [
            {"name": "b", "op": "Identity", "inputs": ["missing:0"], "output_dtypes": ["float32"],
             "output_shapes": [None]}]})
    with pytest.raises(InvalidArgumentError, match="cycle"):
        graph_from_def({"version": 0, "nodes": [
            {"name": "a", "op": "NoOp", "inputs": ["^b"]},
            {"name": "b", "op": "NoOp", "inputs": ["^a"]}]})
    with pytest.raises(InvalidArgumentError, match="GraphDef"):
        graph_from_def([1, 2])


def test_import_graph_def_into_a_scope_with_input_map():
    src = Graph()
    with src.as_default():
        x = ops.placeholder(dtypes.float32, [2], name="x")
        ops.multiply(x, 3.0, name="y")
    dst = Graph()
    with dst.as_default():
        feed = ops.constant([1.0, 2.0], name="feed")
        (y,) = import_graph_def(src.as_graph_def(), input_map={"x:0": feed},
                                return_elements=["y:0"], name="imported")
        assert y.name == "imported/y:0" and y.op.inputs[0] is feed
        with pytest.raises(NotFoundError):
            import_graph_def(src.as_graph_def(), return_elements=["zzz"])
