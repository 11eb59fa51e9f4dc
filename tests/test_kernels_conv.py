"""The CPU convolution kernels (kernels/cpu/conv.py): Conv2D, its two
gradients and the depthwise family, against

- TF's own hard-coded expectations (tensorflow/python/kernel_tests/nn_ops/
  conv_ops_test.py and depthwise_conv_op_base.py: inputs ``1, 2, 3, ...`` in
  the given shapes, the expected outputs flattened in NHWC order), in NHWC
  and NCHW;
- a direct-loop numpy reference written here (a sum over every output
  position and tap), on small random shapes with strides, dilations, every
  padding kind and groups, for the forward pass and both gradients, which are
  also checked as the forward's adjoint: <conv(x, w), dy> = <x, dx> = <w, dw>;
- TF's errors for bad operands and attrs.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels import CPU, KernelError, get_kernel
from kernels.cpu import conv_gemm, jit_loader


class _NoJit:
    """Stands in for conv_gemm.JIT: numba never ready, the numpy path runs."""

    def ready(self, dtype: object) -> None:
        return None


@pytest.fixture(params=["numpy", "numba"])
def col2im_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once with the numpy col2im and once with the numba one."""
    if request.param == "numpy":
        monkeypatch.setattr(conv_gemm, "JIT", _NoJit())
    elif not (conv_gemm.JIT.prepare(np.float32) and conv_gemm.JIT.prepare(np.float64)):
        pytest.skip("numba unavailable: the numpy path is the only one")
    return request.param


def run(op: str, inputs: list, **attrs: object) -> np.ndarray:
    out = get_kernel(op, CPU)(inputs, attrs)
    assert isinstance(out, list) and len(out) == 1
    return out[0]


def ramp(shape: list[int], dtype: object = np.float32) -> np.ndarray:
    """TF's test tensors: 1, 2, 3, ... in ``shape``."""
    return np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape).astype(dtype)


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def to_nchw_list(v: list) -> list:
    return [v[0], v[3], v[1], v[2]]


# ---- the direct-loop reference ---------------------------------------------------------------

def ref_pads(size: int, k: int, s: int, d: int, padding: object) -> tuple[int, int, int]:
    """(output size, pad before, pad after): TF's documented rule, written out."""
    k_eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max(0, (out - 1) * s + k_eff - size)
        return out, total // 2, total - total // 2
    lo, hi = (0, 0) if padding == "VALID" else padding
    return (size + lo + hi - k_eff) // s + 1, lo, hi


def ref_geometry(xshape: tuple, wshape: tuple, strides: tuple, dil: tuple,
                 padding: object) -> tuple[int, int, tuple[int, int]]:
    ph = padding if isinstance(padding, str) else padding[0]
    pw = padding if isinstance(padding, str) else padding[1]
    oh, pt, _ = ref_pads(xshape[1], wshape[0], strides[0], dil[0], ph)
    ow, pl, _ = ref_pads(xshape[2], wshape[1], strides[1], dil[1], pw)
    return oh, ow, (pt, pl)


def taps(x_shape: tuple, w_shape: tuple, strides: tuple, dil: tuple, padding: object):
    """Every (n, i, j, a, b, input row, input col) that lands inside the input."""
    n_, h, w, _ = x_shape
    oh, ow, (pt, pl) = ref_geometry(x_shape, w_shape, strides, dil, padding)
    for n, i, j, a, b in itertools.product(range(n_), range(oh), range(ow), range(w_shape[0]),
                                           range(w_shape[1])):
        r, c = i * strides[0] + a * dil[0] - pt, j * strides[1] + b * dil[1] - pl
        if 0 <= r < h and 0 <= c < w:
            yield n, i, j, a, b, r, c


def ref_conv(x, w, strides=(1, 1), dil=(1, 1), padding="VALID"):
    """Conv2D, NHWC, grouped when x's depth is a multiple of w's."""
    kh, kw, cg, o = w.shape
    og = o // (x.shape[3] // cg)
    oh, ow, _ = ref_geometry(x.shape, w.shape, strides, dil, padding)
    out = np.zeros((x.shape[0], oh, ow, o))
    for n, i, j, a, b, r, c in taps(x.shape, w.shape, strides, dil, padding):
        for oc in range(o):
            g = oc // og
            out[n, i, j, oc] += x[n, r, c, g * cg:(g + 1) * cg] @ w[a, b, :, oc]
    return out


def ref_conv_grads(x, w, dy, strides=(1, 1), dil=(1, 1), padding="VALID"):
    kh, kw, cg, o = w.shape
    og = o // (x.shape[3] // cg)
    dx, dw = np.zeros(x.shape), np.zeros(w.shape)
    for n, i, j, a, b, r, c in taps(x.shape, w.shape, strides, dil, padding):
        for oc in range(o):
            g = oc // og
            dx[n, r, c, g * cg:(g + 1) * cg] += dy[n, i, j, oc] * w[a, b, :, oc]
            dw[a, b, :, oc] += dy[n, i, j, oc] * x[n, r, c, g * cg:(g + 1) * cg]
    return dx, dw


def ref_depthwise(x, w, strides=(1, 1), dil=(1, 1), padding="VALID"):
    kh, kw, c_, m = w.shape
    oh, ow, _ = ref_geometry(x.shape, w.shape, strides, dil, padding)
    out = np.zeros((x.shape[0], oh, ow, c_, m))
    for n, i, j, a, b, r, c in taps(x.shape, w.shape, strides, dil, padding):
        out[n, i, j] += x[n, r, c, :, None] * w[a, b]
    return out.reshape(x.shape[0], oh, ow, c_ * m)


def ref_depthwise_grads(x, w, dy, strides=(1, 1), dil=(1, 1), padding="VALID"):
    kh, kw, c_, m = w.shape
    dy5 = dy.reshape(dy.shape[:3] + (c_, m))
    dx, dw = np.zeros(x.shape), np.zeros(w.shape)
    for n, i, j, a, b, r, c in taps(x.shape, w.shape, strides, dil, padding):
        dx[n, r, c] += (dy5[n, i, j] * w[a, b]).sum(-1)
        dw[a, b] += x[n, r, c, :, None] * dy5[n, i, j]
    return dx, dw


def tf_attrs(strides, dil, padding, data_format="NHWC") -> dict:
    """The ops' attrs from spatial (h, w) values; ``padding`` a string or
    ((top, bottom), (left, right))."""
    attrs = {"strides": [1, *strides, 1], "dilations": [1, *dil, 1], "data_format": data_format}
    if isinstance(padding, str):
        attrs["padding"] = padding
    else:
        attrs["padding"] = "EXPLICIT"
        attrs["explicit_paddings"] = [0, 0, *padding[0], *padding[1], 0, 0]
    if data_format == "NCHW":
        attrs["strides"] = to_nchw_list(attrs["strides"])
        attrs["dilations"] = to_nchw_list(attrs["dilations"])
        if "explicit_paddings" in attrs:
            p = attrs["explicit_paddings"]
            attrs["explicit_paddings"] = p[0:2] + p[6:8] + p[2:6]
    return attrs


# ---- TF's hard-coded cases ---------------------------------------------------------------------

# (input, filter, strides, padding, expected): conv_ops_test.py's Conv2DTest
FORWARD_CASES = [
    ([1, 2, 3, 3], [1, 1, 3, 3], (1, 1), "VALID",
     [30, 36, 42, 66, 81, 96, 102, 126, 150, 138, 171, 204, 174, 216, 258, 210, 261, 312]),
    ([1, 2, 3, 3], [2, 2, 3, 3], (1, 1), "VALID", [2271, 2367, 2463, 2901, 3033, 3165]),
    ([1, 2, 3, 3], [1, 2, 3, 3], (1, 1), "VALID",
     [231, 252, 273, 384, 423, 462, 690, 765, 840, 843, 936, 1029]),
    ([1, 2, 3, 3], [2, 2, 3, 3], (2, 2), "VALID", [2271, 2367, 2463]),
    ([1, 2, 3, 3], [2, 2, 3, 3], (2, 2), "SAME", [2271, 2367, 2463, 1230, 1305, 1380]),
    ([1, 3, 6, 1], [2, 2, 1, 1], (1, 2), "VALID", [58, 78, 98, 118, 138, 158]),
    ([1, 7, 7, 1], [2, 2, 1, 1], (3, 3), "VALID", [65, 95, 275, 305]),
    ([1, 3, 3, 1], [1, 1, 1, 1], (2, 2), "SAME", [1, 3, 7, 9]),
    ([1, 4, 4, 1], [1, 1, 1, 1], (2, 2), "SAME", [1, 3, 9, 11]),
    ([1, 4, 4, 1], [2, 2, 1, 1], (3, 3), "SAME", [44, 28, 41, 16]),
    ([1, 2, 2, 1], [2, 2, 1, 2], (1, 1), "VALID", [50, 60]),
    ([1, 0, 2, 1], [1, 1, 1, 1], (1, 1), ((1, 1), (1, 1)), [0] * 8),
    ([0, 2, 3, 3], [1, 1, 3, 3], (1, 1), "VALID", []),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", range(len(FORWARD_CASES)))
def test_conv2d_matches_tf_expected_values(case: int, data_format: str) -> None:
    xs, ws, strides, padding, expected = FORWARD_CASES[case]
    dtypes = [np.float32, np.float64, np.float16] + ([np.int32] if data_format == "NHWC" else [])
    for dt in dtypes:
        x, w = ramp(xs, dt), ramp(ws, dt)
        attrs = tf_attrs(strides, (1, 1), padding, data_format)
        out = run("Conv2D", [nchw(x) if data_format == "NCHW" else x, w], **attrs)
        assert out.dtype == dt
        if data_format == "NCHW":
            out = nhwc(out)
        tol = 1e-3 if dt == np.float16 else 1e-5
        np.testing.assert_allclose(out.ravel(), np.asarray(expected, np.float64), rtol=tol)


# (input_sizes, filter, out_backprop, strides, padding, expected)
BACKPROP_INPUT_CASES = [
    ([1, 2, 3, 1], [2, 2, 1, 1], [1, 1, 2, 1], (1, 1), "VALID", [1, 4, 4, 3, 10, 8]),
    ([1, 2, 3, 3], [2, 2, 3, 3], [1, 1, 2, 3], (1, 1), "VALID",
     [14, 32, 50, 100, 163, 226, 167, 212, 257, 122, 140, 158, 478, 541, 604, 437, 482, 527]),
    ([1, 3, 6, 1], [2, 2, 1, 1], [1, 2, 3, 1], (1, 2), "VALID",
     [1, 2, 2, 4, 3, 6, 7, 12, 11, 18, 15, 24, 12, 16, 15, 20, 18, 24]),
    ([1, 4, 4, 1], [1, 1, 1, 1], [1, 2, 2, 1], (2, 2), "SAME",
     [1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0]),
    ([1, 2, 2, 1], [2, 2, 1, 2], [1, 1, 1, 2], (1, 1), "VALID", [5, 11, 17, 23]),
    ([0, 2, 3, 1], [2, 2, 1, 1], [0, 1, 2, 1], (1, 1), "VALID", []),
    ([3, 1, 1, 2], [1, 3, 2, 3], [3, 1, 0, 3], (1, 2), "VALID", [0] * 6),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", range(len(BACKPROP_INPUT_CASES)))
def test_conv2d_backprop_input_matches_tf_expected_values(case: int, data_format: str) -> None:
    sizes, ws, dys, strides, padding, expected = BACKPROP_INPUT_CASES[case]
    for dt in (np.float32, np.float64):
        w, dy = ramp(ws, dt), ramp(dys, dt)
        attrs = tf_attrs(strides, (1, 1), padding, data_format)
        if data_format == "NCHW":
            sizes, dy = to_nchw_list(sizes), nchw(dy)
        dx = run("Conv2DBackpropInput", [np.array(sizes, np.int32), w, dy], **attrs)
        if data_format == "NCHW":
            sizes, dx = BACKPROP_INPUT_CASES[case][0], nhwc(dx)
        assert dx.dtype == dt and list(dx.shape) == sizes
        np.testing.assert_allclose(dx.ravel(), np.asarray(expected, np.float64), rtol=1e-6)


def test_filter_one_past_the_input_is_an_empty_output_not_an_error() -> None:
    # TF's C++ division truncates: (2 - 3 + 1) / 1 = 0 positions
    out = run("Conv2D", [ramp([1, 2, 2, 1]), ramp([3, 3, 1, 1])], strides=[1, 1, 1, 1],
              padding="VALID")
    assert out.shape == (1, 0, 0, 1)


def test_conv2d_backprop_input_takes_spatial_only_input_sizes() -> None:
    # testConv2DInputSizesContainsOnlySpatialDimensionsBackpropInput
    dx = run("Conv2DBackpropInput", [np.array([2, 2], np.int32), ramp([2, 2, 1, 2]),
                                     ramp([1, 1, 1, 2])], strides=[1, 1, 1, 1], padding="VALID")
    assert dx.shape == (1, 2, 2, 1)
    np.testing.assert_allclose(dx.ravel(), [5, 11, 17, 23])


# (input, filter_sizes, out_backprop, strides, padding, expected)
BACKPROP_FILTER_CASES = [
    ([1, 2, 3, 1], [2, 2, 1, 1], [1, 1, 2, 1], (1, 1), "VALID", [5, 8, 14, 17]),
    ([1, 2, 3, 3], [2, 2, 3, 3], [1, 1, 2, 3], (1, 1), "VALID",
     [17, 22, 27, 22, 29, 36, 27, 36, 45, 32, 43, 54, 37, 50, 63, 42, 57, 72, 62, 85, 108, 67,
      92, 117, 72, 99, 126, 77, 106, 135, 82, 113, 144, 87, 120, 153]),
    ([1, 3, 6, 1], [2, 2, 1, 1], [1, 2, 3, 1], (1, 2), "VALID", [161, 182, 287, 308]),
    ([1, 4, 4, 1], [1, 1, 1, 1], [1, 2, 2, 1], (2, 2), "SAME", [78]),
    ([1, 2, 2, 1], [2, 2, 1, 2], [1, 1, 1, 2], (1, 1), "VALID", [1, 2, 2, 4, 3, 6, 4, 8]),
    ([1, 2, 3, 1], [2, 2, 1, 0], [1, 1, 2, 0], (1, 1), "VALID", []),
    ([0, 2, 3, 1], [2, 2, 1, 1], [0, 1, 2, 1], (1, 1), "VALID", [0, 0, 0, 0]),
]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", range(len(BACKPROP_FILTER_CASES)))
def test_conv2d_backprop_filter_matches_tf_expected_values(case: int, data_format: str) -> None:
    xs, fs, dys, strides, padding, expected = BACKPROP_FILTER_CASES[case]
    for dt in (np.float32, np.float64, np.float16):
        x, dy = ramp(xs, dt), ramp(dys, dt)
        attrs = tf_attrs(strides, (1, 1), padding, data_format)
        if data_format == "NCHW":
            x, dy = nchw(x), nchw(dy)
        dw = run("Conv2DBackpropFilter", [x, np.array(fs, np.int32), dy], **attrs)
        assert dw.dtype == dt and list(dw.shape) == fs
        tol = 1e-3 if dt == np.float16 else 1e-6
        np.testing.assert_allclose(dw.ravel(), np.asarray(expected, np.float64), rtol=tol)


def test_depthwise_matches_tf_hand_values() -> None:
    # depthwise_conv_op_base.py testConv2D2x2Filter (and conv_ops_test's DepthwiseConv2DTest)
    for data_format in ("NHWC", "NCHW"):
        x = ramp([1, 2, 3, 2])
        out = run("DepthwiseConv2dNative", [nchw(x) if data_format == "NCHW" else x,
                                            ramp([2, 2, 2, 2])],
                  **tf_attrs((1, 1), (1, 1), "VALID", data_format))
        if data_format == "NCHW":
            out = nhwc(out)
        np.testing.assert_allclose(out.ravel(), [196, 216, 272, 296, 252, 280, 344, 376])


def test_explicit_padding_equals_valid_on_the_padded_input() -> None:
    # conv_ops_test's _VerifyExplicitPaddings: EXPLICIT == VALID of tf.pad(input)
    cases = [([1, 2, 3, 2], [2, 2, 2, 2], (1, 1), ((1, 1), (1, 1)), (1, 1)),
             ([1, 2, 1, 2], [1, 1, 2, 1], (2, 1), ((2, 2), (2, 2)), (1, 1)),
             ([1, 2, 4, 2], [2, 2, 2, 2], (1, 3), ((1, 0), (0, 2)), (1, 1)),
             ([1, 1, 1, 3], [2, 2, 3, 3], (1, 1), ((3, 4), (4, 2)), (1, 1)),
             ([1, 2, 3, 2], [3, 2, 2, 1], (1, 1), ((2, 1), (1, 2)), (2, 3))]
    for xs, ws, strides, pads, dil in cases:
        x, w = ramp(xs), ramp(ws)
        expected = run("Conv2D", [np.pad(x, ((0, 0), pads[0], pads[1], (0, 0))), w],
                       **tf_attrs(strides, dil, "VALID"))
        for fmt in ("NHWC", "NCHW"):
            out = run("Conv2D", [nchw(x) if fmt == "NCHW" else x, w],
                      **tf_attrs(strides, dil, pads, fmt))
            np.testing.assert_allclose(nhwc(out) if fmt == "NCHW" else out, expected, rtol=2e-6)


# ---- random shapes against the direct loops -----------------------------------------------------

# (x shape, w shape, strides, dilations, padding)
RANDOM_CASES = [
    ((2, 5, 6, 3), (3, 3, 3, 4), (1, 1), (1, 1), "SAME"),
    ((2, 5, 6, 3), (3, 2, 3, 2), (2, 2), (1, 1), "SAME"),
    ((1, 7, 6, 2), (3, 3, 2, 3), (3, 2), (1, 1), "VALID"),
    ((2, 7, 7, 2), (2, 3, 2, 2), (1, 1), (2, 2), "SAME"),
    ((1, 8, 5, 3), (4, 2, 3, 2), (3, 2), (1, 1), ((1, 2), (3, 4))),
    ((3, 5, 7, 1), (3, 2, 1, 2), (2, 1), (1, 1), ((4, 3), (2, 1))),
    ((2, 6, 7, 3), (3, 4, 3, 2), (1, 2), (1, 2), ((0, 0), (0, 5))),
    ((1, 5, 4, 2), (3, 3, 2, 3), (1, 1), (1, 1), ((2, 2), (2, 2))),
    ((1, 4, 3, 2), (2, 2, 2, 2), (1, 1), (1, 1), ((3, 0), (0, 2))),   # wider than the filter
    ((2, 5, 4, 4), (3, 3, 2, 6), (1, 1), (1, 1), "VALID"),       # 2 groups
    ((1, 6, 6, 6), (2, 2, 2, 3), (2, 1), (2, 1), "SAME"),        # 3 groups
]


def _random(case: tuple, dt: object) -> tuple[np.ndarray, ...]:
    xs, ws, strides, dil, padding = case
    rng = np.random.default_rng(sum(xs) * 31 + sum(ws))
    x = rng.standard_normal(xs)
    w = rng.standard_normal(ws)
    oh, ow, _ = ref_geometry(xs, ws, strides, dil, padding)
    dy = rng.standard_normal((xs[0], oh, ow, ws[3]))
    return x.astype(dt), w.astype(dt), dy.astype(dt)


@pytest.mark.parametrize("case", range(len(RANDOM_CASES)))
def test_conv2d_and_gradients_match_direct_loops(case: int, col2im_path: str) -> None:
    xs, ws, strides, dil, padding = RANDOM_CASES[case]
    x, w, dy = _random(RANDOM_CASES[case], np.float64)
    want_y = ref_conv(x, w, strides, dil, padding)
    want_dx, want_dw = ref_conv_grads(x, w, dy, strides, dil, padding)
    for fmt in ("NHWC", "NCHW"):
        attrs = tf_attrs(strides, dil, padding, fmt)
        t = nchw if fmt == "NCHW" else (lambda a: a)
        back = nhwc if fmt == "NCHW" else (lambda a: a)
        snapshot = [x.copy(), w.copy(), dy.copy()]
        y = back(run("Conv2D", [t(x), w], **attrs))
        dx = back(run("Conv2DBackpropInput",
                      [np.array(t(x).shape, np.int32), w, t(dy)], **attrs))
        dw = run("Conv2DBackpropFilter", [t(x), np.array(w.shape, np.int64), t(dy)], **attrs)
        np.testing.assert_allclose(y, want_y, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-10, atol=1e-10)
        # the adjoint: <conv(x, w), dy> = <x, dx> = <w, dw>
        assert np.vdot(y, dy) == pytest.approx(np.vdot(x, dx), rel=1e-10)
        assert np.vdot(y, dy) == pytest.approx(np.vdot(w, dw), rel=1e-10)
        for before, after in zip(snapshot, (x, w, dy)):
            np.testing.assert_array_equal(before, after)   # inputs untouched


@pytest.mark.parametrize("case", [0, 3, 4, 8])
def test_float32_within_rounding_of_float64(case: int) -> None:
    xs, ws, strides, dil, padding = RANDOM_CASES[case]
    x, w, dy = _random(RANDOM_CASES[case], np.float64)
    attrs = tf_attrs(strides, dil, padding)
    f32 = [a.astype(np.float32) for a in (x, w, dy)]
    for op, ins, ins32 in (("Conv2D", [x, w], [f32[0], f32[1]]),
                           ("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy],
                            [np.array(xs, np.int32), f32[1], f32[2]]),
                           ("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy],
                            [f32[0], np.array(ws, np.int32), f32[2]])):
        got = run(op, ins32, **attrs)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, run(op, ins, **attrs), rtol=1e-4, atol=1e-4)


DEPTHWISE_CASES = [
    ((2, 5, 6, 3), (3, 3, 3, 2), (1, 1), (1, 1), "SAME"),
    ((1, 7, 6, 2), (3, 2, 2, 1), (2, 3), (1, 1), "VALID"),
    ((2, 6, 6, 2), (2, 2, 2, 3), (1, 1), (2, 2), "SAME"),
    ((1, 4, 5, 3), (3, 3, 3, 1), (2, 1), (1, 1), ((1, 2), (0, 3))),
]


@pytest.mark.parametrize("case", range(len(DEPTHWISE_CASES)))
def test_depthwise_and_gradients_match_direct_loops(case: int) -> None:
    xs, ws, strides, dil, padding = DEPTHWISE_CASES[case]
    rng = np.random.default_rng(case)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    want_y = ref_depthwise(x, w, strides, dil, padding)
    dy = rng.standard_normal(want_y.shape)
    want_dx, want_dw = ref_depthwise_grads(x, w, dy, strides, dil, padding)
    for fmt in ("NHWC", "NCHW"):
        attrs = tf_attrs(strides, dil, padding, fmt)
        t = nchw if fmt == "NCHW" else (lambda a: a)
        back = nhwc if fmt == "NCHW" else (lambda a: a)
        y = back(run("DepthwiseConv2dNative", [t(x), w], **attrs))
        dx = back(run("DepthwiseConv2dNativeBackpropInput",
                      [np.array(t(x).shape, np.int32), w, t(dy)], **attrs))
        dw = run("DepthwiseConv2dNativeBackpropFilter",
                 [t(x), np.array(ws, np.int32), t(dy)], **attrs)
        np.testing.assert_allclose(y, want_y, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dx, want_dx, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(dw, want_dw, rtol=1e-10, atol=1e-10)
        assert np.vdot(y, dy) == pytest.approx(np.vdot(x, dx), rel=1e-10)
        assert np.vdot(y, dy) == pytest.approx(np.vdot(w, dw), rel=1e-10)
    y32 = run("DepthwiseConv2dNative", [x.astype(np.float32), w.astype(np.float32)],
              **tf_attrs(strides, dil, padding))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, want_y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scratch", [64, 700, 5000])
def test_small_tiles_give_the_same_numbers(monkeypatch: pytest.MonkeyPatch, scratch: int,
                                           col2im_path: str) -> None:
    """Bands of output rows (an image bigger than the scratch) and several
    images a tile: every tiling sums the same products."""
    case = ((3, 6, 5, 2), (3, 3, 2, 3), (1, 1), (1, 1), "SAME")
    strided = ((3, 7, 6, 2), (3, 2, 2, 2), (2, 2), (1, 1), "SAME")
    full = conv_gemm.SCRATCH_BYTES
    for xs, ws, strides, dil, padding in (case, strided):
        x, w, dy = _random((xs, ws, strides, dil, padding), np.float64)
        attrs = tf_attrs(strides, dil, padding)
        want = [run("Conv2D", [x, w], **attrs),
                run("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy], **attrs),
                run("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy], **attrs),
                run("DepthwiseConv2dNative", [x, w[..., :1]], **attrs)]
        monkeypatch.setattr(conv_gemm, "SCRATCH_BYTES", scratch)
        got = [run("Conv2D", [x, w], **attrs),
               run("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy], **attrs),
               run("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy], **attrs),
               run("DepthwiseConv2dNative", [x, w[..., :1]], **attrs)]
        monkeypatch.setattr(conv_gemm, "SCRATCH_BYTES", full)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scratch", [40000, 3000])
def test_intra_op_threads_split_the_batch_to_the_same_numbers(
        monkeypatch: pytest.MonkeyPatch, scratch: int, col2im_path: str) -> None:
    """Slices of the batch on 3 intra-op threads (whole images, or bands of
    one image kept on one thread): forward and input gradient bit for bit,
    the filter gradient within rounding (its slices are summed in order)."""
    monkeypatch.setattr(conv_gemm, "SCRATCH_BYTES", scratch)
    for strides in ((1, 1), (2, 2)):
        xs, ws = (5, 16, 16, 8), (3, 3, 8, 16)
        x, w, dy = _random((xs, ws, strides, (1, 1), "SAME"), np.float64)
        attrs = tf_attrs(strides, (1, 1), "SAME")
        ops = [("Conv2D", [x, w]),
               ("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy]),
               ("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy])]
        one = [run(op, ins, **attrs) for op, ins in ops]
        jit_loader.set_intra_op_threads(3)
        try:
            three = [run(op, ins, **attrs) for op, ins in ops]
        finally:
            jit_loader.set_intra_op_threads(1)
        np.testing.assert_array_equal(three[0], one[0])
        np.testing.assert_array_equal(three[1], one[1])
        np.testing.assert_allclose(three[2], one[2], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(one[1], ref_conv_grads(x, w, dy, strides, (1, 1), "SAME")[0],
                                   rtol=1e-10, atol=1e-10)


# ---- errors -------------------------------------------------------------------------------------

SAME = {"strides": [1, 1, 1, 1], "padding": "SAME"}


@pytest.mark.parametrize(("op", "inputs", "attrs", "message"), [
    ("Conv2D", [np.ones((1, 4, 4, 3), np.float32), np.ones((2, 2, 2, 2), np.float32)], SAME,
     "evenly divisible by filter depth"),
    ("Conv2D", [np.ones((1, 4, 4, 4), np.float32), np.ones((2, 2, 2, 3), np.float32)], SAME,
     "multiple of the number of groups"),
    ("Conv2D", [np.ones((1, 4, 4, 3), np.float32), np.ones((2, 2, 3, 2), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "FULL"}, "padding must be one of"),
    ("Conv2D", [np.ones((4, 4, 3), np.float32), np.ones((2, 2, 3, 2), np.float32)], SAME,
     "input must be 4-dimensional"),
    ("Conv2D", [np.ones((1, 4, 4, 3), np.float32), np.ones((2, 3, 2), np.float32)], SAME,
     "filter must be 4-dimensional"),
    ("Conv2D", [np.ones((2, 4, 10, 10)), np.ones((2, 4, 10, 10))],
     {"strides": [2, 1, 1, 1], "padding": "SAME"}, "strides in the batch and depth"),
    ("Conv2D", [np.ones((2, 4, 10, 10)), np.ones((2, 4, 10, 10))],
     {"strides": [1, 1, 1, 2], "padding": "SAME"}, "strides in the batch and depth"),
    ("Conv2D", [np.ones((1, 1, 1, 1)), np.ones((1, 0, 1, 1))], SAME,
     "filter must not have zero elements"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float64)], SAME,
     "different dtypes"),
    ("Conv2D", [np.ones((1, 2, 2, 1), np.float32), np.ones((4, 4, 1, 1), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "VALID"}, "output size would be negative"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "EXPLICIT", "explicit_paddings": [0, 0, 1, 1, 0, 0]},
     "explicit_paddings must have 8 elements"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "EXPLICIT",
      "explicit_paddings": [1, 0, 0, 0, 0, 0, 0, 0]}, "zero in the batch and depth"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "SAME", "explicit_paddings": [0] * 8},
     "must be empty unless padding is EXPLICIT"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float32)],
     {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NWHC"}, "data_format"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.float32), np.ones((2, 2, 1, 1), np.float32)],
     {"strides": [1, 1], "padding": "SAME"}, "strides must have 4 elements"),
    ("Conv2D", [np.ones((1, 4, 4, 1), np.bool_), np.ones((2, 2, 1, 1), np.bool_)], SAME,
     "not supported on CPU"),
    ("Conv2DBackpropInput", [np.array([32, 20, 20, 3], np.int32), np.ones((18, 18, 3, 2)),
                             np.ones((32, 3, 2, 2))],
     {"strides": [1, 1, 1, 1], "padding": "EXPLICIT",
      "explicit_paddings": [0, 0, -1, 0, 0, 0, 0, 0]}, "must be nonnegative"),
    ("Conv2DBackpropFilter", [np.ones((32, 20, 20, 3)), np.array([18, 18, 3, 2], np.int32),
                              np.ones((32, 3, 2, 2))],
     {"strides": [1, 1, 1, 1], "padding": "EXPLICIT",
      "explicit_paddings": [0, 0, -1, 0, 0, 0, 0, 0]}, "must be nonnegative"),
    ("Conv2DBackpropInput", [np.array([1, 4, 4, 1], np.int32), np.ones((2, 2, 1, 1)),
                             np.ones((1, 4, 4, 1))],
     {"strides": [1, 1, 1, 1], "padding": "VALID"}, "doesn't match computed"),
    ("Conv2DBackpropInput", [np.array([1, 4, 4], np.int32), np.ones((2, 2, 1, 1)),
                             np.ones((1, 3, 3, 1))],
     {"strides": [1, 1, 1, 1], "padding": "VALID"}, "input_sizes must be an integer vector"),
    ("Conv2DBackpropFilter", [np.ones((1, 4, 4, 1)), np.array([2, 2, 1, 1], np.int32),
                              np.ones((1, 3, 3, 2))],
     {"strides": [1, 1, 1, 1], "padding": "VALID"}, "doesn't match computed"),
    ("Conv2DBackpropFilter", [np.ones((1, 4, 4, 1)), np.array([2.0, 2, 1, 1]),
                              np.ones((1, 3, 3, 1))],
     {"strides": [1, 1, 1, 1], "padding": "VALID"}, "filter_sizes must be an integer vector"),
    ("DepthwiseConv2dNative", [np.ones((1, 4, 4, 3)), np.ones((2, 2, 2, 1))], SAME,
     "must have the same depth"),
    ("DepthwiseConv2dNativeBackpropInput", [np.array([1, 4, 4, 2], np.int32),
                                            np.ones((2, 2, 2, 2)), np.ones((1, 4, 4, 2))],
     SAME, "doesn't match computed"),
    ("DepthwiseConv2dNativeBackpropFilter", [np.ones((1, 4, 4, 2)), np.array([2, 2, 3, 1]),
                                             np.ones((1, 4, 4, 3))], SAME,
     "must have the same depth"),
])
def test_bad_operands_and_attrs_raise_kernel_error(op: str, inputs: list, attrs: dict,
                                                   message: str) -> None:
    with pytest.raises(KernelError, match=message):
        run(op, inputs, **attrs)


def test_intra_op_slices_share_one_pool_and_scratch_stays_bounded():
    """Review: each batch size below the thread count made a pool of its own
    (never shut down), and a row too wide for a tile grew a thread's kept buffer."""
    import threading

    from kernels.cpu import conv_gemm, jit_loader
    before = jit_loader.intra_op_threads()
    try:
        jit_loader.set_intra_op_threads(4)
        seen = []
        for batch in (2, 3, 4, 9):
            jit_loader.split_batch(lambda a, b: seen.append((a, b)), batch, 1 << 30)
        assert len(seen) == 2 + 3 + 4 + 4   # min(threads, batch) slices a call
        assert sum(b - a for a, b in seen) == 2 + 3 + 4 + 9   # each row once
        helpers = [t for t in threading.enumerate() if t.name.startswith("intra-op")]
        assert len(helpers) <= 3   # one pool of threads - 1
    finally:
        jit_loader.set_intra_op_threads(before)
    keep = conv_gemm.SCRATCH_BYTES // 4
    big = conv_gemm.scratch(keep * 3, np.dtype(np.float32))
    assert big.size == keep * 3
    assert conv_gemm.scratch(10, np.dtype(np.float32)).base.size == keep   # the kept one
