"""Op builders: conversion, static shapes, build-time errors, operators, and values."""
from __future__ import annotations

import numpy as np
import pytest

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Graph
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.runtime.step.local_eval import evaluate


@pytest.fixture
def g():
    graph = Graph()
    with graph.as_default():
        yield graph


def run(fetches, feed=None):
    return evaluate(fetches, feed)


# -- conversion and constants --------------------------------------------------------
def test_constant_dtype_inference_like_tf(g):
    assert ops.constant(1).dtype == dtypes.int32
    assert ops.constant(1.5).dtype == dtypes.float32
    assert ops.constant([True, False]).dtype == dtypes.bool
    assert ops.constant(np.zeros(2)).dtype == dtypes.float64  # numpy keeps its dtype
    assert ops.constant(2**40).dtype == dtypes.int64
    assert ops.constant(["a", "bc"]).dtype == dtypes.string
    assert ops.constant([1, 2], dtype=dtypes.float64).dtype == dtypes.float64


def test_constant_shape_reshapes_or_broadcasts(g):
    a = ops.constant([1, 2, 3, 4, 5, 6], shape=[2, 3])
    b = ops.constant(7.0, shape=[2, 2])
    assert a.shape.as_list() == [2, 3] and b.shape.as_list() == [2, 2]
    va, vb = run([a, b])
    np.testing.assert_array_equal(va, [[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(vb, np.full((2, 2), 7.0, np.float32))
    with pytest.raises(InvalidArgumentError, match=r"\[5\].*\[2, 3\]"):
        ops.constant([1, 2, 3, 4, 5], shape=[2, 3])


def test_bad_python_values_are_rejected(g):
    with pytest.raises(InvalidArgumentError, match="int32"):
        ops.constant(1.5, dtype=dtypes.int32)
    with pytest.raises(InvalidArgumentError, match="rectangular"):
        ops.constant([[1, 2], [3]])
    with pytest.raises(InvalidArgumentError, match="float32"):
        ops.convert_to_tensor(ops.constant(1), dtype=dtypes.float32)


def test_string_constant_round_trips(g):
    out = run(ops.constant(["x", "yz"]))
    assert list(out) == ["x", "yz"]


def test_placeholder_shapes(g):
    assert ops.placeholder(dtypes.float32, [None, 784]).shape.as_list() == [None, 784]
    assert ops.placeholder(dtypes.float32).shape.rank is None
    x = ops.placeholder(dtypes.float32, [None, 3])
    np.testing.assert_array_equal(run(x * 2.0, {x: np.ones((2, 3))}), np.full((2, 3), 2.0))


# -- operators ------------------------------------------------------------------------
def test_python_operators_including_reflected(g):
    c = ops.constant([[1.0, 2.0], [3.0, 4.0]])
    exprs = [100 + c, c + 1, 2.0 * c, c * 2, 10 - c, c - 1, 1.0 / c, c / 2, -c, c @ c,
             c ** 2, 2.0 ** c, abs(-c), np.ones((2, 2)) + c]
    values = run(exprs)
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    expected = [100 + x, x + 1, 2 * x, x * 2, 10 - x, x - 1, 1 / x, x / 2, -x, x @ x, x ** 2,
                2.0 ** x, x, 1 + x]
    for got, want, e in zip(values, expected, exprs):
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=e.op.type)
        assert e.dtype == dtypes.float32


def test_comparison_operators_and_logic(g):
    a, b = ops.constant([1, 5, 3]), ops.constant([2, 5, 1])
    lt, gt, le, ge = run([a < b, a > b, a <= b, a >= b])
    np.testing.assert_array_equal(lt, [True, False, False])
    np.testing.assert_array_equal(gt, [False, False, True])
    np.testing.assert_array_equal(le, [True, True, False])
    np.testing.assert_array_equal(ge, [False, True, True])
    t, f = ops.constant([True, True, False]), ops.constant([True, False, False])
    land, lor, lnot = run([t & f, t | f, ~f])
    np.testing.assert_array_equal(land, [True, False, False])
    np.testing.assert_array_equal(lor, [True, True, False])
    np.testing.assert_array_equal(lnot, [False, True, True])


def test_tensor_equality_is_identity_so_tensors_hash(g):
    a, b = ops.constant(1.0), ops.constant(1.0)
    assert (a == a) is True and (a == b) is False and a != b
    assert {a: 1, b: 2}[a] == 1
    with pytest.raises(TypeError, match="bool"):
        bool(a)


def test_python_scalar_takes_the_tensor_dtype(g):
    x = ops.constant([1.0, 2.0], dtype=dtypes.float64)
    assert (x + 1).dtype == dtypes.float64 and (2 * x).dtype == dtypes.float64
    i = ops.constant([1, 2])
    assert (i + 1).dtype == dtypes.int32
    with pytest.raises(InvalidArgumentError, match="int32"):
        _ = i + 1.5
    s = x + 1
    assert s.op.inputs[1].op.name == s.op.name + "/y"  # TF's layout for converted operands


# -- static shapes and errors ---------------------------------------------------------
def test_matmul_shape_error_names_op_and_both_shapes(g):
    a, b = ops.ones([2, 3]), ops.ones([2, 3])
    with pytest.raises(InvalidArgumentError) as info:
        ops.matmul(a, b, name="mm")
    msg = str(info.value)
    assert "'mm'" in msg and "[2, 3] x b [2, 3]" in msg
    assert ops.matmul(a, b, transpose_b=True).shape.as_list() == [2, 2]
    assert ops.matmul(a, b, transpose_a=True).shape.as_list() == [3, 3]


def test_add_dtype_mismatch_is_an_error(g):
    with pytest.raises(InvalidArgumentError, match="float32.*int32"):
        ops.add(ops.ones([2]), ops.ones([2], dtype=dtypes.int32))


def test_broadcast_shape_inference_and_errors(g):
    x = ops.placeholder(dtypes.float32, [None, 3])
    assert (x + ops.ones([3])).shape.as_list() == [None, 3]
    assert (ops.ones([4, 1]) * ops.ones([1, 5])).shape.as_list() == [4, 5]
    assert (x + ops.placeholder(dtypes.float32)).shape.rank is None
    with pytest.raises(InvalidArgumentError, match=r"'bad'.*\[2, 3\].*\[4\]"):
        ops.add(ops.ones([2, 3]), ops.ones([4]), name="bad")


@pytest.mark.parametrize("fn,shape", [
    (lambda x: ops.reduce_sum(x), []),
    (lambda x: ops.reduce_sum(x, axis=1), [None]),
    (lambda x: ops.reduce_mean(x, axis=-1, keepdims=True), [None, 1]),
    (lambda x: ops.reduce_max(x, axis=[0, 1]), []),
    (lambda x: ops.argmax(x), [3]),
    (lambda x: ops.reshape(x, [-1]), [None]),
    (lambda x: ops.transpose(x), [3, None]),
    (lambda x: ops.shape(x), [2]),
    (lambda x: nn.bias_add(x, ops.ones([3])), [None, 3]),
])
def test_static_shapes(g, fn, shape):
    x = ops.placeholder(dtypes.float32, [None, 3])
    assert fn(x).shape.as_list() == shape


def test_more_shape_errors_name_the_op(g):
    x = ops.ones([2, 3])
    with pytest.raises(InvalidArgumentError, match=r"Reshape.*\[2, 3\].*\[4\]"):
        ops.reshape(x, [4])
    with pytest.raises(InvalidArgumentError, match="axis 2 is out of range"):
        ops.reduce_sum(x, axis=2)
    with pytest.raises(InvalidArgumentError, match="BiasAdd.*bias length 2"):
        nn.bias_add(x, ops.ones([2]))
    with pytest.raises(InvalidArgumentError, match="floating-point"):
        ops.log(ops.constant([1, 2]))
    with pytest.raises(InvalidArgumentError, match="labels and logits disagree"):
        nn.softmax_cross_entropy_with_logits(labels=ops.ones([2, 4]), logits=x)
    with pytest.raises(InvalidArgumentError, match="permutation"):
        ops.transpose(x, [0, 0])


def test_nn_cross_entropy_needs_keywords(g):
    with pytest.raises(InvalidArgumentError, match="named arguments"):
        nn.softmax_cross_entropy_with_logits(ops.ones([2, 3]), ops.ones([2, 3]))


# -- values through the real kernels -------------------------------------------------------
def test_math_and_reductions_values(g):
    x = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], np.float32)
    c = ops.constant(x)
    out = run([ops.reduce_sum(c), ops.reduce_mean(c, axis=0), ops.reduce_max(c, axis=1),
               ops.reduce_min(c, axis=1, keepdims=True), ops.reduce_prod(c, axis=1),
               ops.argmax(c), ops.argmax(c, axis=1), ops.maximum(c, 0.0), ops.square(c),
               ops.cast(c, dtypes.int32), ops.divide(ops.constant(3), ops.constant(2)),
               ops.zeros_like(c), ops.ones_like(c), ops.equal(c, 1.0),
               ops.not_equal(c, 1.0)])
    want = [x.sum(), x.mean(0), x.max(1), x.min(1, keepdims=True), x.prod(1), x.argmax(0),
            x.argmax(1), np.maximum(x, 0), x ** 2, x.astype(np.int32), 1.5, np.zeros_like(x),
            np.ones_like(x), x == 1.0, x != 1.0]
    for got, w in zip(out, want):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    assert out[10].dtype == np.float64  # integer division casts first (TF truediv)


def test_nn_values(g):
    logits = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    labels = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    z = ops.constant(logits)
    soft, logsoft, xent, sparse, relu, sig, tanh = run([
        nn.softmax(z), nn.log_softmax(z),
        nn.softmax_cross_entropy_with_logits(labels=labels, logits=z),
        nn.sparse_softmax_cross_entropy_with_logits(labels=[1, 0], logits=z),
        nn.relu(z), nn.sigmoid(z), ops.tanh(z)])
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(soft, p)
    np.testing.assert_allclose(logsoft, np.log(p))
    np.testing.assert_allclose(xent, -(labels * np.log(p)).sum(1))
    np.testing.assert_allclose(sparse, -(labels * np.log(p)).sum(1))
    np.testing.assert_allclose(relu, np.maximum(logits, 0))
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-logits)))
    np.testing.assert_allclose(tanh, np.tanh(logits))


def test_random_ops_shapes_and_seeds(g):
    a = ops.random_normal([3, 2], mean=1.0, stddev=0.5, seed=3, dtype=dtypes.float64)
    b = ops.random_uniform([1000], minval=-1.0, maxval=2.0, seed=4)
    assert a.shape.as_list() == [3, 2] and a.op.get_attr("seed") == 3
    va, vb = run([a, b])
    assert va.shape == (3, 2) and va.dtype == np.float64
    assert vb.min() >= -1.0 and vb.max() < 2.0
    assert ops.random_uniform([2]).op.get_attr("maxval") == 1.0
    with pytest.raises(InvalidArgumentError, match="maxval"):
        ops.random_uniform([2], dtype=dtypes.int32)


def test_add_n_and_identity(g):
    xs = [ops.constant(float(i)) for i in range(4)]
    assert run(ops.add_n(xs)) == 6.0
    assert run(ops.identity(xs[3])) == 3.0


def test_op_attrs_follow_the_catalogue(g):
    x = ops.placeholder(dtypes.float32, [None, 3], name="x")
    mm = ops.matmul(x, ops.ones([3, 2]), transpose_b=False)
    assert mm.op.attrs == {"transpose_a": False, "transpose_b": False}
    s = ops.reduce_sum(x, axis=-1, keepdims=True)
    assert s.op.attrs == {"axis": 1, "keepdims": True}
    assert x.op.attrs == {"dtype": "float32", "shape": [None, 3]}
    assert x.op.get_attr("dtype") is dtypes.float32
    cast = ops.cast(x, dtypes.float64)
    assert cast.op.type == "Cast" and cast.op.attrs["dtype"] == "float64"
    assert ops.cast(x, dtypes.float32) is x
