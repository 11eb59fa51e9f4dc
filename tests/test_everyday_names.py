"""TF's everyday names real TF2 programs call (issue 39's remainder):
``py_function``/``numpy_function`` (graph, eager, a ``dt.data`` map, another
process), ``fill``/``size``/``rank``/``linspace``/``eye``/``sequence_mask``/
``roll``/``meshgrid``/``sort``/``argsort``/``searchsorted``, ``dt.print``,
the ``dt.debugging`` asserts, ``gather_nd`` and the scatters, ``einsum``,
``tensordot``, ``norm``, ``linalg.inv``/``det``, ``nn.conv1d``,
``depth_to_space``/``space_to_depth``.

Numbers: TF's own op tests' hard-coded values where they have them
(gather_nd_op_test, scatter_nd_ops_test, depthtospace_op_test,
spacetodepth_op_test, string_format_op_test, array_ops_test's
sequence_mask, matrix_inverse_op_test's singular matrix), else numpy
references; gradients against central differences in float64.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError, UnimplementedError
from distrib.framework.op_def import op_def
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate

RNG = np.random.default_rng(7)


def run(build, *values, feed=None):
    """``build(*constants)`` built in a fresh graph and run in this process."""
    g = dt.Graph()
    with g.as_default():
        out = build(*[dt.constant(v) for v in values])
    return evaluate(out, feed, graph=g, variables=VariableStore())


def numeric_gradient(build, x: np.ndarray, eps: float = 1e-6):
    """(the graph's d sum(build(x)) / dx, central differences), float64."""
    g, store = dt.Graph(), VariableStore()
    with g.as_default():
        ph = dt.placeholder(dt.float64, shape=x.shape)
        y = dt.reduce_sum(build(ph))
        grad = dt.gradients(y, ph)[0]
    analytic = evaluate(grad, {ph: x}, graph=g, variables=store)
    numeric = np.zeros(x.size)
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        d = d.reshape(x.shape)
        numeric[i] = (evaluate(y, {ph: x + d}, graph=g, variables=store)
                      - evaluate(y, {ph: x - d}, graph=g, variables=store)) / (2 * eps)
    return analytic, numeric.reshape(x.shape)


def check_gradient(build, x, rtol=1e-5, atol=1e-7):
    analytic, numeric = numeric_gradient(build, np.asarray(x, np.float64))
    np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol)


# -- py_function / numpy_function --------------------------------------------------------------
def test_numpy_and_py_function_run_in_a_graph_and_convert_to_tout():
    def build(x):
        doubled = dt.numpy_function(lambda a: a * 2.0, [x], dt.float32)   # float64 -> float32
        plus, count = dt.py_function(lambda a: (dt.square(a) + 1.0, dt.size(a)), [x],
                                     [dt.float32, dt.int64])
        return doubled, plus, count
    doubled, plus, count = run(build, np.array([1.0, 2.0], np.float32))
    assert doubled.dtype == np.float32 and plus.dtype == np.float32 and count.dtype == np.int64
    np.testing.assert_array_equal(doubled, [2.0, 4.0])
    np.testing.assert_array_equal(plus, [2.0, 5.0])
    assert count == 2


def test_python_function_ops_have_side_effects_and_tf_gradients():
    assert op_def("PyFunc").has_side_effects and op_def("EagerPyFunc").has_side_effects
    g = dt.Graph()
    with g.as_default():
        x = dt.constant([1.0])
        assert dt.gradients(dt.numpy_function(lambda a: a, [x], dt.float32), x) == [None]
        with pytest.raises(UnimplementedError, match="py_function.*not implemented"):
            dt.gradients(dt.py_function(lambda a: a, [x], dt.float32), x)


def test_python_function_result_count_and_dtype_mismatch_are_typed_errors():
    with pytest.raises(InvalidArgumentError, match="returned 1 values, Tout declares 2"):
        run(lambda x: dt.numpy_function(lambda a: a, [x], [dt.float32, dt.float32]),
            np.ones(2, np.float32))
    with pytest.raises(InvalidArgumentError, match="does not convert to float32"):
        run(lambda x: dt.numpy_function(lambda a: "text", [x], dt.float32), np.ones(2))


def test_numpy_function_in_a_dataset_map_calls_the_function_on_values():
    seen = []

    def f(a):
        seen.append(type(a))
        return a * 10

    ds = dt.data.Dataset.range(3).map(lambda x: dt.numpy_function(f, [x], dt.int64))
    assert [int(v) for v in ds] == [0, 10, 20]
    assert seen and all(t in (np.ndarray, np.int64) for t in seen)
    ds = dt.data.Dataset.range(2).map(lambda x: dt.py_function(lambda a: a + 1, [x], dt.int64))
    assert [int(v) for v in ds] == [1, 2]


EAGER_PROGRAM = textwrap.dedent("""
    import sys
    import distrib as dt
    from kernels.cpu.py_func import callable_names
    dt.enable_eager_execution()
    y = dt.py_function(lambda a: dt.square(a) * 2.0, [dt.constant([3.0])], dt.float32)
    print(type(y).__name__, y.numpy().tolist(), len(callable_names()))
    print(dt.gather_nd(dt.constant([[1, 2], [3, 4]]), [[1, 0]]).numpy().tolist(),
          dt.einsum("ij,jk->ik", dt.eye(2), dt.fill([2, 2], 3.0)).numpy().tolist(),
          dt.sort(dt.constant([3, 1, 2])).numpy().tolist(), int(dt.size(dt.zeros([2, 3]))))
    print(dt.debugging.assert_equal(dt.constant(1), 1))
    try:
        dt.assert_less(dt.constant([1, 5]), 3)
    except dt.errors.InvalidArgumentError as e:
        print("raised", str(e).splitlines()[0])
    dt.print("t =", dt.constant([1.5, 2.0]), output_stream=sys.stdout)
    x = dt.constant([[1.0, 2.0], [3.0, 5.0]])
    with dt.GradientTape() as tape:
        tape.watch(x)
        d = dt.linalg.det(x)
    print(float(d), tape.gradient(d, x).numpy().tolist())
""")


def test_the_names_run_at_once_with_eager_execution_in_a_child():
    # eager execution is process-wide and cannot be turned off: a child process of its own
    out = subprocess.run([sys.executable, "-c", EAGER_PROGRAM], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.splitlines() == [
        "EagerTensor [18.0] 0",            # py_function ran, and its table entry was dropped
        "[3] [[3.0, 3.0], [3.0, 3.0]] [1, 2, 3] 6",
        "None",                            # a TF2 assert that holds returns None
        "raised Condition x < y did not hold element-wise:",
        "t = [1.5 2]",                     # printed at once
        "-1.0 [[5.0, -3.0], [-2.0, 1.0]]"]   # d det(A)/dA = det(A) A^-T on the tape


def test_a_python_function_op_run_in_another_process_names_the_function():
    # TF's rule: the op runs only in the process that built it. A graph built here (its
    # token in this process's table) is shipped as a GraphDef to a child that runs it.
    g = dt.Graph()
    with g.as_default():
        x = dt.constant([1.0, 2.0])

        def my_special_function(a):
            return a
        y = dt.numpy_function(my_special_function, [x], dt.float32)
    code = textwrap.dedent(f"""
        import distrib as dt
        from distrib.errors import InvalidArgumentError
        from distrib.runtime.step.local_eval import evaluate
        g = dt.Graph()
        with g.as_default():
            x = dt.constant([1.0, 2.0])
            op = g.create_op("PyFunc", [x], {{"token": {y.op.get_attr("token")!r},
                             "func_name": "my_special_function", "Tout": ["float32"],
                             "Tin": ["float32"]}}, "PyFunc", output_specs=[(dt.float32, None)])
        try:
            evaluate(op.outputs[0], graph=g)
        except InvalidArgumentError as e:
            print("ERROR", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert "ERROR" in out.stdout and "'my_special_function'" in out.stdout
    assert "runs only in the process that built it" in out.stdout
    np.testing.assert_array_equal(evaluate(y, graph=g), [1.0, 2.0])   # here it runs


# -- fill, size, rank, linspace, eye, sequence_mask, roll, meshgrid ---------------------------
def test_fill_size_rank_linspace_eye():
    f, s, r = run(lambda d: (dt.fill(d, 7), dt.size(dt.fill(d, 0.5)), dt.rank(dt.fill(d, 1))),
                  np.array([2, 3], np.int32))
    np.testing.assert_array_equal(f, np.full((2, 3), 7, np.int32))
    assert s == 6 and s.dtype == np.int32 and r == 2
    assert run(lambda: dt.size(dt.zeros([2, 5]), out_type=dt.int64)).dtype == np.int64
    lin = run(lambda: dt.linspace(-5.0, 5.0, 11))
    np.testing.assert_allclose(lin, np.linspace(-5.0, 5.0, 11), rtol=1e-6)
    third = run(lambda: dt.lin_space(0.0, 1.0, 4))
    assert third[-1] == 1.0 and third.dtype == np.float32   # stop exactly, TF's kernel
    assert run(lambda: dt.linspace(3.0, 7.0, 1)).tolist() == [3.0]
    with pytest.raises(InvalidArgumentError, match="Requires num > 0"):
        run(lambda: dt.linspace(0.0, 1.0, 0))
    np.testing.assert_array_equal(run(lambda: dt.eye(2, 3, batch_shape=[2], dtype=dt.int32)),
                                  np.broadcast_to(np.eye(2, 3, dtype=np.int32), (2, 2, 3)))
    np.testing.assert_array_equal(run(lambda: dt.linalg.eye(3)), np.eye(3, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="must be a scalar"):
        run(lambda: dt.fill([2], [1.0, 2.0]))


def test_sequence_mask_matches_tfs_tests():
    # array_ops_test.SequenceMaskTest
    got = run(lambda lengths: dt.sequence_mask(lengths, 5), np.array([1, 3, 2], np.int32))
    np.testing.assert_array_equal(got, [[True, False, False, False, False],
                                        [True, True, True, False, False],
                                        [True, True, False, False, False]])
    got = run(lambda lengths: dt.sequence_mask(lengths, dtype=dt.float32),
              np.array([0, 1, 4], np.int32))
    np.testing.assert_array_equal(got, [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    got = run(lambda lengths: dt.sequence_mask(lengths, dt.constant(2)),
              np.array([[0, 1], [3, 2]], np.int32))
    assert got.shape == (2, 2, 2) and got[1, 0].tolist() == [True, True]


def test_roll_meshgrid_and_their_gradients():
    x = RNG.normal(size=(3, 4))
    for shift, axis in ((1, 0), (-2, 1), ([1, 2], [0, 1]), ([1, 1], [1, 1])):
        np.testing.assert_array_equal(run(lambda t, s=shift, a=axis: dt.roll(t, s, a), x),
                                      np.roll(x, shift, axis))
    check_gradient(lambda t: dt.roll(t, 1, 1) * np.arange(12.0).reshape(3, 4), x)
    a, b = np.arange(3.0), np.arange(4.0) * 10
    for indexing in ("xy", "ij"):
        got = run(lambda u, v, i=indexing: dt.meshgrid(u, v, indexing=i), a, b)
        for g, want in zip(got, np.meshgrid(a, b, indexing=indexing)):
            np.testing.assert_array_equal(g, want)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        run(lambda t: dt.roll(t, 1, 2), x)


# -- sort, argsort, searchsorted -----------------------------------------------------------------
def test_sort_argsort_and_searchsorted_match_numpy():
    x = RNG.integers(0, 5, size=(3, 6)).astype(np.float32)   # ties
    np.testing.assert_array_equal(run(dt.sort, x), np.sort(x, axis=-1))
    np.testing.assert_array_equal(run(lambda t: dt.sort(t, direction="DESCENDING"), x),
                                  -np.sort(-x, axis=-1))
    np.testing.assert_array_equal(run(lambda t: dt.sort(t, axis=0), x), np.sort(x, axis=0))
    np.testing.assert_array_equal(run(dt.argsort, x), np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(run(lambda t: dt.argsort(t, axis=0), x),
                                  np.argsort(x, axis=0, kind="stable"))
    u = np.array([3, 255, 0, 7], np.uint8)   # unsigned: TF's flip, not a negation
    np.testing.assert_array_equal(run(dt.sort, u), np.sort(u))
    seq = np.sort(RNG.normal(size=(2, 5)), axis=-1)
    vals = np.concatenate([seq[:, :2], RNG.normal(size=(2, 3))], axis=1)
    for side in ("left", "right"):
        got = run(lambda s, v, sd=side: dt.searchsorted(s, v, side=sd), seq, vals)
        want = np.stack([np.searchsorted(seq[i], vals[i], side=side) for i in range(2)])
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.int32
    with pytest.raises(InvalidArgumentError, match="side"):
        dt.searchsorted(seq, vals, side="middle")


# -- print, asserts ---------------------------------------------------------------------------
def test_string_format_and_print_write_tfs_format_to_stderr(capfd):
    from kernels.cpu.everyday_array import format_tensor
    assert format_tensor(np.arange(10)) == "[0 1 2 ... 7 8 9]"   # string_format_op_test
    assert format_tensor(np.arange(4).reshape(2, 2)) == "[[0 1]\n [2 3]]"
    assert format_tensor(np.float32(0.1)) == "0.1" and format_tensor(np.array(True)) == "1"
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.int32, [None])
        op = dt.print("x:", x, "done", summarize=2)
    assert op.type == "PrintV2"
    capfd.readouterr()
    evaluate(op, {x: np.arange(6, dtype=np.int32)}, graph=g)
    assert capfd.readouterr().err == "x: [0 1 ... 4 5] done\n"


def test_print_in_a_dataset_map_prints_at_once(capfd):
    ds = dt.data.Dataset.range(2).map(lambda v: (dt.print("value", v, output_stream=sys.stdout),
                                                 v)[1])
    capfd.readouterr()
    assert [int(v) for v in ds] == [0, 1]
    assert capfd.readouterr().out == "value 0\nvalue 1\n"


def test_asserts_decide_statically_known_values_at_once():
    g = dt.Graph()
    with g.as_default():
        with pytest.raises(InvalidArgumentError, match=r"Condition x == y did not hold"):
            dt.debugging.assert_equal(dt.constant([1, 2]), dt.constant([1, 3]))
        with pytest.raises(InvalidArgumentError, match="x > 0"):
            dt.assert_positive(dt.constant([1.0, 0.0]))
        with pytest.raises(InvalidArgumentError, match="must have rank 2. Received rank 1"):
            dt.debugging.assert_rank(dt.constant([1.0]), 2)
        assert dt.assert_less(dt.constant(1), 2).type == "Assert"   # holds: an op all the same
    with pytest.raises(InvalidArgumentError, match="x >= 0"):   # values in a map: at once
        list(dt.data.Dataset.range(3).map(lambda v: (dt.assert_non_negative(v - 1), v)[1]))


def test_the_rest_of_the_comparison_asserts_decide_and_build_as_the_others():
    g = dt.Graph()
    with g.as_default():
        cases = [(dt.debugging.assert_greater_equal, ([1, 2], [1, 3]), "x >= y"),
                 (dt.debugging.assert_less_equal, ([1, 4], [1, 3]), "x <= y"),
                 (dt.debugging.assert_none_equal, ([1, 2], [0, 2]), "x != y")]
        for fn, (x, y), what in cases:
            with pytest.raises(InvalidArgumentError, match=f"Condition {what} did not hold"):
                fn(dt.constant(x), dt.constant(y))
        with pytest.raises(InvalidArgumentError, match="x < 0"):
            dt.assert_negative(dt.constant([-1.0, 0.0]))
        with pytest.raises(InvalidArgumentError, match="x <= 0"):
            dt.assert_non_positive(dt.constant([0.0, 2.0]))
        assert dt.assert_less_equal(dt.constant(2), 2).type == "Assert"   # holds
        x = dt.placeholder(dt.float32, [None])
        check = dt.debugging.assert_non_positive(x)
        with dt.control_dependencies([check]):
            y = dt.identity(x)
    store = VariableStore()
    np.testing.assert_array_equal(evaluate(y, {x: np.array([0.0, -2.0], np.float32)}, graph=g,
                                           variables=store), [0.0, -2.0])
    with pytest.raises(InvalidArgumentError, match="x <= 0"):
        evaluate(y, {x: np.array([1.0], np.float32)}, graph=g, variables=store)


def test_an_assert_on_run_time_values_fails_the_step_that_runs_it():
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None])
        check = dt.debugging.assert_greater(x, 0.0, message="x must be positive")
        with dt.control_dependencies([check]):
            y = dt.identity(x)
        ranked = dt.debugging.assert_rank(x, 1)   # the rank is known: decided here
    store = VariableStore()
    np.testing.assert_array_equal(evaluate(y, {x: np.array([1.0, 2.0], np.float32)}, graph=g,
                                           variables=store), [1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match=r"x must be positive.*x > y"):
        evaluate(y, {x: np.array([1.0, -2.0], np.float32)}, graph=g, variables=store)
    assert ranked.type == "Assert"


# -- gather_nd, scatter_nd, tensor scatters -----------------------------------------------------
def test_gather_nd_and_scatter_nd_match_tfs_tests():
    got = run(lambda p, i: dt.gather_nd(p, i), np.array([0, 1, 2, 3, 7, 5]),
              np.array([[4], [4], [0]]))                         # gather_nd_op_test
    np.testing.assert_array_equal(got, [7, 7, 0])
    params = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(run(dt.gather_nd, params, np.array([[1, 2], [0, 0]])),
                                  params[[1, 0], [2, 0]])
    with pytest.raises(InvalidArgumentError,
                       match=r"indices\[0,1\] = \[7\] does not index into param shape \[3\]"):
        run(dt.gather_nd, np.array([0, 1, 2]), np.array([[[0], [7]]]))
    got = run(lambda i, u: dt.scatter_nd(i, u, [8]), np.array([[4], [3], [1], [7]]),
              np.array([9, 10, 11, 12]))                         # scatter_nd_ops_test
    np.testing.assert_array_equal(got, [0, 11, 0, 10, 9, 0, 0, 12])
    np.testing.assert_array_equal(run(lambda i, u: dt.scatter_nd(i, u, [3]),
                                      np.array([[1], [1]]), np.array([2.0, 3.0])), [0, 5, 0])
    with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = \[5\] does not index"):
        run(lambda i, u: dt.scatter_nd(i, u, [4]), np.array([[0], [5]]), np.array([1, 2]))


def test_tensor_scatter_update_add_sub():
    t = np.zeros(8, np.int32)
    i, u = np.array([[1], [3], [4], [7]]), np.array([9, 10, 11, 12], np.int32)
    np.testing.assert_array_equal(run(dt.tensor_scatter_nd_update, t, i, u),
                                  [0, 9, 0, 10, 11, 0, 0, 12])
    ones = np.ones(8, np.int32)
    np.testing.assert_array_equal(run(dt.tensor_scatter_nd_add, ones, i, u),
                                  [1, 10, 1, 11, 12, 1, 1, 13])
    np.testing.assert_array_equal(run(dt.tensor_scatter_nd_sub, ones, i, u),
                                  [1, -8, 1, -9, -10, 1, 1, -11])


def test_nd_gradients_against_central_differences():
    params = RNG.normal(size=(4, 3))
    idx = np.array([[1], [3], [1]])
    weights = np.arange(9.0).reshape(3, 3)
    check_gradient(lambda p: dt.gather_nd(p, idx) * weights, params)
    check_gradient(lambda u: dt.scatter_nd(idx, u, [4, 3]) * np.arange(12.0).reshape(4, 3),
                   RNG.normal(size=(3, 3)))
    w = np.arange(12.0).reshape(4, 3)
    for fn in (dt.tensor_scatter_nd_update, dt.tensor_scatter_nd_add, dt.tensor_scatter_nd_sub):
        check_gradient(lambda t, f=fn: f(t, [[0], [2]], np.ones((2, 3))) * w, params)
        check_gradient(lambda u, f=fn: f(dt.constant(params), [[0], [2]], u) * w,
                       RNG.normal(size=(2, 3)))


# -- einsum, tensordot, norm, inverse, determinant ----------------------------------------------
EQUATIONS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->", [(2, 3)]), ("ij->ji", [(2, 3)]),
             ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("i,i->", [(4,), (4,)]),
             ("ij,j->i", [(3, 4), (4,)]), ("ik,jk", [(2, 3), (4, 3)]),
             ("...ij,jk->...ik", [(2, 2, 3), (3, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
             ("ij,k->ik", [(2, 3), (4,)])]


@pytest.mark.parametrize("equation,shapes", EQUATIONS)
def test_einsum_matches_numpy_and_differentiates(equation, shapes):
    xs = [RNG.normal(size=s) for s in shapes]
    got = run(lambda *t: dt.einsum(equation, *t), *xs)
    np.testing.assert_allclose(got, np.einsum(equation, *xs), rtol=1e-12)
    weights = np.arange(1.0, 1.0 + np.einsum(equation, *xs).size).reshape(got.shape)
    for k in range(len(xs)):
        def build(t, k=k):
            args = [dt.constant(v) for v in xs]
            args[k] = t
            return dt.einsum(equation, *args) * weights
        check_gradient(build, xs[k])


def test_tensordot_norm_and_linalg_matmul():
    a, b = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(4, 3, 5))
    np.testing.assert_allclose(run(lambda x, y: dt.tensordot(x, y, [[1, 2], [1, 0]]), a, b),
                               np.tensordot(a, b, [[1, 2], [1, 0]]), rtol=1e-12)
    m = RNG.normal(size=(3, 4))
    np.testing.assert_allclose(run(lambda x, y: dt.tensordot(x, y, 1), m, m.T),
                               m @ m.T, rtol=1e-12)
    x = RNG.normal(size=(3, 4))
    for ord_, axis in (("euclidean", None), (1, 1), (np.inf, 0), (2, -1), (3, 1)):
        np.testing.assert_allclose(run(lambda t, o=ord_, a_=axis: dt.norm(t, o, a_), x),
                                   np.linalg.norm(x.reshape(-1) if axis is None else x,
                                                  None if ord_ == "euclidean" else ord_, axis),
                                   rtol=1e-12)
    for ord_ in ("fro", 1, np.inf):
        np.testing.assert_allclose(run(lambda t, o=ord_: dt.linalg.norm(t, o, [0, 1]), x),
                                   np.linalg.norm(x, ord_), rtol=1e-12)
    check_gradient(lambda t: dt.norm(t), x)
    batch = RNG.normal(size=(2, 3, 4))
    np.testing.assert_allclose(run(lambda p, q: dt.linalg.matmul(p, q, transpose_b=True),
                                   batch, batch), batch @ batch.transpose(0, 2, 1), rtol=1e-12)


def test_inverse_and_determinant_match_numpy_and_differentiate():
    a = RNG.normal(size=(2, 3, 3)) + 3 * np.eye(3)
    np.testing.assert_allclose(run(dt.linalg.inv, a), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(run(lambda t: dt.matrix_inverse(t, adjoint=True), a),
                               np.linalg.inv(a.transpose(0, 2, 1)), rtol=1e-10)
    np.testing.assert_allclose(run(dt.linalg.det, a), np.linalg.det(a), rtol=1e-10)
    assert run(dt.matrix_determinant, np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)) == 0.0
    singular = np.array([[1.0, 0.0, -1.0], [-1.0, 1.0, 0.0], [0.0, -1.0, 1.0]])
    with pytest.raises(InvalidArgumentError, match="Input is not invertible"):
        run(dt.linalg.inv, singular)                             # matrix_inverse_op_test
    w = np.arange(18.0).reshape(2, 3, 3)
    check_gradient(lambda t: dt.linalg.inv(t) * w, a, rtol=1e-4)
    check_gradient(lambda t: dt.linalg.inv(t, adjoint=True) * w, a, rtol=1e-4)
    check_gradient(lambda t: dt.linalg.det(t) * np.array([1.0, 2.0]), a, rtol=1e-4)
    with pytest.raises(InvalidArgumentError, match="square"):
        dt.linalg.det(dt.constant(np.ones((2, 3))))


# -- conv1d, depth_to_space, space_to_depth -----------------------------------------------------
def test_depth_to_space_and_space_to_depth_match_tfs_tests_and_invert():
    x = np.array([[[[1, 2, 3, 4]]]], np.float32)                 # depthtospace_op_test
    np.testing.assert_array_equal(run(lambda t: dt.nn.depth_to_space(t, 2), x),
                                  [[[[1], [2]], [[3], [4]]]])
    np.testing.assert_array_equal(run(lambda t: dt.space_to_depth(t, 2),
                                      np.array([[[[1], [2]], [[3], [4]]]], np.float32)), x)
    y = RNG.normal(size=(2, 4, 6, 3))
    np.testing.assert_array_equal(run(lambda t: dt.depth_to_space(dt.space_to_depth(t, 2), 2),
                                      y), y)
    nchw = run(lambda t: dt.nn.space_to_depth(t, 2, data_format="NCHW"),
               y.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(nchw.transpose(0, 2, 3, 1), run(lambda t: dt.space_to_depth(
        t, 2), y))
    check_gradient(lambda t: dt.space_to_depth(t, 2) * np.arange(72.0).reshape(1, 2, 3, 12),
                   RNG.normal(size=(1, 4, 6, 3)))
    with pytest.raises(InvalidArgumentError, match="divisible"):
        dt.space_to_depth(dt.constant(np.ones((1, 3, 4, 1))), 2)


def test_conv1d_is_conv2d_on_a_height_of_one():
    x, f = RNG.normal(size=(2, 9, 3)), RNG.normal(size=(3, 3, 4))

    def reference(stride, padding):
        xp = np.pad(x, ((0, 0), (1, 1), (0, 0))) if padding == "SAME" else x
        n = (xp.shape[1] - 3) // stride + 1
        return np.stack([np.einsum("bkc,kco->bo", xp[:, i * stride:i * stride + 3], f)
                         for i in range(n)], axis=1)
    for stride, padding in ((1, "VALID"), (2, "VALID"), (1, "SAME")):
        got = run(lambda t, w, s=stride, p=padding: dt.nn.conv1d(t, w, s, p), x, f)
        np.testing.assert_allclose(got, reference(stride, padding), rtol=1e-10)
    ncw = run(lambda t, w: dt.nn.conv1d(t, w, 1, "VALID", data_format="NCW"),
              x.transpose(0, 2, 1), f)
    np.testing.assert_allclose(ncw.transpose(0, 2, 1), reference(1, "VALID"), rtol=1e-10)


def test_ops_built_on_values_in_a_map_compute_there():
    ds = dt.data.Dataset.from_tensor_slices(np.arange(6).reshape(2, 3)).map(
        lambda r: dt.gather_nd(dt.roll(r, 1, 0), [[0], [2]]))
    np.testing.assert_array_equal(np.stack(list(ds)), [[2, 1], [5, 4]])


# -- from the review ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_sort_of_signed_integers_keeps_their_minimum_first(dtype):
    # sort_ops_test.testInt64: edges from the dtype's min to its max (-x overflowed at min)
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.min + 1, -100, -1, 0, 1, 100, info.max - 1, info.max],
                     dtype)
    shuffled = edges[np.random.default_rng(0).permutation(len(edges))]
    np.testing.assert_array_equal(run(dt.sort, shuffled), edges)
    np.testing.assert_array_equal(run(lambda t: dt.sort(t, direction="DESCENDING"), shuffled),
                                  edges[::-1])
    np.testing.assert_array_equal(run(dt.argsort, shuffled), np.argsort(shuffled, kind="stable"))


def test_a_python_function_that_refers_to_its_graph_goes_with_the_graph():
    import gc

    from kernels.cpu.py_func import callable_names

    def build():
        g = dt.Graph()
        with g.as_default():
            dt.py_function(lambda a: a + len(g.get_operations()), [dt.constant([1.0])],
                           dt.float32)
            y = dt.numpy_function(lambda a: a, [dt.constant([2.0])], dt.float32)
        tokens = {op.get_attr("token") for op in g.get_operations()
                  if op.type in ("PyFunc", "EagerPyFunc")}
        assert len(tokens) == 2
        return g, y, tokens
    g, y, kept = build()
    assert evaluate(y, graph=g).tolist() == [2.0]      # the graph holds its functions
    dropped = set()
    for _ in range(3):
        dropped |= build()[2]
    gc.collect()
    assert kept <= set(callable_names())              # alive with their graph
    assert not dropped & set(callable_names())        # a closure over its graph no longer leaks
    del g, y
    gc.collect()
    assert not kept & set(callable_names())


def test_sequence_mask_of_no_lengths_and_a_negative_maxlen():
    got = run(lambda lengths: dt.sequence_mask(lengths), np.zeros(0, np.int32))
    assert got.shape == (0, 0)
    got = run(lambda lengths: dt.sequence_mask(lengths, dt.constant(-2)), np.array([1, 3]))
    assert got.shape == (2, 0)
    got = run(lambda lengths: dt.sequence_mask(lengths), np.array([0, 0], np.int64))
    assert got.shape == (2, 0)


def test_a_failed_assert_brackets_each_input_as_tfs_kernel():
    # control_flow_ops' Assert: "assertion failed: [msg] [1 2 3...]" (summarize=3)
    with pytest.raises(InvalidArgumentError,
                       match=r"assertion failed: \[hello\] \[0 1 2\.\.\.\] \[5\] "
                             r"\[\[0 1\]\[2\.\.\.\]\.\.\.\]"):
        run(lambda: dt.debugging.Assert(dt.constant(False), [
            "hello", dt.constant(np.arange(10)), dt.constant(5),
            dt.constant(np.arange(4).reshape(2, 2))]))


def test_a_static_rank_failure_is_tfs_value_error():
    with pytest.raises(ValueError, match="must have rank 2"):
        dt.debugging.assert_rank(dt.constant([1.0]), 2)


def test_a_matrix_norm_of_unknown_dimensions():
    v = RNG.normal(size=(2, 3, 4))
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float64, [None, None, None])
        ones, infs = dt.norm(x, 1, [1, 2]), dt.norm(x, np.inf, [-1, 0])
    got = evaluate([ones, infs], {x: v}, graph=g, variables=VariableStore())
    np.testing.assert_allclose(got[0], np.linalg.norm(v, 1, axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.linalg.norm(v, np.inf, axis=(2, 0)), rtol=1e-12)


def test_print_of_nested_structures_formats_their_tensors(capfd):
    # logging_ops.print_v2: a structure printed by pprint, its tensors as StringFormat's
    g = dt.Graph()
    with g.as_default():
        a, b = dt.constant([1, 2]), dt.constant(0.5)
        op = dt.print("vals:", [a, b], {"z": a, "b": (b, 3)}, 7, output_stream=sys.stdout)
    capfd.readouterr()
    evaluate(op, graph=g)
    assert capfd.readouterr().out == "vals: [[1 2], 0.5] {'b': (0.5, 3), 'z': [1 2]} 7\n"
    list(dt.data.Dataset.range(1).map(
        lambda v: (dt.print("m", [v, v + 1], output_stream=sys.stdout), v)[1]))
    assert capfd.readouterr().out == "m [0, 1]\n"


def test_a_python_function_on_a_task_of_another_process_fails_typed():
    import time

    from tests.peers.cli_cluster import cli_flags_task, cluster_spec
    spec = cluster_spec(ps=1, worker=1)
    procs = []
    try:
        procs += [cli_flags_task(spec, "ps", 0), cli_flags_task(spec, "worker", 0)]
        g = dt.Graph()
        with g.as_default():
            x = dt.placeholder(dt.float32, [None])
            with dt.device("/job:ps/task:0"):
                def triple_it(a):
                    return a * 3
                y = dt.numpy_function(triple_it, [x], dt.float32)
            z = y + 1
        with dt.SyncSession("distrib://" + spec["worker"][0], graph=g) as sess:
            start = time.monotonic()
            with pytest.raises(InvalidArgumentError,
                               match="triple_it'.*runs only in the process that built it"):
                sess.run(z, {x: [1.0]})
            assert time.monotonic() - start < 60   # named, not a hang (the bound is generous)
            assert sess.run(x + 1, {x: [1.0]}).tolist() == [2.0]   # the session goes on
    finally:
        for p in procs:
            p.stop()


def test_tf1s_assign_functions_update_the_variable_and_refuse_a_tensor():
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(np.float32(1.0))
        steps = [dt.assign_add(v, 2.0), dt.compat.v1.assign_sub(v, 0.5), dt.assign(v, 10.0)]
        with dt.SyncSession() as sess:
            sess.run(v.initializer)
            assert [float(sess.run(s)) for s in steps] == [3.0, 2.5, 10.0]
        with pytest.raises(InvalidArgumentError, match="needs a variable"):
            dt.assign_add(dt.constant(1.0), 1.0)
