"""Every GPU kernel against the CPU kernel, under numba's CUDA simulator.

The simulator must be switched on before numba is imported, and other tests
in a pytest process may already have imported numba, so these tests only run
in a process started with ``NUMBA_ENABLE_CUDASIM=1``:
``tests/test_kernels_cuda.py`` starts one. Collected in a normal run, this
module skips without importing numba. Shapes are small (the simulator runs
each CUDA thread as a Python thread) but cover one and two matmul tiles and
ragged edges.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (see test_kernels_cuda.py)",
                allow_module_level=True)

F32 = np.float32
RNG = np.random.default_rng(99)


def rand(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


def compare(op, inputs, attrs=None, rtol=1e-5, atol=1e-5, host_inputs=False):
    import kernels
    from kernels.cuda.devices import is_device_array, to_device, to_host
    attrs = attrs or {}
    cpu = kernels.get_kernel(op, "CPU")([np.array(x) for x in inputs], attrs)
    dev_in = [x if host_inputs else to_device(x) for x in inputs]
    gpu = kernels.get_kernel(op, "GPU")(dev_in, attrs)
    assert len(gpu) == len(cpu)
    for c, g in zip(cpu, gpu):
        assert is_device_array(g), f"{op} returned {type(g).__name__}, not a device array"
        g = to_host(g)
        assert g.dtype == c.dtype and g.shape == c.shape, (op, g.dtype, c.dtype, g.shape, c.shape)
        np.testing.assert_allclose(g, c, rtol=rtol, atol=atol, err_msg=op)


def test_backend_is_simulator_with_one_device():
    from kernels.cuda.devices import backend, gpu_devices
    assert backend() == "cudasim"
    devs = gpu_devices()
    assert [d["name"] for d in devs] == ["GPU:0"]
    assert isinstance(devs[0]["memory_bytes"], int) and devs[0]["memory_bytes"] > 0


@pytest.mark.parametrize("shapes", [((16, 16), (16, 16)), ((17, 5), (5, 18)),
                                    ((3, 33), (33, 70)), ((1, 1), (1, 1))])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_matmul_tiles_and_ragged_shapes(shapes, ta, tb):
    a, b = rand(*shapes[0]), rand(*shapes[1])
    a_in = a.T.copy() if ta else a
    b_in = b.T.copy() if tb else b
    compare("MatMul", [a_in, b_in], {"transpose_a": ta, "transpose_b": tb}, rtol=1e-4, atol=1e-4)


def test_matmul_float64_and_both_transposed():
    a, b = rand(20, 7, dtype=np.float64), rand(7, 9, dtype=np.float64)
    compare("MatMul", [a.T.copy(), b.T.copy()], {"transpose_a": True, "transpose_b": True},
            rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "RealDiv"])
def test_binary_ops_with_common_broadcasts(op):
    x = rand(5, 7)
    y = x * 0.5 + 3  # away from zero for RealDiv
    compare(op, [x, y])
    compare(op, [x, rand(7) + 3])                  # row vector over the last axis
    compare(op, [x, np.array(2.5, F32)])           # scalar
    compare(op, [np.array(2.5, F32), y])           # scalar on the left
    compare(op, [rand(2, 1, 7), rand(3, 1) + 3])   # not covered on the device: host fallback


def test_equal_and_host_inputs_and_dtype_rule():
    x = rand(4, 6)
    y = x.copy()
    y[1, 2] += 1
    compare("Equal", [x, y])
    compare("Add", [x, np.array(1.0)], host_inputs=True)  # host arrays are copied in; stays f32


@pytest.mark.parametrize("op", ["Neg", "Square", "Exp", "Relu", "Sigmoid", "Tanh"])
def test_unary(op):
    compare(op, [rand(9, 5) * 3])


def test_log_sqrt_and_grads():
    x = np.abs(rand(6, 4)) + 0.1
    compare("Log", [x])
    compare("Sqrt", [x])
    dy, y = rand(6, 4), rand(6, 4)
    compare("ReluGrad", [dy, y])
    compare("SigmoidGrad", [y, dy])
    compare("TanhGrad", [y, dy])


def test_bias_add_and_grad():
    compare("BiasAdd", [rand(7, 10), rand(10)])
    compare("BiasAddGrad", [rand(33, 10)], rtol=1e-4)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (None, True), (0, False), (1, True),
                                           (-1, False), ([0, 1], False)])
def test_sum_mean(op, axis, keepdims):
    compare(op, [rand(37, 9)], {"axis": axis, "keepdims": keepdims}, rtol=1e-4)


def test_sum_of_many_elements_and_ints():
    compare("Sum", [rand(3000)], rtol=1e-4, atol=1e-3)  # more than one block of partial sums
    compare("Sum", [np.arange(40, dtype=np.int32).reshape(5, 8)], {"axis": 0})
    compare("Sum", [np.arange(40, dtype=np.int64)], {})


def test_softmax_and_losses():
    logits = rand(6, 10) * 4
    logits[0, 3] = 500.0  # stability: must not overflow
    compare("Softmax", [logits])
    compare("LogSoftmax", [logits], rtol=1e-4)
    labels = np.eye(10, dtype=F32)[RNG.integers(0, 10, 6)]
    compare("SoftmaxCrossEntropyWithLogits", [logits, labels], rtol=1e-4)
    compare("SparseSoftmaxCrossEntropyWithLogits",
            [logits, RNG.integers(0, 10, 6).astype(np.int64)], rtol=1e-4)


def test_sparse_xent_bad_label_gives_nan_row():
    import kernels
    from kernels.cuda.devices import to_host
    loss, backprop = kernels.get_kernel("SparseSoftmaxCrossEntropyWithLogits", "GPU")(
        [rand(2, 3), np.array([1, 7], np.int32)], {})
    loss, backprop = to_host(loss), to_host(backprop)
    assert np.isfinite(loss[0]) and np.isnan(loss[1]) and np.isnan(backprop[1]).all()


def test_argmax_cast_identity_reshape_fill():
    x = rand(5, 8)
    compare("ArgMax", [x], {"axis": 1})
    compare("ArgMax", [x], {"axis": 0, "output_type": "int32"})
    compare("Cast", [x * 3], {"dtype": "int32"})
    compare("Cast", [np.array([0.0, 1.5, 0.0], F32)], {"dtype": "bool"})
    compare("Cast", [np.arange(4, dtype=np.int32)], {"dtype": "float32"})
    compare("Identity", [x])
    compare("StopGradient", [x])
    compare("Reshape", [x], {"shape": [2, -1, 4]})
    compare("Reshape", [np.array(3.0, F32)], {"shape": [1]})
    compare("ZerosLike", [x])
    compare("OnesLike", [x])
    compare("Zeros", [], {"shape": [3, 2], "dtype": "float32"})
    compare("Ones", [], {"shape": [4], "dtype": "int64"})


def test_strings_stay_on_host():
    import kernels
    out = kernels.get_kernel("Equal", "GPU")([np.array(["a", "b"]), np.array(["a", "c"])], {})
    assert out[0].tolist() == [True, False]


def test_sum_to_shape_of():
    g = rand(6, 5)
    compare("SumToShapeOf", [g, np.zeros(5, F32)], rtol=1e-4)
    compare("SumToShapeOf", [g, np.zeros((1, 5), F32)], rtol=1e-4)
    compare("SumToShapeOf", [g, np.zeros((), F32)], rtol=1e-4)
    compare("SumToShapeOf", [g, np.zeros((6, 1), F32)], rtol=1e-4)  # host fallback


def test_broadcast_to():
    compare("BroadcastTo", [rand(4, 1), np.array([3, 4, 6], np.int32)], host_inputs=False)
    compare("BroadcastTo", [rand(6), np.array([2, 3, 6], np.int64)])
    compare("BroadcastTo", [np.array([True, False]), np.array([3, 2], np.int32)])
    compare("BroadcastTo", [rand(), np.array([2, 2], np.int32)])
    compare("BroadcastTo", [rand(2, 1, 3), np.array([2, 4, 3], np.int32)])   # host fallback


def _update_case(op, attrs, make):
    """Run ``op`` for three steps on CPU copies and on device arrays; compare state."""
    import kernels
    from kernels.cuda.devices import to_device, to_host
    state_cpu, hyper = make()
    state_gpu = [to_device(s.copy()) for s in state_cpu]
    for step in range(3):
        grad = rand(*state_cpu[0].shape)
        h = hyper(step)
        kernels.get_kernel(op, "CPU")(state_cpu + h + [grad] if op != "ApplyMomentum"
                                      else state_cpu + [h[0], grad, h[1]], attrs)
        ins = state_gpu + h + [to_device(grad)] if op != "ApplyMomentum" \
            else state_gpu + [h[0], to_device(grad), h[1]]
        out = kernels.get_kernel(op, "GPU")(ins, attrs)
        assert out[0] is state_gpu[0]
    for c, g in zip(state_cpu, state_gpu):
        np.testing.assert_allclose(to_host(g), c, rtol=1e-5, atol=1e-6, err_msg=op)


def test_update_rules_in_place():
    from kernels.cuda.devices import to_device
    lr = lambda step: [np.array(0.1, F32)]  # noqa: E731
    _update_case("ApplyGradientDescent", {}, lambda: ([rand(4, 3)], lr))
    for nesterov in (False, True):
        _update_case("ApplyMomentum", {"use_nesterov": nesterov},
                     lambda: ([rand(4, 3), np.zeros((4, 3), F32)],
                              lambda step: [to_device(np.array(0.1, F32)), np.array(0.9, F32)]))
    _update_case("ApplyAdagrad", {}, lambda: ([rand(7), np.full(7, 0.1, F32)], lr))
    b1, b2 = 0.9, 0.999
    _update_case("ApplyAdam", {}, lambda: (
        [rand(5), np.zeros(5, F32), np.zeros(5, F32)],
        lambda step: [np.array(b1 ** (step + 1), F32), np.array(b2 ** (step + 1), F32),
                      np.array(0.01, F32), np.array(b1, F32), np.array(b2, F32),
                      np.array(1e-7, F32)]))


def test_update_needs_device_storage():
    import kernels
    from kernels import KernelError
    with pytest.raises(KernelError, match="device array"):
        kernels.get_kernel("ApplyGradientDescent", "GPU")([np.ones(3, F32), 0.1, np.ones(3, F32)], {})


def test_op_without_gpu_kernel_is_kernel_not_found():
    import kernels
    with pytest.raises(kernels.KernelNotFound, match="Transpose.*CPU"):
        kernels.get_kernel("Transpose", "GPU")
    assert not kernels.has_kernel("VariableV2", "GPU") and kernels.has_kernel("MatMul", "GPU")


@pytest.mark.parametrize("op,ufunc", [("AssignAdd", np.add), ("AssignSub", np.subtract)])
def test_assign_add_sub_in_place_on_a_device_variable(op, ufunc):
    import kernels
    from kernels.cuda.devices import to_device, to_host
    var = rand(3, 4)
    deltas = [rand(3, 4), rand(4), np.array(1.5, F32),      # equal, a row, a scalar
              rand(3, 1),                                   # a column: on a host copy
              (rand(3, 4) * 4).astype(np.float64)]          # cast to the variable's dtype
    dev = to_device(var.copy())
    for delta in deltas:
        out = kernels.get_kernel(op, "GPU")([dev, to_device(delta)], {})
        assert out[0] is dev
        ufunc(var, np.asarray(delta, F32), out=var)
        np.testing.assert_allclose(to_host(dev), var, rtol=1e-6, err_msg=op)
    counter = to_device(np.array(0, np.int64))
    for _ in range(3):
        kernels.get_kernel(op, "GPU")([counter, np.array(1, np.int64)], {})
    assert int(to_host(counter)) == (3 if op == "AssignAdd" else -3)
    with pytest.raises(kernels.KernelError, match="does not fit"):
        kernels.get_kernel(op, "GPU")([dev, to_device(rand(2, 3, 4))], {})
