"""The convolutional GPU kernels (kernels/cuda/conv.py, conv_gemm.py,
pooling.py, normalization.py) against the CPU kernels, under numba's CUDA
simulator: convolution forward and both gradients (SAME/VALID/EXPLICIT,
strides, dilations, NCHW, split-k), pooling and its gradients (TF's tie and
NaN rules), LRN and batch norm (training, running averages, inference,
gradients), float32 and float64; and TF's own expected numbers for a
convolution (conv_ops_test.py's 2x2-filter cases).

Runs only in a process started with ``NUMBA_ENABLE_CUDASIM=1``
(``tests/test_kernels_cuda_conv.py`` starts one); collected in a normal run
it skips without importing numba. Shapes are tiny: the simulator runs each
CUDA thread as a Python thread.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (see test_kernels_cuda_conv.py)",
                allow_module_level=True)

F32, F64 = np.float32, np.float64
RNG = np.random.default_rng(38)


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


def compare(op: str, inputs: list, attrs: dict, tol: float = 1e-5) -> list:
    want, got = cpu(op, inputs, attrs), gpu(op, inputs, attrs)
    assert len(got) == len(want)
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.dtype == w.dtype and g.shape == w.shape, (op, i, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{op} output {i}")
    return got


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


# --- convolution ----------------------------------------------------------------------

# conv_ops_test.py (Conv2DTest.testConv2D2x2Filter, testConv2D2x2FilterStride2Same):
# input 1..18 as [1, 2, 3, 3], filter 1..36 as [2, 2, 3, 3]
@pytest.mark.parametrize("strides,padding,expected", [
    ((1, 1), "VALID", [2271, 2367, 2463, 2901, 3033, 3165]),
    ((2, 2), "SAME", [2271, 2367, 2463, 1230, 1305, 1380])])
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv2d_matches_tf_expected_values(strides, padding, expected, fmt):
    x = np.arange(1, 19, dtype=F32).reshape(1, 2, 3, 3)
    w = np.arange(1, 37, dtype=F32).reshape(2, 2, 3, 3)
    st = [1, strides[0], strides[1], 1]
    if fmt == "NCHW":
        x, st = nchw(x), [1, 1, strides[0], strides[1]]
    [out] = gpu("Conv2D", [x, w], {"strides": st, "padding": padding, "data_format": fmt})
    if fmt == "NCHW":
        out = out.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out.ravel(), np.asarray(expected, F32))


CONV_CASES = {
    "same": ((2, 6, 6, 3), (3, 3, 3, 5), {"strides": [1, 1, 1, 1], "padding": "SAME"}),
    "valid-strided": ((1, 7, 6, 4), (3, 2, 4, 3), {"strides": [1, 2, 3, 1], "padding": "VALID"}),
    "explicit-dilated": ((1, 5, 6, 2), (2, 3, 2, 3),
                         {"strides": [1, 1, 2, 1], "padding": "EXPLICIT", "dilations": [1, 2, 1, 1],
                          "explicit_paddings": [0, 0, 2, 1, 0, 2, 0, 0]}),
    "same-strided-nchw": ((1, 3, 5, 5), (3, 3, 3, 2),
                          {"strides": [1, 1, 2, 2], "padding": "SAME", "data_format": "NCHW"}),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_and_its_gradients_match_cpu(case):
    xs, ws, attrs = CONV_CASES[case]
    x, w = rand(*xs), rand(*ws)
    [y] = compare("Conv2D", [x, w], attrs, tol=1e-4)
    dy = rand(*y.shape)
    compare("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy], attrs, tol=1e-4)
    compare("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy], attrs, tol=1e-4)


def test_conv2d_float64_gradients_and_two_element_input_sizes():
    attrs = {"strides": [1, 2, 1, 1], "padding": "SAME"}
    x, w = rand(1, 5, 4, 3, dtype=F64), rand(3, 3, 3, 2, dtype=F64)
    [y] = compare("Conv2D", [x, w], attrs, tol=1e-12)
    dy = rand(*y.shape, dtype=F64)
    compare("Conv2DBackpropInput", [np.array([5, 4], np.int64), w, dy], attrs, tol=1e-12)
    compare("Conv2DBackpropFilter", [x, np.array(w.shape, np.int32), dy], attrs, tol=1e-12)


def test_the_filter_gradient_splits_k_over_the_grid_and_sums_the_splits():
    from kernels.cuda import conv_gemm
    x, w = rand(2, 6, 6, 2), rand(2, 2, 2, 3)
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    dy = rand(2, 6, 6, 3)
    m, n, k = 2 * 2 * 2, 3, 2 * 6 * 6
    assert conv_gemm.plan_splits(m, n, k)[0] > 1   # this case takes the split path
    assert conv_gemm.plan_splits(m, n, k, splits=3) == (3, 32)
    compare("Conv2DBackpropFilter", [x, np.array(w.shape, np.int32), dy], attrs, tol=1e-4)


def test_cases_the_device_code_leaves_to_the_cpu_kernel():
    """float16 and grouped filters: the CPU kernel's numbers, as device arrays;
    a bad attr: the CPU kernel's KernelError (the depthwise ops:
    test_kernels_cuda_depthwise_sim.py)."""
    import kernels
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    compare("Conv2D", [rand(1, 3, 3, 2).astype(np.float16), rand(2, 2, 2, 2).astype(np.float16)],
            attrs, tol=1e-3)
    compare("Conv2D", [rand(1, 3, 3, 4), rand(2, 2, 2, 4)], attrs, tol=1e-4)   # 2 groups
    with pytest.raises(kernels.KernelError, match="padding"):
        gpu("Conv2D", [rand(1, 3, 3, 2), rand(2, 2, 2, 2)], {**attrs, "padding": "FULL"})


# --- pooling ------------------------------------------------------------------------------

POOL_CASES = [
    {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"},
    {"ksize": [1, 2, 3, 1], "strides": [1, 1, 2, 1], "padding": "VALID"},
    {"ksize": [1, 1, 3, 2], "strides": [1, 1, 2, 1], "padding": "SAME", "data_format": "NCHW"},
]


def _cpu_pooling_loops(dtype) -> None:
    """The CPU pooling kernels' numba loops, compiled now: the numpy path they
    run meanwhile adds a gradient's terms in another order (last-bit differences)."""
    from kernels.cpu.pooling import JIT
    assert JIT.prepare(dtype)


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_pooling_and_its_gradients_match_cpu_exactly(case, dtype):
    _cpu_pooling_loops(dtype)
    attrs = POOL_CASES[case]
    x = rand(2, 5, 6, 3, dtype=dtype)
    [y] = compare("MaxPool", [x], attrs, tol=0)
    [a] = compare("AvgPool", [x], attrs, tol=0)
    g = rand(*y.shape, dtype=dtype)
    compare("MaxPoolGrad", [x, y, g], attrs, tol=0)
    compare("AvgPoolGrad", [np.array(x.shape, np.int32), rand(*a.shape, dtype=dtype)], attrs,
            tol=0)


def test_max_pool_explicit_padding_ties_and_nan_follow_tf_cpu():
    attrs = {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "EXPLICIT",
             "explicit_paddings": [0, 0, 1, 0, 0, 1, 0, 0]}
    _cpu_pooling_loops(F32)
    x = np.ones((1, 3, 3, 2), F32)       # every window a tie: the first cell takes the gradient
    x[0, 1, 1, 1] = np.nan               # channel 1: windows holding it pool to NaN
    [y] = compare("MaxPool", [x], attrs, tol=0)
    assert np.isnan(y[0, 1, 1, 1]) and not np.isnan(y[..., 0]).any()
    g = rand(*y.shape)
    [dx] = compare("MaxPoolGrad", [x, y, g], attrs, tol=0)
    # channel 0, a tie everywhere: window (i, j)'s first real cell is (max(i-1, 0), j)
    want = np.zeros((3, 3), F32)
    for i in range(3):
        for j in range(3):
            want[max(i - 1, 0), j] += g[0, i, j, 0]
    np.testing.assert_allclose(dx[0, :, :, 0], want, rtol=1e-6)


# --- LRN and batch norm --------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0, 0.6])
def test_lrn_and_its_gradient_match_cpu(beta):
    attrs = {"depth_radius": 2, "bias": 1.5, "alpha": 0.2, "beta": beta}
    x = rand(1, 2, 3, 7)
    [y] = compare("LRN", [x], attrs, tol=1e-5)
    compare("LRNGrad", [rand(*x.shape), x, y], attrs, tol=1e-5)
    x64 = x.astype(F64)
    [y64] = compare("LRN", [x64], attrs, tol=1e-12)
    compare("LRNGrad", [x64 * 0.5, x64, y64], attrs, tol=1e-12)


BN_ATTRS = [{"is_training": True, "epsilon": 1e-3},
            {"is_training": True, "exponential_avg_factor": 0.25},
            {"is_training": False, "epsilon": 1e-3},
            {"is_training": True, "data_format": "NCHW"}]


@pytest.mark.parametrize("case", range(len(BN_ATTRS)))
@pytest.mark.parametrize("dtype", [F32, F64])
def test_fused_batch_norm_and_its_gradient_match_cpu(case, dtype):
    attrs = BN_ATTRS[case]
    x = rand(3, 4, 5, 6, dtype=dtype) * 2 + 1
    c = x.shape[1] if attrs.get("data_format") == "NCHW" else x.shape[3]
    scale, offset, mean = rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype)
    var = np.abs(rand(c, dtype=dtype)) + 0.5
    tol = 1e-5 if dtype == F32 else 1e-12
    y, _, _, rs1, rs2, _ = compare("FusedBatchNormV3", [x, scale, offset, mean, var], attrs, tol)
    dy = rand(*x.shape, dtype=dtype)
    grad_attrs = {k: v for k, v in attrs.items() if k != "exponential_avg_factor"}
    compare("FusedBatchNormGradV3", [dy, x, scale, rs1, rs2], grad_attrs, tol=tol * 10)
