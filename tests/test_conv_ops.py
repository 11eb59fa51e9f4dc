"""Convolution and pooling through a dt.Session: forward numbers against TF's
own op tests (conv_ops_test.py, pooling_ops_test.py: inputs 1, 2, 3 ... and
their hard-coded expected values) and against the loop references of
tests/conv_reference.py (themselves checked against TF's numbers here); and
every gradient (Conv2D, its backprops, conv2d_transpose, depthwise, MaxPool,
AvgPool and AvgPoolGrad) against central differences in float64."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from tests import conv_reference as ref
from tests.conv_reference import RNG, check_gradient, counting, nchw, nhwc, run


@pytest.fixture(scope="module")
def server():
    srv = dt.Server.create_local_server()
    yield srv
    srv.stop()


# -- Conv2D: TF's numbers ---------------------------------------------------------------------------
# conv_ops_test.py: (input, filter, strides, padding, expected)
TF_CONV2D = [
    ([1, 2, 3, 3], [1, 1, 3, 3], [1, 1], "VALID",
     [30, 36, 42, 66, 81, 96, 102, 126, 150, 138, 171, 204, 174, 216, 258, 210, 261, 312]),
    ([1, 2, 3, 3], [2, 2, 3, 3], [1, 1], "VALID", [2271, 2367, 2463, 2901, 3033, 3165]),
    ([1, 2, 3, 3], [1, 2, 3, 3], [1, 1], "VALID",
     [231, 252, 273, 384, 423, 462, 690, 765, 840, 843, 936, 1029]),
    ([1, 2, 3, 3], [2, 2, 3, 3], [2, 2], "VALID", [2271, 2367, 2463]),
    ([1, 2, 3, 3], [2, 2, 3, 3], [2, 2], "SAME", [2271, 2367, 2463, 1230, 1305, 1380]),
    ([1, 3, 6, 1], [2, 2, 1, 1], [1, 2], "VALID", [58, 78, 98, 118, 138, 158]),
    ([1, 7, 7, 1], [2, 2, 1, 1], [3, 3], "VALID", [65, 95, 275, 305]),
    ([1, 3, 3, 1], [1, 1, 1, 1], [2, 2], "SAME", [1, 3, 7, 9]),
    ([1, 4, 4, 1], [1, 1, 1, 1], [2, 2], "SAME", [1, 3, 9, 11]),
    ([1, 4, 4, 1], [2, 2, 1, 1], [3, 3], "SAME", [44, 28, 41, 16]),
    ([1, 2, 2, 1], [2, 2, 1, 2], [1, 1], "VALID", [50, 60]),
]


def _ref_pads(x_shape, f_shape, strides, padding, dil=(1, 1)):
    if padding == "VALID":
        return ((0, 0), (0, 0))
    return tuple(ref.same_pads(x_shape[1 + i], f_shape[i], strides[i], dil[i]) for i in range(2))


@pytest.mark.parametrize("case", range(len(TF_CONV2D)))
def test_conv2d_matches_tfs_op_tests(server, case):
    xs, fs, strides, padding, expected = TF_CONV2D[case]
    x, w = counting(xs), counting(fs)
    loops = ref.conv2d(x, w, strides, _ref_pads(xs, fs, strides, padding))
    np.testing.assert_array_equal(loops.ravel(), expected)   # the reference is TF's
    g = dt.Graph()
    with g.as_default():
        outs = []
        for dtype in (np.float32, np.float64):
            outs.append(dt.nn.conv2d(x.astype(dtype), w.astype(dtype), strides, padding))
        outs.append(nhwc_of(dt.nn.conv2d(nchw(x), w, strides, padding, data_format="NCHW")))
    got = run(server, g, outs)
    assert got[0].dtype == np.float32 and got[1].dtype == np.float64
    for value in got:
        np.testing.assert_allclose(value.ravel(), expected, rtol=1e-6)


def nhwc_of(t):
    return dt.transpose(t, [0, 2, 3, 1])


@pytest.mark.parametrize("xs,fs,strides,padding,dil", [
    ([2, 7, 6, 3], [3, 2, 3, 4], (2, 1), "SAME", (1, 1)),
    ([1, 8, 8, 2], [3, 3, 2, 3], (1, 1), "VALID", (2, 2)),
    ([1, 6, 5, 2], [3, 2, 2, 2], (1, 1), "SAME", (2, 3)),
    ([2, 3, 2, 1], [2, 2, 1, 3], (1, 1), [[3, 4], [4, 2]], (1, 1)),
    ([1, 5, 4, 2], [3, 2, 2, 1], (2, 1), [[2, 1], [1, 2]], (2, 1)),
])
def test_conv2d_matches_loops_with_strides_dilations_and_padding(server, xs, fs, strides,
                                                                  padding, dil):
    x, w = RNG.standard_normal(xs), RNG.standard_normal(fs)
    pads = tuple(map(tuple, padding)) if isinstance(padding, list) else \
        _ref_pads(xs, fs, strides, padding, dil)
    want = ref.conv2d(x, w, strides, pads, dil)
    tf_padding = [[0, 0], *padding, [0, 0]] if isinstance(padding, list) else padding
    g = dt.Graph()
    with g.as_default():
        y = dt.nn.conv2d(x, w, list(strides), tf_padding, dilations=list(dil))
        y32 = dt.nn.conv2d(x.astype(np.float32), w.astype(np.float32), list(strides), tf_padding,
                           dilations=list(dil))
        nchw_padding = [[0, 0], [0, 0], *padding] if isinstance(padding, list) else padding
        yc = dt.nn.conv2d(nchw(x), w, list(strides), nchw_padding, dilations=list(dil),
                          data_format="NCHW")
    assert y.shape.as_list() == list(want.shape)
    got, got32, gotc = run(server, g, [y, y32, yc])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got32, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nhwc(gotc), want, rtol=1e-10, atol=1e-12)


# -- the backprops: TF's numbers and the adjoint identity -------------------------------------------
def test_conv2d_backprops_match_tfs_op_tests(server):
    g = dt.Graph()
    with g.as_default():
        a = dt.nn.conv2d_backprop_input([1, 2, 3, 3], counting([2, 2, 3, 3]),
                                        counting([1, 1, 2, 3]), [1, 1, 1, 1], "VALID")
        b = dt.nn.conv2d_backprop_input([1, 4, 4, 1], counting([1, 1, 1, 1]),
                                        counting([1, 2, 2, 1]), [1, 2, 2, 1], "SAME")
        c = dt.nn.conv2d_backprop_input([1, 3, 6, 1], counting([2, 2, 1, 1]),
                                        counting([1, 2, 3, 1]), [1, 1, 2, 1], "VALID")
        d = dt.nn.conv2d_backprop_filter(counting([1, 2, 3, 1]), [2, 2, 1, 1],
                                         counting([1, 1, 2, 1]), [1, 1, 1, 1], "VALID")
    got = run(server, g, [a, b, c, d])
    np.testing.assert_allclose(got[0].ravel(), [14, 32, 50, 100, 163, 226, 167, 212, 257, 122,
                                                140, 158, 478, 541, 604, 437, 482, 527])
    np.testing.assert_allclose(got[1].ravel(), [1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(got[2].ravel(), [1, 2, 2, 4, 3, 6, 7, 12, 11, 18, 15, 24, 12, 16,
                                                15, 20, 18, 24])
    np.testing.assert_allclose(got[3].ravel(), [5, 8, 14, 17])


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv2d_transpose_is_the_adjoint_of_conv2d(server, fmt):
    """<conv2d(x, w), y> == <x, conv2d_transpose(y, w)> for every x, y."""
    x, w = RNG.standard_normal([2, 7, 7, 3]), RNG.standard_normal([3, 3, 3, 4])
    y = RNG.standard_normal([2, 4, 4, 4])
    conv = ref.conv2d(x, w, (2, 2), ((1, 1), (1, 1)))
    to = nchw if fmt == "NCHW" else (lambda v: v)
    shape = [2, 3, 7, 7] if fmt == "NCHW" else [2, 7, 7, 3]
    g = dt.Graph()
    with g.as_default():
        t = dt.nn.conv2d_transpose(to(y), w, shape, strides=2, padding="SAME", data_format=fmt)
    got = run(server, g, t)
    got = nhwc(got) if fmt == "NCHW" else got
    assert np.isclose(np.sum(conv * y), np.sum(x * got), rtol=1e-10)


# -- depthwise and separable ------------------------------------------------------------------------
@pytest.mark.parametrize("strides,padding,rate", [(1, "SAME", 1), (2, "VALID", 1),
                                                  (1, "SAME", 2), (2, "SAME", 1)])
def test_depthwise_and_separable_match_loops(server, strides, padding, rate):
    x, w = RNG.standard_normal([2, 7, 6, 3]), RNG.standard_normal([3, 3, 3, 2])
    p = RNG.standard_normal([1, 1, 6, 4])
    s, d = (strides, strides), (rate, rate)
    pads = _ref_pads(x.shape, w.shape, s, padding, d)
    want = ref.depthwise(x, w, s, pads, d)
    g = dt.Graph()
    with g.as_default():
        y = dt.nn.depthwise_conv2d(x, w, [1, strides, strides, 1], padding, rate=[rate, rate])
        yc = dt.nn.depthwise_conv2d(nchw(x), w, [1, 1, strides, strides], padding,
                                    data_format="NCHW", dilations=[rate, rate])
        sep = dt.nn.separable_conv2d(x, w, p, [1, strides, strides, 1], padding,
                                     rate=[rate, rate])
    got, gotc, got_sep = run(server, g, [y, yc, sep])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(nhwc(gotc), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_sep, ref.conv2d(want, p), rtol=1e-10, atol=1e-12)


# -- pooling ---------------------------------------------------------------------------------------
# pooling_ops_test.py: (input, ksize, strides, padding, expected)
TF_POOL = {
    "max": [([1, 3, 3, 3], 2, 2, "VALID", [13, 14, 15]),
            ([1, 2, 3, 3], 2, 2, "SAME", [13, 14, 15, 16, 17, 18])],
    "avg": [([1, 3, 3, 3], 2, 2, "VALID", [7, 8, 9]),
            ([1, 2, 4, 3], 2, 2, "SAME", [8.5, 9.5, 10.5, 14.5, 15.5, 16.5])],
}


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pools_match_tfs_op_tests_and_loops(server, kind):
    pool = dt.nn.max_pool if kind == "max" else dt.nn.avg_pool
    g = dt.Graph()
    outs, wants = [], []
    with g.as_default():
        for shape, k, s, padding, expected in TF_POOL[kind]:
            x = counting(shape, np.float32)
            pads = _ref_pads(shape, [k, k], [s, s], padding)
            np.testing.assert_allclose(ref.pool(x, (k, k), (s, s), pads, kind).ravel(), expected)
            outs.append(pool(x, [1, k, k, 1], [1, s, s, 1], padding))
            wants.append(expected)
        x = RNG.standard_normal([2, 7, 6, 3])
        for k, s, padding in (((3, 3), (2, 2), "SAME"), ((2, 3), (1, 2), "VALID"),
                              ((3, 2), (3, 1), "SAME")):
            pads = _ref_pads(x.shape, k, s, padding)
            wants.append(ref.pool(x, k, s, pads, kind).ravel())
            outs.append(pool(x, list(k), list(s), padding))
            wants.append(wants[-1])
            outs.append(dt.reshape(nhwc_of(pool(nchw(x), list(k), list(s), padding,
                                                data_format="NCHW")), [-1]))
    for got, want in zip(run(server, g, outs), wants):
        np.testing.assert_allclose(got.ravel(), want, rtol=1e-6)


def test_max_pool_with_explicit_padding_matches_loops(server):
    x = RNG.standard_normal([1, 5, 4, 2])
    want = ref.pool(x, (3, 2), (2, 2), ((1, 2), (0, 1)), "max")
    g = dt.Graph()
    with g.as_default():
        y = dt.nn.max_pool(x, [3, 2], 2, [[0, 0], [1, 2], [0, 1], [0, 0]])
    np.testing.assert_allclose(run(server, g, y), want)


# -- gradients against central differences ------------------------------------------------------------
@pytest.mark.parametrize("strides,padding,dil,fmt", [
    (1, "VALID", 1, "NHWC"), (2, "SAME", 1, "NHWC"), (1, "SAME", 2, "NHWC"),
    (2, "SAME", 1, "NCHW"), (1, [[0, 0], [1, 0], [2, 1], [0, 0]], 1, "NHWC"),
])
def test_conv2d_gradients(server, strides, padding, dil, fmt):
    shape = [2, 2, 5, 4] if fmt == "NCHW" else [2, 5, 4, 2]
    check_gradient(server, lambda x, w: dt.nn.conv2d(x, w, strides, padding, dilations=dil,
                                                     data_format=fmt),
                   [RNG.standard_normal(shape), RNG.standard_normal([3, 2, 2, 3])])


def test_conv2d_transpose_gradients(server):
    """Conv2DBackpropInput's gradient (what trains conv2d_transpose)."""
    check_gradient(server, lambda y, w: dt.nn.conv2d_transpose(y, w, [2, 5, 5, 2], 2, "SAME"),
                   [RNG.standard_normal([2, 3, 3, 3]), RNG.standard_normal([3, 3, 2, 3])])


def test_conv2d_backprop_filter_gradients(server):
    check_gradient(server, lambda x, dy: dt.nn.conv2d_backprop_filter(x, [2, 2, 2, 3], dy, 1,
                                                                      "VALID"),
                   [RNG.standard_normal([1, 4, 3, 2]), RNG.standard_normal([1, 3, 2, 3])])


@pytest.mark.parametrize("strides,padding,rate", [(1, "SAME", 1), (2, "SAME", 1),
                                                  (1, "VALID", 2)])
def test_depthwise_gradients(server, strides, padding, rate):
    check_gradient(server, lambda x, w: dt.nn.depthwise_conv2d(
        x, w, [1, strides, strides, 1], padding, rate=rate),
                   [RNG.standard_normal([1, 6, 5, 2]), RNG.standard_normal([3, 2, 2, 2])])


@pytest.mark.parametrize("kind,k,s,padding", [("max", 2, 2, "VALID"), ("max", 3, 2, "SAME"),
                                              ("avg", 2, 2, "VALID"), ("avg", 3, 2, "SAME"),
                                              ("avg", [2, 3], 1, "SAME")])
def test_pool_gradients(server, kind, k, s, padding):
    pool = dt.nn.max_pool if kind == "max" else dt.nn.avg_pool
    # distinct values far apart: no tie within EPS moves a window's max
    x = RNG.permutation(60).reshape(1, 5, 4, 3) / 7.0
    check_gradient(server, lambda t: pool(t, k, s, padding), [x])


def test_max_pool_gradient_in_nchw(server):
    x = RNG.permutation(40).reshape(1, 2, 5, 4) / 7.0
    check_gradient(server, lambda t: dt.nn.max_pool(t, 2, 2, "SAME", data_format="NCHW"), [x])


def test_avg_pool_grad_has_its_gradient(server):
    """AvgPoolGrad's own gradient (an AvgPool): the second derivative path."""
    def build(x, w):
        (gx,) = dt.gradients(dt.reduce_sum(dt.nn.avg_pool(x, 2, 1, "SAME") * w), [x])
        return gx
    check_gradient(server, build, [RNG.standard_normal([1, 3, 3, 2]),
                                   RNG.standard_normal([1, 3, 3, 2])], check=(1,))


def test_a_cifar10_shaped_model_trains(server):
    """cifar10.py's layers as it writes them (conv, bias, relu, max_pool, lrn,
    xw_plus_b, in_top_k, zero_fraction), narrowed: SGD through every gradient
    above lowers the loss on a fixed batch."""
    rng = np.random.default_rng(10)
    g = dt.Graph()
    with g.as_default():
        images, labels = dt.placeholder(dt.float32, [None, 24, 24, 3]), dt.placeholder(dt.int32)
        h = images
        for i, (cin, bias) in enumerate(((3, 0.0), (8, 0.1))):
            kernel = dt.Variable(rng.standard_normal([5, 5, cin, 8]).astype(np.float32) * 0.05)
            conv = dt.nn.conv2d(h, kernel, [1, 1, 1, 1], padding="SAME")
            h = dt.nn.relu(dt.nn.bias_add(conv, dt.Variable(np.full(8, bias, np.float32))))
            pool = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
            if i == 0:
                h = dt.nn.lrn(dt.nn.max_pool(h, **pool), 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
            else:
                h = dt.nn.max_pool(dt.nn.lrn(h, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75), **pool)
        assert h.shape.as_list() == [None, 6, 6, 8]
        weights = dt.Variable(rng.standard_normal([288, 10]).astype(np.float32) / 288)
        logits = dt.nn.xw_plus_b(dt.reshape(h, [-1, 288]), weights,
                                 dt.Variable(np.zeros(10, np.float32)))
        loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                             logits=logits))
        top1 = dt.nn.in_top_k(logits, labels, 1)
        frac = dt.nn.zero_fraction(h)
        train = dt.train.GradientDescentOptimizer(0.03).minimize(loss)
        init = dt.global_variables_initializer()
    feed = {images: rng.standard_normal([16, 24, 24, 3]).astype(np.float32),
            labels: rng.integers(0, 10, 16).astype(np.int32)}
    sess = dt.SyncSession(server.target, graph=g)
    try:
        sess.run(init)
        losses = [sess.run([loss, train], feed)[0] for _ in range(8)]
        hits, zeros = sess.run([top1, frac], feed)
    finally:
        sess.close()
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < losses[0] - 0.2, \
        losses
    assert hits.dtype == np.bool_ and hits.shape == (16,) and 0 < zeros < 1
