"""CPU kernels against direct numpy/Python references, and the registry contract."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import kernels
from kernels import CPU, KernelError, KernelNotFound, get_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(1234)
F32 = np.float32


def run(op: str, *inputs, **attrs) -> list:
    return get_kernel(op, CPU)(list(inputs), attrs)


def one(op: str, *inputs, **attrs) -> np.ndarray:
    out = run(op, *inputs, **attrs)
    assert isinstance(out, list) and len(out) == 1
    return out[0]


def rand(*shape, dtype=F32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# --- registry ----------------------------------------------------------------------

def test_import_kernels_does_not_import_numba():
    code = "import sys, kernels; kernels.get_kernel('MatMul', 'CPU'); print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def test_every_catalogue_op_has_a_cpu_kernel():
    from distrib.framework.op_def import op_types
    # the worker runs these itself (variables, resources, collectives, cross-task edges)
    stateful = op_types(lambda d: d.is_stateful or d.is_collective or d.name.startswith("_")) - {
        "ApplyGradientDescent", "ApplyMomentum", "ApplyAdagrad", "ApplyAdam"}
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        text = f.read()

    named = set(re.findall(r"`([A-Z_][A-Za-z]+)`", text)) - stateful
    # error names and Python literals are not ops
    named = {n for n in named if not n.endswith("Error") and n not in ("None", "True", "False")}
    missing = sorted(op for op in named if not kernels.has_kernel(op, CPU))
    assert missing == []


def test_unknown_op_raises_kernel_not_found_naming_op_and_device():
    with pytest.raises(KernelNotFound) as info:
        get_kernel("NoSuchOp", CPU)
    assert isinstance(info.value, KeyError)
    assert "NoSuchOp" in str(info.value) and "CPU" in str(info.value)


def test_unknown_device_type_lists_known_ones():
    with pytest.raises(KernelNotFound, match="TPU.*known device types"):
        get_kernel("MatMul", "TPU")


def test_register_twice_is_refused_and_lookup_works():
    @kernels.register("TestOnlyOp", "TEST")
    def k(inputs, attrs):
        return [inputs[0]]
    assert kernels.get_kernel("TestOnlyOp", "TEST") is k
    assert kernels.registered_ops("TEST") == ["TestOnlyOp"]
    with pytest.raises(ValueError, match="already registered"):
        kernels.register("TestOnlyOp", "TEST")(lambda i, a: i)
    with pytest.raises(KernelNotFound, match=r"has kernels on \['TEST'\]"):
        get_kernel("TestOnlyOp", CPU)


# --- sources -------------------------------------------------------------------------

def test_const_is_read_only_and_cast_to_dtype():
    value = np.array([1, 2, 3])
    out = one("Const", value=value, dtype="float32")
    assert out.dtype == F32 and out.tolist() == [1, 2, 3]
    with pytest.raises(ValueError):
        out[0] = 5
    strings = one("Const", value=np.array(["a", "bc"]), dtype="string")
    assert strings.dtype.kind == "U" and strings.tolist() == ["a", "bc"]


def test_zeros_ones_like_and_sources():
    assert one("Zeros", shape=[2, 3], dtype="int32").dtype == np.int32
    assert one("Ones", shape=[], dtype="float64").shape == ()
    assert one("Ones", shape=[0, 2], dtype="float32").shape == (0, 2)
    x = rand(2, 2)
    assert one("ZerosLike", x).tolist() == [[0, 0], [0, 0]] and one("OnesLike", x).dtype == F32
    assert run("NoOp") == []
    with pytest.raises(KernelError, match="fully known"):
        one("Zeros", shape=[None, 3], dtype="float32")
    with pytest.raises(KernelError, match="feed"):
        one("Placeholder", dtype="float32", shape=[None])


def test_random_ops_reproducible_with_seed_and_fresh_without():
    a = one("RandomStandardNormal", shape=[1000], dtype="float32", mean=2.0, stddev=0.5, seed=7)
    b = one("RandomStandardNormal", shape=[1000], dtype="float32", mean=2.0, stddev=0.5, seed=7)
    c = one("RandomStandardNormal", shape=[1000], dtype="float32", mean=2.0, stddev=0.5, seed=None)
    d = one("RandomStandardNormal", shape=[1000], dtype="float32", mean=2.0, stddev=0.5, seed=None)
    assert a.dtype == F32 and np.array_equal(a, b) and not np.array_equal(c, d)
    assert abs(a.mean() - 2.0) < 0.1 and abs(a.std() - 0.5) < 0.1
    u = one("RandomUniform", shape=[500], dtype="float64", minval=-1.0, maxval=3.0, seed=3)
    assert u.dtype == np.float64 and u.min() >= -1.0 and u.max() < 3.0
    assert np.array_equal(u, one("RandomUniform", shape=[500], dtype="float64",
                                 minval=-1.0, maxval=3.0, seed=3))
    i = one("RandomUniform", shape=[200], dtype="int32", minval=0, maxval=5, seed=1)
    assert i.dtype == np.int32 and set(i.tolist()) <= set(range(5))


def test_unseeded_draws_differ_across_threads_and_a_forked_child():
    """Unseeded: one generator per thread, seeded from the OS; a forked child
    makes its own, so it never repeats its parent's numbers."""
    import os
    import threading
    draw = lambda: one("RandomUniform", shape=[64], dtype="float64", seed=None)  # noqa: E731
    draw()   # this thread's generator exists before the fork and the thread
    got: list = []
    t = threading.Thread(target=lambda: got.append(draw()))
    t.start()
    t.join(30)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: its first draw, to the parent
        try:
            os.write(write_end, draw().tobytes())
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while len(data) < 64 * 8:
        chunk = os.read(read_end, 64 * 8)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    mine = draw()
    child = np.frombuffer(data, np.float64)
    assert child.shape == (64,) and not np.array_equal(child, mine)
    assert got and not np.array_equal(got[0], mine)


# --- elementwise ---------------------------------------------------------------------

BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum,
          "Minimum": np.minimum, "Equal": np.equal, "NotEqual": np.not_equal,
          "Less": np.less, "Greater": np.greater}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 4), ()),
                                    ((), ()), ((2, 1, 4), (3, 1)), ((0, 4), (4,))])
def test_binary_matches_numpy_with_broadcasting(op, shapes):
    x, y = rand(*shapes[0]), rand(*shapes[1])
    out = one(op, x, y)
    ref = BINARY[op](x, y)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


def test_float32_stays_float32_with_0d_operands():
    x = rand(3)
    assert one("Add", x, np.array(1.5, F32)).dtype == F32
    assert one("Mul", x, np.array(0.5)).dtype == F32          # 0-d float64 does not upcast
    assert one("Sub", np.array(2, np.int64), x).dtype == F32  # nor does a 0-d int
    assert one("Add", np.arange(3, dtype=np.int32), np.array(1)).dtype == np.int32
    np.testing.assert_allclose(one("Mul", x, np.array(0.5)), x * F32(0.5))


def test_real_div_floats_and_refuses_ints():
    x, y = rand(2, 3), rand(3) + 5
    out = one("RealDiv", x, y)
    assert out.dtype == F32
    np.testing.assert_allclose(out, x / y, rtol=1e-6)
    assert one("RealDiv", np.array([1.0]), np.array([0.0]))[0] == math.inf
    with pytest.raises(KernelError, match="Cast"):
        one("RealDiv", np.array([4, 6]), np.array([2, 3]))


def test_pow_logical_and_broadcast_errors():
    np.testing.assert_allclose(one("Pow", np.array([2.0, 3.0], F32), np.array(2.0, F32)), [4, 9])
    a, b = np.array([True, False, True]), np.array([True, True, False])
    assert one("LogicalAnd", a, b).tolist() == [True, False, False]
    assert one("LogicalNot", a).tolist() == [False, True, False]
    with pytest.raises(KernelError, match="do not broadcast"):
        one("Add", rand(3, 4), rand(3))


def test_string_identity_equal_reshape():
    s = np.array(["a", "b", "c", "d"])
    assert one("Equal", s, np.array(["a", "x", "c", "y"])).tolist() == [True, False, True, False]
    assert one("Identity", s).tolist() == s.tolist()
    assert one("Reshape", s, shape=[2, -1]).tolist() == [["a", "b"], ["c", "d"]]


def _sigmoid_ref(x):
    return np.array([1 / (1 + math.exp(-v)) if v > -700 else 0.0 for v in x.ravel().astype(float)])


UNARY = {"Neg": np.negative, "Exp": np.exp, "Square": np.square, "Abs": np.abs,
         "Tanh": np.tanh, "Sign": np.sign, "Relu": lambda x: np.where(x > 0, x, 0)}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (0,)])
def test_unary_matches_numpy_and_keeps_dtype(op, shape):
    x = rand(*shape)
    out = one(op, x)
    assert out.dtype == F32 and out.shape == x.shape
    np.testing.assert_allclose(out, UNARY[op](x).astype(F32), rtol=1e-6)


def test_log_sqrt_sigmoid():
    x = np.abs(rand(10)) + 0.1
    np.testing.assert_allclose(one("Log", x), np.log(x), rtol=1e-6)
    np.testing.assert_allclose(one("Sqrt", x), np.sqrt(x), rtol=1e-6)
    assert one("Log", np.array([0.0]))[0] == -math.inf
    z = np.array([-1000.0, -3.0, 0.0, 2.0, 1000.0])
    np.testing.assert_allclose(one("Sigmoid", z), _sigmoid_ref(z), rtol=1e-12)
    assert one("Sigmoid", z.astype(F32)).dtype == F32


def test_identity_is_a_snapshot():
    x = rand(3)
    y = one("Identity", x)
    z = one("StopGradient", x)
    x[0] = 99
    assert y[0] != 99 and z[0] != 99


def test_grads_and_cast():
    dy, y = rand(4, 3), rand(4, 3)
    np.testing.assert_array_equal(one("ReluGrad", dy, y), np.where(y > 0, dy, 0))
    assert one("ReluGrad", dy, y).dtype == F32
    np.testing.assert_allclose(one("SigmoidGrad", y, dy), dy * y * (1 - y), rtol=1e-6)
    np.testing.assert_allclose(one("TanhGrad", y, dy), dy * (1 - y * y), rtol=1e-6)
    c = one("Cast", np.array([1.7, -1.7, 0.0]), dtype="int32")
    assert c.dtype == np.int32 and c.tolist() == [1, -1, 0]
    assert one("Cast", np.array([0.0, 2.0]), dtype="bool").tolist() == [False, True]


# --- reductions ----------------------------------------------------------------------

@pytest.mark.parametrize("op,ref", [("Sum", np.sum), ("Mean", np.mean), ("Min", np.min),
                                    ("Max", np.max), ("Prod", np.prod)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, [0, 2], []])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_match_numpy(op, ref, axis, keepdims):
    x = rand(2, 3, 4)
    out = one(op, x, axis=axis, keepdims=keepdims)
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    expect = ref(x, axis=np_axis, keepdims=keepdims)
    assert out.dtype == F32 and out.shape == np.shape(expect)
    np.testing.assert_allclose(out, expect, rtol=1e-5)
    # float reductions take the ufunc's reduce: numpy's own bits
    assert np.array_equal(out, np.asarray(ref(x, axis=np_axis, keepdims=keepdims,
                                              **({"dtype": F32} if op in ("Sum", "Mean", "Prod")
                                                 else {}))))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_of_more_elements_than_the_float_counts_exactly_has_numpys_bits(dtype):
    # np.mean divides by an intp count in float64: 2**24 + 1 is not a float32
    x = np.full((1 << 24) + 1, 7.0011177, dtype)
    x[::3] = 2.5
    assert np.array_equal(one("Mean", x), np.asarray(np.mean(x, dtype=dtype)))


def test_integer_reductions_keep_dtype_and_mean_truncates():
    x = np.array([[1, 2], [3, 5]], np.int32)
    assert one("Sum", x).dtype == np.int32 and int(one("Sum", x)) == 11
    m = one("Mean", x, axis=1)
    assert m.dtype == np.int32 and m.tolist() == [1, 4]
    with pytest.raises(KernelError, match="out of range"):
        one("Sum", x, axis=2)


def test_argmax():
    x = np.array([[1.0, 5.0, 5.0], [7.0, 0.0, 2.0]])
    assert one("ArgMax", x, axis=1).tolist() == [1, 0]
    assert one("ArgMax", x, axis=1).dtype == np.int64
    out = one("ArgMax", x, axis=0, output_type="int32")
    assert out.dtype == np.int32 and out.tolist() == [1, 0, 0]


# --- shape ---------------------------------------------------------------------------

def test_reshape_transpose_shape_expand_tile():
    x = np.arange(6, dtype=F32)
    assert one("Reshape", x, shape=[2, -1]).shape == (2, 3)
    assert one("Reshape", np.array(3.0), shape=[1, 1]).shape == (1, 1)
    with pytest.raises(KernelError, match="cannot reshape"):
        one("Reshape", x, shape=[4, -1])
    with pytest.raises(KernelError, match="at most one"):
        one("Reshape", x, shape=[-1, -1])
    m = x.reshape(2, 3)
    t = one("Transpose", m)
    assert t.flags.c_contiguous and np.array_equal(t, m.T)
    assert one("Transpose", rand(2, 3, 4), perm=[1, 0, 2]).shape == (3, 2, 4)
    assert one("Transpose", np.array(1.0)).shape == ()
    s = one("Shape", rand(2, 0, 5))
    assert s.dtype == np.int32 and s.tolist() == [2, 0, 5]
    assert one("ExpandDims", m, axis=-1).shape == (2, 3, 1)
    assert np.array_equal(one("Tile", m, multiples=[2, 1]), np.tile(m, [2, 1]))


@pytest.mark.parametrize("gshape,rshape", [((4, 3), (3,)), ((4, 3), (1, 3)), ((4, 3), ()),
                                           ((2, 4, 3), (4, 1)), ((4, 3), (4, 3))])
def test_sum_to_shape_of_undoes_broadcasting(gshape, rshape):
    g, ref = rand(*gshape), np.zeros(rshape, F32)
    out = one("SumToShapeOf", g, ref)
    assert type(out) is np.ndarray and out.shape == rshape and out.dtype == F32
    # reference: the gradient of sum(broadcast(r) * g) with respect to r is sum_to_shape(g)
    expect = np.zeros(rshape, np.float64)
    for idx in np.ndindex(*gshape):
        ridx = tuple(0 if d == 1 else i for i, d in zip(idx[len(gshape) - len(rshape):], rshape))
        expect[ridx] += g[idx]
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), ([0, 2], False),
                                           (1, True), (None, True)])
def test_broadcast_to_shape_of_undoes_reduction(axis, keepdims):
    ref = rand(2, 3, 4)
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    g = np.sum(ref, axis=np_axis, keepdims=keepdims)
    out = one("BroadcastToShapeOf", g, ref, axis=axis, keepdims=keepdims)
    assert out.shape == ref.shape and out.flags.writeable
    expect = np.broadcast_to(np.sum(ref, axis=np_axis, keepdims=True), ref.shape)
    np.testing.assert_allclose(out, expect, rtol=1e-6)


# --- linear algebra and nn -----------------------------------------------------------

@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_matches_python_triple_loop(ta, tb):
    a, b = rand(3, 4), rand(4, 5)
    ai, bi = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    out = one("MatMul", ai, bi, transpose_a=ta, transpose_b=tb)
    expect = [[sum(float(a[i, k]) * float(b[k, j]) for k in range(4)) for j in range(5)]
              for i in range(3)]
    assert out.dtype == F32 and out.shape == (3, 5)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_matmul_errors_and_empty():
    with pytest.raises(KernelError, match="inner dimensions"):
        one("MatMul", rand(2, 3), rand(2, 3))
    with pytest.raises(KernelError, match="dtypes"):
        one("MatMul", rand(2, 3), rand(3, 2, dtype=np.float64))
    assert np.array_equal(one("MatMul", rand(2, 0), rand(0, 3)), np.zeros((2, 3)))


def test_bias_add_and_grad():
    x, b = rand(4, 3), rand(3)
    np.testing.assert_allclose(one("BiasAdd", x, b), x + b)
    dy = rand(2, 4, 3)
    g = one("BiasAddGrad", dy)
    assert g.dtype == F32
    np.testing.assert_allclose(g, dy.reshape(-1, 3).sum(axis=0), rtol=1e-5)
    with pytest.raises(KernelError, match="bias"):
        one("BiasAdd", x, rand(4))


def _softmax_ref(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    return [v / sum(e) for v in e]


def test_softmax_and_log_softmax_stable():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]], F32)
    sm = one("Softmax", x)
    assert sm.dtype == F32 and np.all(np.isfinite(sm))
    for r in range(2):
        np.testing.assert_allclose(sm[r], _softmax_ref(x[r].astype(float)), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(one("LogSoftmax", x)[0], np.log(_softmax_ref([1.0, 2.0, 3.0])),
                               rtol=1e-6)


def test_softmax_cross_entropy_loss_and_backprop():
    logits = np.array([[1.0, 2.0, 3.0], [500.0, 0.0, -500.0]], F32)
    labels = np.array([[0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], F32)
    loss, backprop = run("SoftmaxCrossEntropyWithLogits", logits, labels)
    p0 = _softmax_ref([1.0, 2.0, 3.0])
    assert loss.shape == (2,) and backprop.shape == (2, 3) and loss.dtype == F32
    np.testing.assert_allclose(loss[0], -math.log(p0[2]), rtol=1e-6)
    np.testing.assert_allclose(loss[1], 0.5 * 500.0, rtol=1e-6)  # -0.5*log(1) - 0.5*log(e^-500)
    np.testing.assert_allclose(backprop[0], np.array(p0) - labels[0], rtol=1e-5, atol=1e-7)


def test_sparse_softmax_cross_entropy():
    logits = rand(4, 5)
    labels = np.array([0, 4, 2, 2], np.int32)
    loss, backprop = run("SparseSoftmaxCrossEntropyWithLogits", logits, labels)
    for r in range(4):
        p = _softmax_ref(logits[r].astype(float))
        np.testing.assert_allclose(loss[r], -math.log(p[labels[r]]), rtol=1e-5)
        onehot = np.eye(5)[labels[r]]
        np.testing.assert_allclose(backprop[r], np.array(p) - onehot, rtol=1e-5, atol=1e-6)
    with pytest.raises(KernelError, match="label 5 at index \\[1\\]"):
        run("SparseSoftmaxCrossEntropyWithLogits", logits, np.array([0, 5, 1, 1]))


# --- update rules: a few steps against the hand formulas -----------------------------

def _steps():
    return [np.array([0.5, -1.0, 2.0], F32), np.array([0.1, 0.3, -0.2], F32),
            np.array([-0.4, 0.2, 0.6], F32)]


def test_apply_gradient_descent_in_place():
    var = np.array([1.0, 2.0, 3.0], F32)
    storage = var
    expect = var.astype(float).copy()
    for g in _steps():
        out = one("ApplyGradientDescent", var, np.array(0.1, F32), g)
        expect -= 0.1 * g
        assert out is storage
    np.testing.assert_allclose(var, expect, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blas", [True, False])
def test_apply_gradient_descent_big_in_place_matches_numpy(dtype, blas, monkeypatch):
    # Big variables take one pass through the BLAS's axpy when it is found
    # and passes its check; either way the result is numpy's within an ulp
    # of the operands (axpy may fuse the multiply-add: one rounding, not two)
    # and it stays in place.
    from kernels.cpu import update as cpu_update
    if not blas:
        monkeypatch.setattr(cpu_update, "_axpy_by_dtype", None)
    elif cpu_update._blas_axpy() is None:
        pytest.skip("numpy's BLAS has no usable axpy here")
    var = rand(300, 70, dtype=dtype)
    grad = rand(300, 70, dtype=dtype)
    grad_before = grad.copy()
    lr = dtype(0.01)
    want = var - lr * grad
    before = var.copy()
    out = one("ApplyGradientDescent", var, np.array(0.01, dtype), grad)
    assert out is var and out.dtype == dtype
    assert np.array_equal(grad, grad_before)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(out, want, rtol=2 * eps, atol=2 * eps * np.abs(before).max())
    assert not np.array_equal(out, before)


def test_blas_axpy_is_used_only_after_its_check(monkeypatch):
    from kernels.cpu import update as cpu_update
    monkeypatch.setattr(cpu_update, "_axpy_by_dtype", cpu_update._UNSET)
    monkeypatch.setattr(cpu_update, "_axpy_works", lambda fn, dt: False)
    assert cpu_update._blas_axpy() is None        # a candidate that fails is never used
    var, grad, lr = rand(64, 64), rand(64, 64), F32(0.0371)
    want = var - lr * grad                        # numpy's two roundings, to the bit
    np.testing.assert_array_equal(one("ApplyGradientDescent", var, lr, grad), want)


def test_blas_axpy_is_looked_up_once_for_all_threads(monkeypatch):
    # every thread waits for the one lookup: none takes numpy's path meanwhile
    # (its bits differ), and all get the same answer
    import threading
    import time

    from kernels.cpu import update as cpu_update
    found = cpu_update._blas_axpy()
    monkeypatch.setattr(cpu_update, "_axpy_by_dtype", cpu_update._UNSET)
    calls = []

    def slow_find():
        calls.append(1)
        time.sleep(0.05)
        return found
    monkeypatch.setattr(cpu_update, "_find_axpy", slow_find)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cpu_update._blas_axpy()))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(got) == 8 and all(g is found for g in got)


@pytest.mark.parametrize("dtype", [np.float16, np.dtype(">f4")])
def test_apply_gradient_descent_big_in_other_float_dtypes(dtype):
    # no axpy for them: numpy's rule, in place
    var = rand(64, 64).astype(dtype)
    grad = rand(64, 64).astype(dtype)
    want = var - np.asarray(0.25, dtype) * grad
    out = one("ApplyGradientDescent", var, 0.25, grad)
    assert out is var and out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, want)


def test_apply_gradient_descent_with_lr_zero_keeps_a_nan_gradient():
    # var - 0 * nan is nan, as in numpy and TF, for a big variable too (a BLAS
    # axpy may skip an update whose factor is 0)
    var = rand(64, 64)
    grad = rand(64, 64)
    grad[3, 5] = np.nan
    out = one("ApplyGradientDescent", var, 0.0, grad)
    assert np.isnan(out[3, 5]) and np.isfinite(np.delete(out.ravel(), 3 * 64 + 5)).all()


@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_momentum(nesterov):
    var, accum = np.array([1.0, 2.0, 3.0], F32), np.zeros(3, F32)
    v, a = var.astype(float), np.zeros(3)
    lr, mom = 0.1, 0.9
    for g in _steps():
        one("ApplyMomentum", var, accum, np.array(lr, F32), g, np.array(mom, F32),
            use_nesterov=nesterov)
        a = a * mom + g
        v = v - (lr * g + lr * mom * a if nesterov else lr * a)
    np.testing.assert_allclose(accum, a, rtol=1e-6)
    np.testing.assert_allclose(var, v, rtol=1e-6)


def test_apply_adagrad():
    var, accum = np.array([1.0, 2.0, 3.0], F32), np.full(3, 0.1, F32)
    v, a = var.astype(float), np.full(3, 0.1)
    for g in _steps():
        one("ApplyAdagrad", var, accum, 0.5, g)
        a = a + g * g
        v = v - 0.5 * g / np.sqrt(a)
    np.testing.assert_allclose(accum, a, rtol=1e-6)
    np.testing.assert_allclose(var, v, rtol=1e-6)


def test_apply_adam():
    var, m, s = np.array([1.0, 2.0, 3.0]), np.zeros(3), np.zeros(3)
    ev, em, es = var.copy(), np.zeros(3), np.zeros(3)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    for t, g in enumerate(_steps(), start=1):
        g = g.astype(float)
        one("ApplyAdam", var, m, s, np.array(b1 ** t), np.array(b2 ** t), np.array(lr),
            np.array(b1), np.array(b2), np.array(eps), g)
        em = b1 * em + (1 - b1) * g
        es = b2 * es + (1 - b2) * g * g
        ev = ev - lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * em / (np.sqrt(es) + eps)
    np.testing.assert_allclose(m, em, rtol=1e-12)
    np.testing.assert_allclose(s, es, rtol=1e-12)
    np.testing.assert_allclose(var, ev, rtol=1e-12)


def test_update_refuses_read_only_or_mismatched_storage():
    var = np.ones(3, F32)
    var.flags.writeable = False
    with pytest.raises(KernelError, match="writable copy"):
        one("ApplyGradientDescent", var, 0.1, np.ones(3, F32))
    with pytest.raises(KernelError, match="gradient shape"):
        one("ApplyGradientDescent", np.ones(3, F32), 0.1, np.ones(4, F32))
