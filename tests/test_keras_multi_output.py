"""Several outputs in ``compile``/``fit``/``evaluate`` (Keras 2's loss and metric
containers): ``loss`` one, a list or a dict by output name (None: no loss),
``loss_weights``, ``metrics`` as a flat list (every output), a list of lists or a
dict, targets as a list or dict, and the logs' names and order
(``loss``, ``<output>_loss``, ``<output>_<metric>``).

References: tf_keras' own tests (``compile_utils_test.LossesContainerTest``'s
list / dict / partial dict / None cases, worked again here without sample
weights; ``training_test.test_metrics_names``'s names, verbatim) and numpy
(each output's loss and metric from the model's weights; one SGD step's update
from the weighted gradient written out by hand). MirroredStrategy (two logical
CPUs) gives the same numbers as no strategy."""
from __future__ import annotations

import asyncio
import contextlib
import re

import numpy as np
import pytest

import distrib as dt

keras = dt.keras
pytestmark = pytest.mark.usefixtures("fresh_keras")
BOUND_S = 120
RNG = np.random.default_rng(11)


def constant_heads():
    """Two outputs ``out1``, ``out2`` that are 1 everywhere (tf_keras' y_p = ones)."""
    x = keras.Input(shape=(2,))
    outs = [keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="ones",
                               name=name)(x) for name in ("out1", "out2")]
    return keras.Model(x, outs)


X10 = np.zeros((10, 2), np.float32)
Y_ONES, Y_ZEROS = np.ones((10, 1), np.float32), np.zeros((10, 1), np.float32)


@pytest.mark.parametrize("loss,weights,y,want", [
    # tf_keras test_loss_list / test_loss_dict (no sample weights: mae over all 10 rows)
    (["mse", "mae"], [1, 0.5], [Y_ONES, Y_ZEROS],
     {"loss": 0.5, "out1_loss": 0.0, "out2_loss": 1.0}),
    ({"out1": "mse", "out2": "mae"}, {"out1": 1, "out2": 0.5}, {"out1": Y_ONES, "out2": Y_ZEROS},
     {"loss": 0.5, "out1_loss": 0.0, "out2_loss": 1.0}),
    # test_loss_partial_dict_with_output_names / test_loss_dict_with_nones
    ({"out2": "mae"}, {"out2": 1.0}, [Y_ONES, Y_ZEROS], {"loss": 1.0, "out2_loss": 1.0}),
    ({"out1": None, "out2": "mae"}, None, {"out1": Y_ONES, "out2": Y_ZEROS},
     {"loss": 1.0, "out2_loss": 1.0}),
    # one loss for both outputs, weighted by one number each
    ("mae", [2.0, 3.0], [Y_ZEROS, Y_ZEROS], {"loss": 5.0, "out1_loss": 1.0, "out2_loss": 1.0}),
])
async def test_losses_as_list_dict_partial_and_none_match_tf_keras(loss, weights, y, want) -> None:
    model = constant_heads()
    model.compile(optimizer="sgd", loss=loss, loss_weights=weights)
    assert model.metrics_names == list(want)
    async with asyncio.timeout(BOUND_S):
        got = await model.evaluate(X10, y, batch_size=4, verbose=0, return_dict=True)
        values = await model.evaluate(X10, y, batch_size=4, verbose=0)
    assert list(got) == list(want)
    np.testing.assert_allclose(list(got.values()), list(want.values()), atol=1e-6)
    np.testing.assert_allclose(values, list(want.values()), atol=1e-6)


async def test_a_missing_target_skips_that_outputs_loss() -> None:
    model = constant_heads()
    model.compile(optimizer="sgd", loss={"out1": "mse", "out2": "mae"},
                  loss_weights={"out1": 1, "out2": 0.5}, metrics={"out1": "mae"})
    async with asyncio.timeout(BOUND_S):
        got = await model.evaluate(X10, {"out2": Y_ZEROS}, verbose=0, return_dict=True)
    assert got == pytest.approx({"loss": 0.5, "out1_loss": 0.0, "out2_loss": 1.0,
                                 "out1_mae": 0.0})


async def test_metrics_names_as_tf_keras_training_test() -> None:
    # tf_keras training_test.TestTrainingWithMetrics.test_metrics_names, eager names
    a = keras.layers.Input(shape=(3,), name="input_a")
    b = keras.layers.Input(shape=(3,), name="input_b")
    dense = keras.layers.Dense(4, name="dense")
    c, d = dense(a), dense(b)
    e = keras.layers.Dropout(0.5, name="dropout")(c)
    model = keras.Model([a, b], [d, e])
    accuracy = keras.metrics.BinaryAccuracy()
    model.compile(keras.optimizers.RMSprop(learning_rate=0.001), loss="mae",
                  metrics=["mse", accuracy])
    reference = ["loss", "dense_loss", "dropout_loss", "dense_mse", "dense_binary_accuracy",
                 "dropout_mse", "dropout_binary_accuracy"]
    xa, xb = RNG.random((10, 3)), RNG.random((10, 3))
    ya, yb = RNG.random((10, 4)), RNG.random((10, 4))
    async with asyncio.timeout(BOUND_S):
        history = await model.fit([xa, xb], [ya, yb], epochs=1, batch_size=5, verbose=0)
    assert model.metrics_names == reference
    assert list(history.history) == reference
    assert accuracy.name == "binary_accuracy"   # the user's object is copied per output


def regression_and_classes(strategy=None):
    def make():
        x = keras.Input(shape=(4,), name="x")
        h = keras.layers.Dense(5, activation="relu", name="hidden")(x)
        reg = keras.layers.Dense(1, name="reg")(h)
        cls = keras.layers.Dense(3, activation="softmax", name="cls")(h)
        return keras.Model(x, [reg, cls])
    if strategy is None:
        return make()
    with strategy.scope():
        return make()


def numpy_logs(w: dict[str, np.ndarray], x, y_reg, y_cls, weights) -> dict[str, float]:
    h = np.maximum(x @ w["hidden/kernel"] + w["hidden/bias"], 0.0)
    reg = h @ w["reg/kernel"] + w["reg/bias"]
    z = h @ w["cls/kernel"] + w["cls/bias"]
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    reg_loss = float(np.mean((reg[:, 0] - y_reg) ** 2))
    cls_loss = float(np.mean(-np.log(p[np.arange(len(y_cls)), y_cls])))
    return {"loss": weights[0] * reg_loss + weights[1] * cls_loss, "reg_loss": reg_loss,
            "cls_loss": cls_loss, "reg_mae": float(np.mean(np.abs(reg[:, 0] - y_reg))),
            "cls_accuracy": float(np.mean(p.argmax(1) == y_cls))}


async def weights_by_name(model) -> dict[str, np.ndarray]:
    """``{"<layer>/<weight>": value}`` (a second model's ``hidden_1/kernel_1``: ``hidden/kernel``)."""
    return {re.sub(r"_\d+(?=/|$)", "", v.op.name): w
            for v, w in zip(model.weights, await model.get_weights())}


@pytest.mark.parametrize("metrics", [
    {"reg": "mae", "cls": ["accuracy"]},
    [["mae"], ["accuracy"]],
])
async def test_evaluate_matches_numpy_with_per_output_metrics(metrics) -> None:
    x = RNG.random((12, 4)).astype(np.float32)
    y_reg = RNG.random(12).astype(np.float32)
    y_cls = RNG.integers(0, 3, 12)
    model = regression_and_classes()
    model.compile(optimizer="sgd", loss={"reg": "mse", "cls": "sparse_categorical_crossentropy"},
                  loss_weights={"reg": 0.3, "cls": 1.0}, metrics=metrics)
    async with asyncio.timeout(BOUND_S):
        got = await model.evaluate(x, {"reg": y_reg, "cls": y_cls}, batch_size=5, verbose=0,
                                   return_dict=True)
        want = numpy_logs(await weights_by_name(model), x, y_reg, y_cls, (0.3, 1.0))
    assert list(got) == ["loss", "reg_loss", "cls_loss", "reg_mae", "cls_accuracy"]
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


async def one_step(strategy) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    x = np.random.default_rng(3).random((8, 4)).astype(np.float32)
    y_reg = np.random.default_rng(4).random((8, 1)).astype(np.float32)
    y_cls = np.random.default_rng(5).integers(0, 3, 8)
    dt.set_random_seed(1)
    model = regression_and_classes(strategy)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=["mse",
                      "sparse_categorical_crossentropy"], loss_weights=[0.3, 1.0],
                      metrics=[["mae"], ["accuracy"]])
    before = await weights_by_name(model)
    history = await model.fit(x, [y_reg, y_cls], batch_size=8, epochs=1, shuffle=False,
                              verbose=0)
    return before, await weights_by_name(model), history.history


def numpy_step(w: dict[str, np.ndarray], lr: float = 0.5) -> dict[str, np.ndarray]:
    x = np.random.default_rng(3).random((8, 4)).astype(np.float64)
    y_reg = np.random.default_rng(4).random((8, 1))
    y_cls = np.random.default_rng(5).integers(0, 3, 8)
    n = len(x)
    pre = x @ w["hidden/kernel"] + w["hidden/bias"]
    h = np.maximum(pre, 0.0)
    reg = h @ w["reg/kernel"] + w["reg/bias"]
    z = h @ w["cls/kernel"] + w["cls/bias"]
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    d_reg = 0.3 * 2.0 * (reg - y_reg) / n            # d(0.3 * mean sq. error)/d reg
    d_z = 1.0 * (p - np.eye(3)[y_cls]) / n            # d(mean cross-entropy)/d logits
    d_h = (d_reg @ w["reg/kernel"].T + d_z @ w["cls/kernel"].T) * (pre > 0)
    grads = {"reg/kernel": h.T @ d_reg, "reg/bias": d_reg.sum(0),
             "cls/kernel": h.T @ d_z, "cls/bias": d_z.sum(0),
             "hidden/kernel": x.T @ d_h, "hidden/bias": d_h.sum(0)}
    return {k: w[k] - lr * grads[k] for k in grads}


@pytest.mark.parametrize("kind", ["none", "mirrored"])
async def test_one_fit_step_applies_the_weighted_gradient(two_cpus, kind) -> None:
    async with asyncio.timeout(BOUND_S):
        strategy = dt.distribute.MirroredStrategy() if kind == "mirrored" else None
        before, after, history = await one_step(strategy)
    want = numpy_step(before)
    for name, value in want.items():
        np.testing.assert_allclose(after[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    assert list(history) == ["loss", "reg_loss", "cls_loss", "reg_mae", "cls_accuracy"]
    # one step: the logged values are the step's (weights before the update)
    x = np.random.default_rng(3).random((8, 4)).astype(np.float32)
    logs = numpy_logs(before, x, np.random.default_rng(4).random(8),
                      np.random.default_rng(5).integers(0, 3, 8), (0.3, 1.0))
    for key, value in logs.items():
        assert history[key][0] == pytest.approx(value, rel=1e-4, abs=1e-5), key


async def test_mirrored_evaluate_returns_the_list_of_no_strategy(two_cpus) -> None:
    x = RNG.random((16, 4)).astype(np.float32)
    y = [RNG.random(16).astype(np.float32), RNG.integers(0, 3, 16)]
    results = []
    async with asyncio.timeout(BOUND_S):
        for strategy in (None, dt.distribute.MirroredStrategy()):
            dt.set_random_seed(2)
            model = regression_and_classes(strategy)
            with strategy.scope() if strategy is not None else contextlib.nullcontext():
                model.compile(optimizer="sgd", loss=["mse", "sparse_categorical_crossentropy"],
                              metrics=["mae"])
            weights = await weights_by_name(model)
            results.append((await model.evaluate(x, y, batch_size=8, verbose=0), weights))
    (got_none, w_none), (got_mirrored, w_mirrored) = results
    assert len(got_none) == len(got_mirrored) == 5   # loss, reg/cls_loss, reg/cls_mae
    for got, weights in ((got_none, w_none), (got_mirrored, w_mirrored)):
        want = numpy_logs(weights, x, y[0], y[1], (1.0, 1.0))
        np.testing.assert_allclose(got[:4], [want["loss"], want["reg_loss"], want["cls_loss"],
                                             want["reg_mae"]], rtol=1e-5)


async def test_a_subclassed_model_names_its_outputs_output_1_output_2() -> None:
    class Twice(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.one = keras.layers.Dense(1, kernel_initializer="zeros",
                                          bias_initializer="ones")

        def call(self, x):
            y = self.one(x)
            return [y, y * 2.0]

    model = Twice()
    model.compile(optimizer="sgd", loss="mae", metrics=["mse"])
    async with asyncio.timeout(BOUND_S):
        got = await model.evaluate(X10, [Y_ZEROS, Y_ZEROS], verbose=0, return_dict=True)
    assert got == pytest.approx({"loss": 3.0, "output_1_loss": 1.0, "output_2_loss": 2.0,
                                 "output_1_mse": 1.0, "output_2_mse": 4.0})


def test_bad_structures_fail_at_compile_naming_the_outputs() -> None:
    model = constant_heads()
    with pytest.raises(ValueError, match="Found unexpected losses or metrics that do not "
                       r"correspond to any Model output: \['nope'\]"):
        model.compile(optimizer="sgd", loss={"nope": "mse"})
    with pytest.raises(ValueError, match="3 losses for a model with 2 output"):
        model.compile(optimizer="sgd", loss=["mse", "mse", "mse"])
    with pytest.raises(ValueError, match="gives none of the outputs"):
        model.compile(optimizer="sgd", loss={"out1": None})


async def test_save_and_load_keep_per_output_losses_and_metrics(tmp_path) -> None:
    model = constant_heads()
    model.compile(optimizer="sgd", loss={"out1": "mse", "out2": "mae"},
                  loss_weights={"out1": 1, "out2": 0.5}, metrics={"out2": ["mse"]})
    async with asyncio.timeout(BOUND_S):
        await model.save(str(tmp_path / "two"))
        loaded = await keras.models.load_model(str(tmp_path / "two"))
        got = await loaded.evaluate(X10, [Y_ONES, Y_ZEROS], verbose=0, return_dict=True)
    assert got == pytest.approx({"loss": 0.5, "out1_loss": 0.0, "out2_loss": 1.0,
                                 "out2_mse": 1.0})


async def test_validation_split_cuts_every_target_and_logs_val_names() -> None:
    x = RNG.random((20, 4)).astype(np.float32)
    y = {"reg": RNG.random(20).astype(np.float32), "cls": RNG.integers(0, 3, 20)}
    model = regression_and_classes()
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss={"reg": "mse",
                  "cls": "sparse_categorical_crossentropy"}, metrics={"cls": "accuracy"})
    async with asyncio.timeout(BOUND_S):
        history = await model.fit(x, y, batch_size=4, epochs=1, validation_split=0.25,
                                  verbose=0)
        weights = await weights_by_name(model)
    names = ["loss", "reg_loss", "cls_loss", "cls_accuracy"]
    assert list(history.history) == names + ["val_" + n for n in names]
    # SGD(0): nothing moves, so each side's logs are numpy's on its rows
    train = numpy_logs(weights, x[:15], y["reg"][:15], y["cls"][:15], (1.0, 1.0))
    val = numpy_logs(weights, x[15:], y["reg"][15:], y["cls"][15:], (1.0, 1.0))
    for n in names:
        assert history.history[n][0] == pytest.approx(train[n], rel=1e-5), n
        assert history.history["val_" + n][0] == pytest.approx(val[n], rel=1e-5), n
