"""Graph core: dtypes, device specs and scopes, names, control deps, colocation, collections."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from distrib.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from distrib.framework import dtypes
from distrib.framework.device import DeviceSpec, canonical_device
from distrib.framework.graph import Graph, GraphKeys, get_default_graph, name_scope, reset_default_graph
from distrib.framework.tensor_shape import TensorShape
from distrib.ops import math_ops as ops


@pytest.fixture
def g():
    graph = Graph()
    with graph.as_default():
        yield graph


# -- dtypes ------------------------------------------------------------------------
def test_as_dtype_accepts_every_spelling():
    assert dtypes.as_dtype("float32") is dtypes.float32
    assert dtypes.as_dtype(np.float64) is dtypes.float64
    assert dtypes.as_dtype(np.dtype("int8")) is dtypes.int8
    assert dtypes.as_dtype(float) is dtypes.float32 and dtypes.as_dtype(int) is dtypes.int32
    assert dtypes.as_dtype(bool) is dtypes.bool
    assert dtypes.as_dtype(np.array(["a"]).dtype) is dtypes.string
    assert dtypes.as_dtype(object) is dtypes.string
    assert dtypes.float32 == "float32" and dtypes.float32 == np.float32
    assert dtypes.float32 != dtypes.float64 and dtypes.int32 != "nonsense"
    assert {dtypes.float32: 1}[dtypes.as_dtype("float32")] == 1


def test_dtype_properties():
    assert dtypes.float16.is_floating and not dtypes.float16.is_integer
    assert dtypes.uint8.is_integer and not dtypes.uint8.is_floating
    assert not dtypes.bool.is_integer and not dtypes.string.is_floating
    assert dtypes.int64.as_numpy_dtype is np.int64 and dtypes.string.as_numpy_dtype is np.object_
    assert dtypes.float32.name == "float32"


def test_as_dtype_rejects_unknown_with_the_valid_names():
    with pytest.raises(InvalidArgumentError, match="complex32.*float32"):
        dtypes.as_dtype("complex32")   # (complex64 is one of tf.dtypes' since issue 39)


# -- device specs -----------------------------------------------------------------
@pytest.mark.parametrize("text,fields", [
    ("/job:ps/task:0", ("ps", None, 0, None, None)),
    ("/job:worker/replica:0/task:1/device:GPU:0", ("worker", 0, 1, "GPU", 0)),
    ("/gpu:0", (None, None, None, "GPU", 0)),
    ("/cpu:0", (None, None, None, "CPU", 0)),
    ("/device:CPU:*", (None, None, None, "CPU", None)),
    ("GPU:1", (None, None, None, "GPU", 1)),
    ("", (None, None, None, None, None)),
    ("/job:worker/task:3/cpu:1", ("worker", None, 3, "CPU", 1)),
])
def test_device_spec_parses_every_tf_form(text, fields):
    spec = DeviceSpec.from_string(text)
    assert (spec.job, spec.replica, spec.task, spec.device_type, spec.device_index) == fields
    assert DeviceSpec.from_string(spec.to_string()) == spec  # printing round-trips


@pytest.mark.parametrize("bad", ["/job:", "/task:x", "/replica:-1", "/foo", "/device:GPU:a",
                                 "/job:ps/task:0/gpu", "job:ps:1"])
def test_bad_device_string_names_it_and_shows_the_form(bad):
    with pytest.raises(InvalidArgumentError) as info:
        DeviceSpec.from_string(bad)
    assert repr(bad) in str(info.value) and "/job:NAME/replica:N/task:N/device:TYPE:N" in str(info.value)


def test_device_spec_to_string_and_merge():
    spec = DeviceSpec.from_string("/job:ps/task:0")
    spec.merge_from(DeviceSpec.from_string("/task:2/gpu:1"))
    assert spec.to_string() == "/job:ps/task:2/device:GPU:1"
    merged = DeviceSpec.from_string("/job:a/cpu:0").make_merged_spec("/job:b")
    assert merged.to_string() == "/job:b/device:CPU:0"
    assert DeviceSpec(job="w", task=1).to_string() == "/job:w/task:1"


def test_canonical_device_fills_defaults():
    assert canonical_device("/job:ps/task:1", "worker", 0) == "/job:ps/replica:0/task:1/device:CPU:0"
    assert canonical_device("/gpu:1", "worker", 3) == "/job:worker/replica:0/task:3/device:GPU:1"
    assert canonical_device("", "local", 0) == "/job:local/replica:0/task:0/device:CPU:0"


def test_nested_device_scopes_merge_inner_over_outer(g):
    with g.device("/job:worker/task:1"):
        a = ops.constant(1.0)
        with g.device("/gpu:0"):
            b = ops.constant(1.0)
            with g.device("/job:ps"):
                c = ops.constant(1.0)
        with g.device("/task:3/cpu:0"):
            d = ops.constant(1.0)
        with g.device(None):
            e = ops.constant(1.0)
            with g.device("/cpu:0"):
                f = ops.constant(1.0)
    assert a.device == "/job:worker/task:1"
    assert b.device == "/job:worker/task:1/device:GPU:0"
    assert c.device == "/job:ps/task:1/device:GPU:0"
    assert d.device == "/job:worker/task:3/device:CPU:0"
    assert e.device == "" and f.device == "/device:CPU:0"


def test_device_function_receives_the_operation_and_merges(g):
    seen = []

    def chooser(op):
        seen.append((op.type, op.name, op.device, op.node_def.op))
        base = "/job:ps/task:0" if op.type == "VariableV2" else "/job:worker"
        # like replica_device_setter: the fields already set on the op win
        return DeviceSpec.from_string(base).make_merged_spec(op.device)

    from distrib.ops.variables import Variable
    with g.device(chooser):
        with g.device("/task:2"):  # the inner scope is applied first
            w = Variable([1.0, 2.0], name="w")
        x = ops.constant(3.0, name="x")
    assert w.device == "/job:ps/task:2"
    assert x.device == "/job:worker"
    assert ("VariableV2", "w", "/task:2", "VariableV2") in seen
    assert w.initializer.device == w.device  # the Assign is colocated, not re-chosen


def test_bad_device_in_scope_fails_at_the_with(g):
    with pytest.raises(InvalidArgumentError, match="/jb:ps"):
        with g.device("/jb:ps"):
            pass


def test_colocate_with_ignores_outer_devices(g):
    with g.device("/job:ps/task:1"):
        a = ops.constant(1.0, name="a")
    with g.device("/job:worker/task:0"):
        with g.colocate_with(a.op):
            b = ops.identity(a)
        c = ops.identity(a)
    assert b.device == "/job:ps/task:1" and c.device == "/job:worker/task:0"


# -- names ---------------------------------------------------------------------------
def test_unique_names_and_nested_scopes(g):
    assert ops.constant(1, name="c").op.name == "c"
    assert ops.constant(1, name="c").op.name == "c_1"
    with name_scope("layer1") as scope:
        assert scope == "layer1/"
        assert ops.constant(1, name="w").name == "layer1/w:0"
        with name_scope("inner"):
            assert ops.constant(1).op.name == "layer1/inner/Const"
        with name_scope("abs/") as s2:  # an absolute scope is used as is
            assert s2 == "abs/" and ops.constant(1, name="k").op.name == "abs/k"
        with name_scope(None):
            assert ops.constant(1, name="top").op.name == "top"
    with name_scope("layer1") as again:
        assert again == "layer1_1/"
    assert g.get_name_scope() == ""


def test_invalid_names_are_rejected(g):
    with pytest.raises(InvalidArgumentError, match="valid op name"):
        ops.constant(1, name="bad name!")
    with pytest.raises(InvalidArgumentError, match="scope"):
        with name_scope("-x"):
            pass


def test_name_scopes_are_per_thread(g):
    names = {}

    def build(tag):
        with g.as_default(), name_scope(tag):
            names[tag] = ops.constant(1.0, name="v").op.name

    with name_scope("main"):
        t = threading.Thread(target=build, args=("replica",))
        t.start()
        t.join()
        names["main"] = ops.constant(1.0, name="v").op.name
    assert names == {"replica": "replica/v", "main": "main/v"}


# -- control dependencies -------------------------------------------------------------
def test_control_dependencies_nest_and_clear(g):
    a, b = ops.no_op(name="a"), ops.constant(1.0, name="b")
    with g.control_dependencies([a]):
        c = ops.constant(2.0, name="c")
        with g.control_dependencies([b]):  # a tensor stands for its op
            d = ops.constant(3.0, name="d")
            with g.control_dependencies(None):
                e = ops.constant(4.0, name="e")
    assert c.op.control_inputs == (a,)
    assert set(d.op.control_inputs) == {a, b.op}
    assert e.op.control_inputs == ()
    assert "^a" in g.as_graph_def()["nodes"][3]["inputs"]


def test_group_runs_after_all_inputs(g):
    x, y = ops.constant(1.0), ops.no_op()
    grp = ops.group(x, y, name="both")
    assert grp.type == "NoOp" and set(grp.control_inputs) == {x.op, y}
    assert grp.name == "both"


# -- collections, lookup, default graph -----------------------------------------------
def test_collections(g):
    g.add_to_collection("things", 1)
    g.add_to_collections(["things", "other"], 2)
    assert g.get_collection("things") == [1, 2] and g.get_collection("other") == [2]
    ref = g.get_collection_ref("things")
    ref.append(3)
    assert g.get_collection("things") == [1, 2, 3]
    copy = g.get_collection("things")
    copy.append(99)
    assert 99 not in g.get_collection("things")
    assert g.get_collection("missing") == []
    assert GraphKeys.GLOBAL_VARIABLES == "variables" and GraphKeys.TRAIN_OP == "train_op"


def test_get_collection_filters_by_scope(g):
    from distrib.ops.variables import Variable
    with name_scope("enc"):
        v1 = Variable(1.0, name="v")
    v2 = Variable(2.0, name="v")
    assert g.get_collection(GraphKeys.GLOBAL_VARIABLES, scope="enc") == [v1]
    assert g.get_collection(GraphKeys.GLOBAL_VARIABLES) == [v1, v2]


def test_lookup_by_name(g):
    c = ops.constant([1.0, 2.0], name="c")
    assert g.get_tensor_by_name("c:0") is c and g.get_operation_by_name("c") is c.op
    with pytest.raises(NotFoundError, match="'nope:0'"):
        g.get_tensor_by_name("nope:0")
    with pytest.raises(NotFoundError, match="'nope'"):
        g.get_operation_by_name("nope")
    with pytest.raises(NotFoundError, match="1 output"):
        g.get_tensor_by_name("c:1")
    with pytest.raises(InvalidArgumentError, match="tensor name"):
        g.get_tensor_by_name("c")
    assert g.as_graph_element("c:0") is c and g.as_graph_element("c") is c.op


def test_version_bumps_on_every_change(g):
    v0 = g.version
    c = ops.constant(1.0)
    v1 = g.version
    assert v1 > v0
    c.op._add_control_input(ops.no_op())
    assert g.version > v1 + 1


def test_finalize_forbids_changes(g):
    ops.constant(1.0)
    g.finalize()
    with pytest.raises(RuntimeError, match="finalized"):
        ops.constant(2.0)
    with pytest.raises(RuntimeError, match="finalized"):
        g.add_to_collection("x", 1)


def test_default_graph_stack_and_reset():
    outer = get_default_graph()
    inner = Graph()
    with inner.as_default():
        assert get_default_graph() is inner
        assert ops.constant(1.0).graph is inner
        with pytest.raises(FailedPreconditionError, match="as_default"):
            reset_default_graph()
    assert get_default_graph() is outer
    reset_default_graph()
    assert get_default_graph() is not outer and len(get_default_graph()) == 0


def test_default_graph_stack_is_per_thread():
    mine = Graph()
    seen = []
    with mine.as_default():
        t = threading.Thread(target=lambda: seen.append(get_default_graph()))
        t.start()
        t.join()
    assert seen[0] is not mine


def test_ops_from_two_graphs_do_not_mix():
    g1, g2 = Graph(), Graph()
    with g1.as_default():
        a = ops.constant(1.0)
    with g2.as_default():
        b = ops.constant(1.0)
        with pytest.raises(InvalidArgumentError, match="another graph"):
            ops.add(b, a)
    # a Python operand joins the tensor's graph, whatever graph is the default
    assert (a + 1.0).graph is g1


def test_tensor_shape_basics():
    s = TensorShape([None, 3])
    assert s.rank == 2 and s.as_list() == [None, 3] and not s.is_fully_defined()
    assert s.is_compatible_with([5, 3]) and not s.is_compatible_with([5, 4])
    assert s.merge_with([5, None]) == TensorShape([5, 3])
    assert TensorShape(None).rank is None and TensorShape(None).as_list() is None
    assert TensorShape([2, 3]).num_elements() == 6 and str(s) == "[?, 3]"
