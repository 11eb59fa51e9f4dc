"""Gradients against central finite differences, in float64, for every registered gradient.

Each case builds ``out = f(inputs)`` from placeholders, differentiates
``loss = sum(out * W)`` (W random, so every output element matters with its
own weight) and compares ``dt.gradients`` with ``(loss(x+e) - loss(x-e)) / 2e``,
all evaluated by the real kernels through ``distrib.runtime.step.local_eval.evaluate``.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distrib.errors import NotFoundError
from distrib.framework import dtypes
from distrib.framework.graph import Graph
from distrib.framework.op_def import op_def, op_defs, set_gradient
from distrib.ops import math_ops as ops
from distrib.ops import nn
from distrib.ops.gradients import BUILTIN_FAMILIES, gradients, install_builtin_gradients, register_gradient
from distrib.ops.variables import Variable, global_variables_initializer
from distrib.runtime.step.local_eval import evaluate
from distrib.summary.summary_ops import SUMMARY_OP_TYPES
from tests.helpers import ROOT, child_env

RNG = np.random.default_rng(7)
EPS = 1e-6


def _rand(*shape, low=-2.0, high=2.0):
    return np.asarray(RNG.uniform(low, high, size=shape))


def _away_from_zero(*shape):
    return np.asarray(RNG.uniform(0.3, 2.0, size=shape) * RNG.choice([-1.0, 1.0], size=shape))


def check_gradient(build, values, feed_shapes=None, dtype=dtypes.float64, rtol=1e-5, atol=1e-6):
    """Compare dt.gradients of sum(build(*xs) * W) with finite differences; returns the graph."""
    g = Graph()
    with g.as_default():
        shapes = feed_shapes or [v.shape for v in values]
        xs = [ops.placeholder(dtype, shape=list(s)) for s in shapes]
        out = build(*xs)
        feed = dict(zip(xs, values))
        out_value = evaluate(out, feed, graph=g)
        weights = ops.constant(RNG.standard_normal(np.shape(out_value)), dtype=out.dtype)
        loss = ops.reduce_sum(ops.multiply(out, weights))
        grads = gradients(loss, xs)
        analytic = evaluate(grads, feed, graph=g)
        for i, x_value in enumerate(values):
            numeric = np.zeros_like(x_value, dtype=np.float64)
            for j in np.ndindex(x_value.shape):
                plus, minus = x_value.copy(), x_value.copy()
                plus[j] += EPS
                minus[j] -= EPS
                lp = evaluate(loss, {**feed, xs[i]: plus}, graph=g)
                lm = evaluate(loss, {**feed, xs[i]: minus}, graph=g)
                numeric[j] = (lp - lm) / (2 * EPS)
            np.testing.assert_allclose(analytic[i], numeric, rtol=rtol, atol=atol,
                                       err_msg=f"input {i} of {out.op.type}")
    return g


UNARY = {
    "neg": (ops.negative, _rand),
    "log": (ops.log, lambda *s: RNG.uniform(0.5, 3.0, size=s)),
    "exp": (ops.exp, _rand),
    "square": (ops.square, _rand),
    "sqrt": (ops.sqrt, lambda *s: RNG.uniform(0.5, 3.0, size=s)),
    "abs": (ops.abs, _away_from_zero),
    "relu": (nn.relu, _away_from_zero),
    "sigmoid": (nn.sigmoid, _rand),
    "tanh": (nn.tanh, _rand),
    "identity": (ops.identity, _rand),
    "softmax": (nn.softmax, _rand),
    "log_softmax": (nn.log_softmax, _rand),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient_matches_finite_differences(name):
    fn, gen = UNARY[name]
    check_gradient(fn, [gen(2, 3)])


BINARY = {
    "add_broadcast_row": (ops.add, (2, 3), (3,)),
    "add_scalar": (lambda a, b: a + b, (2, 3), ()),
    "sub_broadcast_col": (ops.subtract, (2, 3), (2, 1)),
    "mul_broadcast": (ops.multiply, (1, 3), (2, 1)),
    "mul_same": (lambda a, b: a * b, (2, 3), (2, 3)),
    "div_broadcast": (ops.divide, (2, 3), (3,)),
    "maximum": (ops.maximum, (2, 3), (2, 3)),
    "minimum_broadcast": (ops.minimum, (2, 3), (3,)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient_with_broadcasting(name):
    fn, sa, sb = BINARY[name]
    a = _away_from_zero(*sa)
    b = np.asarray(_away_from_zero(*sb) + 0.05)  # ties would make max/min non-differentiable
    check_gradient(fn, [a, b])


def test_pow_gradient_both_inputs():
    x = RNG.uniform(0.5, 2.0, size=(2, 3))
    y = RNG.uniform(-1.5, 2.5, size=(2, 3))
    check_gradient(ops.pow, [x, y])


def test_pow_gradient_for_nonpositive_base_is_finite():
    g = Graph()
    with g.as_default():
        x = ops.constant([-2.0, 0.0, 3.0], dtype=dtypes.float64)
        y = ops.constant([2.0, 2.0, 2.0], dtype=dtypes.float64)
        gx, gy = evaluate(gradients(ops.reduce_sum(ops.pow(x, y)), [x, y]), graph=g)
    np.testing.assert_allclose(gx, [-4.0, 0.0, 6.0])
    np.testing.assert_allclose(gy, [0.0, 0.0, 9.0 * np.log(3.0)])


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_gradient_all_transposes(ta, tb):
    a = _rand(*((3, 2) if ta else (2, 3)))
    b = _rand(*((4, 3) if tb else (3, 4)))
    check_gradient(lambda x, y: ops.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


def test_bias_add_gradient():
    check_gradient(nn.bias_add, [_rand(3, 4), _rand(4)])


REDUCTIONS = {
    "sum_all": (ops.reduce_sum, None, False),
    "sum_axis0": (ops.reduce_sum, 0, False),
    "sum_axis_neg_keep": (ops.reduce_sum, -1, True),
    "sum_two_axes": (ops.reduce_sum, [0, 2], False),
    "mean_all": (ops.reduce_mean, None, False),
    "mean_axis1_keep": (ops.reduce_mean, 1, True),
    "max_axis1": (ops.reduce_max, 1, False),
    "max_all_keep": (ops.reduce_max, None, True),
    "min_axis_list": (ops.reduce_min, [0, 1], False),
    "prod_all": (ops.reduce_prod, None, False),
    "prod_axis1_keep": (ops.reduce_prod, 1, True),
    "prod_two_axes": (ops.reduce_prod, [0, 2], False),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_gradient(name):
    fn, axis, keep = REDUCTIONS[name]
    check_gradient(lambda x: fn(x, axis=axis, keepdims=keep), [_rand(2, 3, 2)])


def test_max_gradient_splits_ties_evenly():
    g = Graph()
    with g.as_default():
        x = ops.constant([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype=dtypes.float64)
        (gx,) = evaluate(gradients(ops.reduce_max(x, axis=1), [x]), graph=g)
    np.testing.assert_allclose(gx, [[0, 0.5, 0.5], [1, 0, 0]])


@pytest.mark.parametrize("row", [[0.0, 2.0, 3.0, 4.0], [2.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
def test_prod_gradient_where_the_group_holds_zeros(row):
    # the product of the other elements, which y / x (0/0 at a zero) cannot give
    x_value = np.array([row, [1.5, -2.0, 0.5, 3.0]])
    expected = np.array([[np.prod(np.delete(r, i)) for i in range(len(r))] for r in x_value])
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float64, [2, 4])
        (gx,) = gradients(ops.reduce_prod(x, axis=1), [x])
        np.testing.assert_array_equal(evaluate(gx, {x: x_value}, graph=g), expected)
    # and where the group is every element, through finite differences too
    check_gradient(ops.reduce_prod, [np.array([[0.0, 2.0], [-1.5, 3.0]])])


def test_sign_gradient_is_zeros_not_a_stop():
    # x reached only through a Sign: zeros, as in TF (it was None)
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float64, [3])
        (gx,) = gradients(ops.reduce_sum(ops.sign(x)), [x])
        assert gx is not None
        np.testing.assert_array_equal(evaluate(gx, {x: [-2.0, 0.0, 3.0]}, graph=g), [0.0, 0.0, 0.0])


def test_mean_gradient_with_unknown_batch_dimension():
    check_gradient(lambda x: ops.reduce_mean(x, axis=0), [_rand(4, 3)], feed_shapes=[[None, 3]])


def test_broadcast_gradient_with_unknown_dims():
    check_gradient(ops.add, [_rand(4, 3), _rand(3)], feed_shapes=[[None, 3], [None]])


def _op_types(g):
    return [op.type for op in g.get_operations()]


def test_mean_gradient_with_unknown_batch_is_one_op():
    # the count each output averaged is found at run time by the spreading op
    # itself: no Shape/Prod/Cast/Maximum/RealDiv chain per mean
    g = check_gradient(lambda x: ops.reduce_mean(x), [_rand(5, 3)], feed_shapes=[[None, 3]])
    types = _op_types(g)
    means = [op for op in g.get_operations() if op.type == "BroadcastToShapeOf"
             and op.get_attr("mean")]
    assert len(means) == 1
    assert not {"Shape", "Prod", "Maximum", "RealDiv"} & set(types)


def test_mean_of_an_empty_batch_has_an_empty_gradient():
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float64, [None, 3])
        (gx,) = gradients(ops.reduce_mean(x, axis=1), [x])
        out = evaluate(gx, {x: np.zeros((0, 3))}, graph=g)
    assert out.shape == (0, 3)


def test_second_order_gradient_of_a_mean_with_unknown_batch():
    check_gradient(_first(lambda x: ops.square(ops.reduce_mean(ops.exp(x), axis=0))),
                   [_rand(4, 2)], feed_shapes=[[None, 2]], rtol=1e-4, atol=1e-5)


def test_dense_layer_bias_gradient_sums_only_the_bias():
    # [None, 3] + [3] is [None, 3] whatever the batch: x's gradient is the
    # output's as it is, and only the bias's is summed
    g = check_gradient(ops.add, [_rand(4, 3), _rand(3)], feed_shapes=[[None, 3], [3]])
    x, b = [op for op in g.get_operations() if op.type == "Placeholder"]
    refs = [op.inputs[1].op for op in g.get_operations() if op.type == "SumToShapeOf"]
    assert b in refs and x not in refs


@pytest.mark.parametrize("sa,sb,shape_a", [
    ((4, 1), (3,), [None, 1]),        # a known 1 is stretched by the other side
    ((4, 1), (3,), [None, None]),     # an unknown dim may be a 1 that stretches
    ((1, 3), (4, 3), [1, 3]),         # the other side has the batch
    ((4, 3), (2, 4, 3), [None, 3]),   # the other side has more dims
])
def test_broadcast_gradient_still_sums_where_the_shape_may_grow(sa, sb, shape_a):
    check_gradient(lambda a, b: a * b, [_away_from_zero(*sa), _away_from_zero(*sb)],
                   feed_shapes=[shape_a, list(sb)])


def test_reshape_and_transpose_gradients():
    check_gradient(lambda x: ops.transpose(ops.reshape(x, [3, -1]), [1, 0]), [_rand(2, 3)])
    check_gradient(lambda x: ops.transpose(x), [_rand(2, 3, 2)])
    check_gradient(lambda x: ops.transpose(x, [1, 2, 0]), [_rand(2, 3, 2)])


def test_reshape_gradient_with_several_unknown_dims_uses_runtime_shape():
    check_gradient(lambda x: ops.reshape(x, [-1]) * 2.0, [_rand(2, 3)], feed_shapes=[[None, None]])


def test_cast_gradient_float_to_float_and_not_from_int():
    # finite differences through float32 are too coarse: check the exact value instead
    g = Graph()
    with g.as_default():
        x = ops.constant([1.0, -2.0], dtype=dtypes.float64)
        weights = ops.constant([0.5, 4.0], dtype=dtypes.float64)
        y = ops.cast(ops.cast(x, dtypes.float32) * 3.0, dtypes.float64)
        (gx,) = gradients(ops.reduce_sum(y * weights), [x])
        assert gx.dtype == dtypes.float64
        np.testing.assert_allclose(evaluate(gx, graph=g), [1.5, 12.0])
        (gi,) = gradients(ops.reduce_sum(ops.cast(ops.cast(x, dtypes.int32), dtypes.float64)), [x])
        assert gi is None


def test_softmax_cross_entropy_gradient_uses_backprop_output():
    labels = RNG.dirichlet(np.ones(4), size=3)
    check_gradient(lambda z: nn.softmax_cross_entropy_with_logits(
        labels=ops.constant(labels), logits=z), [_rand(3, 4)])


def test_sparse_softmax_cross_entropy_gradient():
    check_gradient(lambda z: nn.sparse_softmax_cross_entropy_with_logits(
        labels=ops.constant([0, 3, 1]), logits=z), [_rand(3, 4)])


def test_multiple_paths_are_summed():
    # f = x*x + exp(x) + x: three paths from x
    check_gradient(lambda x: x * x + ops.exp(x) + x, [_rand(2, 2)])


def test_ys_list_is_summed_and_grad_ys_weights():
    g = Graph()
    with g.as_default():
        x = ops.constant([1.0, 2.0], dtype=dtypes.float64)
        y1, y2 = ops.square(x), x * 3.0
        (both,) = gradients([y1, y2], [x])
        (weighted,) = gradients(y1, [x], grad_ys=[ops.constant([10.0, 0.0], dtype=dtypes.float64)])
        b, w = evaluate([both, weighted], graph=g)
    np.testing.assert_allclose(b, [2.0 + 3.0, 4.0 + 3.0])
    np.testing.assert_allclose(w, [20.0, 0.0])


def test_unconnected_x_gets_none():
    g = Graph()
    with g.as_default():
        x, z = ops.placeholder(dtypes.float32, [2]), ops.placeholder(dtypes.float32, [2])
        gx, gz = gradients(ops.reduce_sum(x * 2.0), [x, z])
    assert gz is None and gx is not None


def test_gradient_stops_at_non_differentiable_ops():
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float32, [3])
        y = ops.cast(ops.argmax(ops.reshape(x, [1, 3]), axis=1), dtypes.float32) + x
        (gx,) = gradients(ops.reduce_sum(y), [x])
        np.testing.assert_allclose(evaluate(gx, {x: [1, 5, 2]}, graph=g), [1, 1, 1])


def test_variable_gradient_through_its_reads():
    g = Graph()
    with g.as_default():
        w = Variable(np.array([[1.0, 2.0], [3.0, 4.0]]), name="w")
        x = ops.constant([[1.0, -1.0]], dtype=dtypes.float64)
        loss = ops.reduce_sum(ops.matmul(x, w)) + ops.reduce_sum(w.read_value() * w)
        (gw,) = gradients(loss, [w])
        evaluate(global_variables_initializer(), graph=g)
        value = evaluate(gw, graph=g)
    expected = np.array([[1.0, 1.0], [-1.0, -1.0]]) + 2 * np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(value, expected)


def test_gradient_ops_are_colocated_with_forward_ops():
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float32, [2, 3])
        with g.device("/job:ps/task:0"):
            w = Variable(np.ones((3, 4), np.float32), name="w")
        with g.device("/job:worker/task:1"):
            h = nn.relu(ops.matmul(x, w))
            loss = ops.reduce_sum(h)
        with g.device("/job:worker/task:7"):  # colocation wins over the caller's device scope
            (gw,) = gradients(loss, [w])
    assert gw.op.device == "/job:worker/task:1"  # the MatMul's gradient runs where MatMul ran
    relu_grads = [op for op in g.get_operations() if op.type == "ReluGrad"]
    assert relu_grads and all(op.device == "/job:worker/task:1" for op in relu_grads)
    assert all(op.device != "/job:worker/task:7" for op in g.get_operations())


def test_op_without_gradient_on_path_raises_naming_it():
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float32, [3])
        y = ops.reduce_prod(x, name="product")
        prod_grad = op_def("Prod").gradient
        set_gradient("Prod", None)   # as if Prod had no gradient
        try:
            with pytest.raises(NotFoundError, match="product.*Prod.*register_gradient"):
                gradients(y, [x])
        finally:
            set_gradient("Prod", prod_grad)


def test_register_gradient_extends_the_table():
    g = Graph()
    prod_grad = op_def("Prod").gradient
    try:
        @register_gradient("Prod")
        def _naive_prod_grad(op, grad):  # y / x: the table's entry is what runs
            x, y = op.inputs[0], op.outputs[0]
            return [ops.divide(grad * y, x)]
        with g.as_default():
            x = ops.constant([2.0, 0.0, 4.0], dtype=dtypes.float64)
            (gx,) = gradients(ops.reduce_prod(x), [x])
            with np.errstate(invalid="ignore"):
                got = evaluate(gx, graph=g)
            np.testing.assert_array_equal(got, [0.0, np.nan, 0.0])  # (the real one: [0, 8, 0])
    finally:
        set_gradient("Prod", prod_grad)


def test_every_emitted_differentiable_op_has_a_gradient():
    differentiable = {"Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Pow", "Neg", "Log",
                      "Exp", "Square", "Sqrt", "Abs", "Relu", "Sigmoid", "Tanh", "Identity",
                      "Cast", "MatMul", "BiasAdd", "Softmax", "LogSoftmax",
                      "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
                      "Sum", "Mean", "Max", "Min", "Prod", "Sign", "Reshape", "Transpose",
                      # the ops first-order gradients emit (second order)
                      "SumToShapeOf", "BroadcastToShapeOf", "ReluGrad", "SigmoidGrad",
                      "TanhGrad", "BiasAddGrad"}
    missing = {t for t in differentiable if op_def(t).gradient is None}
    assert not missing


def _first(f, wrt=0):
    """A build function whose output is d(sum f(*xs))/d(xs[wrt]): check_gradient then
    compares that gradient's own gradient (second order) with finite differences."""
    def build(*xs):
        return gradients(ops.reduce_sum(f(*xs)), [xs[wrt]])[0]
    return build


SECOND_ORDER = {
    # (first-order gradient, inputs): each puts one gradient op on the second pass
    "relu (ReluGrad)": (_first(lambda x: ops.square(nn.relu(x))), [_away_from_zero(2, 3)]),
    "sigmoid (SigmoidGrad)": (_first(nn.sigmoid), [_rand(2, 3)]),
    "tanh (TanhGrad)": (_first(nn.tanh), [_rand(2, 3)]),
    "broadcast (SumToShapeOf)": (
        _first(lambda x, c: ops.square(ops.multiply(x, c)), wrt=1), [_rand(2, 3), _rand(2, 1)]),
    "sum (BroadcastToShapeOf)": (
        _first(lambda x: ops.multiply(ops.reduce_sum(ops.square(x), axis=1), ops.reduce_sum(x))),
        [_rand(2, 3)]),
    "mean keepdims": (_first(lambda x: ops.square(ops.reduce_mean(ops.exp(x), axis=0, keepdims=True))),
                      [_rand(3, 2)]),
    "bias_add (BiasAddGrad)": (_first(lambda x, b: ops.square(nn.bias_add(x, b)), wrt=1),
                               [_rand(4, 3), _rand(3)]),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_order_gradient_matches_finite_differences(name):
    build, values = SECOND_ORDER[name]
    check_gradient(build, values, rtol=1e-4, atol=1e-5)


def test_paths_through_non_differentiable_ops_are_not_walked():
    """A row count made from the loss (OnesLike, as Keras' mean) is past a
    non-differentiable op: no gradient ops are built for it, and the gradient
    is the one through the loss alone; dt.stop_gradient stops a path the same way."""
    g = Graph()
    with g.as_default():
        x = ops.placeholder(dtypes.float64, shape=[3])
        per_example = x * x
        rows = ops.reduce_sum(ops.ones_like(per_example))
        loss = ops.reduce_sum(per_example) / ops.maximum(rows, 1.0)
        (dx,) = gradients(loss, [x])
        (stopped,) = gradients(ops.reduce_sum(x * ops.stop_gradient(x * 3.0)), [x])
        names = [op.name for op in g.get_operations()]
    assert not [n for n in names if "Maximum_grad" in n or "OnesLike_grad" in n], names
    value = np.array([1.0, -2.0, 3.0])
    got, got_stopped = evaluate([dx, stopped], {x: value}, graph=g)
    np.testing.assert_allclose(got, 2 * value / 3)
    np.testing.assert_allclose(got_stopped, 3 * value)


# -- the built-in gradients: tables by family, installed in one place ---------------------
def test_the_catalogue_holds_exactly_the_families_tables():
    """Each family's table is what the catalogue holds, no op type is in two
    families (or both differentiable and not), and no other module declares a
    built-in gradient (the summary ops declare theirs, a layer above ops)."""
    seen: dict[str, str] = {}
    for family in BUILTIN_FAMILIES:
        for t in [*family.GRADIENTS, *family.NOT_DIFFERENTIABLE]:
            assert t not in seen, (t, seen.get(t), family.__name__)
            seen[t] = family.__name__
        for t, fn in family.GRADIENTS.items():
            assert op_def(t).gradient is fn and not op_def(t).no_gradient, t
        for t in family.NOT_DIFFERENTIABLE:
            assert op_def(t).no_gradient and op_def(t).gradient is None, t
    with_gradient = {d.name for d in op_defs() if d.gradient is not None}
    assert with_gradient == {t for f in BUILTIN_FAMILIES for t in f.GRADIENTS}
    stopped = {d.name for d in op_defs() if d.no_gradient}
    assert stopped - {t for f in BUILTIN_FAMILIES for t in f.NOT_DIFFERENTIABLE} \
        == set(SUMMARY_OP_TYPES)


def test_install_builtin_gradients_puts_back_a_replaced_builtin():
    prod_grad = op_def("Prod").gradient
    try:
        register_gradient("Prod")(lambda op, g: [g])   # dt.register_gradient, TF's decorator
        assert op_def("Prod").gradient is not prod_grad
        install_builtin_gradients()
        assert op_def("Prod").gradient is prod_grad
    finally:
        set_gradient("Prod", prod_grad)


def test_a_gradient_family_only_defines():
    """A family module's top level holds imports, definitions and assignments: its
    import writes nothing anywhere (distrib.ops.gradients installs the tables)."""
    for family in BUILTIN_FAMILIES:
        tree = ast.parse(Path(family.__file__).read_text())
        for node in tree.body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            assert docstring or isinstance(node, (
                ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign,
                ast.AnnAssign)), (family.__name__, node.lineno, ast.dump(node)[:80])


def test_floor_stops_gradients_without_the_learning_rate_decays_loaded():
    """Floor's no-gradient declaration was made when the learning-rate decays
    loaded (dt.train): before that, a Floor on the path failed the walk."""
    probe = (
        "import sys\n"
        "import distrib as dt\n"
        "from distrib.framework.op_def import op_def\n"
        "assert 'distrib.train.optimizers.learning_rate_decay' not in sys.modules\n"
        "from distrib.ops.math_ops import unary_op\n"
        "x = dt.placeholder(dt.float32, [2])\n"
        "loss = dt.reduce_sum(unary_op('Floor', x, 'Floor')) + dt.reduce_sum(x * 2.0)\n"
        "(gx,) = dt.gradients(loss, [x])\n"
        "print(op_def('Floor').no_gradient, gx is not None)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=child_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "True"]
