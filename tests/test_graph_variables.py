"""Variables: their ops (docs/ops.md), names, placement, collections and values."""
from __future__ import annotations

import numpy as np
import pytest

from distrib.errors import FailedPreconditionError, InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Graph, GraphKeys, name_scope
from distrib.ops import math_ops as ops
from distrib.ops.variables import (
    Variable,
    global_variables,
    global_variables_initializer,
    is_variable_initialized,
    trainable_variables,
    variables_initializer,
)
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate


@pytest.fixture
def g():
    graph = Graph()
    with graph.as_default():
        yield graph


@pytest.fixture
def store():
    return VariableStore()  # a fresh store per test: variables do not leak between tests


def test_variable_ops_follow_the_catalogue(g):
    with name_scope("layer1"):
        w = Variable(ops.zeros([2, 3]), name="w")
    assert w.name == "layer1/w:0" and w.op.type == "VariableV2"
    assert w.op.attrs == {"var": "layer1/w", "dtype": "float32", "shape": [2, 3]}
    assert w.initializer.type == "Assign" and w.initializer.name == "layer1/w/Assign"
    assert w.initializer.attrs == {"var": "layer1/w", "validate_shape": True}
    assert w.initializer.inputs[0] is w.initial_value
    assert w.value().op.type == "Identity" and w.value().name == "layer1/w/read:0"
    assert w.shape.as_list() == [2, 3] and w.dtype == dtypes.float32 and w.graph is g
    assert w.shared_name == "layer1/w"


def test_same_name_twice_gets_a_unique_shared_name(g):
    a, b = Variable(1.0, name="v"), Variable(2.0, name="v")
    assert (a.op.name, b.op.name) == ("v", "v_1")
    assert b.op.get_attr("var") == "v_1"


def test_variables_are_placed_at_creation_and_updates_colocated(g):
    with g.device("/job:ps/task:1"):
        w = Variable([1.0, 2.0], name="w")
    with g.device("/job:worker/task:0"):
        up = w.assign_add([1.0, 1.0])
        read = w.read_value()
        y = w * 2.0
    for op in (w.op, w.initializer, w.value().op, up.op, read.op):
        assert op.device == "/job:ps/task:1", op.name
    assert y.op.device == "/job:worker/task:0"
    assert up.op.attrs == {"var": "w"}


def test_collections_and_trainable(g):
    a = Variable(1.0, name="a")
    b = Variable(2.0, name="b", trainable=False)
    c = Variable(3.0, name="c", collections=["mine"])
    assert global_variables() == [a, b]
    assert trainable_variables() == [a, c]  # trainable joins TRAINABLE_VARIABLES anyway (TF)
    assert g.get_collection("mine") == [c]
    assert GraphKeys.GLOBAL_VARIABLES in g.get_all_collection_keys()


def test_initializers_group_and_values(g, store):
    w = Variable([[1.0, 2.0]], name="w")
    b = Variable(ops.constant(5, dtype=dtypes.int64), name="b")
    init = global_variables_initializer()
    assert init.name == "init" and init.type == "NoOp"
    assert set(init.control_inputs) == {w.initializer, b.initializer}
    with pytest.raises(FailedPreconditionError, match="w"):
        evaluate(w.value(), variables=store)
    assert not evaluate(is_variable_initialized(w), variables=store)
    evaluate(init, variables=store)
    assert evaluate(is_variable_initialized(w), variables=store)
    np.testing.assert_array_equal(evaluate(w, variables=store), [[1.0, 2.0]])
    assert evaluate(b, variables=store) == 5
    assert variables_initializer([]).type == "NoOp"


def test_assign_ops_and_operators(g, store):
    v = Variable([1.0, 2.0], name="v")
    evaluate(v.initializer, variables=store)
    assert list(evaluate(v.assign([5.0, 6.0]), variables=store)) == [5.0, 6.0]
    assert list(evaluate(v.assign_add([1.0, 1.0]), variables=store)) == [6.0, 7.0]
    assert list(evaluate(v.assign_sub([2.0, 2.0]), variables=store)) == [4.0, 5.0]
    np.testing.assert_array_equal(evaluate([v + 1, 10.0 * v, -v, ops.matmul(
        ops.reshape(v, [1, 2]), ops.ones([2, 1]))], variables=store)[:3],
        [[5.0, 6.0], [40.0, 50.0], [-4.0, -5.0]])


def test_read_value_respects_control_dependencies(g, store):
    v = Variable(1.0, name="v")
    evaluate(v.initializer, variables=store)
    up = v.assign_add(10.0)
    with g.control_dependencies([up]):
        after = v.read_value()
    assert after.op.control_inputs == (up.op,) and after.op.attrs["var"] == "v"
    assert evaluate(after, variables=store) == 11.0
    assert evaluate(v.read_value(), variables=store) == 11.0


def test_initializer_ignores_surrounding_control_dependencies(g):
    gate = ops.no_op(name="gate")
    with g.control_dependencies([gate]):
        v = Variable(1.0, name="v")
    assert v.initializer.control_inputs == ()


def test_shape_errors(g):
    v = Variable([1.0, 2.0], name="v")
    with pytest.raises(InvalidArgumentError, match=r"\[3\].*\[2\]"):
        v.assign([1.0, 2.0, 3.0])
    with pytest.raises(InvalidArgumentError, match="validate_shape=False"):
        Variable(ops.placeholder(dtypes.float32, [None]), name="p")
    free = Variable(ops.placeholder(dtypes.float32, [None]), validate_shape=False, name="q")
    assert free.shape.rank is None  # unknown, as TF: assignments may change it
    with pytest.raises(InvalidArgumentError, match="float32"):
        Variable(ops.constant(1.0), dtype=dtypes.int32)


def test_callable_initial_value_and_dtype(g, store):
    v = Variable(lambda: [1, 2], dtype=dtypes.float64, name="v")
    assert v.dtype == dtypes.float64
    evaluate(v.initializer, variables=store)
    assert evaluate(v, variables=store).dtype == np.float64


def test_variable_is_hashable_and_fetchable_by_graph(g):
    v = Variable(1.0, name="v")
    assert {v: 1}[v] == 1
    assert g.as_graph_element(v) is v.value()
    assert ops.convert_to_tensor(v) is v.value()
