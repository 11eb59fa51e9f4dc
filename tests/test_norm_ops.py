"""Normalization, top-k and the classifier's helpers through a dt.Session:
``lrn``, ``fused_batch_norm`` (training, inference, moving averages, NCHW),
``moments``, ``batch_normalization``, ``l2_normalize``, ``top_k``,
``in_top_k``, ``sigmoid_cross_entropy_with_logits``,
``softmax_cross_entropy_with_logits_v2``, ``xw_plus_b``, ``zero_fraction``.
Forward numbers against TF's op tests' hard-coded cases (topk_op_test,
in_topk_op_test) and plain numpy (loops for LRN, tests/conv_reference.py);
every gradient against central differences in float64."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from tests import conv_reference as ref
from tests.conv_reference import RNG, check_gradient, nchw, nhwc, run


@pytest.fixture(scope="module")
def server():
    srv = dt.Server.create_local_server()
    yield srv
    srv.stop()


# -- LRN ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("radius,bias,alpha,beta", [(5, 1.0, 1.0, 0.5), (4, 1.0, 0.001 / 9, 0.75),
                                                    (2, 2.0, 0.3, 1.0), (0, 0.5, 0.2, 0.6)])
def test_lrn_matches_loops(server, radius, bias, alpha, beta):
    x = RNG.standard_normal([2, 3, 3, 7])
    g = dt.Graph()
    with g.as_default():
        y = dt.nn.lrn(x, radius, bias, alpha, beta)
        y32 = dt.nn.local_response_normalization(x.astype(np.float32), depth_radius=radius,
                                                 bias=bias, alpha=alpha, beta=beta)
    got, got32 = run(server, g, [y, y32])
    want = ref.lrn(x, radius, bias, alpha, beta)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got32, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("radius,beta", [(2, 0.75), (1, 0.5)])
def test_lrn_gradient(server, radius, beta):
    check_gradient(server, lambda x: dt.nn.lrn(x, radius, 1.0, 0.3, beta),
                   [RNG.standard_normal([1, 2, 2, 5])])


# -- fused batch norm -----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_training_and_inference(server, fmt):
    x = RNG.standard_normal([3, 4, 5, 2]) * 2 + 1
    scale, offset = np.array([0.5, 2.0]), np.array([0.1, -0.3])
    eps = 1e-3
    y_want, mean_want, var_want = ref.batch_norm_train(x, scale, offset, eps)
    to = nchw if fmt == "NCHW" else (lambda v: v)
    back = nhwc if fmt == "NCHW" else (lambda v: v)
    moving_mean, moving_var = np.array([0.2, 0.4]), np.array([1.5, 0.5])
    g = dt.Graph()
    with g.as_default():
        train = dt.nn.fused_batch_norm(to(x), scale, offset, data_format=fmt, epsilon=eps)
        blend = dt.nn.fused_batch_norm(to(x), scale, offset, moving_mean, moving_var,
                                       data_format=fmt, epsilon=eps, exponential_avg_factor=0.25)
        infer = dt.nn.fused_batch_norm(to(x), scale, offset, moving_mean, moving_var,
                                       data_format=fmt, epsilon=eps, is_training=False)
        f32 = dt.nn.fused_batch_norm(to(x).astype(np.float32), scale.astype(np.float32),
                                     offset.astype(np.float32), data_format=fmt, epsilon=eps)
    (y, m, v), (_, bm, bv), (yi, mi, vi), (y32, m32, _) = run(server, g,
                                                               [train, blend, infer, f32])
    np.testing.assert_allclose(back(y), y_want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m, mean_want, rtol=1e-12)
    np.testing.assert_allclose(v, var_want, rtol=1e-12)   # unbiased: n / (n - 1)
    np.testing.assert_allclose(bm, 0.75 * moving_mean + 0.25 * mean_want, rtol=1e-12)
    np.testing.assert_allclose(bv, 0.75 * moving_var + 0.25 * var_want, rtol=1e-12)
    want_inf = (x - moving_mean) / np.sqrt(moving_var + eps) * scale + offset
    np.testing.assert_allclose(back(yi), want_inf, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mi, moving_mean)
    np.testing.assert_allclose(vi, moving_var)
    assert y32.dtype == np.float32 and m32.dtype == np.float32
    np.testing.assert_allclose(back(y32), y_want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("training,fmt", [(True, "NHWC"), (True, "NCHW"), (False, "NHWC"),
                                          (False, "NCHW")])
def test_fused_batch_norm_gradient(server, training, fmt):
    stats = [np.array([0.3, -0.2]), np.array([0.8, 1.7])]

    def build(x, scale, offset):
        y, _, _ = dt.nn.fused_batch_norm(x, scale, offset, *(stats if not training else []),
                                         epsilon=1e-3, data_format=fmt, is_training=training)
        return y
    shape = [2, 2, 3, 2] if fmt == "NCHW" else [2, 3, 2, 2]
    check_gradient(server, build, [RNG.standard_normal(shape), RNG.uniform(0.5, 2.0, [2]),
                                   RNG.standard_normal([2])], rtol=1e-5, atol=1e-6)


# -- the composites --------------------------------------------------------------------------------
def test_moments_batch_normalization_and_l2_normalize(server):
    x = RNG.standard_normal([4, 3, 5])
    g = dt.Graph()
    with g.as_default():
        mean, var = dt.nn.moments(x, [0, 1])
        kmean, kvar = dt.nn.moments(x, axes=[2], keep_dims=True)
        half = dt.nn.moments(x.astype(np.float16), [0])
        bn = dt.nn.batch_normalization(x, mean, var, 0.5, 2.0, 1e-3)
        bare = dt.nn.batch_normalization(x, mean, var, None, None, 1e-3)
        l2 = dt.nn.l2_normalize(x, axis=-1)
        l2_all = dt.nn.l2_normalize(x)
        l2_tiny = dt.nn.l2_normalize(np.zeros([2, 3]), 1)
    got = run(server, g, [mean, var, kmean, kvar, half, bn, bare, l2, l2_all, l2_tiny])
    np.testing.assert_allclose(got[0], x.mean(axis=(0, 1)))
    np.testing.assert_allclose(got[1], x.var(axis=(0, 1)))
    np.testing.assert_allclose(got[2], x.mean(axis=2, keepdims=True))
    np.testing.assert_allclose(got[3], x.var(axis=2, keepdims=True))
    assert got[4][0].dtype == np.float16
    np.testing.assert_allclose(got[4][1], x.astype(np.float16).astype(np.float32).var(axis=0),
                               rtol=2e-3, atol=1e-3)
    normed = (x - x.mean(axis=(0, 1))) / np.sqrt(x.var(axis=(0, 1)) + 1e-3)
    np.testing.assert_allclose(got[5], normed * 2.0 + 0.5)
    np.testing.assert_allclose(got[6], normed)
    np.testing.assert_allclose(got[7], x / np.linalg.norm(x, axis=-1, keepdims=True))
    np.testing.assert_allclose(got[8], x / np.linalg.norm(x))
    np.testing.assert_array_equal(got[9], np.zeros([2, 3]))


def test_composite_gradients(server):
    check_gradient(server, lambda x: dt.nn.moments(x, [0, 2]), [RNG.standard_normal([3, 2, 4])])
    check_gradient(server, lambda x, m, v, o, s: dt.nn.batch_normalization(x, m, v, o, s, 1e-3),
                   [RNG.standard_normal([4, 3]), RNG.standard_normal([3]),
                    RNG.uniform(0.5, 2, [3]), RNG.standard_normal([3]), RNG.standard_normal([3])])
    check_gradient(server, lambda x: dt.nn.l2_normalize(x, axis=1), [RNG.standard_normal([3, 4])])


# -- top k --------------------------------------------------------------------------------------------
def test_top_k_and_in_top_k_match_tfs_op_tests(server):
    g = dt.Graph()
    with g.as_default():
        top = dt.nn.top_k(np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.3, 0.4, 0.2]]), 2)
        tie = dt.nn.top_k(np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.3, 0.3, 0.2]]), k=2)
        p = np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.2, 0.3, 0.4]], np.float32)
        hits = [dt.nn.in_top_k(p, [3, 1], 1), dt.nn.in_top_k(p, [0, 2], 2),
                dt.nn.in_top_k(np.array([[0.1, 0.3, 0.2, 0.2]] * 2, np.float32),
                               np.array([2, 3], np.int64), 2),
                dt.nn.in_top_k(np.array([[0.1, np.nan, 0.2, 0.4], [0.1, 0.2, 0.3, np.inf]],
                                        np.float32), [1, 3], 2)]
    (v, i), (tv, ti), *got = run(server, g, [top, tie, *hits])
    np.testing.assert_allclose(v, [[0.4, 0.3], [0.4, 0.3]])
    np.testing.assert_array_equal(i, [[3, 1], [2, 1]])
    np.testing.assert_allclose(tv, [[0.4, 0.3], [0.3, 0.3]])
    np.testing.assert_array_equal(ti, [[3, 1], [1, 2]])
    assert [h.tolist() for h in got] == [[True, False], [False, True], [True, True],
                                         [False, False]]


def test_top_k_gradient_scatters_into_the_input(server):
    x = RNG.permutation(24).reshape(2, 3, 4) / 5.0
    check_gradient(server, lambda t: dt.nn.top_k(t, 2)[0], [x])
    check_gradient(server, lambda t: dt.nn.top_k(dt.reshape(t, [-1, 4]), 3, sorted=True)[0], [x])


# -- the classifier's helpers --------------------------------------------------------------------
def test_sigmoid_cross_entropy_is_stable_and_tfs(server):
    logits = np.array([-100, -2, -2, 0, 2, 2, 2, 100], np.float64)
    labels = np.array([0, 0, 1, 0, 0, 1, 0.5, 1], np.float64)
    want = np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))
    g = dt.Graph()
    with g.as_default():
        loss = dt.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        loss32 = dt.nn.sigmoid_cross_entropy_with_logits(labels=labels.astype(np.float32),
                                                         logits=logits.astype(np.float32))
        zero = dt.placeholder(dt.float64, [3])
        (g0,) = dt.gradients(dt.nn.sigmoid_cross_entropy_with_logits(
            labels=np.array([0.0, 1.0, 0.25]), logits=zero), [zero])
    got, got32, grad0 = run(server, g, [loss, loss32, g0], {zero: np.zeros(3)})
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got32, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grad0, [0.5, -0.5, 0.25])   # sigmoid(0) - z, as TF's where()


def test_softmax_v2_xw_plus_b_and_zero_fraction(server):
    logits, labels = RNG.standard_normal([3, 5]), RNG.dirichlet(np.ones(5), 3)
    x, w, b = RNG.standard_normal([3, 4]), RNG.standard_normal([4, 2]), RNG.standard_normal(2)
    g = dt.Graph()
    with g.as_default():
        v2 = dt.nn.softmax_cross_entropy_with_logits_v2(labels, logits)
        v2_3d = dt.nn.softmax_cross_entropy_with_logits_v2(labels.reshape(3, 1, 5),
                                                           logits.reshape(3, 1, 5), axis=-1)
        xwb = dt.nn.xw_plus_b(x, w, b)
        frac = dt.nn.zero_fraction(np.array([[0.0, 1.0], [0.0, 0.0]], np.float32))
    got = run(server, g, [v2, v2_3d, xwb, frac])
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got[0], -(labels * log_softmax).sum(axis=1))
    np.testing.assert_allclose(got[1], got[0].reshape(3, 1))
    np.testing.assert_allclose(got[2], x @ w + b)
    assert got[3] == np.float32(0.75)


def test_classifier_gradients_and_labels_of_v1_and_v2(server):
    check_gradient(server, lambda z, x: dt.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=x),
                   [RNG.uniform(0, 1, [2, 3]), RNG.standard_normal([2, 3])])
    check_gradient(server, lambda z, x: dt.nn.softmax_cross_entropy_with_logits_v2(z, x),
                   [RNG.dirichlet(np.ones(4), 2), RNG.standard_normal([2, 4])])
    check_gradient(server, dt.nn.xw_plus_b, [RNG.standard_normal([2, 3]),
                                             RNG.standard_normal([3, 2]), RNG.standard_normal(2)])
    g = dt.Graph()
    with g.as_default():
        z, x = dt.placeholder(dt.float32, [2, 3]), dt.placeholder(dt.float32, [2, 3])
        v1 = dt.nn.softmax_cross_entropy_with_logits(labels=z, logits=x)
        assert dt.gradients(v1, [z]) == [None]   # TF1: the labels get no gradient
        assert dt.gradients(dt.nn.softmax_cross_entropy_with_logits_v2(z, x), [z])[0] is not None
