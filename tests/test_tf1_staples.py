"""The TF1 staples of the seeds' multi-GPU CIFAR trainer, against numpy:
``dt.nn.dropout``, ``dt.train.RMSPropOptimizer`` (CPU kernel, GPU kernel under
the CUDA simulator, strategies, Saver), the learning-rate decays and
``dt.keras.optimizers.RMSprop`` with ``compile('rmsprop')``.

Each test states TF's behaviour; the numpy references are written from TF's
own unit tests (``rmsprop_test.py``'s ``_rmsprop_update_numpy``, Keras'
``optimizer_v2/rmsprop_test.py``, ``learning_rate_decay_test.py``,
``nn_test.py``'s dropout tests), not from our kernels.
"""
from __future__ import annotations

import asyncio
import math
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate
from tests.helpers import ROOT, child_env

BOUND_S = 60
keras = dt.keras


pytestmark = pytest.mark.usefixtures("fresh_keras")


class Local:
    """A graph run in this process with a private variable store."""

    def __init__(self) -> None:
        self.graph, self.store = dt.Graph(), VariableStore()

    def __call__(self, fetches, feed_dict=None):
        return evaluate(fetches, feed_dict, graph=self.graph, variables=self.store)


# -- dropout ---------------------------------------------------------------------------------
def dropout_reference(x: np.ndarray, rate: float, seed: int, noise_shape=None) -> np.ndarray:
    """TF 1.15's dropout_v2: keep where U[0,1) >= rate, scale by 1 / (1 - rate), in x's dtype."""
    draw = np.random.default_rng(seed).random(noise_shape or x.shape, dtype=np.float32)
    r = np.float32(rate)
    keep = (draw >= r).astype(np.float32)
    return x * (np.float32(1) / (np.float32(1) - r)) * keep


def test_dropout_keeps_with_probability_keep_prob_and_scales_by_its_inverse():
    run = Local()
    x = np.arange(1, 41, dtype=np.float32).reshape(4, 10)
    with run.graph.as_default():
        y = dt.nn.dropout(dt.constant(x), keep_prob=0.8, seed=5)
        y_rate = dt.nn.dropout(dt.constant(x), rate=0.25, seed=6)
        z = dt.nn.dropout(dt.constant(x), noise_shape=[4, 1], rate=0.5, seed=7)
    np.testing.assert_allclose(run(y), dropout_reference(x, 1.0 - 0.8, 5), rtol=1e-6)
    np.testing.assert_allclose(run(y_rate), dropout_reference(x, 0.25, 6), rtol=1e-6)
    got = run(z)
    np.testing.assert_allclose(got, dropout_reference(x, 0.5, 7, (4, 1)), rtol=1e-6)
    assert all(len(set(row != 0)) == 1 for row in got)      # a whole row kept or dropped
    assert y.shape.as_list() == [4, 10] and y.op.name.startswith("dropout")


def test_dropout_of_a_batch_of_unknown_size_and_a_fed_keep_prob():
    run = Local()
    with run.graph.as_default():
        x = dt.placeholder(dt.float32, [None, 1000])
        keep = dt.placeholder(dt.float32, [])
        y = dt.nn.dropout(x, keep_prob=keep)
        loss = dt.reduce_sum(y * y)
        (dx,) = dt.gradients(loss, [x])
    assert y.shape.as_list() == [None, 1000]
    ones = np.ones((3, 1000), np.float32)
    out = run(y, {x: ones, keep: 0.7})
    assert out.shape == (3, 1000) and set(np.unique(out)) <= {0.0, np.float32(1 / np.float32(0.7))}
    assert abs((out != 0).mean() - 0.7) < 0.03
    np.testing.assert_array_equal(run(y, {x: ones[:2], keep: 1.0}), ones[:2])   # evaluation
    out, grad = run([y, dx], {x: ones, keep: 0.5})
    np.testing.assert_allclose(grad, 2 * out * (out != 0) * 2.0)   # d(y^2)/dx = 2 y * scale * mask


def test_dropout_arguments_are_tfs():
    with dt.Graph().as_default():
        x = dt.constant([1.0, 2.0])
        assert dt.nn.dropout(x, rate=0.0) is x and dt.nn.dropout(x, keep_prob=1.0) is x
        with pytest.raises(ValueError, match="Cannot specify both 'keep_prob' and 'rate'"):
            dt.nn.dropout(x, keep_prob=0.5, rate=0.5)
        with pytest.raises(ValueError, match="You must provide a rate to dropout"):
            dt.nn.dropout(x)
        with pytest.raises(ValueError, match=r"rate must be a scalar tensor or a float in the "
                                             r"range \[0, 1\), got 1"):
            dt.nn.dropout(x, rate=1.0)
        with pytest.raises(ValueError, match="keep_prob must be a floating point number"):
            dt.nn.dropout(x, keep_prob="half")
        with pytest.raises(ValueError, match="x has to be a floating point tensor"):
            dt.nn.dropout(dt.constant([1, 2]), rate=0.5)


# -- RMSProp (TF1) ------------------------------------------------------------------------------
def rmsprop_reference(var, g, mg, rms, mom, lr, decay, momentum, epsilon, centered):
    """TF's rmsprop_test._rmsprop_update_numpy."""
    rms_t = rms * decay + (1 - decay) * g * g
    denom_t = rms_t + epsilon
    if centered:
        mg_t = mg * decay + (1 - decay) * g
        denom_t -= mg_t * mg_t
    else:
        mg_t = mg
    mom_t = momentum * mom + lr * g / np.sqrt(denom_t, dtype=denom_t.dtype)
    return var - mom_t, mg_t, rms_t, mom_t


# TF's _TEST_PARAM_VALUES: learning_rate, decay, momentum, epsilon, centered
TF_PARAMS = [(0.5, 0.9, 0.0, 1e-3, True), (0.5, 0.9, 0.0, 1e-3, False),
             (0.1, 0.9, 0.0, 1e-3, True), (0.5, 0.95, 0.0, 1e-3, False),
             (0.5, 0.95, 0.0, 1e-5, True), (0.5, 0.95, 0.9, 1e-5, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lr,decay,momentum,epsilon,centered", TF_PARAMS)
def test_rmsprop_dense_follows_tfs_rule(dtype, lr, decay, momentum, epsilon, centered):
    run = Local()
    var_np = [np.array([1.0, 2.0], dtype), np.array([3.0, 4.0], dtype)]
    grads_np = [np.array([0.1, 0.2], dtype), np.array([0.01, 0.2], dtype)]
    with run.graph.as_default():
        vars_ = [dt.Variable(v, name=f"var{i}") for i, v in enumerate(var_np)]
        opt = dt.train.RMSPropOptimizer(learning_rate=lr, decay=decay, momentum=momentum,
                                        epsilon=epsilon, centered=centered)
        update = opt.apply_gradients(zip([dt.constant(g) for g in grads_np], vars_))
        run(dt.global_variables_initializer())
    for v in vars_:
        assert (opt.get_slot(v, "mg") is not None) == centered
        assert opt.get_slot(v, "rms") is not None and opt.get_slot(v, "momentum") is not None
    state = [[v, np.zeros(2, dtype), np.ones(2, dtype), np.zeros(2, dtype)] for v in var_np]
    tol = 1e-6 if dtype == np.float32 else 1e-12
    for _ in range(4):
        run(update)
        for i, v in enumerate(vars_):
            state[i] = list(rmsprop_reference(*state[i][:1], grads_np[i], *state[i][1:], lr,
                                              decay, momentum, epsilon, centered))
            got = run([v, opt.get_slot(v, "rms"), opt.get_slot(v, "momentum")])
            for a, b in zip(got, [state[i][0], state[i][2], state[i][3]]):
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
            if centered:
                np.testing.assert_allclose(run(opt.get_slot(v, "mg")), state[i][1], rtol=tol,
                                           atol=tol)


def test_rmsprop_with_momentum_matches_tfs_written_out_numbers():
    # TF rmsprop_test.testWithMomentum, first two steps of var0 (float64 here)
    run = Local()
    with run.graph.as_default():
        var0 = dt.Variable([1.0, 2.0], dtype=dt.float64)
        opt = dt.train.RMSPropOptimizer(learning_rate=2.0, decay=0.9, momentum=0.5, epsilon=1e-5)
        update = opt.apply_gradients([(dt.constant([0.1, 0.1], dtype=dt.float64), var0)])
        run(dt.global_variables_initializer())
    run(update)
    np.testing.assert_allclose(run(opt.get_slot(var0, "rms")), [0.901, 0.901])
    step1 = 0.1 * 2.0 / math.sqrt(0.901 + 1e-5)
    np.testing.assert_allclose(run(var0), [1.0 - step1, 2.0 - step1])
    run(update)
    mom = 0.5 * step1 + 0.1 * 2.0 / math.sqrt(0.901 * 0.9 + 0.001 + 1e-5)
    np.testing.assert_allclose(run(opt.get_slot(var0, "momentum")), [mom, mom])
    np.testing.assert_allclose(run(var0), [1.0 - step1 - mom, 2.0 - step1 - mom])


def test_rmsprop_slots_are_tf1s_names_beside_their_variable():
    graph = dt.Graph()
    with graph.as_default():
        with dt.device("/job:ps/task:1"):
            w = dt.Variable(np.zeros([3]), name="w")
        with dt.device("/job:worker/task:0"):
            opt = dt.train.RMSPropOptimizer(0.1, centered=True)
            opt.minimize(dt.reduce_sum(dt.square(w - 1.0)))
    names = [opt.get_slot(w, s).op.name for s in ("rms", "mg", "momentum")]
    assert names == ["w/RMSProp", "w/RMSProp_1", "w/RMSProp_2"]
    assert opt.get_slot_names() == ["mg", "momentum", "rms"]
    for s in ("rms", "mg", "momentum"):
        slot = opt.get_slot(w, s)
        assert slot.device == w.device and not slot.trainable
    (update,) = [op for op in graph.get_operations() if op.type == "ApplyCenteredRMSProp"]
    assert update.device == w.device and update.get_attr("ms") == "w/RMSProp"
    assert [update.get_attr(k) for k in ("mg", "mom")] == ["w/RMSProp_1", "w/RMSProp_2"]


def test_gpu_rmsprop_kernels_match_the_cpu_kernels_under_the_simulator():
    code = """
import numpy as np, kernels
from kernels.cuda.devices import to_device, to_host
rng = np.random.default_rng(3)
def rand(scale, shift=0.0):
    return (rng.standard_normal(7) * scale + shift).astype(np.float32)
for op in ("ApplyRMSProp", "ApplyCenteredRMSProp"):
    # var, [mg,] ms, mom; ms >= mg * mg, as the moving averages keep it
    state = [rand(1.0)] + ([rand(0.1)] if "Centered" in op else [])
    state += [np.abs(rand(1.0)) + np.float32(1), rand(0.1)]
    gpu = [to_device(s.copy()) for s in state]
    for step in range(3):
        g = rng.standard_normal(7).astype(np.float32)
        hyper = [np.array(v, np.float32) for v in (0.01, 0.9, 0.5, 1e-3)]
        kernels.get_kernel(op, "CPU")(state + hyper + [g], {})
        out = kernels.get_kernel(op, "GPU")(gpu + hyper + [to_device(g)], {})
        assert out[0] is gpu[0]
    for c, d in zip(state, gpu):
        np.testing.assert_allclose(to_host(d), c, rtol=1e-5, atol=1e-6, err_msg=op)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                         env=child_env(NUMBA_ENABLE_CUDASIM="1"), capture_output=True, text=True,
                         timeout=110)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "ok"


# -- learning-rate decay -------------------------------------------------------------------------
def decays_at(step: int) -> list[float]:
    """learning_rate_decay_test's formulas, written out in numpy."""
    exp_c = 0.1 * 0.96 ** (step / 7)
    exp_s = 0.1 * 0.96 ** math.floor(step / 7)
    nat = 0.1 * math.exp(-0.5 * math.floor(step / 7))
    inv = 0.1 / (1 + 0.5 * step / 7)
    poly = (0.1 - 0.01) * (1 - min(step, 10) / 10) ** 0.5 + 0.01
    mult = 1.0 if step == 0 else math.ceil(step / 10)
    poly_c = (0.1 - 0.0001) * (1 - step / (10 * mult)) + 0.0001
    pw = 1.0 if step <= 5 else 0.5 if step <= 10 else 0.1
    return [exp_c, exp_s, nat, inv, poly, poly_c, pw]


def test_learning_rate_decays_follow_the_global_step():
    run = Local()
    with run.graph.as_default():
        step = dt.train.get_or_create_global_step()
        lrs = [dt.train.exponential_decay(0.1, step, 7, 0.96),
               dt.train.exponential_decay(0.1, step, 7, 0.96, staircase=True),
               dt.train.natural_exp_decay(0.1, step, 7, 0.5, staircase=True),
               dt.train.inverse_time_decay(0.1, step, 7, 0.5),
               dt.train.polynomial_decay(0.1, step, 10, 0.01, power=0.5),
               dt.train.polynomial_decay(0.1, step, 10, cycle=True),
               dt.train.piecewise_constant(step, [5, 10], [1.0, 0.5, 0.1])]
        run(dt.global_variables_initializer())
    assert lrs[1].op.name == "ExponentialDecay_1" and lrs[6].dtype == dt.float32
    for s in (0, 1, 5, 6, 7, 10, 11, 14, 23):
        run(step.assign(s))
        np.testing.assert_allclose(run(lrs), decays_at(s), rtol=1e-5, err_msg=f"step {s}")


def test_learning_rate_decay_arguments_are_tfs():
    with dt.Graph().as_default():
        with pytest.raises(ValueError, match="global_step is required for exponential_decay"):
            dt.train.exponential_decay(0.1, None, 10, 0.5)
        with pytest.raises(ValueError, match="global_step is required for polynomial_decay"):
            dt.train.polynomial_decay(0.1, None, 10)
        with pytest.raises(ValueError, match="boundaries should be 1 less than the length"):
            dt.train.piecewise_constant(1, [1, 2], [0.1, 0.2])
        with pytest.raises(ValueError, match="Values must have elements all with the same dtype"):
            dt.train.piecewise_constant(1, [1], [0.1, 2])


def test_an_optimizer_takes_a_decayed_learning_rate_tensor():
    # each step uses the rate of the step count it started at; minimize counts after the update
    run = Local()
    w0, g = np.array([1.0, -1.0], np.float32), np.array([0.5, 0.25], np.float32)
    with run.graph.as_default():
        step = dt.train.get_or_create_global_step()
        w = dt.Variable(w0)
        lr = dt.train.exponential_decay(0.1, step, 1, 0.5, staircase=True)
        train = dt.train.GradientDescentOptimizer(lr).minimize(dt.reduce_sum(w * g),
                                                               global_step=step)
        run(dt.global_variables_initializer())
    want = w0.copy()
    for s in range(4):
        run(train)
        want = want - np.float32(0.1 * 0.5 ** s) * g
        np.testing.assert_allclose(run(w), want, rtol=1e-6)
    assert run(step) == 4


# -- under the strategies and the Saver -----------------------------------------------------------
def data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [2.0], [-1.0]], np.float32) + 0.5).astype(np.float32)


def make_opt():
    return dt.train.RMSPropOptimizer(0.01, momentum=0.5, centered=True)


async def rmsprop_one_replica(x, y, batch):
    g = dt.Graph()
    with g.as_default():
        w = dt.Variable(np.full((3, 1), 0.1, np.float32), name="w")
        xp, yp = dt.placeholder(dt.float32, [None, 3]), dt.placeholder(dt.float32, [None, 1])
        loss = dt.reduce_sum(dt.square(dt.matmul(xp, w) - yp)) / float(batch)
        train = make_opt().minimize(loss)
        init = dt.global_variables_initializer()
    server = dt.Server.create_local_server()
    try:
        async with dt.Session(server.target, graph=g) as sess:
            await sess.run(init)
            for i in range(0, len(x), batch):
                await sess.run(train, {xp: x[i:i + batch], yp: y[i:i + batch]})
            return await sess.run(w)
    finally:
        server.stop()


async def test_rmsprop_under_mirrored_strategy_equals_one_replica_and_saves_once(two_cpus,
                                                                                tmp_path):
    from distrib.distribute.functions.local_target import default_target
    from distrib.train.checkpoints import file_format
    x, y = data()
    strategy = dt.distribute.MirroredStrategy()
    with strategy.scope():
        w = dt.Variable(np.full((3, 1), 0.1, np.float32), name="w")
        opt = make_opt()

    def step(inputs):
        xb, yb = inputs
        with dt.GradientTape() as tape:
            loss = dt.nn.compute_average_loss(
                dt.reduce_sum(dt.square(dt.matmul(xb, w) - yb), axis=1), global_batch_size=8)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    @dt.function
    def train(inputs):
        return strategy.run(step, args=(inputs,))

    @dt.function
    def copies():
        return list(strategy.experimental_local_results(w))

    async with asyncio.timeout(BOUND_S):
        ds = dt.data.Dataset.from_tensor_slices((x, y)).batch(8)
        for inputs in strategy.experimental_distribute_dataset(ds):
            await train(inputs)
        got = await copies()
        np.testing.assert_array_equal(got[0], got[1])
        want = await rmsprop_one_replica(x, y, batch=8)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
        saver = dt.train.Saver()
        assert set(saver.var_list) == {"w", "w/RMSProp", "w/RMSProp_1", "w/RMSProp_2"}
        async with dt.Session(default_target()) as sess:
            path = await saver.save(sess, str(tmp_path / "rms"))
            assert set(file_format.list_checkpoint_tensors(path)) == set(saver.var_list)


async def test_rmsprop_slots_round_trip_through_the_saver(tmp_path):
    """Saved after two steps and restored into a fresh graph, two more steps give
    what four uninterrupted steps give: the slots were saved and restored."""
    x, y = data(16, seed=2)

    def build():
        g = dt.Graph()
        with g.as_default():
            w = dt.Variable(np.full((3, 1), 0.1, np.float32), name="w")
            loss = dt.reduce_sum(dt.square(dt.matmul(x, w) - y))
            train = make_opt().minimize(loss)
            return g, w, train, dt.global_variables_initializer(), dt.train.Saver()

    server = dt.Server.create_local_server()
    try:
        async with asyncio.timeout(BOUND_S):
            g, w, train, init, saver = build()
            async with dt.Session(server.target, graph=g) as sess:
                await sess.run(init)
                for _ in range(2):
                    await sess.run(train)
                path = await saver.save(sess, str(tmp_path / "ckpt"))
                for _ in range(2):
                    await sess.run(train)
                straight = await sess.run(w)
            g2, w2, train2, _, saver2 = build()
            async with dt.Session(server.target, graph=g2) as sess:
                await saver2.restore(sess, path)
                for _ in range(2):
                    await sess.run(train2)
                np.testing.assert_array_equal(await sess.run(w2), straight)
    finally:
        server.stop()


# -- Keras RMSprop ---------------------------------------------------------------------------------
def keras_rmsprop_reference(var, g, mg, rms, mom, lr, rho, momentum, epsilon, centered):
    """Keras' optimizer_v2 rmsprop_test._rmsprop_update_numpy: epsilon outside the
    square root without momentum, inside it (TF1's kernel) with momentum."""
    rms_t = rms * rho + (1 - rho) * g * g
    if centered:
        mg_t = mg * rho + (1 - rho) * g
        denom_t = rms_t - mg_t * mg_t
    else:
        mg_t, denom_t = mg, rms_t
    if momentum > 0.0:
        mom_t = momentum * mom + lr * g / np.sqrt(denom_t + epsilon)
        return var - mom_t, mg_t, rms_t, mom_t
    return var - lr * g / (np.sqrt(denom_t) + epsilon), mg_t, rms_t, mom


@pytest.mark.parametrize("momentum,centered", [(0.0, False), (0.0, True), (0.9, False),
                                               (0.9, True)])
def test_keras_rmsprop_follows_keras_rule(momentum, centered):
    run = Local()
    var0 = np.array([1.0, 2.0], np.float64)
    grads = [np.array([0.1, -0.2]), np.array([0.01, 0.2]), np.array([-0.3, 0.05])]
    with run.graph.as_default():
        w = dt.Variable(var0)
        gp = dt.placeholder(dt.float64, [2])
        opt = keras.optimizers.RMSprop(learning_rate=0.01, momentum=momentum, epsilon=1e-3,
                                       centered=centered)
        train = opt.apply_gradients([(gp, w)])
        run(dt.global_variables_initializer())
    state = [var0, np.zeros(2), np.zeros(2), np.zeros(2)]   # Keras: rms starts at zero
    for g in grads:
        run(train, {gp: g})
        state = list(keras_rmsprop_reference(state[0], g, *state[1:], 0.01, 0.9, momentum, 1e-3,
                                             centered))
        np.testing.assert_allclose(run(w), state[0], rtol=1e-12, atol=1e-12)
    assert run(opt.iterations) == 3
    assert opt.get_config() == {"name": "RMSprop", "learning_rate": 0.01, "rho": 0.9,
                                "momentum": momentum, "epsilon": 1e-3, "centered": centered}
    with pytest.raises(ValueError, match=r"`momentum` must be between \[0, 1\]"):
        keras.optimizers.RMSprop(momentum=1.5)


async def test_compile_takes_every_optimizer_name_and_rmsprop_trains():
    x, y = data(64, seed=3)
    for name in ("sgd", "adam", "adagrad", "rmsprop", "RMSprop", "Adam"):
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
        model.compile(optimizer=name, loss="mse")
        assert type(model.optimizer).__name__.lower() == name.lower()
    model = keras.Sequential([keras.layers.Dense(
        1, input_shape=(3,), kernel_initializer=keras.initializers.RandomNormal(seed=1))])
    model.compile(loss="mse")                       # Keras' default: 'rmsprop'
    assert isinstance(model.optimizer, keras.optimizers.RMSprop)
    assert model.optimizer.learning_rate == 0.001 and model.optimizer.epsilon == 1e-7
    async with asyncio.timeout(BOUND_S):
        history = await model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    bad = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    with pytest.raises(ValueError, match=r"nadam.*'adagrad', 'adam', 'rmsprop', 'sgd'"):
        bad.compile(optimizer="nadam", loss="mse")   # at compile, naming the known ones


async def fit_linear(strategy, make_optimizer, x, y) -> tuple[list, list]:
    import contextlib
    dt.reset_default_graph()
    dt.set_random_seed(11)
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=make_optimizer(), loss="mse")
    history = await model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return await model.get_weights(), history.history["loss"]


@pytest.mark.parametrize("make_optimizer", [
    lambda: "rmsprop", lambda: keras.optimizers.RMSprop(0.01, momentum=0.9, centered=True)],
    ids=["keras-ops", "tf1-kernel"])
async def test_keras_rmsprop_under_mirrored_strategy_reaches_the_weights_of_no_strategy(
        two_cpus, make_optimizer):
    x, y = data(64, seed=5)
    async with asyncio.timeout(BOUND_S):
        want, want_losses = await fit_linear(None, make_optimizer, x, y)
        got, losses = await fit_linear(dt.distribute.MirroredStrategy(), make_optimizer, x, y)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
