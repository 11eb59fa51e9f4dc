"""The everyday TF vocabulary (issue 39 item 3), against TF's own op tests'
expected values and plain numpy references: ``dt.math`` (trigonometry, erf,
floor division, scans, reductions), the activations with their gradients,
``Tensor.__getitem__``, stack/unstack/split/squeeze/tile/range/one_hot/where/
boolean_mask, the clip ops (``clip_ops_test.py``'s numbers), the random ops
(seeded statistics), ``check_numerics``, TF1's remaining optimizers
(``ftrl_test.py``'s and ``proximal_adagrad_test.py``'s numbers, Adadelta
against ``adadelta_test.py``'s numpy rule) and the GPU kernels of the
activations and updates under the CUDA simulator (in a child process).

Gradients are checked against central differences in float64.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import distrib as dt
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate
from tests import background

RNG = np.random.default_rng(3)


class Local:
    """A graph run in this process with a private variable store."""

    def __init__(self) -> None:
        self.graph, self.store = dt.Graph(), VariableStore()

    def __call__(self, fetches, feed_dict=None):
        return evaluate(fetches, feed_dict, graph=self.graph, variables=self.store)


def run1(build, *values):
    """``build(*constants)`` evaluated on ``values``."""
    run = Local()
    with run.graph.as_default():
        out = build(*[dt.constant(v) for v in values])
    return run(out)


def numeric_gradient(build, x: np.ndarray, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(the graph's d sum(build(x)) / dx, central differences) in float64."""
    run = Local()
    with run.graph.as_default():
        ph = dt.placeholder(dt.float64, shape=x.shape)
        y = dt.reduce_sum(build(ph))
        g = dt.gradients(y, ph)[0]
    analytic = run(g, {ph: x})
    numeric = np.zeros_like(x)
    flat = numeric.reshape(-1)
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        d = d.reshape(x.shape)
        flat[i] = (run(y, {ph: x + d}) - run(y, {ph: x - d})) / (2 * eps)
    return analytic, numeric


# -- dt.math -----------------------------------------------------------------------------------
UNARY = [("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("asin", np.arcsin),
         ("acos", np.arccos), ("atan", np.arctan), ("sinh", np.sinh), ("cosh", np.cosh),
         ("asinh", np.arcsinh), ("atanh", np.arctanh), ("log1p", np.log1p),
         ("expm1", np.expm1), ("rsqrt", lambda x: 1 / np.sqrt(x)),
         ("erf", np.vectorize(math.erf)), ("erfc", np.vectorize(math.erfc)),
         ("lgamma", np.vectorize(math.lgamma)), ("reciprocal", lambda x: 1 / x)]


@pytest.mark.parametrize("name,ref", UNARY)
def test_math_unary_matches_numpy_and_differentiates(name, ref):
    x = np.array([0.1, 0.3, 0.45, 0.7, 0.9])   # inside every domain
    fn = getattr(dt.math, name)
    np.testing.assert_allclose(run1(fn, x), ref(x), rtol=1e-10)
    analytic, numeric = numeric_gradient(fn, x)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_and_lgamma_compiled_loops_give_the_per_element_numbers(dtype):
    # Erf/Erfc/Lgamma ran Python's math per element (~100 ns each, gelu's exact form on
    # every step): the numba loops must give the same numbers, poles and specials included
    import kernels
    from kernels.cpu import math_extra

    assert math_extra.JIT.prepare(dtype), "numba is a dependency: the compiled path must load"
    x = np.concatenate([np.linspace(-6, 6, 2001), [0.0, -1.0, -3.0, 0.5, 1e-30, 30.0,
                                                   np.inf, -np.inf, np.nan]]).astype(dtype)
    x = x.reshape(-1, 5)[:, ::2]   # strided: the kernel takes any layout
    for op, fn in (("Erf", math.erf), ("Erfc", math.erfc), ("Lgamma", math.lgamma)):
        def ref(v, fn=fn):
            try:
                return fn(v)
            except ValueError:   # lgamma's poles: TF (and C) give inf
                return math.inf
        want = np.array([ref(float(v)) for v in x.ravel()]).reshape(x.shape).astype(dtype)
        got = kernels.get_kernel(op, kernels.CPU)([x], {})[0]
        assert got.dtype == dtype and got.shape == x.shape
        # (C's lgamma and Python's differ by a few ulp of 1 near lgamma's zeros, x < 0)
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, want, rtol=4 * eps, atol=16 * eps)
    # TF's math_ops_test: lgamma(0.5) = log(sqrt(pi)), lgamma(1) = lgamma(2) = 0
    got = kernels.get_kernel("Lgamma", kernels.CPU)([np.array([0.5, 1.0, 2.0], dtype)], {})[0]
    np.testing.assert_allclose(got, [0.5 * math.log(math.pi), 0, 0], atol=2e-7)


def test_digamma_and_rounding_as_tf():
    # digamma(1) = -Euler's gamma, digamma(0.5) = -gamma - 2 ln 2 (math_ops_test's identities)
    g = 0.5772156649015329
    np.testing.assert_allclose(run1(dt.math.digamma, np.array([1.0, 0.5, 10.0, -0.5])),
                               [-g, -g - 2 * math.log(2), 2.251752589066721, 0.03648997397857652],
                               rtol=1e-10)
    # TF rounds halves to even (math_ops_test's testRounding)
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6])
    np.testing.assert_array_equal(run1(dt.round, x), [-2, -2, -0, 0, 2, 2, 3])
    np.testing.assert_array_equal(run1(dt.math.rint, x), np.rint(x))
    np.testing.assert_array_equal(run1(dt.math.ceil, x), np.ceil(x))


def test_floor_division_and_modulo_take_pythons_signs():
    # math_ops_test's testFloorModInt / testFloorDivide: the signs of Python's // and %
    x = np.array([-7, -7, 7, 7, 0], np.int32)
    y = np.array([2, -2, 2, -2, 3], np.int32)
    np.testing.assert_array_equal(run1(dt.math.floordiv, x, y), x // y)
    np.testing.assert_array_equal(run1(dt.math.floormod, x, y), x % y)
    np.testing.assert_array_equal(run1(dt.math.truncatemod, x, y), np.fmod(x, y))
    fx, fy = x.astype(np.float64) + 0.5, y.astype(np.float64)
    np.testing.assert_allclose(run1(lambda a, b: a // b, fx, fy), fx // fy)
    np.testing.assert_allclose(run1(lambda a, b: a % b, fx, fy), fx % fy)


def test_binary_math_and_their_gradients():
    x, y = np.array([0.0, 1.0, -2.0, 3.0]), np.array([2.0, 0.0, 4.0, -1.0])
    np.testing.assert_allclose(run1(dt.math.divide_no_nan, x, y), [0.0, 0.0, -0.5, -3.0])
    np.testing.assert_allclose(run1(dt.math.xlogy, x, np.abs(y) + 1),
                               [0.0, 0.0, -2 * np.log(5), 3 * np.log(2)])
    np.testing.assert_allclose(run1(dt.math.squared_difference, x, y), (x - y) ** 2)
    np.testing.assert_allclose(run1(dt.math.atan2, x, y), np.arctan2(x, y))
    c = np.array([0.5, -1.5, 2.0])
    for fn in (lambda t: dt.math.atan2(t, c), lambda t: dt.math.squared_difference(c, t),
               lambda t: dt.math.xlogy(c, t * t + 1.0), lambda t: dt.math.floormod(t, 0.7)):
        analytic, numeric = numeric_gradient(fn, np.array([0.3, 1.1, -0.4]))
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_scans_reductions_and_predicates():
    x = np.arange(1.0, 7.0).reshape(2, 3)
    np.testing.assert_allclose(run1(lambda t: dt.cumsum(t, axis=1), x), np.cumsum(x, 1))
    # math_ops_test's cumsum: exclusive [a, b, c] -> [0, a, a+b]; reverse -> [a+b+c, b+c, c]
    v = np.array([1.0, 2.0, 3.0])
    assert run1(lambda t: dt.cumsum(t, exclusive=True), v).tolist() == [0, 1, 3]
    assert run1(lambda t: dt.cumsum(t, reverse=True), v).tolist() == [6, 5, 3]
    assert run1(lambda t: dt.cumsum(t, exclusive=True, reverse=True), v).tolist() == [5, 3, 0]
    assert run1(lambda t: dt.math.cumprod(t, exclusive=True), v).tolist() == [1, 1, 2]
    for kw in ({}, {"exclusive": True}, {"reverse": True}):
        analytic, numeric = numeric_gradient(lambda t, kw=kw: dt.cumsum(t * t, **kw), v)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6)
    analytic, numeric = numeric_gradient(dt.math.cumprod, v)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6)
    b = np.array([[True, False], [True, True]])
    assert run1(lambda t: dt.reduce_all(t, axis=1), b).tolist() == [False, True]
    assert run1(lambda t: dt.reduce_any(t, axis=0), b).tolist() == [True, True]
    assert run1(lambda t: dt.argmin(t, axis=1), np.array([[3, 1, 2], [0, 5, -1]])).tolist() == \
        [1, 2]
    np.testing.assert_allclose(run1(lambda t: dt.reduce_logsumexp(t, axis=1), x),
                               np.log(np.exp(x).sum(1)))
    np.testing.assert_allclose(run1(dt.math.reduce_variance, x), x.var())
    f = np.array([1.0, np.nan, np.inf, -np.inf])
    assert run1(dt.math.is_nan, f).tolist() == [False, True, False, False]
    assert run1(dt.math.is_finite, f).tolist() == [True, False, False, False]
    assert run1(dt.math.count_nonzero, np.array([0, 1, 2, 0])) == 2


# -- activations ---------------------------------------------------------------------------------
SCALE, ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
ACTIVATIONS = [
    ("elu", lambda x: np.where(x < 0, np.exp(x) - 1, x)),
    ("selu", lambda x: SCALE * np.where(x < 0, ALPHA * (np.exp(x) - 1), x)),
    ("relu6", lambda x: np.minimum(np.maximum(x, 0), 6)),
    ("leaky_relu", lambda x: np.where(x > 0, x, 0.2 * x)),
    ("softplus", lambda x: np.logaddexp(0, x)),
    ("softsign", lambda x: x / (1 + np.abs(x))),
    ("silu", lambda x: x / (1 + np.exp(-x))),
    ("gelu", lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))),
]


@pytest.mark.parametrize("name,ref", ACTIVATIONS)
def test_activation_values_and_gradients(name, ref):
    # relu_op_test / nn_test references; points away from the kinks (0 and 6)
    x = np.array([-9.0, -2.5, -0.7, 0.3, 1.9, 5.2, 7.5, 30.0])
    fn = getattr(dt.nn, name)
    np.testing.assert_allclose(run1(fn, x), ref(x), rtol=1e-7, atol=1e-12)
    analytic, numeric = numeric_gradient(fn, x)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_gelu_approximate_and_float32_activations_keep_their_dtype():
    x = np.linspace(-4, 4, 9)
    approx = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(run1(lambda t: dt.nn.gelu(t, approximate=True), x), approx,
                               rtol=1e-10)
    x32 = x.astype(np.float32)
    for name in ("elu", "selu", "relu6", "leaky_relu", "softplus", "softsign", "swish"):
        assert run1(getattr(dt.nn, name), x32).dtype == np.float32, name
    assert run1(lambda t: dt.nn.leaky_relu(t, alpha=0.5), x32)[0] == np.float32(-2.0)
    # the softplus of a large input is the input, not inf (softplus_op_test)
    assert run1(dt.nn.softplus, np.array([100.0], np.float32))[0] == np.float32(100.0)


# -- slicing and array ops ------------------------------------------------------------------------
def test_getitem_is_tfs_slicing_with_gradients():
    a = np.arange(60.0).reshape(3, 4, 5)
    keys = [(1,), (-1,), (slice(None, None, -1),), (Ellipsis, 2), (0, None, slice(1, 3)),
            (slice(None), slice(3, 0, -2), -2), (None, Ellipsis, None), (slice(-2, None),),
            (2, 3, 4)]
    for key in keys:
        np.testing.assert_array_equal(run1(lambda t, key=key: t[key], a), a[key])
    analytic, numeric = numeric_gradient(lambda t: t[1:, ::-2, None, 3] * t[0, 0, 0], a[:, :, :])
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    # a scalar tensor index (x[i] in a loop), negative ones counted from the end
    np.testing.assert_array_equal(run1(lambda t: t[dt.constant(-1)], a), a[-1])
    np.testing.assert_array_equal(run1(lambda t: t[1, dt.constant(2), :], a), a[1, 2, :])
    analytic, numeric = numeric_gradient(lambda t: t[dt.constant(1), :, dt.constant(-2)] ** 2,
                                         a / 10)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    with pytest.raises(dt.errors.InvalidArgumentError, match="dt.gather"):
        run1(lambda t: t[[0, 1]], a)


def test_stack_unstack_split_squeeze_tile_and_gradients():
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(run1(lambda t: dt.stack([t, t + 1], axis=1), x),
                                  np.stack([x, x + 1], axis=1))
    parts = run1(lambda t: dt.unstack(t, axis=2), x)
    assert len(parts) == 4 and np.array_equal(parts[3], x[:, :, 3])
    parts = run1(lambda t: dt.split(t, [1, -1], axis=2), x)
    assert [p.shape for p in parts] == [(2, 3, 1), (2, 3, 3)]
    parts = run1(lambda t: dt.split(t, 3, axis=1), x)
    assert [p.shape for p in parts] == [(2, 1, 4)] * 3
    np.testing.assert_array_equal(run1(lambda t: dt.squeeze(t), x[:, :1, None, :]),
                                  np.squeeze(x[:, :1, None, :]))
    np.testing.assert_array_equal(run1(lambda t: dt.tile(t, [2, 1, 3]), x), np.tile(x, [2, 1, 3]))
    for build in (lambda t: dt.stack([t, 2 * t], axis=1),
                  lambda t: dt.unstack(t, axis=1)[1] * dt.unstack(t, axis=1)[2],
                  lambda t: dt.split(t, [1, 3], axis=2)[1] * 3.0,
                  lambda t: dt.squeeze(t[:, :1, None, :]) ** 2,
                  lambda t: dt.tile(t, [2, 1, 3]) ** 2):
        analytic, numeric = numeric_gradient(build, x / 10)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    with pytest.raises(dt.errors.InvalidArgumentError, match="evenly"):
        dt.split(dt.constant(x), 5, axis=1)


def test_pad_mirror_modes_match_tfs_documented_values():
    t = np.array([[1, 2, 3], [4, 5, 6]], np.float64)
    reflect = run1(lambda x: dt.pad(x, [[1, 1], [2, 2]], "REFLECT"), t)
    symmetric = run1(lambda x: dt.pad(x, [[1, 1], [2, 2]], "SYMMETRIC"), t)
    np.testing.assert_array_equal(reflect, [[6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1],
                                            [6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1]])
    np.testing.assert_array_equal(symmetric, [[2, 1, 1, 2, 3, 3, 2], [2, 1, 1, 2, 3, 3, 2],
                                              [5, 4, 4, 5, 6, 6, 5], [5, 4, 4, 5, 6, 6, 5]])
    for mode in ("REFLECT", "SYMMETRIC"):
        analytic, numeric = numeric_gradient(
            lambda x, mode=mode: dt.pad(x, [[1, 1], [2, 2]], mode) ** 2, t / 10)
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    with pytest.raises(dt.errors.InvalidArgumentError, match="at most 2"):
        dt.pad(dt.constant(t), [[0, 0], [3, 0]], "REFLECT")


def test_range_one_hot_where_and_boolean_mask():
    # array_ops_test / one_hot_op_test expectations
    run = Local()
    with run.graph.as_default():
        r = [dt.range(5), dt.range(3, 18, 3), dt.range(0, 1, 0.25), dt.range(5, 1, -2)]
        oh = dt.one_hot([0, 2, -1, 1], 3, on_value=5.0, off_value=0.0)
        oh0 = dt.one_hot([0, 2], 3, axis=0, dtype=dt.int32)
        w = dt.where(dt.constant([[True, False], [False, True]]))
        sel = dt.where(dt.constant([True, False]), dt.constant([1, 2]), dt.constant([3, 4]))
        bm = dt.boolean_mask(dt.constant([[1, 2], [3, 4], [5, 6]]), [True, False, True])
    out = run([*r, oh, oh0, w, sel, bm])
    assert out[0].tolist() == [0, 1, 2, 3, 4] and out[0].dtype == np.int32
    assert out[1].tolist() == [3, 6, 9, 12, 15]
    assert out[2].tolist() == [0, 0.25, 0.5, 0.75] and out[2].dtype == np.float32
    assert out[3].tolist() == [5, 3]
    assert out[4].tolist() == [[5, 0, 0], [0, 0, 5], [0, 0, 0], [0, 5, 0]]
    assert out[5].tolist() == [[1, 0], [0, 0], [0, 1]]
    assert out[6].tolist() == [[0, 0], [1, 1]] and out[6].dtype == np.int64
    assert out[7].tolist() == [1, 4]
    assert out[8].tolist() == [[1, 2], [5, 6]]


# -- clipping (clip_ops_test.py's numbers) ----------------------------------------------------------
def test_clip_ops_match_tfs_tests():
    run = Local()
    with run.graph.as_default():
        x = dt.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
        by_value = dt.clip_by_value(x, 2.0, 4.0)
        by_norm = dt.clip_by_norm(dt.constant([[-3.0, 0.0, 0.0], [4.0, 0.0, 0.0]]), 4.0)
        unclipped = dt.clip_by_norm(dt.constant([[-3.0, 0.0, 0.0], [4.0, 0.0, 0.0]]), 6.0)
        zero = dt.constant([0.0, 0.0])
        zero_clip = dt.clip_by_norm(zero, 1.0)
        zero_grad = dt.gradients(dt.reduce_sum(zero_clip), zero)[0]
        x0 = dt.constant([[-2.0, 0.0, 0.0], [4.0, 0.0, 0.0]])
        x1 = dt.constant([1.0, -2.0])
        (c0, c1), norm = dt.clip_by_global_norm([x0, x1], 4.0)
        (n0, none), inf_norm = dt.clip_by_global_norm([x0, None], 1.0, use_norm=float("inf"))
    out = run([by_value, by_norm, unclipped, zero_clip, zero_grad, c0, c1, norm, n0])
    np.testing.assert_allclose(out[0], [[2, 2, 3], [4, 4, 4]])
    np.testing.assert_allclose(out[1], [[-2.4, 0, 0], [3.2, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(out[2], [[-3, 0, 0], [4, 0, 0]])
    np.testing.assert_allclose(out[3], [0, 0])
    assert np.all(np.isfinite(out[4]))
    np.testing.assert_allclose(out[5], [[-1.6, 0, 0], [3.2, 0, 0]], rtol=1e-6)
    np.testing.assert_allclose(out[6], [0.8, -1.6], rtol=1e-6)
    np.testing.assert_allclose(out[7], 5.0)
    assert none is None and np.all(np.isnan(out[8]))


# -- random ops: seeded statistics ------------------------------------------------------------------
def test_random_ops_statistics_with_fixed_seeds():
    g = dt.Graph()
    with g.as_default():
        dt.random.set_seed(1234)
        tn = dt.random.truncated_normal([20000], mean=1.0, stddev=2.0)
        tn2 = dt.truncated_normal([3], seed=7)
        cat = dt.random.categorical(dt.math.log([[0.1, 0.6, 0.3]]), 20000, seed=3)
        sh = dt.random.shuffle(dt.range(100), seed=5)
        u = dt.random.uniform([4], seed=9)
        sl1 = dt.random.stateless_normal([3], seed=[1, 2])
    sess = dt.SyncSession(graph=g)
    try:
        a, b, c, d, e, f = sess.run([tn, tn2, cat, sh, u, sl1])
        # a seeded op gives the next numbers each step; stateless ones repeat
        b2, f2 = sess.run([tn2, sl1])
    finally:
        sess.close()
    # TF's truncated normal: within 2 stddevs, mean kept, stddev 0.8796 of the normal's
    assert np.all(np.abs(a - 1.0) <= 4.0) and abs(a.mean() - 1.0) < 0.05
    assert abs(a.std() / 2.0 - 0.8796) < 0.02
    counts = np.bincount(c[0], minlength=3) / c.size
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.02)
    assert sorted(d.tolist()) == list(range(100)) and d.tolist() != list(range(100))
    assert np.all((e >= 0) & (e < 1))
    assert not np.array_equal(b, b2) and np.array_equal(f, f2)
    # a new session starts the sequence over
    sess = dt.SyncSession(graph=g)
    try:
        assert np.array_equal(sess.run(tn2), b)
    finally:
        sess.close()


def test_check_numerics_names_the_message():
    run = Local()
    with run.graph.as_default():
        x = dt.placeholder(dt.float32, [2])
        y = dt.debugging.check_numerics(x * 2.0, "bad activations")
        g = dt.gradients(dt.reduce_sum(y), x)[0]
    np.testing.assert_allclose(run(g, {x: np.array([1.0, 2.0], np.float32)}), [2.0, 2.0])
    with pytest.raises(dt.errors.InvalidArgumentError, match="bad activations.*NaN"):
        run(y, {x: np.array([1.0, np.nan], np.float32)})


# -- TF1's remaining optimizers --------------------------------------------------------------------
def _apply(make_opt, v0, v1, steps, g0=(0.1, 0.2), g1=(0.01, 0.02)):
    run = Local()
    with run.graph.as_default():
        var0, var1 = dt.Variable(v0, dtype=dt.float32), dt.Variable(v1, dtype=dt.float32)
        opt = make_opt()
        update = opt.apply_gradients([(dt.constant(list(g0)), var0),
                                      (dt.constant(list(g1)), var1)])
        run(dt.global_variables_initializer())
    for _ in range(steps):
        run(update)
    return run([var0, var1])


FTRL_CASES = [   # ftrl_test.py: (kwargs, initial values, steps, expected var0, expected var1)
    ({}, ([0.0, 0.0], [0.0, 0.0]), 3, [-2.60260963, -4.29698515], [-0.28432083, -0.56694895]),
    ({}, ([1.0, 2.0], [4.0, 3.0]), 3, [-2.55607247, -3.98729396], [-0.28232238, -0.56096673]),
    ({"l1_regularization_strength": 0.001}, ([1.0, 2.0], [4.0, 3.0]), 10,
     [-7.66718769, -10.91273689], [-0.93460727, -1.86147261]),
    ({"l1_regularization_strength": 0.001, "l2_regularization_strength": 2.0},
     ([1.0, 2.0], [4.0, 3.0]), 10, [-0.24059935, -0.46829352], [-0.02406147, -0.04830509]),
    ({"l1_regularization_strength": 0.001, "l2_regularization_strength": 2.0,
      "l2_shrinkage_regularization_strength": 0.1}, ([1.0, 2.0], [4.0, 3.0]), 10,
     [-0.22578995, -0.44345796], [-0.14378493, -0.13229476]),
]


@pytest.mark.parametrize("kwargs,init,steps,want0,want1", FTRL_CASES)
def test_ftrl_matches_tfs_ftrl_test(kwargs, init, steps, want0, want1):
    got0, got1 = _apply(lambda: dt.train.FtrlOptimizer(3.0, initial_accumulator_value=0.1,
                                                       **kwargs), *init, steps)
    np.testing.assert_allclose(got0, want0, rtol=1e-5)
    np.testing.assert_allclose(got1, want1, rtol=1e-5)


def test_ftrl_with_fixed_rate_is_gradient_descent():
    # ftrl_test's testEquivGradientDescentwithoutRegularization
    ftrl = _apply(lambda: dt.train.FtrlOptimizer(3.0, learning_rate_power=-0.0), [0.0, 0.0],
                  [0.0, 0.0], 5)
    sgd = _apply(lambda: dt.train.GradientDescentOptimizer(3.0), [0.0, 0.0], [0.0, 0.0], 5)
    np.testing.assert_allclose(ftrl, sgd, rtol=1e-5)


@pytest.mark.parametrize("kwargs,steps,want0,want1", [
    ({}, 3, [-1.60261, -2.296985], [3.715679, 2.433051]),
    ({"l1_regularization_strength": 0.001}, 10, [-6.663634, -9.190331], [2.959304, 1.029232]),
    ({"l1_regularization_strength": 0.001, "l2_regularization_strength": 2.0}, 10,
     [-0.0495, -0.0995], [-0.0045, -0.0095]),
])
def test_proximal_adagrad_matches_tfs_test(kwargs, steps, want0, want1):
    got0, got1 = _apply(lambda: dt.train.ProximalAdagradOptimizer(
        3.0, initial_accumulator_value=0.1, **kwargs), [1.0, 2.0], [4.0, 3.0], steps)
    np.testing.assert_allclose(got0, want0, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got1, want1, rtol=1e-5, atol=1e-6)


def test_proximal_gradient_descent_and_adagrad_da_follow_tfs_rules():
    # proximal_gradient_descent_test: no regularization is plain SGD (3 steps, lr 3)
    got0, got1 = _apply(lambda: dt.train.ProximalGradientDescentOptimizer(3.0), [1.0, 2.0],
                        [4.0, 3.0], 3)
    np.testing.assert_allclose(got0, [1 - 0.9, 2 - 1.8], rtol=1e-6)
    np.testing.assert_allclose(got1, [4 - 0.09, 3 - 0.18], rtol=1e-6)
    # proximal_gradient_descent_test's testProximalGradientDescentWithL1_L2 (10 steps)
    got0, got1 = _apply(lambda: dt.train.ProximalGradientDescentOptimizer(
        3.0, l1_regularization_strength=0.001, l2_regularization_strength=2.0),
        [1.0, 2.0], [4.0, 3.0], 10)
    np.testing.assert_allclose(got0, [-0.0495, -0.0995], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got1, [-0.0045, -0.0095], rtol=1e-4, atol=1e-6)
    # adagrad_da_test's testAdagradDAwithoutRegularizationBasic1 (one step, global step 0)
    run = Local()
    with run.graph.as_default():
        gs = dt.Variable(0, dtype=dt.int64)
        var0, var1 = dt.Variable([0.0, 0.0]), dt.Variable([0.0, 0.0])
        opt = dt.train.AdagradDAOptimizer(3.0, global_step=gs,
                                          initial_gradient_squared_accumulator_value=0.1)
        up = opt.apply_gradients([(dt.constant([0.1, 0.2]), var0),
                                  (dt.constant([0.01, 0.02]), var1)], global_step=gs)
        run(dt.global_variables_initializer())
    run(up)
    np.testing.assert_allclose(run(var0), [-0.904534, -1.603567], rtol=1e-5)
    np.testing.assert_allclose(run(var1), [-0.094821, -0.189358], rtol=1e-5)


def test_adadelta_matches_tfs_numpy_rule():
    # adadelta_test.py: accum, accum_update from zeros; lr 1.0, rho 0.95, epsilon 1e-8
    lr, rho, eps = 1.0, 0.95, 1e-8
    var, grad = np.array([1.0, 2.0]), np.array([0.1, 0.1])
    accum, accum_update = np.zeros(2), np.zeros(2)
    for _ in range(4):
        accum = accum * rho + grad ** 2 * (1 - rho)
        update = np.sqrt(accum_update + eps) * (grad / np.sqrt(accum + eps))
        accum_update = accum_update * rho + update ** 2 * (1.0 - rho)
        var = var - update * lr
    got0, _ = _apply(lambda: dt.train.AdadeltaOptimizer(lr, rho, eps), [1.0, 2.0], [4.0, 3.0], 4,
                     g0=(0.1, 0.1))
    np.testing.assert_allclose(got0, var, rtol=1e-5)


# -- namespaces ------------------------------------------------------------------------------------
def test_namespaces_resolve_tfs_names():
    for name in ("abs", "log1p", "reduce_logsumexp", "top_k", "segment_sum", "softplus",
                 "unsorted_segment_sum", "in_top_k", "xlogy", "is_finite"):
        assert callable(getattr(dt.math, name)), name
    for name in ("uniform", "normal", "truncated_normal", "shuffle", "categorical", "set_seed",
                 "stateless_uniform"):
        assert callable(getattr(dt.random, name)), name
    assert dt.dtypes.as_dtype("double") is dt.float64 is dt.dtypes.float64
    assert dt.dtypes.uint32.is_unsigned and dt.dtypes.complex64.real_dtype is dt.float32
    assert dt.float32.size == 4 and dt.dtypes.DType is dt.DType
    assert dt.log1p is dt.math.log1p and dt.floordiv is dt.math.floordiv


# -- the GPU kernels, under the simulator ----------------------------------------------------------
def test_gpu_kernels_match_cpu_under_the_simulator():
    spec = background.simulator_suite("tests/test_vocabulary_cudasim.py", 120)
    background.assert_suite_passed(background.run("vocabulary_cudasim", spec))
