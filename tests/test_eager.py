"""Eager values (issue 39 item 1): ops that run at once, eager variables, the
tape, dt.function taking eager arguments, a strategy's scope, the errors.

Eager execution is process-wide and cannot be turned off (TF's rule), so
every test here runs in a child process (``run_eager``) that turns it on:
the rest of the suite keeps its graphs. Numbers are checked against numpy
and against the graph path (the same builders run through a session-free
``local_eval``), and TF's own op tests' values where one is quoted.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = """
import asyncio
import numpy as np
import distrib as dt
assert not dt.executing_eagerly()   # graphs stay the default
dt.enable_eager_execution()
assert dt.executing_eagerly()
"""


def run_eager(body: str, timeout: float = 120) -> str:
    """Run ``body`` after turning eager execution on, in a child process; its stdout."""
    code = PRELUDE + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_ops_return_values_against_numpy() -> None:
    run_eager("""
    x = dt.constant([[1., 2.], [3., 4.]])
    y = dt.constant([[0.5, -1.], [2., 0.]])
    assert isinstance(x + y, dt.EagerTensor)
    np.testing.assert_allclose((x + y).numpy(), np.array([[1.5, 1.], [5., 4.]]))
    np.testing.assert_allclose((x * y - x / 2).numpy(), x.numpy() * y.numpy() - x.numpy() / 2)
    np.testing.assert_allclose(dt.matmul(x, y).numpy(), x.numpy() @ y.numpy())
    np.testing.assert_allclose((x @ y).numpy(), x.numpy() @ y.numpy())
    assert float(dt.reduce_sum(x)) == 10.0
    assert dt.reduce_mean(x, axis=1).shape.as_list() == [2]
    assert dt.argmax(x, axis=1).numpy().tolist() == [1, 1]
    # TF's softmax test values (nn_test.py: softmax of [1, 2, 3, 4])
    np.testing.assert_allclose(dt.nn.softmax(dt.constant([[1., 2., 3., 4.]])).numpy(),
                               [[0.0320586, 0.08714432, 0.23688284, 0.64391428]], rtol=1e-5)
    # a Python number takes the tensor's dtype, as in TF
    assert (x + 1).dtype == dt.float32 and (2 * x).numpy()[1, 1] == 8.0
    assert dt.cast(x, dt.int32).dtype == dt.int32
    # TensorShape, dtype, numpy interop, Python protocols
    assert x.shape == dt.TensorShape([2, 2]) and x.dtype == dt.float32 and x.ndim == 2
    assert np.asarray(x).dtype == np.float32 and np.add(x, 1).tolist() == [[2, 3], [4, 5]]
    assert [r.numpy().tolist() for r in x] == [[1., 2.], [3., 4.]] and len(x) == 2
    assert bool(dt.constant(True)) and int(dt.constant(3)) == 3
    assert dt.constant(2.5).numpy() == 2.5 and isinstance(dt.constant(2.5).numpy(), np.float32)
    assert str(dt.constant([1, 2])) == "dt.Tensor([1 2], shape=(2,), dtype=int32)"
    assert (x == x).numpy().all()
    # a caller's array is copied: changing it later changes no tensor
    a = np.ones(3, np.float32)
    t = dt.constant(a)
    a[0] = 5
    assert t.numpy()[0] == 1.0
    """)


def test_bad_inputs_are_the_graphs_typed_errors() -> None:
    out = run_eager("""
    for f in (lambda: dt.constant([1., 2.]) + dt.constant([1, 2]),
              lambda: dt.matmul(dt.constant([[1., 2.]]), dt.constant([[1., 2.]])),
              lambda: dt.placeholder(dt.float32)):
        try:
            f()
        except dt.errors.OpError as e:
            print(type(e).__name__, "|", e)
    """)
    lines = out.splitlines()
    assert lines[0].startswith("InvalidArgumentError") and "different dtypes" in lines[0]
    assert lines[1].startswith("InvalidArgumentError") and "inner dimensions" in lines[1]
    assert lines[2].startswith("UnimplementedError") and "eager" in lines[2]


def test_variables_hold_their_value_and_update_at_once() -> None:
    run_eager("""
    v = dt.Variable(1.0)
    assert isinstance(v, dt.Variable) and v.dtype == dt.float32
    before = v.read_value()
    v.assign_add(1)                  # TF1 built an op here and changed nothing
    assert v.numpy() == 2.0 and before.numpy() == 1.0   # a read is a snapshot
    v.assign(5.0); v.assign_sub(0.5)
    assert float(v) == 4.5 and (v * 2).numpy() == 9.0
    w = dt.Variable(np.zeros((2, 3), np.float32), name="w")
    w2 = dt.Variable(np.zeros((2, 3), np.float32), name="w")
    assert w.name != w2.name          # two live variables never share a value
    try:
        w.assign(np.zeros((3, 3), np.float32))
    except dt.errors.InvalidArgumentError as e:
        assert "shape" in str(e)
    else:
        raise AssertionError("a wrong shape was assigned")
    counter = dt.Variable(0)
    for _ in range(5):
        counter.assign_add(1)
    assert counter.numpy() == 5 and counter.dtype == dt.int32
    # names of eager ops are not kept: a long eager loop does not grow the graph
    g = dt.get_default_graph()
    ops_before, names_before = len(g.get_operations()), len(g._names_in_use)
    for _ in range(50):
        dt.add(counter, 1); dt.reduce_sum(w)
    assert len(g.get_operations()) == ops_before and len(g._names_in_use) == names_before
    """)


def test_tape_gradients_match_the_graph_path() -> None:
    run_eager("""
    from distrib.runtime.step.local_eval import evaluate
    w0 = np.array([[1., -2.], [0.5, 3.]], np.float32)
    x0 = np.array([[1., 0.5], [-1., 2.]], np.float32)

    def model(w, x, b):
        h = dt.nn.relu(dt.matmul(x, w) + b)
        return dt.reduce_mean(dt.square(h)) + dt.reduce_sum(dt.nn.softmax(h) * h)

    w, b = dt.Variable(w0), dt.Variable([0.1, -0.2])
    x = dt.constant(x0)
    with dt.GradientTape() as tape:
        loss = model(w, x, b)
    gw, gb = tape.gradient(loss, [w, b])

    g = dt.Graph()
    with g.as_default():
        assert not dt.executing_eagerly()
        wg, bg = dt.Variable(w0), dt.Variable([0.1, -0.2])
        lg = model(wg, dt.constant(x0), bg)
        grads = dt.gradients(lg, [wg, bg])
        evaluate([wg.initializer, bg.initializer], graph=g)
        want_loss, want_w, want_b = evaluate([lg, *grads], graph=g)
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=1e-6)
    np.testing.assert_allclose(gw.numpy(), want_w, rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), want_b, rtol=1e-6)

    # watched tensors, unwatched ones, persistent tapes, a second derivative
    c = dt.constant(3.0)
    with dt.GradientTape(persistent=True) as t2:
        t2.watch(c)
        y = c * c * c
    assert t2.gradient(y, c).numpy() == 27.0
    assert t2.gradient(y, dt.constant(1.0)) is None
    with dt.GradientTape() as outer:
        outer.watch(c)
        with dt.GradientTape() as inner:
            inner.watch(c)
            y = c * c * c
        dy = inner.gradient(y, c)
    assert outer.gradient(dy, c).numpy() == 18.0
    with dt.GradientTape() as t3:
        z = dt.reduce_sum(x * 2.0)
    assert t3.gradient(z, [w], unconnected_gradients="zero")[0].numpy().tolist() == [[0, 0], [0, 0]]
    """)


def test_an_update_copies_only_a_value_someone_holds() -> None:
    # the store's copy on write counted its own local name as a holder, and a used
    # tape kept its reads, so every update copied the variable (each step, every weight)
    run_eager("""
    from distrib.eager import context
    store = context.runner().store
    w = dt.Variable(np.zeros(1000, np.float32))
    opt = dt.train.GradientDescentOptimizer(0.5)
    first = id(store.read(w.shared_name))
    for _ in range(3):
        w.assign_add(np.ones(1000, np.float32), read_value=False)
        with dt.GradientTape() as tape:
            loss = dt.reduce_sum(w * w)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))   # (the tape alive)
    assert id(store.read(w.shared_name)) == first     # updated in place: nobody held it
    held, seen = w.read_value(), w.numpy().copy()
    view = w.numpy()[:10]
    w.assign_add(np.ones(1000, np.float32))
    np.testing.assert_array_equal(held.numpy(), seen)   # a read is a snapshot still
    np.testing.assert_array_equal(view, seen[:10])      # a view of one too
    np.testing.assert_array_equal(w.numpy(), seen + 1)
    """)


def test_compat_v1_disable_eager_execution_says_it_cannot() -> None:
    # it looked for a distrib.eager.disable_eager_execution that does not exist and
    # returned, eager still on, where its docstring said it turned eager values off
    out = run_eager("""
    import distrib.compat.v1 as tf
    try:
        tf.disable_eager_execution()
    except dt.errors.FailedPreconditionError as e:
        assert "cannot be turned off" in str(e)
        print("refused")
    assert dt.executing_eagerly()
    """)
    assert out.strip() == "refused"


def test_numpy_functions_take_an_eager_variable() -> None:
    # an eager variable inherited the graph tensors' __array_ufunc__ = None: np.sqrt(v)
    # and np.add(v, 1) raised TypeError (TF's eager variables are numpy's arrays there)
    run_eager("""
    v = dt.Variable([1.0, 4.0])
    np.testing.assert_array_equal(np.sqrt(v), [1.0, 2.0])
    np.testing.assert_array_equal(np.add(v, 1), [2.0, 5.0])
    np.testing.assert_array_equal(np.maximum(dt.constant([3.0, 3.0]), v), [3.0, 4.0])
    """)


def test_optimizers_apply_gradients_eagerly() -> None:
    run_eager("""
    w = dt.Variable([1.0, -2.0])
    opt = dt.train.GradientDescentOptimizer(0.5)
    with dt.GradientTape() as tape:
        loss = dt.reduce_sum(w * w)
    opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
    # Adam's first step moves each weight by lr (TF's update rule, its slots eager too)
    v = dt.Variable([1.0, -2.0])
    adam = dt.train.AdamOptimizer(0.1)
    with dt.GradientTape() as tape:
        loss = dt.reduce_sum(v * v)
    adam.apply_gradients(zip(tape.gradient(loss, [v]), [v]))
    np.testing.assert_allclose(v.numpy(), [0.9, -1.9], rtol=1e-5)
    """)


def test_function_takes_eager_arguments_and_keeps_its_graph() -> None:
    out = run_eager("""
    @dt.function
    def f(a, b):
        assert not dt.executing_eagerly()   # the body is traced into a graph
        return dt.reduce_sum(a * b)

    async def main():
        x, y = dt.constant([1., 2.]), dt.constant([3., 4.])
        out = await f(x, y)   # a dt.function called eagerly gives EagerTensors, as TF2's
        print(type(out).__name__, out.numpy(), f.experimental_get_tracing_count())
        print((await f(dt.constant([2., 2.]), y)).numpy(), f.experimental_get_tracing_count())
        print((await f(np.array([1., 1.], np.float32), y)).numpy(),
              f.experimental_get_tracing_count())
        ds = dt.data.Dataset.from_tensor_slices(dt.constant([[1., 2.], [3., 4.]])).batch(1)
        print([b.tolist() for b in ds])
    asyncio.run(main())
    """)
    assert out.split() == ["EagerTensor", "11.0", "1", "14.0", "1", "7.0", "1", "[[[1.0,", "2.0]],",
                           "[[3.0,", "4.0]]]"]


def test_strategy_scope_places_variables_read_by_await() -> None:
    out = run_eager("""
    async def main():
        strategy = dt.distribute.MirroredStrategy()
        with strategy.scope():
            assert not dt.executing_eagerly()
            v = dt.Variable(2.0)
        assert dt.executing_eagerly()

        @dt.function
        def step():
            return v.assign_add(1.0)

        print((await step()).numpy())
        try:
            v.numpy()
        except dt.errors.FailedPreconditionError as e:
            print("numpy:", "await v.read_value()" in str(e))
        value = await v.read_value()
        print(type(value).__name__, value.numpy())
        local = dt.Variable(1.0)   # outside the scope: eager, in this process
        print(type(local).__name__, local.numpy())
    asyncio.run(main())
    """)
    assert out.split() == ["3.0", "numpy:", "True", "EagerTensor", "3.0", "EagerVariable", "1.0"]


def test_entered_graph_builds_as_tf1() -> None:
    run_eager("""
    g = dt.Graph()
    with g.as_default():
        assert not dt.executing_eagerly()
        c = dt.constant(1.0)
        assert isinstance(c, dt.Tensor) and c.graph is g
        e = c + dt.constant(2.0)
        v = dt.Variable(1.0)
        assert type(v) is dt.Variable
        inc = v.assign_add(1.0)
        assert isinstance(inc, dt.Tensor)
    assert dt.executing_eagerly()
    """)


@pytest.mark.parametrize("spelling", ["dt.enable_eager_execution", "dt.compat.v1.enable_eager_execution"])
def test_switch_spellings(spelling: str) -> None:
    code = ("import distrib as dt\n"
            f"fn = {spelling} if '{spelling}'.count('.') == 1 or hasattr(dt, 'compat') else None\n"
            "if fn is not None:\n    fn(); fn()\n    assert dt.executing_eagerly()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
