"""CPU kernels for pooling, LRN, fused batch norm, TopKV2 and InTopKV2.

Expected values come from TensorFlow's own op tests (pooling_ops_test.py,
lrn_op_test.py, nn_fused_batchnorm_test.py, topk_op_test.py,
in_topk_op_test.py: their hard-coded numbers and their reference formulas),
from direct-loop numpy references written here, and, for gradients, from
central differences in float64. Pooling, LRN and batch norm run twice: on
the numpy path and on the numba path (compiled here, or loaded from numba's
disk cache).
"""
from __future__ import annotations

import numpy as np
import pytest

from kernels import CPU, KernelError, get_kernel
from kernels.cpu import jit_loader, normalization, pooling

RNG = np.random.default_rng(38)


def run(op: str, *inputs, **attrs) -> list:
    return get_kernel(op, CPU)(list(inputs), attrs)


def one(op: str, *inputs, **attrs) -> np.ndarray:
    return run(op, *inputs, **attrs)[0]


@pytest.fixture(params=["numpy", "numba"])
def path(request, monkeypatch):
    """Run a test on the numpy path, then on the numba path."""
    if request.param == "numpy":
        for jit in (pooling.JIT, normalization.JIT):
            monkeypatch.setattr(jit, "ready", lambda dtype: None)
    else:
        for jit in (pooling.JIT, normalization.JIT):
            if not (jit.prepare(np.float32) and jit.prepare(np.float64)):
                pytest.skip("numba is not importable here")
    return request.param


def tf_input(shape, negative=False) -> np.ndarray:
    """pooling_ops_test's input: 1, 2, ... wrapping to -127 after 127."""
    n = int(np.prod(shape))
    sign = -1 if negative else 1
    return np.array([(((f + 128) % 255) - 127) * sign for f in range(n)]).reshape(shape)


def nchw(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def nhwc(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def to_nchw_attr(v: list) -> list:
    return [v[0], v[3], v[1], v[2]]


# --- pooling: TF's hard-coded cases ---------------------------------------------------

POOL_CASES = [   # op, input shape, ksize, strides, padding, expected (pooling_ops_test.py)
    ("AvgPool", [1, 3, 3, 3], [1, 2, 2, 1], [1, 2, 2, 1], "VALID", [7.0, 8.0, 9.0]),
    ("AvgPool", [1, 2, 4, 3], [1, 2, 2, 1], [1, 2, 2, 1], "SAME",
     [8.5, 9.5, 10.5, 14.5, 15.5, 16.5]),
    ("AvgPool", [1, 2, 2, 1], [1, 1, 2, 1], [1, 1, 1, 1], "SAME", [1.5, 2.0, 3.5, 4.0]),
    ("AvgPool", [1, 2, 2, 1], [1, 2, 1, 1], [1, 1, 1, 1], "SAME", [2.0, 3.0, 3.0, 4.0]),
    ("AvgPool", [2, 2, 2, 2], [1, 2, 1, 1], [1, 1, 1, 1], "SAME",
     [3, 4, 5, 6, 5, 6, 7, 8, 11, 12, 13, 14, 13, 14, 15, 16]),
    ("AvgPool", [1, 3, 3, 3], [1, 2, 2, 1], [1, 1, 2, 1], "VALID",
     [7.0, 8.0, 9.0, 16.0, 17.0, 18.0]),
    ("AvgPool", [1, 4, 4, 4], [1, 3, 3, 1], [1, 2, 2, 1], "SAME",
     [21, 22, 23, 24, 27, 28, 29, 30, 45, 46, 47, 48, 51, 52, 53, 54]),
    ("AvgPool", [1, 8, 8, 8], [1, 3, 3, 1], [1, 2, 2, 1], "SAME",
     [-12, -11, -10, -9, -8, -7, -6, -5, 4, 5, 6, 7, 8, 9, 10, 11, 20, 21, 22, 23, 24, 25,
      26, 27, 32, 33, 34, 35, 36, 37, 38, -3.5]),   # the first 32 of TF's 128
    ("AvgPool", [1, 7, 7, 1], [1, 2, 2, 1], [1, 3, 3, 1], "VALID", [5, 8, 26, 29]),
    ("MaxPool", [1, 3, 3, 3], [1, 2, 2, 1], [1, 2, 2, 1], "VALID", [13.0, 14.0, 15.0]),
    ("MaxPool", [1, 2, 3, 3], [1, 2, 2, 1], [1, 2, 2, 1], "SAME",
     [13.0, 14.0, 15.0, 16.0, 17.0, 18.0]),
    ("MaxPool", [1, 2, 2, 1], [1, 1, 2, 1], [1, 1, 1, 1], "SAME", [2.0, 2.0, 4.0, 4.0]),
    ("MaxPool", [1, 4, 4, 1], [1, 2, 2, 1], [1, 1, 2, 1], "VALID",
     [6.0, 8.0, 10.0, 12.0, 14.0, 16.0]),
    ("MaxPool", [1, 4, 4, 4], [1, 2, 2, 1], [1, 2, 2, 1], "SAME",
     [21, 22, 23, 24, 29, 30, 31, 32, 53, 54, 55, 56, 61, 62, 63, 64]),
    ("MaxPool", [1, 8, 8, 8], [1, 3, 3, 1], [1, 2, 2, 1], "SAME",
     [81, 82, 83, 84, 85, 86, 87, 88, 97, 98, 99, 100, 101, 102, 103, 104, 113, 114, 115,
      116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 120]),   # first 32
    ("MaxPool", [1, 7, 7, 1], [1, 2, 2, 1], [1, 3, 3, 1], "VALID", [9, 12, 30, 33]),
    ("MaxPool", [1, 3, 3, 1], [1, 1, 1, 1], [1, 2, 2, 1], "SAME", [1, 3, 7, 9]),
    ("AvgPool", [1, 4, 4, 1], [1, 1, 1, 1], [1, 2, 2, 1], "SAME", [1, 3, 9, 11]),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[4]}")
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_pool_tf_cases(case, fmt, path):
    op, shape, ksize, strides, padding, expected = case
    for dtype in (np.float32, np.float64, np.float16):
        x = tf_input(shape).astype(dtype)
        if fmt == "NCHW":
            y = nhwc(one(op, nchw(x), ksize=to_nchw_attr(ksize),
                         strides=to_nchw_attr(strides), padding=padding, data_format=fmt))
        else:
            y = one(op, x, ksize=ksize, strides=strides, padding=padding)
        assert y.dtype == dtype
        np.testing.assert_allclose(y.ravel()[:len(expected)], expected, rtol=1e-3)


EXPLICIT_CASES = [   # input shape, negative input, paddings (H, W), expected
    ([1, 3, 3, 1], False, [[0, 0], [0, 0]], [9.0]),
    ([1, 3, 3, 1], True, [[2, 1], [2, 1]], [-1, -1, -1, -1]),
    ([1, 3, 3, 1], False, [[0, 2], [0, 1]], [9.0, 9.0]),
    ([1, 6, 6, 1], False, [[1, 2], [2, 1]],
     [7, 9, 11, 12, 19, 21, 23, 24, 31, 33, 35, 36, 31, 33, 35, 36]),
    ([1, 6, 6, 1], True, [[1, 2], [2, 1]],
     [-1, -1, -3, -5, -7, -7, -9, -11, -19, -19, -21, -23, -31, -31, -33, -35]),
]


@pytest.mark.parametrize("case", EXPLICIT_CASES)
def test_max_pool_explicit_padding(case, path):
    shape, negative, (ph, pw), expected = case
    x = tf_input(shape, negative).astype(np.float32)
    y = one("MaxPool", x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="EXPLICIT",
            explicit_paddings=[0, 0, *ph, *pw, 0, 0])
    np.testing.assert_array_equal(y.ravel(), expected)


def test_depthwise_max_pool():
    x = tf_input([1, 1, 1, 10]).astype(np.float32)
    y = one("MaxPool", x, ksize=[1, 1, 1, 2], strides=[1, 1, 1, 2], padding="SAME")
    np.testing.assert_array_equal(y.ravel(), [2, 4, 6, 8, 10])
    x = tf_input([1, 2, 2, 6]).astype(np.float32)
    y = one("MaxPool", x, ksize=[1, 1, 1, 3], strides=[1, 1, 1, 3], padding="SAME")
    np.testing.assert_array_equal(y.ravel(), [3, 6, 9, 12, 15, 18, 21, 24])


NAN = float("nan")
GRAD_CASES = [   # input, grad, expected dx, out shape, window, stride, padding (TF's Direct tests)
    ([1.0] * 16, [11, 12, 13, 15, 16, 17, 19, 20, 21],
     [11, 12, 13, 0, 15, 16, 17, 0, 19, 20, 21, 0, 0, 0, 0, 0], [1, 3, 3, 1], 2, 1, "VALID"),
    ([1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1], [11, 12, 13, 15, 16, 17, 19, 20, 21],
     [11, 0, 25, 0, 0, 31, 0, 17, 19, 0, 41, 0, 0, 0, 0, 0], [1, 3, 3, 1], 2, 1, "VALID"),
    ([1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1], list(range(11, 27)),
     [54, 0, 62, 0, 0, 60, 0, 22, 47, 0, 51, 0, 0, 0, 0, 0], [1, 4, 4, 1], 3, 1, "SAME"),
    ([1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1], list(range(11, 23)),
     [11, 0, 25, 0, 0, 31, 0, 49, 19, 0, 41, 0, 0, 0, 0, 22], [1, 3, 4, 1], 2, 1,
     [[0, 0], [0, 1]]),
    ([1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1], [11, 12, 13, 15, 16, 17, 19, 20, 21],
     [54, 0, 30, 0, 0, 0, 0, 0, 39, 0, 21, 0, 0, 0, 0, 0], [1, 3, 3, 1], 3, 2,
     [[2, 1], [2, 1]]),
    ([-1, -5, -1, -5, -5, -1, -5, -1, -1, -5, -1, -5, -5, -1, -5, -1], list(range(11, 23)),
     [11, 0, 25, 0, 0, 31, 0, 49, 19, 0, 41, 0, 0, 0, 0, 22], [1, 3, 4, 1], 2, 1,
     [[0, 0], [0, 1]]),
    ([NAN] * 16, [11, 12, 13, 15, 16, 17, 19, 20, 21],
     [11, 12, 13, 0, 15, 16, 17, 0, 19, 20, 21, 0, 0, 0, 0, 0], [1, 3, 3, 1], 2, 1, "VALID"),
    ([NAN] * 16, [NAN, 12, 13, 15, NAN, 17, 19, 20, NAN],
     [NAN, 12, 13, 0, 15, NAN, 17, 0, 19, 20, NAN, 0, 0, 0, 0, 0], [1, 3, 3, 1], 2, 1,
     "VALID"),
]


@pytest.mark.parametrize("case", GRAD_CASES)
def test_max_pool_grad_tf_cases(case, path):
    x, g, expected, out_shape, k, s, padding = case
    x = np.array(x, np.float32).reshape(1, 4, 4, 1)
    g = np.array(g, np.float32).reshape(out_shape)
    attrs = {"ksize": [1, k, k, 1], "strides": [1, s, s, 1], "padding": padding}
    if not isinstance(padding, str):
        attrs.update(padding="EXPLICIT", explicit_paddings=[0, 0, *padding[0], *padding[1], 0, 0])
    y = one("MaxPool", x, **attrs)
    assert y.shape == g.shape
    dx = one("MaxPoolGrad", x, y, g, **attrs)
    np.testing.assert_array_equal(dx.ravel(), np.array(expected, np.float32))


# --- pooling: direct-loop references, random shapes ---------------------------------------

def ref_windows(shape, k, s, padding):
    """{(i, j): [(h, w), ...] in row-major order} of TF's SAME/VALID windows."""
    _, h_in, w_in, _ = shape
    if padding == "VALID":
        oh, ow, pt, pl = (h_in - k[0]) // s[0] + 1, (w_in - k[1]) // s[1] + 1, 0, 0
    else:
        oh, ow = -(-h_in // s[0]), -(-w_in // s[1])
        pt = max((oh - 1) * s[0] + k[0] - h_in, 0) // 2
        pl = max((ow - 1) * s[1] + k[1] - w_in, 0) // 2
    return {(i, j): [(h, w) for h in range(i * s[0] - pt, i * s[0] - pt + k[0])
                     for w in range(j * s[1] - pl, j * s[1] - pl + k[1])
                     if 0 <= h < h_in and 0 <= w < w_in]
            for i in range(oh) for j in range(ow)}, (oh, ow)


def ref_pool(x, k, s, padding, kind):
    wins, (oh, ow) = ref_windows(x.shape, k, s, padding)
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
    for n in range(x.shape[0]):
        for (i, j), cells in wins.items():
            for c in range(x.shape[3]):
                vals = [x[n, h, w, c] for h, w in cells]
                out[n, i, j, c] = max(vals) if kind == "max" else sum(vals) / len(vals)
    return out


def ref_pool_grad(x, g, k, s, padding, kind):
    wins, _ = ref_windows(x.shape, k, s, padding)
    dx = np.zeros(x.shape)
    for n in range(x.shape[0]):
        for (i, j), cells in wins.items():
            for c in range(x.shape[3]):
                if kind == "avg":
                    for h, w in cells:
                        dx[n, h, w, c] += g[n, i, j, c] / len(cells)
                    continue
                best = cells[0]
                for h, w in cells:
                    if x[n, h, w, c] > x[(n, *best, c)]:
                        best = (h, w)
                dx[(n, *best, c)] += g[n, i, j, c]
    return dx


SHAPES = [((2, 5, 6, 3), (3, 3), (2, 2), "SAME"), ((1, 7, 5, 2), (2, 3), (2, 1), "VALID"),
          ((2, 4, 4, 3), (3, 2), (1, 3), "SAME"), ((1, 6, 6, 4), (3, 3), (2, 2), "VALID")]


@pytest.mark.parametrize("shape,k,s,padding", SHAPES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_against_loops(shape, k, s, padding, kind, path):
    op = "MaxPool" if kind == "max" else "AvgPool"
    attrs = {"ksize": [1, *k, 1], "strides": [1, *s, 1], "padding": padding}
    for dtype, tol in ((np.float32, 1e-6), (np.float64, 1e-13)):
        # integer values in a narrow range: many ties for the max's tie rule
        x = RNG.integers(0, 4, shape).astype(dtype)
        y = one(op, x, **attrs)
        np.testing.assert_allclose(y, ref_pool(x, k, s, padding, kind), rtol=tol)
        g = RNG.standard_normal(y.shape).astype(dtype)
        if kind == "max":
            dx = one("MaxPoolGrad", x, y, g, **attrs)
        else:
            dx = one("AvgPoolGrad", np.array(shape, np.int32), g, **attrs)
        assert dx.dtype == dtype and dx.shape == x.shape
        np.testing.assert_allclose(dx, ref_pool_grad(x, g, k, s, padding, kind), rtol=tol,
                                   atol=tol)
        # NCHW gives the NHWC numbers
        c_attrs = {"ksize": [1, 1, *k], "strides": [1, 1, *s], "padding": padding,
                   "data_format": "NCHW"}
        np.testing.assert_array_equal(nhwc(one(op, nchw(x), **c_attrs)), y)


def central_diff(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[idx] += eps
        lo[idx] -= eps
        grad[idx] = (f(hi) - f(lo)) / (2 * eps)
    return grad


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_grads_by_central_differences(kind, path):
    op = "MaxPool" if kind == "max" else "AvgPool"
    attrs = {"ksize": [1, 3, 2, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}
    x = RNG.permutation(30).reshape(1, 5, 3, 2) / 7.0   # distinct: no ties
    g = RNG.standard_normal(one(op, x, **attrs).shape)
    if kind == "max":
        dx = one("MaxPoolGrad", x, one(op, x, **attrs), g, **attrs)
    else:
        dx = one("AvgPoolGrad", np.array(x.shape, np.int32), g, **attrs)
    num = central_diff(lambda v: float(np.sum(one(op, v, **attrs) * g)), x)
    np.testing.assert_allclose(dx, num, atol=1e-7)


# --- LRN ---------------------------------------------------------------------------------

def ref_lrn(x, r, bias, alpha, beta):
    """lrn_op_test.py's _LRN: direct loops."""
    out = np.array(x, np.float64)
    depth = x.shape[3]
    for idx in np.ndindex(x.shape[:3]):
        for d in range(depth):
            patch = x[idx][max(0, d - r):min(depth, d + r + 1)].astype(np.float64)
            out[idx + (d,)] /= (bias + alpha * np.sum(patch * patch)) ** beta
    return out


LRN_PARAMS = [(5, 1.0, 1.0, 0.5), (4, 1.0, 0.001 / 9.0, 0.75), (2, 1.7, 1.3, 1.6),
              (1, 1.2, 0.4, 1.0), (0, 2.0, 0.5, 0.3)]


@pytest.mark.parametrize("params", LRN_PARAMS)
def test_lrn_against_loops(params, path):
    r, bias, alpha, beta = params
    attrs = dict(depth_radius=r, bias=bias, alpha=alpha, beta=beta)
    x = RNG.random((2, 3, 4, 9)).astype(np.float32)
    y = one("LRN", x, **attrs)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref_lrn(x, r, bias, alpha, beta), rtol=2e-6, atol=1e-7)
    x64 = x.astype(np.float64)
    y64 = one("LRN", x64, **attrs)
    np.testing.assert_allclose(y64, ref_lrn(x64, r, bias, alpha, beta), rtol=1e-13)
    # the gradient, by central differences in float64
    g = RNG.standard_normal(x.shape)
    dx = one("LRNGrad", g, x64, y64, **attrs)
    small = x64[:1, :1, :2]
    num = central_diff(lambda v: float(np.sum(one("LRN", v, **attrs) * g[:1, :1, :2])), small)
    np.testing.assert_allclose(dx[:1, :1, :2],
                               one("LRNGrad", g[:1, :1, :2], small, y64[:1, :1, :2], **attrs))
    np.testing.assert_allclose(dx[:1, :1, :2], num, rtol=1e-6, atol=1e-8)
    dx32 = one("LRNGrad", g.astype(np.float32), x, y, **attrs)
    np.testing.assert_allclose(dx32, dx, rtol=1e-4, atol=1e-5)


def test_lrn_gradient_of_zero_input_is_one(path):
    # lrn_op_test.testGradientsZeroInput: radius 2, bias 1, alpha 0, beta 1
    x = np.zeros((4, 4, 4, 4), np.float32)
    attrs = dict(depth_radius=2, bias=1.0, alpha=0.0, beta=1.0)
    y = one("LRN", x, **attrs)
    np.testing.assert_array_equal(one("LRNGrad", np.ones_like(x), x, y, **attrs), 1.0)


def test_lrn_cifar10_norm1_by_hand(path):
    # cifar10.py's norm1: depth_radius 4, bias 1, alpha 0.001/9, beta 0.75
    x = np.array([1.0, 2.0, 3.0], np.float32).reshape(1, 1, 1, 3)
    y = one("LRN", x, depth_radius=4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
    np.testing.assert_allclose(y.ravel(), np.array([1, 2, 3]) / (1 + 14 * 0.001 / 9) ** 0.75,
                               rtol=1e-6)


# --- fused batch norm ----------------------------------------------------------------------

def bn_ref(x, scale, offset, mean, var, eps):
    """nn_fused_batchnorm_test's _batch_norm, channels last, float64."""
    return (x - mean) / np.sqrt(var + eps) * scale + offset


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW", "NDHWC"])
def test_fused_batch_norm_training_and_inference(fmt, path):
    shape = {"NHWC": (3, 4, 5, 6), "NCHW": (3, 6, 4, 5), "NDHWC": (2, 3, 2, 4, 6)}[fmt]
    axes = (0, 2, 3) if fmt == "NCHW" else tuple(range(len(shape) - 1))
    bshape = (1, 6, 1, 1) if fmt == "NCHW" else (6,)
    for dtype, tol in ((np.float32, 2e-5), (np.float64, 1e-12), (np.float16, 2e-3)):
        u = np.float64 if dtype == np.float64 else np.float32
        x = RNG.random(shape).astype(dtype)
        scale, offset, pmean, pvar = (RNG.random(6).astype(u) for _ in range(4))
        empty = np.empty(0, u)
        y, bm, bv, r1, r2, r3 = run("FusedBatchNormV3", x, scale, offset, empty, empty,
                                    epsilon=0.001, data_format=fmt)
        x64 = x.astype(np.float64)
        m, v = x64.mean(axis=axes), x64.var(axis=axes)
        n = x.size / 6
        assert y.dtype == dtype and bm.dtype == u and r3.shape == () and r3 == 0
        np.testing.assert_allclose(y, bn_ref(x64, scale.reshape(bshape), offset.reshape(bshape),
                                             m.reshape(bshape), v.reshape(bshape), 0.001),
                                   atol=tol * 10)
        np.testing.assert_allclose(bm, m, rtol=tol)
        np.testing.assert_allclose(bv, v * n / (n - 1), rtol=tol)   # Bessel's correction
        np.testing.assert_allclose(r1, m, rtol=tol)
        np.testing.assert_allclose(r2, v, rtol=tol)   # biased: what the gradient needs
        y, bm, bv, r1, r2, _ = run("FusedBatchNormV3", x, scale, offset, pmean, pvar,
                                   epsilon=0.001, data_format=fmt, is_training=False)
        np.testing.assert_allclose(y, bn_ref(x64, *(a.reshape(bshape) for a in
                                                    (scale, offset, pmean, pvar)), 0.001),
                                   atol=tol * 10)
        for got, want in ((bm, pmean), (bv, pvar), (r1, pmean), (r2, pvar)):
            np.testing.assert_array_equal(got, want)


def test_fused_batch_norm_by_hand(path):
    x = np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 1, 4, 1)
    one32 = np.ones(1, np.float32)
    y, bm, bv, _, r2, _ = run("FusedBatchNormV3", x, one32 * 2, one32 * 0.5,
                              one32 * 1.0, one32 * 2.0, epsilon=0.0,
                              exponential_avg_factor=0.5)
    np.testing.assert_allclose(y.ravel(), (np.arange(1, 5) - 2.5) / np.sqrt(1.25) * 2 + 0.5,
                               rtol=1e-6)
    np.testing.assert_allclose(bm, [0.5 * 1.0 + 0.5 * 2.5], rtol=1e-6)
    np.testing.assert_allclose(bv, [0.5 * 2.0 + 0.5 * 5 / 3], rtol=1e-6)
    np.testing.assert_allclose(r2, [1.25], rtol=1e-6)
    # one element per channel: Bessel's n/(n-1) is left out, as TF
    _, _, bv, _, _, _ = run("FusedBatchNormV3", x[:, :, :1], one32, one32, one32[:0],
                            one32[:0], epsilon=0.001)
    np.testing.assert_array_equal(bv, [0.0])
    # empty x: NaN statistics
    _, bm, bv, _, _, _ = run("FusedBatchNormV3", np.zeros((0, 2, 2, 1), np.float32), one32,
                             one32, one32[:0], one32[:0])
    assert np.isnan(bm).all() and np.isnan(bv).all()


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_grad_by_central_differences(training, fmt, path):
    shape = (2, 3, 2, 2) if fmt == "NCHW" else (2, 2, 2, 3)
    x = RNG.standard_normal(shape)
    scale, offset, pmean = RNG.standard_normal(3), RNG.standard_normal(3), RNG.standard_normal(3)
    pvar = RNG.random(3) + 0.5
    g = RNG.standard_normal(shape)
    attrs = dict(epsilon=0.01, data_format=fmt, is_training=training)

    def loss(xv, sv, ov):
        return float(np.sum(one("FusedBatchNormV3", xv, sv, ov, pmean, pvar, **attrs) * g))

    outs = run("FusedBatchNormV3", x, scale, offset, pmean, pvar, **attrs)
    dx, dscale, doffset, r4, r5 = run("FusedBatchNormGradV3", g, x, scale, outs[3], outs[4],
                                      outs[5], **attrs)
    assert r4.shape == r5.shape == (0,)
    np.testing.assert_allclose(dx, central_diff(lambda v: loss(v, scale, offset), x),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dscale, central_diff(lambda v: loss(x, v, offset), scale),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(doffset, central_diff(lambda v: loss(x, scale, v), offset),
                               rtol=1e-6, atol=1e-7)
    # float32 agrees with float64 within float32 rounding
    f = np.float32
    outs32 = run("FusedBatchNormGradV3", g.astype(f), x.astype(f), scale.astype(f),
                 outs[3].astype(f), outs[4].astype(f), outs[5].astype(f), **attrs)
    for a, b in zip(outs32[:3], (dx, dscale, doffset)):
        assert a.dtype == f
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# --- TopKV2 and InTopKV2 -----------------------------------------------------------------

def test_top_k_tf_cases():
    v, i = run("TopKV2", np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.3, 0.3, 0.2]]), np.int32(1))
    np.testing.assert_array_equal(v, [[0.4], [0.3]])
    np.testing.assert_array_equal(i, [[3], [1]])
    assert i.dtype == np.int32
    for index_type in ("int16", "int32", "int64"):
        v, i = run("TopKV2", np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.3, 0.4, 0.2]], np.float32),
                   np.int64(2), index_type=index_type)
        np.testing.assert_array_equal(i, [[3, 1], [2, 1]])
        assert i.dtype == index_type and v.dtype == np.float32
    ints = np.array([[5, 2, 8, 8, 1], [9, 3, 7, 0, 4]], np.int32)
    v, i = run("TopKV2", ints, np.int32(3))
    np.testing.assert_array_equal(v, [[8, 8, 5], [9, 7, 4]])
    np.testing.assert_array_equal(i, [[2, 3, 0], [0, 2, 4]])
    for dtype in (np.int8, np.uint8, np.uint32, np.int64, np.uint64):
        info = np.iinfo(dtype)
        _, i = run("TopKV2", np.array([[info.min, info.max, 0, info.max]], dtype), np.int32(1))
        np.testing.assert_array_equal(i, [[1]])


def test_top_k_nan_order():
    neg_nan = np.copysign(np.nan, -1.0)
    v, i = run("TopKV2", np.array([-np.inf, np.nan, 0.0, np.inf, -0.0, neg_nan]), np.int32(6))
    np.testing.assert_array_equal(i, [1, 3, 2, 4, 0, 5])
    assert np.isnan(v[0]) and np.isnan(v[5]) and np.signbit(v[5])
    for dtype in (np.float64, np.float32, np.float16):
        x = np.array([np.nan, 3.0, 1.0, np.nan, 2.0, np.nan, 0.5], dtype)
        for k, want in ((1, [0]), (3, [0, 3, 5]), (7, [0, 3, 5, 1, 4, 2, 6])):
            np.testing.assert_array_equal(run("TopKV2", x, np.int32(k))[1], want)
        row = np.array([neg_nan, 1.0, np.nan, 2.0], dtype)
        for k, want in ((1, [2]), (2, [2, 3]), (4, [2, 3, 1, 0])):
            np.testing.assert_array_equal(run("TopKV2", row, np.int32(k))[1], want)
    batched = np.array([[3.0, np.nan, 2.0, 1.0], [np.nan, 5.0, np.nan, 4.0],
                        [1.0, 2.0, 3.0, np.nan], [4.0, 3.0, 2.0, 1.0]], np.float32)
    np.testing.assert_array_equal(run("TopKV2", batched, np.int32(1))[1], [[1], [0], [3], [0]])
    np.testing.assert_array_equal(run("TopKV2", batched, np.int32(2))[1][:2], [[1, 0], [0, 2]])
    # a large row against a stable lexsort reference
    x = (np.round(RNG.standard_normal((8, 300)) * 4) / 4).astype(np.float32)
    _, i = run("TopKV2", x, np.int32(37), sorted=False)
    ref = np.stack([np.lexsort((np.arange(300), -r)) for r in x])[:, :37]
    np.testing.assert_array_equal(i, ref)


def test_in_top_k_tf_cases():
    p = np.array([[0.1, 0.3, 0.2, 0.4], [0.1, 0.2, 0.3, 0.4]], np.float32)
    tie = np.array([[0.1, 0.3, 0.2, 0.2], [0.1, 0.3, 0.2, 0.2]], np.float32)
    nan = np.array([[0.1, np.nan, 0.2, 0.4], [0.1, 0.2, 0.3, np.inf]], np.float32)
    cases = [(p, [3, 2], 1, [True, False]), (p, [2, 2], 2, [False, True]),
             (tie, [2, 3], 2, [True, True]), (p, np.array([0, 2], np.int64), 2, [False, True]),
             (nan, [1, 3], 2, [False, False]), (tie, [2, 4], 2, [True, False]),
             (np.zeros((4, 2), np.float32), [-1, 0, 1, 2], 1, [False, True, True, False]),
             (p, [0, 2], 3, [False, True])]
    for pred, targets, k, want in cases:
        targets = np.asarray(targets, np.int32) if isinstance(targets, list) else targets
        got = one("InTopKV2", pred, targets, targets.dtype.type(k))
        assert got.dtype == bool
        np.testing.assert_array_equal(got, want)
    assert one("InTopKV2", np.empty((0, 5), np.float32), np.empty(0, np.int32),
               np.int32(2)).shape == (0,)


# --- bad input, the contract, the loader ---------------------------------------------------

X4 = np.ones((1, 4, 4, 2), np.float32)
V2 = np.ones(2, np.float32)
POOL = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"}
BAD = [
    ("MaxPool", [np.ones((4, 4, 2), np.float32)], POOL, "4-dimensional"),
    ("MaxPool", [X4], {**POOL, "ksize": [2, 2, 2, 1]}, "batch dimension"),
    ("MaxPool", [X4], {**POOL, "ksize": [1, 2, 2]}, "4 positive int32"),
    ("MaxPool", [X4], {**POOL, "padding": "FULL"}, "padding must be one of"),
    ("MaxPool", [X4], {**POOL, "ksize": [1, 5, 1, 1]}, "larger than the input"),
    ("MaxPool", [X4], {**POOL, "data_format": "NCHW_VECT_C"}, "data_format"),
    ("MaxPool", [X4], {**POOL, "padding": "EXPLICIT", "explicit_paddings": [0, 0, 1, 1]},
     "explicit_paddings"),
    ("MaxPool", [X4], {**POOL, "padding": "EXPLICIT", "explicit_paddings": [1, 0] + [0] * 6},
     "batch and depth"),
    ("MaxPool", [X4], {"ksize": [1, 2, 2, 2], "strides": [1, 1, 1, 2], "padding": "SAME"},
     "exactly one of pooling across depth"),
    ("MaxPool", [X4], {"ksize": [1, 1, 1, 2], "strides": [1, 1, 1, 1], "padding": "SAME"},
     "depth window to equal the depth stride"),
    ("MaxPool", [np.ones((1, 2, 2, 4), np.float32)],
     {"ksize": [1, 1, 1, 3], "strides": [1, 1, 1, 3], "padding": "SAME"}, "evenly divide"),
    ("AvgPool", [X4], {**POOL, "padding": "EXPLICIT"}, "padding must be one of"),
    ("AvgPool", [X4.astype(np.int32)], POOL, "float16, float32 or float64"),
    ("MaxPoolGrad", [X4, np.ones((1, 2, 2, 2), np.float32), np.ones((1, 3, 3, 2), np.float32)],
     POOL, "pooled shape"),
    ("MaxPoolGrad", [X4, X4[:, :1, :1], X4[:, :1, :1]],
     {"ksize": [1, 1, 1, 2], "strides": [1, 1, 1, 2], "padding": "SAME"}, "depth"),
    ("AvgPoolGrad", [np.array([1, 4, 4], np.int32), X4], POOL, "orig_input_shape"),
    ("LRN", [X4[0]], {}, "4-dimensional"),
    ("LRN", [X4], {"depth_radius": -1}, "depth_radius"),
    ("LRNGrad", [X4, X4, X4[:, :2]], {}, "one shape and dtype"),
    ("FusedBatchNormV3", [X4, np.ones(3, np.float32), V2, V2, V2], {}, "channels of x"),
    ("FusedBatchNormV3", [X4, V2, V2, V2[:1], V2], {"is_training": False}, "mean must have"),
    ("FusedBatchNormV3", [X4, V2, V2, V2, V2], {"data_format": "NWC"}, "data_format"),
    ("FusedBatchNormV3", [X4, V2.astype(np.float64), V2, V2, V2], {}, "must be float32"),
    ("FusedBatchNormV3", [X4[0], V2, V2, V2, V2], {}, "4 or 5-dimensional"),
    ("FusedBatchNormGradV3", [X4[:, :2], X4, V2, V2, V2, V2], {}, "same shape"),
    ("TopKV2", [np.ones((2, 3)), np.int32(4)], {}, "at least k columns"),
    ("TopKV2", [np.ones((2, 3)), np.int32(-1)], {}, "k >= 0"),
    ("TopKV2", [np.ones((2, 3)), np.ones(2, np.int32)], {}, "integer scalar"),
    ("InTopKV2", [np.ones((2, 3), np.float32), np.zeros(3, np.int32), np.int32(1)], {},
     "must match length of targets"),
    ("InTopKV2", [np.ones(3, np.float32), np.zeros(3, np.int32), np.int32(1)], {},
     "2-dimensional"),
]


@pytest.mark.parametrize("op,inputs,attrs,message", BAD, ids=[f"{b[0]}-{b[3]}" for b in BAD])
def test_bad_input_is_a_kernel_error(op, inputs, attrs, message):
    with pytest.raises(KernelError, match=message):
        run(op, *inputs, **attrs)


def test_inputs_not_mutated_and_read_only_inputs_accepted(path):
    x = RNG.standard_normal((2, 5, 5, 4)).astype(np.float32)
    x.flags.writeable = False
    keep = x.copy()
    y = one("MaxPool", x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    y.flags.writeable = False
    one("MaxPoolGrad", x, y, y, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    one("AvgPool", x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    lrn = one("LRN", x, depth_radius=2)
    one("LRNGrad", x, x, lrn, depth_radius=2)
    v = np.ones(4, np.float32)
    v.flags.writeable = False
    outs = run("FusedBatchNormV3", x, v, v, v, v, is_training=False)
    run("FusedBatchNormGradV3", x, x, v, outs[3], outs[4], outs[5])
    np.testing.assert_array_equal(x, keep)


def test_split_over_intra_op_threads_gives_the_same_numbers():
    if not (pooling.JIT.prepare(np.float32) and normalization.JIT.prepare(np.float32)):
        pytest.skip("numba is not importable here")
    x = RNG.standard_normal((16, 24, 24, 16)).astype(np.float32)
    attrs = dict(ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
    ops = [("MaxPool", [x], attrs), ("LRN", [x], dict(depth_radius=4, alpha=0.1, beta=0.75))]
    single = [one(op, *ins, **a) for op, ins, a in ops]
    try:
        jit_loader.set_intra_op_threads(3)
        for (op, ins, a), want in zip(ops, single):
            np.testing.assert_array_equal(one(op, *ins, **a), want)
    finally:
        jit_loader.set_intra_op_threads(1)


def test_background_loader_serves_numpy_until_ready():
    loader = jit_loader.BackgroundJit("kernels.cpu.pooling_jit")
    assert loader.ready(np.float16) is None   # not a numba dtype: no thread
    first = loader.ready(np.float32)
    jit_loader.join_loaders()
    mod = loader.ready(np.float32)
    assert first is None and mod is not None and hasattr(mod, "max_pool")
