"""``dt.get_variable`` / ``dt.variable_scope`` and TF1's initializer objects.

Each test states TF1's behaviour, most of them taken from TensorFlow's own
``variable_scope_test.py`` (testVarScope, testVarScopeNameScope,
testVarOpScope, testVarScopeReuse, testGetVar...) and ``init_ops_test.py``;
values are checked against numpy. Graphs run in-process with
``local_eval.evaluate`` and a private variable store per test.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError
from distrib.ops.variable_scope import REGULARIZATION_LOSSES, VariableScopeError
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate


@pytest.fixture
def g():
    graph = dt.Graph()
    with graph.as_default():
        yield graph


@pytest.fixture
def run(g):
    store = VariableStore()

    def run(fetches, feed_dict=None, graph=None):
        return evaluate(fetches, feed_dict, graph=graph or g, variables=store)
    return run


# -- names and scopes ------------------------------------------------------------------------
def test_names_come_from_the_variable_scopes(g):
    # TF: with variable_scope("foo"): with variable_scope("bar"): v.name == "foo/bar/v:0"
    with dt.variable_scope("foo"):
        with dt.variable_scope("bar") as bar:
            v = dt.get_variable("v", [1])
    assert v.name == "foo/bar/v:0" and bar.name == "foo/bar"
    assert isinstance(v, dt.Variable) and v.shared_name == "foo/bar/v"
    assert v in dt.global_variables() and v in dt.trainable_variables()
    assert v.dtype == dt.float32 and v.shape.as_list() == [1]


def test_a_variable_scope_opens_a_name_scope_as_tf_does(g):
    # TF testVarScope / testVarScopeNameScope
    with dt.variable_scope("tower") as tower:
        with dt.name_scope("scope") as sc:
            assert sc == "tower/scope/"
    with dt.variable_scope("foo"):
        with dt.variable_scope(tower, reuse=True) as shared:
            assert shared.name == "tower"
            with dt.name_scope("scope") as sc:
                assert sc == "foo/tower/scope/"
    with dt.name_scope("scope1"):
        with dt.variable_scope("tower") as tower1:
            with dt.name_scope("scope2") as sc2:
                assert sc2 == "scope1/tower/scope2/"
        with dt.variable_scope(tower1):          # re-entering acts like another "tower"
            with dt.name_scope("scope2") as sc2:
                assert sc2 == "scope1/tower_1/scope2/"
        with dt.variable_scope("tower"):         # re-entering by string acts the same
            with dt.name_scope("scope2") as sc2:
                assert sc2 == "scope1/tower_2/scope2/"
    root = dt.get_variable_scope()
    with dt.name_scope("scope4"):
        with dt.variable_scope(root):
            with dt.name_scope("scope2") as sc2:
                assert sc2 == "scope4/scope2/"


def test_variable_names_ignore_the_name_scope(g):
    # TF testVarOpScope: the variable is tower/w whatever the enclosing name scope
    with dt.name_scope("testVarOpScope1"):
        with dt.variable_scope("tower", "default", []):
            assert dt.get_variable("w", []).name == "tower/w:0"
            with dt.name_scope("testVarOpScope2") as sc2:
                assert sc2 == "testVarOpScope1/tower/testVarOpScope2/"
        with dt.variable_scope("tower", "default", []):
            with pytest.raises(ValueError):
                dt.get_variable("w", [])
            with dt.name_scope("testVarOpScope2") as sc2:
                assert sc2 == "testVarOpScope1/tower_1/testVarOpScope2/"
    with dt.name_scope("testVarOpScope2"):
        with dt.variable_scope(None, "default", []):
            assert dt.get_variable("w", []).name == "default/w:0"
            with dt.name_scope("testVarOpScope2") as sc2:
                assert sc2 == "testVarOpScope2/default/testVarOpScope2/"
        with dt.variable_scope(None, "default", []):
            assert dt.get_variable("w", []).name == "default_1/w:0"


def test_default_name_counts_restart_when_the_parent_closes(g):
    # TF's variable_scope docstring example
    with dt.variable_scope("foo") as vs:
        with dt.variable_scope(None, default_name="bar"):
            assert dt.get_variable("a", [1]).name == "foo/bar/a:0"
        with dt.variable_scope(None, default_name="bar"):
            assert dt.get_variable("b", [1]).name == "foo/bar_1/b:0"
    with dt.variable_scope(vs):
        with dt.variable_scope(None, default_name="bar"):
            assert dt.get_variable("c", [1]).name == "foo/bar/c:0"   # bar, not bar_2


def test_reentering_a_captured_scope_keeps_the_variable_names(g):
    # TF docstring: variable_scope(vs, auxiliary_name_scope=False) + original_name_scope
    with dt.variable_scope("foo") as vs:
        pass
    with dt.variable_scope(vs, auxiliary_name_scope=False) as vs1:
        with dt.name_scope(vs1.original_name_scope):
            v = dt.get_variable("v", [1])
            c = dt.constant([1], name="c")
    assert v.name == "foo/v:0" and c.name == "foo/c:0"


# -- reuse -------------------------------------------------------------------------------------
def test_reuse_true_returns_the_same_variable(g):
    with dt.variable_scope("foo"):
        v = dt.get_variable("v", [1])
    with dt.variable_scope("foo", reuse=True):
        v1 = dt.get_variable("v", [1])
    assert v1 is v
    with dt.variable_scope("foo") as scope:
        scope.reuse_variables()
        assert dt.get_variable("v", [1]) is v


def test_a_second_get_without_reuse_is_tfs_value_error(g):
    with dt.variable_scope("foo"):
        dt.get_variable("v", [1])
        with pytest.raises(ValueError, match=r"Variable foo/v already exists, disallowed\. "
                                             r"Did you mean to set reuse=True"):
            dt.get_variable("v", [1])
    # typed as well: an InvalidArgumentError that is a ValueError
    with pytest.raises(VariableScopeError) as err:
        with dt.variable_scope("foo"):
            dt.get_variable("v", [1])
    assert isinstance(err.value, InvalidArgumentError) and "Originally defined at" in str(err.value)
    assert __file__.rsplit("/", 1)[-1] in str(err.value)   # the user's line, not distrib's


def test_reuse_of_a_missing_variable_is_tfs_value_error(g):
    with dt.variable_scope("foo", reuse=True):
        with pytest.raises(ValueError, match=r"Variable foo/w does not exist, or was not "
                                             r"created with tf\.get_variable\(\)"):
            dt.get_variable("w", [1])


def test_auto_reuse_creates_then_returns(g):
    def foo():
        with dt.variable_scope("foo", reuse=dt.AUTO_REUSE):
            return dt.get_variable("v", [1])
    v1, v2 = foo(), foo()
    assert v1 is v2 and len(dt.global_variables()) == 1


def test_reuse_is_inherited_and_false_means_inherit(g):
    # TF testVarScopeReuse: "reuse=False" since TF 1.1 means "inherit", as None
    with dt.variable_scope("outer"):
        with dt.variable_scope("inner"):
            w = dt.get_variable("w", [1])
    with dt.variable_scope("outer", reuse=True) as outer:
        assert outer.reuse is True
        with dt.variable_scope("inner", reuse=False) as inner:
            assert inner.reuse is True
            assert dt.get_variable("w", [1]) is w
    with dt.variable_scope("other") as scope:
        scope.reuse_variables()
        with dt.variable_scope("sub") as sub:
            assert sub.reuse is True
    with pytest.raises(ValueError, match="reuse parameter must be True or False or None"):
        dt.variable_scope("x", reuse="yes")
    with pytest.raises(ValueError, match="cannot be used without a name_or_scope"):
        with dt.variable_scope(None, default_name="d", reuse=True):
            pass
    with pytest.raises(TypeError, match="name_or_scope is required"):
        dt.variable_scope(None)


def test_sharing_checks_shape_and_dtype(g):
    with dt.variable_scope("s"):
        dt.get_variable("w", [2, 3])
    with dt.variable_scope("s", reuse=True):
        assert dt.get_variable("w").shape.as_list() == [2, 3]    # no shape: any is compatible
        with pytest.raises(ValueError, match=r"Trying to share variable s/w, but specified "
                                             r"shape"):
            dt.get_variable("w", [3, 2])
        with pytest.raises(ValueError, match=r"specified dtype int32 and found dtype float32"):
            dt.get_variable("w", [2, 3], dtype=dt.int32)


# -- initializers and defaults -------------------------------------------------------------------
def test_default_initializers_are_tf1s(g, run):
    # floats: glorot_uniform (|w| <= sqrt(6 / (fan_in + fan_out))); ints and bools: zeros
    w = dt.get_variable("w", [30, 20])
    i = dt.get_variable("i", [4], dtype=dt.int32)
    b = dt.get_variable("b", [2], dtype=dt.bool)
    run(dt.global_variables_initializer())
    wv = run(w)
    limit = np.sqrt(6.0 / 50)
    assert wv.dtype == np.float32 and np.abs(wv).max() <= limit
    assert abs(wv.std() - limit / np.sqrt(3)) < 0.1 * limit     # U(-l, l) has std l/sqrt(3)
    np.testing.assert_array_equal(run(i), np.zeros(4, np.int32))
    np.testing.assert_array_equal(run(b), np.zeros(2, bool))


def test_a_scope_initializer_is_inherited_and_an_argument_wins(g, run):
    with dt.variable_scope("s", initializer=dt.constant_initializer(0.3)):
        a = dt.get_variable("a", [2])
        with dt.variable_scope("t"):
            b = dt.get_variable("b", [2])
            c = dt.get_variable("c", [2], initializer=dt.zeros_initializer())
        with dt.variable_scope("u", dtype=dt.float64):
            d = dt.get_variable("d", [1])
        dt.get_variable_scope().set_initializer(dt.ones_initializer())
        e = dt.get_variable("e", [1])
    assert dt.get_variable_scope().initializer is None      # the set initializer goes away
    run(dt.global_variables_initializer())
    np.testing.assert_allclose(run(a), [0.3, 0.3])
    np.testing.assert_allclose(run(b), [0.3, 0.3])
    np.testing.assert_array_equal(run(c), [0.0, 0.0])
    assert d.dtype == dt.float64 and run(d).dtype == np.float64
    np.testing.assert_array_equal(run(e), [1.0])


def test_a_value_initializer_gives_the_shape_and_refuses_one(g, run):
    v = dt.get_variable("v", initializer=dt.constant([[1.0, 2.0]]))
    n = dt.get_variable("n", initializer=np.arange(3, dtype=np.int64))
    assert v.shape.as_list() == [1, 2] and n.dtype == dt.int64
    run(dt.global_variables_initializer())
    np.testing.assert_array_equal(run(n), [0, 1, 2])
    with pytest.raises(ValueError, match="If initializer is a constant, do not specify shape"):
        dt.get_variable("x", [1, 2], initializer=dt.constant([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="Initializer type 'float32' and explicit dtype "
                                         "'int32' don't match"):
        dt.get_variable("y", dtype=dt.int32, initializer=dt.constant([1.0]))
    with pytest.raises(ValueError, match="initializer passed is not valid"):
        dt.get_variable("z", [None, 2], initializer=dt.zeros_initializer())


def test_keras_initializers_and_plain_callables_are_accepted(g, run):
    from distrib.keras import initializers
    a = dt.get_variable("a", [2, 2], initializer=initializers.Ones())
    b = dt.get_variable("b", [3], initializer=lambda shape, dtype: np.full(shape, 7.0))
    c = dt.get_variable("c", [2], initializer=dt.random_uniform_initializer)  # a class
    run(dt.global_variables_initializer())
    np.testing.assert_array_equal(run(a), np.ones((2, 2)))
    np.testing.assert_array_equal(run(b), [7.0, 7.0, 7.0])
    assert run(c).shape == (2,)


def test_initializer_objects_match_numpy(g, run):
    # init_ops_test: constant fills the rest with the last value; the seeded draws
    # are the kernels' numpy streams; a truncated normal stays within 2 stddev
    const = dt.constant_initializer([1, 2, 3])([2, 3])
    zeros = dt.zeros_initializer(dtype=dt.int64)([2])
    ones = dt.ones_initializer()([2], dtype=dt.float64)
    normal = dt.random_normal_initializer(mean=1.0, stddev=2.0, seed=11)([4, 5])
    uniform = dt.random_uniform_initializer(-2.0, 3.0, seed=12)([100])
    trunc = dt.truncated_normal_initializer(mean=0.5, stddev=0.1, seed=13)([2000])
    glorot = dt.glorot_uniform_initializer(seed=14)([6, 10])
    np.testing.assert_array_equal(run(const), [[1, 2, 3], [3, 3, 3]])
    assert run(zeros).dtype == np.int64 and run(ones).dtype == np.float64
    want = np.random.default_rng(11).standard_normal((4, 5), dtype=np.float32) * 2.0 + 1.0
    np.testing.assert_allclose(run(normal), want, rtol=1e-6)
    u = run(uniform)
    np.testing.assert_allclose(u, np.random.default_rng(12).random(100, dtype=np.float32) * 5 - 2,
                               rtol=1e-6, atol=1e-6)
    t = run(trunc)
    assert np.abs(t - 0.5).max() <= 0.2 and abs(t.mean() - 0.5) < 0.01
    limit = np.sqrt(6.0 / 16)
    np.testing.assert_allclose(
        run(glorot), np.random.default_rng(14).random((6, 10), dtype=np.float32) * 2 * limit - limit,
        rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Too many elements provided"):
        dt.constant_initializer([1, 2, 3])([2])
    with pytest.raises(ValueError, match="Expected floating point type"):
        dt.random_normal_initializer(dtype=dt.int32)
    with pytest.raises(TypeError, match="Invalid type for initial value"):
        dt.constant_initializer({"a": 1})


def test_variance_scaling_follows_the_fans(g, run):
    # fan_in of a [3, 3, 8, 16] kernel is 3*3*8 = 72; scale 2 -> stddev sqrt(2/72)
    v = dt.variance_scaling_initializer(2.0, "fan_in", "untruncated_normal", seed=3)([3, 3, 8, 16])
    got = run(v)
    assert got.shape == (3, 3, 8, 16) and abs(got.std() - np.sqrt(2 / 72)) < 0.02
    with pytest.raises(ValueError, match="Invalid `mode` argument"):
        dt.variance_scaling_initializer(mode="fan_middle")


# -- collections, regularizers, custom getters ---------------------------------------------------
def test_trainable_local_and_regularized_variables(g, run):
    w = dt.get_variable("w", initializer=np.array([1.0, -2.0], np.float32),
                        regularizer=lambda t: dt.reduce_sum(dt.square(t)) * 0.5)
    n = dt.get_variable("n", [1], trainable=False)
    loc = dt.get_local_variable("loc", [2])
    assert w in dt.trainable_variables() and n not in dt.trainable_variables()
    assert loc in dt.local_variables() and loc not in dt.trainable_variables()
    losses = dt.get_collection(REGULARIZATION_LOSSES)
    assert len(losses) == 1 and losses[0].name.startswith("w/Regularizer/")
    run(dt.global_variables_initializer())
    assert run(losses[0]) == pytest.approx(0.5 * (1.0 + 4.0))
    with dt.variable_scope("quiet", regularizer=lambda t: dt.reduce_sum(t)):
        dt.get_variable("q", [1], regularizer=dt.no_regularizer)
    assert len(dt.get_collection(REGULARIZATION_LOSSES)) == 1
    with dt.variable_scope("scoped") as sc:
        dt.get_variable("a", [1])
        dt.get_variable("b", [1], trainable=False)
    assert [v.name for v in sc.trainable_variables()] == ["scoped/a:0"]
    assert [v.name for v in sc.global_variables()] == ["scoped/a:0", "scoped/b:0"]


def test_custom_getters_wrap_the_true_getter(g):
    calls = []

    def suffix(getter, name, *args, **kwargs):
        calls.append(name)
        return getter(name + "_suffix", *args, **kwargs)

    with dt.variable_scope("outer", custom_getter=suffix):
        with dt.variable_scope("inner", custom_getter=suffix):
            v = dt.get_variable("v", [1])
    assert v.name == "outer/inner/v_suffix_suffix:0" and len(calls) == 2
    # a partitioner gives TF1's PartitionedVariable (issue 41; tests/test_embedding_ops.py)
    parts = dt.get_variable("p", [4, 2], partitioner=lambda shape, dtype: [2, 1])
    assert isinstance(parts, dt.PartitionedVariable) and len(parts) == 2


# -- graphs, threads, tasks ----------------------------------------------------------------------
def test_each_graph_has_its_store_and_each_thread_its_scope(g):
    with dt.variable_scope("main"):
        v = dt.get_variable("v", [1])
        seen = {}

        def other():
            with g.as_default():   # TF: a new thread starts at the root scope, same store
                seen["scope"] = dt.get_variable_scope().name
                with dt.variable_scope("main", reuse=True):
                    seen["v"] = dt.get_variable("v", [1])
        t = threading.Thread(target=other)
        t.start()
        t.join(10)
    assert seen == {"scope": "", "v": v}
    with dt.Graph().as_default():
        with dt.variable_scope("main"):
            assert dt.get_variable("v", [1]) is not v    # another graph, another store


def test_variables_of_the_same_name_share_storage_on_their_task(run):
    """A get_variable variable is a dt.Variable keyed by its full name: another
    graph that declares it reads the same storage on the task."""
    g1, g2 = dt.Graph(), dt.Graph()
    with g1.as_default(), dt.variable_scope("model"):
        w1 = dt.get_variable("w", initializer=np.array([1.5, 2.5], np.float32))
    with g2.as_default(), dt.variable_scope("model"):
        w2 = dt.get_variable("w", [2], initializer=dt.zeros_initializer())
    run(w1.initializer, graph=g1)
    np.testing.assert_array_equal(run(w2, graph=g2), [1.5, 2.5])


def test_improper_nesting_is_refused(g):
    outer = dt.variable_scope("a")
    inner = dt.variable_scope("b")
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="Improper nesting of variable_scope"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)


async def test_get_variable_under_mirrored_strategy():
    """In a strategy's scope get_variable makes (and stores) the strategy's
    variable; inside strategy.run, replicas after the first reuse the first
    replica's variables, as TF's replica threads enter their scope reusing."""
    import asyncio

    from distrib.distribute.functions import def_function
    from tests.helpers import reset_device_config
    reset_device_config()
    cpu = dt.config.list_physical_devices("CPU")[0]
    dt.config.set_logical_device_configuration(
        cpu, [dt.config.LogicalDeviceConfiguration()] * 2)
    dt.reset_default_graph()
    try:
        strategy = dt.distribute.MirroredStrategy()
        with strategy.scope():
            with dt.variable_scope("model"):
                w = dt.get_variable("w", [3, 1], initializer=dt.constant_initializer(0.5))
            opt = dt.train.GradientDescentOptimizer(0.1)
        assert isinstance(w, dt.distribute.MirroredVariable) and w.name == "model/w:0"
        made = {}

        def step(x):
            with dt.variable_scope("model", reuse=True):
                made.setdefault("w", []).append(dt.get_variable("w", [3, 1]))
            with dt.variable_scope("head", reuse=dt.AUTO_REUSE):
                made.setdefault("b", []).append(
                    dt.get_variable("b", [1], initializer=dt.zeros_initializer()))
            w_, b_ = made["w"][-1], made["b"][-1]
            with dt.GradientTape() as tape:
                loss = dt.reduce_sum(dt.matmul(x, w_) + b_)
            opt.apply_gradients(zip(tape.gradient(loss, [w_, b_]), [w_, b_]))
            return loss

        @dt.function
        def train(x):
            return strategy.run(step, args=(x,))

        @dt.function
        def copies():
            return list(strategy.experimental_local_results(w))

        async with asyncio.timeout(60):
            await train(np.ones((2, 3), np.float32))
            got = await copies()
        assert all(v is w for v in made["w"]) and made["b"][0] is made["b"][1]
        # a plain tensor goes whole to each replica (TF): 2 rows of ones each, so the
        # gradient of w summed over the replicas is 2 * 2 per weight
        for copy in got:
            np.testing.assert_allclose(copy, np.full((3, 1), 0.5 - 0.1 * 4.0), rtol=1e-6)
    finally:
        await def_function.close_sessions()
        reset_device_config()
        dt.reset_default_graph()


def test_the_multi_gpu_cifar_trainers_tower_pattern(g, run):
    """cifar10_multi_gpu_train.py: one tower per device under name scopes
    tower_<i>, the variables made by the first tower and reused by the next
    (``reuse_variables()`` on the enclosing scope), the towers' gradients
    averaged and applied once."""
    x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)

    def tower_loss(batch):
        with dt.variable_scope("local"):
            w = dt.get_variable("weights", initializer=np.array([[0.5], [-0.5]], np.float32))
            b = dt.get_variable("biases", [1], initializer=dt.constant_initializer(0.1))
        return dt.reduce_sum(dt.square(dt.matmul(batch, w) + b))

    opt = dt.train.GradientDescentOptimizer(0.01)
    tower_grads = []
    with dt.variable_scope(dt.get_variable_scope()):
        for i in range(2):
            with dt.device("/cpu:0"), dt.name_scope(f"tower_{i}") as scope:
                loss = tower_loss(dt.constant(x[i:i + 1]))
                assert scope == f"tower_{i}/"
                dt.get_variable_scope().reuse_variables()
                tower_grads.append(opt.compute_gradients(loss))
    assert [v.op.name for v in dt.trainable_variables()] == ["local/weights", "local/biases"]
    averaged = [(dt.multiply(dt.add_n([gv[k][0] for gv in tower_grads]), 0.5), tower_grads[0][k][1])
                for k in range(2)]
    train = opt.apply_gradients(averaged)
    run(dt.global_variables_initializer())
    run(train)
    w, b = np.array([[0.5], [-0.5]]), 0.1
    grads_w = [2 * (x[i:i + 1] @ w + b) * x[i:i + 1].T for i in range(2)]
    grads_b = [2 * (x[i:i + 1] @ w + b).sum() for i in range(2)]
    np.testing.assert_allclose(run(dt.trainable_variables()[0]), w - 0.01 * sum(grads_w) / 2,
                               rtol=1e-6)
    np.testing.assert_allclose(run(dt.trainable_variables()[1]), [b - 0.01 * sum(grads_b) / 2],
                               rtol=1e-6)
