"""The depthwise convolution's GPU kernels (kernels/cuda/conv_depthwise.py)
under numba's CUDA simulator: ``DepthwiseConv2dNative`` and its two
gradients against the CPU kernels and a plain numpy reference (direct loops
over the taps, float64), SAME/VALID/EXPLICIT, strides, dilations, channel
multipliers 1 to 3, NCHW, float32 and float64, the filter gradient's
positions split over the grid; TF's own expected numbers for the forward
(depthwise_conv_op_base.py's testConv2D2x2Filter); and what the device code
leaves to the CPU kernel.

Runs only in a process started with ``NUMBA_ENABLE_CUDASIM=1``
(``tests/test_kernels_cuda_depthwise.py`` starts one); collected in a
normal run it skips without importing numba. Shapes are tiny: the simulator
runs each CUDA thread as a Python thread.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 "
                "(see test_kernels_cuda_depthwise.py)", allow_module_level=True)

F32, F64 = np.float32, np.float64
RNG = np.random.default_rng(383)
OPS = ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
       "DepthwiseConv2dNativeBackpropFilter")


def rand(*shape: int, dtype=F32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def cpu(op: str, inputs: list, attrs: dict) -> list:
    import kernels
    return kernels.get_kernel(op, "CPU")([np.array(x) for x in inputs], dict(attrs))


def gpu(op: str, inputs: list, attrs: dict) -> list:
    import kernels
    from kernels.cuda.devices import is_device_array, to_device, to_host
    outs = kernels.get_kernel(op, "GPU")([to_device(x) for x in inputs], dict(attrs))
    assert all(is_device_array(o) for o in outs), f"{op}: an output is not a device array"
    return [to_host(o) for o in outs]


def compare(op: str, inputs: list, attrs: dict, tol: float) -> np.ndarray:
    [want], [got] = cpu(op, inputs, attrs), gpu(op, inputs, attrs)
    assert got.dtype == want.dtype and got.shape == want.shape, (op, got.dtype, got.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=op)
    return got


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def no_fallback(monkeypatch) -> None:
    """Fail if the GPU kernels hand a case to the CPU kernel."""
    from kernels.cuda import conv_depthwise

    def refuse(op, inputs, attrs):
        raise AssertionError(f"{op}: ran on the host")
    monkeypatch.setattr(conv_depthwise, "host_fallback", refuse)


# --- a plain reference: the taps walked by hand, float64, NHWC -------------------------

def reference(x, w, dy, strides, dil, pads):
    """(y, dx, dw): y[n, i, j, c*m + q] = sum over taps of
    x_padded[n, i*sh + a*dh, j*sw + b*dw, c] * w[a, b, c, q], and its gradients
    for ``dy``; ``pads`` = (top, bottom, left, right)."""
    x, w = x.astype(F64), w.astype(F64)
    kh, kw, c, m = w.shape
    (sh, sw), (dh, dw) = strides, dil
    xp = np.pad(x, ((0, 0), pads[:2], pads[2:], (0, 0)))
    oh = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((x.shape[0], oh, ow, c, m))
    dxp, dwt = np.zeros(xp.shape), np.zeros(w.shape)
    dy5 = None if dy is None else dy.astype(F64).reshape(x.shape[0], oh, ow, c, m)
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    r, s = i * sh + a * dh, j * sw + b * dw
                    y[:, i, j] += xp[:, r, s, :, None] * w[a, b]
                    if dy5 is not None:
                        dxp[:, r, s] += (dy5[:, i, j] * w[a, b]).sum(-1)
                        dwt[a, b] += (xp[:, r, s, :, None] * dy5[:, i, j]).sum(0)
    dx = dxp[:, pads[0]:pads[0] + x.shape[1], pads[2]:pads[2] + x.shape[2]]
    return y.reshape(x.shape[0], oh, ow, c * m), dx, dwt


# --- TF's numbers --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_forward_matches_tf_expected_values(fmt, monkeypatch):
    # depthwise_conv_op_base.py testConv2D2x2Filter: input 1..12 as [1, 2, 3, 2],
    # filter 1..16 as [2, 2, 2, 2], VALID
    no_fallback(monkeypatch)
    x = np.arange(1, 13, dtype=F32).reshape(1, 2, 3, 2)
    w = np.arange(1, 17, dtype=F32).reshape(2, 2, 2, 2)
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": fmt}
    [out] = gpu("DepthwiseConv2dNative", [nchw(x) if fmt == "NCHW" else x, w], attrs)
    if fmt == "NCHW":
        out = nhwc(out)
    np.testing.assert_array_equal(out.ravel(), np.array([196, 216, 272, 296, 252, 280, 344, 376],
                                                        F32))


# --- against the CPU kernels and the reference ----------------------------------------

# x (NHWC), w, attrs, pads (top, bottom, left, right), strides, dilations
CASES = {
    "same-m2": ((2, 5, 5, 3), (3, 3, 3, 2), {"strides": [1, 1, 1, 1], "padding": "SAME"},
                (1, 1, 1, 1), (1, 1), (1, 1)),
    "valid-strided-m1": ((1, 7, 6, 4), (3, 2, 4, 1), {"strides": [1, 2, 3, 1], "padding": "VALID"},
                         (0, 0, 0, 0), (2, 3), (1, 1)),
    "explicit-dilated-m3": ((1, 5, 6, 2), (2, 3, 2, 3),
                            {"strides": [1, 1, 2, 1], "padding": "EXPLICIT",
                             "dilations": [1, 2, 1, 1],
                             "explicit_paddings": [0, 0, 2, 1, 0, 2, 0, 0]},
                            (2, 1, 0, 2), (1, 2), (2, 1)),
    "same-strided-nchw": ((1, 5, 5, 3), (3, 3, 3, 2),
                          {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"},
                          (1, 1, 1, 1), (2, 2), (1, 1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_forward_and_gradients_match_cpu_and_reference(case, monkeypatch):
    no_fallback(monkeypatch)
    xs, ws, attrs, pads, strides, dil = CASES[case]
    x, w = rand(*xs), rand(*ws)
    want_y, _, _ = reference(x, w, None, strides, dil, pads)
    dy = rand(*want_y.shape)
    want_y, want_dx, want_dw = reference(x, w, dy, strides, dil, pads)
    fmt_nchw = attrs.get("data_format") == "NCHW"
    t = nchw if fmt_nchw else (lambda a: a)
    back = nhwc if fmt_nchw else (lambda a: a)
    in_sizes = np.array(t(x).shape, np.int32)
    y = compare("DepthwiseConv2dNative", [t(x), w], attrs, tol=1e-4)
    dx = compare("DepthwiseConv2dNativeBackpropInput", [in_sizes, w, t(dy)], attrs, tol=1e-4)
    dw = compare("DepthwiseConv2dNativeBackpropFilter", [t(x), np.array(ws, np.int32), t(dy)],
                 attrs, tol=1e-4)
    np.testing.assert_allclose(back(y), want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(back(dx), want_dx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, want_dw, rtol=1e-4, atol=1e-4)


def test_float64_forward_and_gradients(monkeypatch):
    no_fallback(monkeypatch)
    attrs = {"strides": [1, 2, 1, 1], "padding": "SAME", "dilations": [1, 1, 2, 1]}
    x, w = rand(2, 5, 4, 3, dtype=F64), rand(3, 2, 3, 2, dtype=F64)
    [y] = gpu("DepthwiseConv2dNative", [x, w], attrs)
    dy = rand(*y.shape, dtype=F64)
    want_y, want_dx, want_dw = reference(x, w, dy, (2, 1), (1, 2), (1, 1, 1, 1))
    np.testing.assert_allclose(y, want_y, rtol=1e-12, atol=1e-12)
    [dx] = gpu("DepthwiseConv2dNativeBackpropInput", [np.array(x.shape, np.int64), w, dy], attrs)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-12, atol=1e-12)
    [dw] = gpu("DepthwiseConv2dNativeBackpropFilter", [x, np.array(w.shape, np.int32), dy], attrs)
    assert dw.dtype == F64
    np.testing.assert_allclose(dw, want_dw, rtol=1e-12, atol=1e-12)


def test_the_filter_gradient_splits_positions_over_the_grid_and_sums_the_splits(monkeypatch):
    from kernels.cpu.conv_geometry import conv_attrs, geometry
    from kernels.cuda import conv_depthwise
    from kernels.cuda.devices import to_device, to_host
    no_fallback(monkeypatch)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    x, dy = rand(2, 6, 6, 2), rand(2, 6, 6, 2)
    fs = (2, 2, 2, 1)
    assert conv_depthwise.plan_filter_splits(8, 72)[0] > 1   # the op below takes the split path
    assert conv_depthwise.plan_filter_splits(8, 72, splits=5) == (5, 15)
    [want] = cpu("DepthwiseConv2dNativeBackpropFilter", [x, np.array(fs, np.int32), dy], attrs)
    compare("DepthwiseConv2dNativeBackpropFilter", [x, np.array(fs, np.int32), dy], attrs,
            tol=1e-4)
    g = geometry("t", conv_attrs("t", attrs), x.shape, 2, 2)
    for splits in (1, 5, 11):   # one split, chunks of 15 and 7 with a short last one
        got = to_host(conv_depthwise.filter_grad(to_device(x), to_device(dy), g, fs, splits))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"splits={splits}")


def test_cases_the_device_code_leaves_to_the_cpu_kernel():
    """float16: the CPU kernel's numbers, as device arrays; a bad attr or a depth
    mismatch: the CPU kernel's KernelError."""
    import kernels
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    x, w = rand(1, 4, 4, 2).astype(np.float16), rand(2, 2, 2, 3).astype(np.float16)
    y = compare("DepthwiseConv2dNative", [x, w], attrs, tol=1e-3)
    compare("DepthwiseConv2dNativeBackpropFilter", [x, np.array(w.shape, np.int32), y], attrs,
            tol=1e-2)
    with pytest.raises(kernels.KernelError, match="padding"):
        gpu("DepthwiseConv2dNative", [rand(1, 3, 3, 2), rand(2, 2, 2, 2)],
            {**attrs, "padding": "FULL"})
    with pytest.raises(kernels.KernelError, match="same depth"):
        gpu("DepthwiseConv2dNative", [rand(1, 3, 3, 2), rand(2, 2, 3, 2)], attrs)
    with pytest.raises(kernels.KernelError, match="out_backprop"):
        gpu("DepthwiseConv2dNativeBackpropInput",
            [np.array([1, 3, 3, 2], np.int32), rand(2, 2, 2, 2), rand(1, 2, 2, 4)], attrs)
