"""dt.keras: Sequential/Dense/Flatten/Dropout, compile with strings or objects,
fit/evaluate/predict on the digits data, the progress bar, layer names,
weight checkpoints and a fit resumed after a crash (BackupAndRestore), and
the same model trained by ``fit`` under MirroredStrategy and
CentralStorageStrategy (two logical CPUs) reaching the weights it reaches
without a strategy.

Steps run on this process's local server (real sockets, loopback); the crash
test runs its fit in a child process, stopped by its pid."""
from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.keras.progbar import Progbar
from examples.datasets import load_digits
from tests.helpers import ROOT, child_env, linear_data

keras = dt.keras
BOUND_S = 60


pytestmark = pytest.mark.usefixtures("fresh_keras")




def digits_model(optimizer: object = None) -> keras.Sequential:
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(64,)),
                              keras.layers.Dropout(0.1),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1, momentum=0.9),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def step_ops(function, *args) -> int:
    """How many ops one call of a traced ``dt.function`` runs: those its outputs
    and side effects need (the master's pruning), its placeholders included."""
    from distrib.client.fetches import FetchPlan
    from distrib.runtime.step.plan import prune
    trace = function.get_concrete_function(*args)
    graph = dt.get_default_graph()
    plan = FetchPlan([trace.structured_outputs, trace.side_effect_ops], graph)
    nodes = {n["name"]: n for n in graph.as_graph_def()["nodes"]}
    return len(prune(nodes, plan.tensors, plan.targets, []))


@pytest.mark.parametrize("metrics", [[], ["accuracy"], ["accuracy", "sparse_categorical_accuracy"]])
def test_the_train_step_has_the_ops_of_the_hand_written_step_plus_the_metrics(metrics) -> None:
    """Keras' train step against the same step written by hand (compile's
    match_dtype_and_rank, the loss object's mean, tape, the optimizer) that also
    sums each metric's values: the statistics fit reports cost no op of their own."""
    from distrib.keras.losses_utils import match_dtype_and_rank
    x = np.zeros((32, 20), np.float32)
    y = np.zeros(32, np.int64)

    def model_and_loss():
        model = keras.Sequential([keras.layers.Dense(16, activation="relu", input_shape=(20,)),
                                  keras.layers.Dense(4)])
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=metrics)
        return model, loss

    model, _ = model_and_loss()
    with model.function_scope():
        keras_ops = step_ops(model._steps.train_function(), (x, y))

    with dt.Graph().as_default():
        hand, loss_fn = model_and_loss()
        hand.build((None, 20))

        @dt.function
        def by_hand(data):
            bx, by = data
            with dt.GradientTape() as tape:
                logits = hand(bx, training=True)
                by, logits, _ = match_dtype_and_rank(by, logits)
                loss = loss_fn(by, logits)
            grads = tape.gradient(loss, hand.trainable_variables)
            hand.optimizer.apply_gradients(zip(grads, hand.trainable_variables))
            return [loss] + [dt.reduce_sum(m.values(by, logits)) for m in hand.compiled_metrics]
        with hand.function_scope():
            hand_ops = step_ops(by_hand, (x, y))
    assert keras_ops <= hand_ops, (keras_ops, hand_ops)


# -- training on real data ----------------------------------------------------------------
async def test_fit_on_digits_lowers_the_loss_and_reaches_ninety_percent() -> None:
    dt.set_random_seed(3)
    x, y = load_digits("train")
    xt, yt = load_digits("test")
    model = digits_model()
    async with asyncio.timeout(BOUND_S):
        history = await model.fit(x, y, epochs=4, batch_size=32, validation_data=(xt, yt),
                                  verbose=0)
        loss, accuracy = await model.evaluate(xt, yt, verbose=0)
        as_dict = await model.evaluate(xt, yt, verbose=0, return_dict=True)
        probabilities = await model.predict(xt, batch_size=100, verbose=0)
    losses = history.history["loss"]
    assert len(losses) == 4 and losses[-1] < losses[0] / 3
    assert history.history["accuracy"][-1] > history.history["accuracy"][0]
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert accuracy >= 0.9, accuracy
    assert as_dict == {"loss": loss, "accuracy": accuracy}
    assert history.history["val_loss"][-1] == pytest.approx(loss, rel=1e-6)
    assert probabilities.shape == (len(xt), 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert np.mean(probabilities.argmax(axis=1) == yt) == pytest.approx(accuracy)
    assert model.optimizer.iterations is not None


async def test_compile_strings_and_objects_train_alike() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 4)).astype(np.float32)
    y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    results = []
    for optimizer, loss, metric in (
            ("adam", "binary_crossentropy", "accuracy"),
            (keras.optimizers.Adam(), keras.losses.BinaryCrossentropy(),
             keras.metrics.BinaryAccuracy(name="accuracy"))):
        model = keras.Sequential([keras.layers.Dense(
            1, activation="sigmoid", input_shape=(4,),
            kernel_initializer=keras.initializers.RandomNormal(seed=5))])
        model.compile(optimizer=optimizer, loss=loss, metrics=[metric])
        async with asyncio.timeout(BOUND_S):
            history = await model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
            results.append((history.history, await model.get_weights()))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_array_equal(a, b)
    assert results[0][0]["loss"][-1] < results[0][0]["loss"][0]
    assert keras.optimizers.get("adam").epsilon == 1e-7
    assert keras.optimizers.get("sgd").learning_rate == 0.01
    with pytest.raises(ValueError, match="sgd"):   # rmsprop exists now (tests/test_tf1_staples.py)
        keras.optimizers.get("adadelta_of_doom")
    with pytest.raises(ValueError, match="loss"):
        keras.losses.get("hinge_of_doom")


async def test_losses_and_reductions_match_numpy() -> None:
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=6)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    one_hot = np.eye(4, dtype=np.float32)[labels]
    z = (rng.random((6, 1)) > 0.5).astype(np.float32)
    p1 = rng.random((6, 1)).astype(np.float32) * 0.9 + 0.05
    want_ce = -np.log(probs[np.arange(6), labels])
    want_bce = -(z * np.log(p1) + (1 - z) * np.log(1 - p1)).mean(axis=1)
    L = keras.losses

    @dt.function
    def compute():
        soft = keras.activations.softmax(dt.constant(logits))
        return {
            "scce_logits": L.SparseCategoricalCrossentropy(from_logits=True,
                                                           reduction="none")(labels, logits),
            "scce_probs": L.SparseCategoricalCrossentropy(reduction="none")(labels, probs),
            "scce_softmax": L.SparseCategoricalCrossentropy(reduction="none")(labels, soft),
            "cce": L.CategoricalCrossentropy(reduction="sum")(one_hot, probs),
            "bce": L.BinaryCrossentropy()(z, p1),
            "bce_logits": L.BinaryCrossentropy(from_logits=True)(
                z, np.log(p1 / (1 - p1)).astype(np.float32)),
            "mse": L.MeanSquaredError()(z[:, 0], p1),        # labels of lower rank
            "mae": L.get("mae")(z, p1),
        }

    async with asyncio.timeout(BOUND_S):
        got = await compute()
    np.testing.assert_allclose(got["scce_logits"], want_ce, rtol=1e-5)
    np.testing.assert_allclose(got["scce_probs"], want_ce, rtol=1e-5)
    np.testing.assert_allclose(got["scce_softmax"], want_ce, rtol=1e-5)
    np.testing.assert_allclose(got["cce"], want_ce.sum(), rtol=1e-5)
    np.testing.assert_allclose(got["bce"], want_bce.mean(), rtol=1e-5)
    np.testing.assert_allclose(got["bce_logits"], want_bce.mean(), rtol=1e-4)
    np.testing.assert_allclose(got["mse"], np.mean((z - p1) ** 2), rtol=1e-5)
    np.testing.assert_allclose(got["mae"], np.mean(np.abs(z - p1)), rtol=1e-5)
    with pytest.raises(ValueError, match="Reduction"):
        L.MeanSquaredError(reduction="mean")


def _keras2_per_example(name: str, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """A per-example loss or metric by tf_keras' rules, in numpy, once labels and
    predictions have their matched shapes (broadcast as numpy does, mean over the
    last axis)."""
    if name in ("mse", "mean_squared_error"):
        return ((p - y) ** 2).mean(axis=-1)
    if name in ("mae", "mean_absolute_error"):
        return np.abs(p - y).mean(axis=-1)
    if name == "binary_accuracy":
        return ((p > 0.5).astype(np.float32) == y).mean(axis=-1)
    raise KeyError(name)


def _keras2_compile_match(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """compile_utils.match_dtype_and_rank, then LossFunctionWrapper's
    squeeze_or_expand_dimensions: [N] labels against [N, k] outputs become [N, 1]."""
    if y.ndim == 1 and p.ndim == 2:
        y = y[:, None]
    return y.astype(p.dtype)


@pytest.mark.parametrize("n, units", [(10, 10), (8, 10), (6, 1)])
async def test_compiled_losses_and_metrics_match_rank1_labels_as_keras2(n, units) -> None:
    # issue 36: compile(loss="mse") with [N] labels against [N, k] outputs: Keras 2
    # makes the labels [N, 1] (one per row, broadcast over the row's k outputs);
    # a plain broadcast lays the N labels along the k axis: an error for N != k,
    # and silently another loss for N == k
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.normal(size=n).astype(np.float32)
    w = rng.normal(size=(3, units)).astype(np.float32)
    b = rng.normal(size=units).astype(np.float32)
    model = keras.Sequential([keras.layers.Dense(units, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae", keras.metrics.MeanSquaredError()])
    async with asyncio.timeout(BOUND_S):
        await model.set_weights([w, b])
        got = await model.evaluate(x, y, batch_size=n, verbose=0, return_dict=True)
    p = x @ w + b
    yy = _keras2_compile_match(y, p)
    want = _keras2_per_example("mse", yy, p).mean()
    if n == units:   # the wrong way, told apart: labels along the k axis
        assert abs(((p - y[None, :]) ** 2).mean() - want) > 1e-3
    np.testing.assert_allclose(got["loss"], want, rtol=1e-5)
    np.testing.assert_allclose(got["mae"], _keras2_per_example("mae", yy, p).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["mean_squared_error"], want, rtol=1e-5)


async def test_loss_and_metric_objects_squeeze_or_expand_as_keras2() -> None:
    """Called directly (a custom loop), a loss or metric object applies tf_keras'
    squeeze_or_expand_dimensions: a trailing 1 dropped from the side with one more
    axis (predictions [N, 1] against labels [N] are squeezed, labels [N, 1] against
    predictions [N] too); class ids [N] against [N, k] scores stay as they are;
    sample weights gain or lose a trailing axis to meet the per-example losses."""
    rng = np.random.default_rng(3)
    y = rng.normal(size=6).astype(np.float32)
    p = rng.normal(size=(6, 1)).astype(np.float32)
    p3 = rng.normal(size=(6, 3)).astype(np.float32)
    y3 = rng.normal(size=(6, 3)).astype(np.float32)
    sw = rng.random(6).astype(np.float32)
    z = (rng.random(6) > 0.5).astype(np.float32)
    L, M = keras.losses, keras.metrics

    @dt.function
    def compute():
        return {
            "pred_squeezed": L.MeanSquaredError(reduction="sum")(y, p),
            "labels_squeezed": L.MeanAbsoluteError(reduction="sum")(y[:, None], p[:, 0]),
            "weights_squeezed": L.MeanSquaredError(reduction="none")(y3, p3, sw[:, None]),
            "weights_expanded": L.MeanSquaredError(reduction="none")(
                y3[:, :, None], p3[:, :, None], sw),
            "metric_values": M.BinaryAccuracy().values(z, p),
            "metric_labels_squeezed": M.MeanSquaredError().values(y[:, None], p[:, 0]),
        }

    async with asyncio.timeout(BOUND_S):
        got = await compute()
    flat = p[:, 0]
    np.testing.assert_allclose(got["pred_squeezed"], ((flat - y) ** 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(got["labels_squeezed"], np.abs(flat - y).mean(), rtol=1e-5)
    per = ((p3 - y3) ** 2).mean(axis=-1)
    np.testing.assert_allclose(got["weights_squeezed"], per * sw, rtol=1e-5)
    np.testing.assert_allclose(got["weights_expanded"], ((p3 - y3) ** 2) * sw[:, None],
                               rtol=1e-5)
    # a metric's values are per example here (their mean is the metric: Keras'
    # result), on the squeezed predictions
    np.testing.assert_allclose(got["metric_values"],
                               ((flat > 0.5).astype(np.float32) == z), rtol=1e-6)
    # (mean_squared_error's mean over the last axis of rank-1 values is their mean, Keras')
    np.testing.assert_allclose(got["metric_labels_squeezed"], ((flat - y) ** 2).mean(),
                               rtol=1e-5)


async def test_initializers_activations_flatten_and_dropout() -> None:
    x = np.arange(12, dtype=np.float64).reshape(2, 2, 3) - 2.0   # float64: cast to float32
    model = keras.Sequential([
        keras.layers.Flatten(input_shape=(2, 3)),
        keras.layers.Dense(2, activation="relu", kernel_initializer="ones",
                           bias_initializer=keras.initializers.Constant(0.5)),
        keras.layers.Dropout(0.5, seed=1)])
    flat = x.reshape(2, 6).astype(np.float32)
    want = np.maximum(flat @ np.ones((6, 2), np.float32) + 0.5, 0.0)

    @dt.function
    def train_mode(inputs):
        return model(inputs, training=True)

    seeded = [keras.initializers.GlorotUniform(seed=4), keras.initializers.RandomNormal(seed=4)]

    @dt.function
    def draws():
        return [init((30, 20)) for init in seeded] + [seeded[0]((30, 20))]

    async with asyncio.timeout(BOUND_S):
        predicted = await model.predict(x, verbose=0)      # Dropout is off outside training
        trained = await train_mode(np.repeat(x, 50, axis=0))
        glorot, normal, glorot_again = await draws()
    np.testing.assert_allclose(predicted, want)
    kept = trained != 0
    assert 0.3 < kept.mean() < 0.7                          # about half dropped
    np.testing.assert_allclose(trained[kept], (np.repeat(want, 50, axis=0) * 2.0)[kept])
    limit = np.sqrt(6.0 / 50)
    assert np.abs(glorot).max() <= limit and glorot.std() > limit / 3
    np.testing.assert_array_equal(glorot, glorot_again)   # a seed gives the same values
    assert abs(normal.std() - 0.05) < 0.01
    assert keras.activations.get(None)(3.0) == 3.0
    with pytest.raises(ValueError, match="activation"):
        keras.layers.Dense(2, activation="swishy")
    with pytest.raises(ValueError, match="initializer"):
        keras.initializers.get("nonsense")


async def test_layers_are_named_per_process_and_never_share_variables() -> None:
    a = keras.Sequential([keras.layers.Dense(2, input_shape=(3,)), keras.layers.Dense(1)])
    b = keras.Sequential([keras.layers.Dense(2, input_shape=(3,)), keras.layers.Flatten()])
    assert [layer.name for layer in a.layers] == ["dense", "dense_1"]
    assert [layer.name for layer in b.layers] == ["dense_2", "flatten"]
    assert (a.name, b.name) == ("sequential", "sequential_1")
    assert [v.name for v in a.weights] == ["dense/kernel:0", "dense/bias:0",
                                           "dense_1/kernel:0", "dense_1/bias:0"]
    names = [v.op.name for v in a.weights + b.weights]
    assert len(set(names)) == len(names)
    assert a.count_params() == 3 * 2 + 2 + 2 + 1
    with pytest.raises(ValueError, match="unique names"):
        keras.Sequential([keras.layers.Dense(1, name="same"), keras.layers.Dense(1, name="same")])
    with pytest.raises(RuntimeError, match="compile"):
        await a.fit(np.zeros((4, 3)), np.zeros((4, 1)), verbose=0)


async def test_a_dt_function_step_calls_the_model_with_training() -> None:
    x, y = linear_data()
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.MeanSquaredError()

    @dt.function
    def step(xb, yb):
        with dt.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    async with asyncio.timeout(BOUND_S):
        losses = [float(await step(x, y)) for _ in range(30)]
    assert losses[-1] < losses[0] / 10
    assert step.experimental_get_tracing_count() == 1


# -- the progress bar ----------------------------------------------------------------------
async def test_progress_bar_in_keras_format(capsys) -> None:
    x, y = linear_data(40)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    async with asyncio.timeout(BOUND_S):
        await model.fit(x, y, batch_size=8, epochs=2, verbose=1)
        bar = capsys.readouterr().out
        await model.fit(x, y, batch_size=8, epochs=2, verbose=2)
        per_epoch = capsys.readouterr().out
        await model.fit(x, y, batch_size=8, epochs=2, verbose=0)
        silent = capsys.readouterr().out
    lines = bar.splitlines()
    assert lines[0] == "Epoch 1/2" and lines[2] == "Epoch 2/2" and len(lines) == 4
    pattern = r"5/5 ━{20} \d+s \d+(ms|us)/step - loss: \d+\.\d{4} - mae: \d+\.\d{4} - " \
              r"\d+ examples/s"
    assert re.fullmatch(pattern, lines[1]), lines[1]
    assert re.fullmatch(r"5/5 - \d+s - \d+(ms|us)/step - loss: \S+ - mae: \S+ - \d+ examples/s",
                        per_epoch.splitlines()[1]), per_epoch
    assert silent == ""
    tty = io.StringIO()
    tty.isatty = lambda: True
    bar_ = Progbar(4, stream=tty, interval=0.0)
    bar_.update(1, {"loss": 0.5})
    bar_.update(4, {"loss": 0.25})
    assert tty.getvalue().startswith("\r1/4 ━━━━━")   # redrawn in place on a terminal
    assert tty.getvalue().endswith("loss: 0.2500\n")


# -- checkpoints ---------------------------------------------------------------------------
async def test_save_and_load_weights_round_trip_with_the_optimizer_state(tmp_path) -> None:
    x, y = linear_data()

    def make() -> keras.Sequential:
        m = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)),
                              keras.layers.Dense(1)])
        m.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse")
        return m

    a, b = make(), make()
    path = str(tmp_path / "ckpt" / "weights")
    async with asyncio.timeout(BOUND_S):
        await a.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        assert await a.save_weights(path) == path
        await b.fit(x[:16], y[:16], batch_size=16, epochs=1, verbose=0)   # builds its slots
        await b.load_weights(str(tmp_path / "ckpt"))                    # the folder: newest
        for wa, wb in zip(await a.get_weights(), await b.get_weights()):
            np.testing.assert_array_equal(wa, wb)
        # momentum slots and iterations came along: both continue alike
        await a.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        await b.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        for wa, wb in zip(await a.get_weights(), await b.get_weights()):
            np.testing.assert_allclose(wa, wb, rtol=1e-6)
        other = keras.Sequential([keras.layers.Dense(5, input_shape=(3,)),
                                  keras.layers.Dense(1)])
        with pytest.raises(dt.errors.InvalidArgumentError, match="shape"):
            await other.load_weights(path)
        with pytest.raises(dt.errors.NotFoundError):
            await b.load_weights(str(tmp_path / "missing"))
        # ModelCheckpoint: a file per epoch, named from the epoch and the logs
        ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "mc" / "w.{epoch:02d}"),
                                               monitor="loss", save_best_only=True,
                                               save_weights_only=True)
        history = await a.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[ckpt])
    # save_best_only: epoch 1 always, epoch 2 when its loss improved (shuffled batches
    # need not improve it)
    losses = history.history["loss"]
    best = ["w.01", "w.02"] if losses[1] < losses[0] else ["w.01"]
    assert sorted(os.listdir(tmp_path / "mc")) == ["checkpoint", *best]
    assert dt.train.latest_checkpoint(str(tmp_path / "mc")).endswith(best[-1])


RESUME_JOB = r"""
import asyncio, os, sys
import numpy as np
import distrib as dt
from tests.test_keras import resumable_fit

crash_after = int(sys.argv[2])

class Crash(dt.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == crash_after:
            print("crashing after epoch", epoch + 1, flush=True)
            os._exit(3)          # as a kill: nothing is cleaned up

async def main():
    history, weights = await resumable_fit(sys.argv[1], [Crash()])
    print("epochs", history.epoch, flush=True)
    np.save(sys.argv[3], np.concatenate([w.ravel() for w in weights]))

asyncio.run(main())
"""


async def resumable_fit(backup_dir: str, extra: list) -> tuple:
    dt.set_random_seed(7)
    x, y = linear_data(48, seed=3)
    model = keras.Sequential([keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.02, momentum=0.9), loss="mse")
    backup = keras.callbacks.BackupAndRestore(backup_dir)
    history = await model.fit(x, y, batch_size=8, epochs=4, shuffle=False, verbose=0,
                              callbacks=[backup, *extra])
    return history, await model.get_weights()


def run_job(backup_dir: str, crash_after: int, out: str) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-c", RESUME_JOB, backup_dir, str(crash_after),
                             out], cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        stdout, _ = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout)


async def test_backup_and_restore_resumes_a_crashed_fit_at_the_next_epoch(tmp_path) -> None:
    backup, out = str(tmp_path / "backup"), str(tmp_path / "weights.npy")
    crashed = await asyncio.to_thread(run_job, backup, 1, out)
    assert crashed.returncode == 3 and "crashing after epoch 2" in crashed.stdout, \
        crashed.stdout[-3000:]
    assert os.path.exists(os.path.join(backup, "ckpt"))
    resumed = await asyncio.to_thread(run_job, backup, 99, out)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "epochs [2, 3]" in resumed.stdout             # epochs 3 and 4 only
    assert not os.path.exists(backup)                     # a finished fit deletes it
    async with asyncio.timeout(BOUND_S):
        history, weights = await resumable_fit(str(tmp_path / "fresh"), [])
    assert history.epoch == [0, 1, 2, 3]
    np.testing.assert_allclose(np.load(out), np.concatenate([w.ravel() for w in weights]),
                               rtol=1e-5, atol=1e-6)


# -- strategies ----------------------------------------------------------------------------
async def fit_linear(strategy, x, y, epochs: int = 3) -> tuple[list, list]:
    dt.reset_default_graph()
    dt.set_random_seed(11)
    scope = strategy.scope() if strategy is not None else contextlib.nullcontext()
    with scope:
        model = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss="mse",
                      metrics=["mae"])
    history = await model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0)
    return await model.get_weights(), history.history["loss"]


@pytest.mark.parametrize("kind", ["mirrored", "central"])
async def test_fit_under_a_strategy_reaches_the_weights_of_no_strategy(two_cpus, kind) -> None:
    x, y = linear_data(64, seed=5)
    async with asyncio.timeout(BOUND_S):
        want, want_losses = await fit_linear(None, x, y)
        strategy = dt.distribute.MirroredStrategy() if kind == "mirrored" else \
            dt.distribute.experimental.CentralStorageStrategy()
        got, losses = await fit_linear(strategy, x, y)
    assert strategy.num_replicas_in_sync == 2
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert losses[-1] < losses[0]


async def test_fit_refuses_a_strategy_it_cannot_drive() -> None:
    class Elsewhere(dt.distribute.Strategy):   # e.g. one that schedules steps remotely
        def create_variable(self, *args, **kwargs):
            raise AssertionError("no variable is made before fit refuses")

    strategy = Elsewhere(["/device:CPU:0"])
    model = keras.Sequential([keras.layers.Dense(1)])
    with strategy.scope():
        model.compile(optimizer="sgd", loss="mse")
    assert model.distribute_strategy is strategy
    with pytest.raises(dt.errors.UnimplementedError, match="Elsewhere"):
        await model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0)


async def test_compiling_in_another_strategys_scope_is_refused(two_cpus) -> None:
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    with pytest.raises(ValueError, match="scope"):
        with dt.distribute.MirroredStrategy().scope():
            model.compile(optimizer="sgd", loss="mse")


@pytest.mark.slow
def test_two_mwms_workers_fit_as_mirrored_does_on_two_replicas() -> None:
    import json

    from distrib.launch.tasks import free_ports
    args = ["examples/keras_fit.py", "--epochs", "2", "--verbose", "0"]
    ports = free_ports(2)
    procs = [subprocess.Popen(
        [sys.executable, *args, "--strategy", "mwms"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env=child_env(TF_CONFIG=json.dumps({
            "cluster": {"worker": [f"localhost:{p}" for p in ports]},
            "task": {"type": "worker", "index": i}}))) for i in range(2)]
    try:
        outs = [p.communicate(timeout=90)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    local = subprocess.run([sys.executable, *args, "--strategy", "mirrored"], cwd=ROOT,
                           capture_output=True, text=True, timeout=90, env=child_env())
    assert local.returncode == 0, local.stdout[-2000:] + local.stderr[-2000:]

    def summary(out: str) -> list[str]:
        return re.findall(r"(?:seed example: .*|epoch \d+: loss \S+|accuracy=\S+)", out)

    want = summary(local.stdout)
    assert len(want) == 4, local.stdout
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
        assert summary(out) == want
        assert "replicas=2" in out
