"""Keras 2's stateful metrics (``update_state``/``result``/``reset_state`` in
``dt.function``\\ s), the compiled step's metrics agreeing with the metric
objects, the learning-rate schedules, ``optimizers.legacy`` and
``dt.nn.scale_regularization_loss``, against tf_keras' own tests' expected
values (``metrics_confusion_matrix_test``, ``metrics_test``,
``learning_rate_schedule_test``) and numpy."""
from __future__ import annotations

import math

import numpy as np
import pytest

import distrib as dt

keras = dt.keras
pytestmark = pytest.mark.usefixtures("fresh_keras")


async def run_metric(metric, *batches) -> float:
    """``update_state`` for each batch in a dt.function, then ``result`` in another."""
    update = dt.function(lambda *args: metric.update_state(*args))
    result = dt.function(lambda: metric.result())
    for batch in batches:
        await update(*[np.asarray(b, np.float32) for b in batch])
    return np.asarray(await result())


# tf_keras metrics_confusion_matrix_test.AUCTest: 3 thresholds, these rows and weights
AUC_PRED = [0.0, 0.5, 0.3, 0.9]
AUC_TRUE = [0.0, 0.0, 1.0, 1.0]
AUC_WEIGHT = [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("kwargs,weighted,expected", [
    ({}, False, 0.75),
    ({}, True, (1 + 4 / 7) / 2),                                   # ROC, interpolation
    ({"summation_method": "minoring"}, True, 4 / 7),
    ({"summation_method": "majoring"}, True, 1.0),
    ({"curve": "PR", "summation_method": "minoring"}, True, 0.7 * 3 / 7),
    ({"curve": "PR", "summation_method": "majoring"}, True, 1.0),
    ({"curve": "PR"}, True, 2.416 / 7 + 4 / 7),                    # careful interpolation
])
async def test_auc_matches_tf_keras(kwargs, weighted, expected) -> None:
    metric = keras.metrics.AUC(num_thresholds=3, **kwargs)
    batch = (AUC_TRUE, AUC_PRED, AUC_WEIGHT) if weighted else (AUC_TRUE, AUC_PRED)
    assert float(await run_metric(metric, batch)) == pytest.approx(expected, abs=1e-3)
    assert metric.thresholds[1:-1] == [0.5]


async def test_precision_recall_and_reset_as_tf_keras() -> None:
    precision = keras.metrics.Precision()
    got = await run_metric(precision, ([[0, 1, 1, 0], [1, 0, 0, 1]],
                                       [[1, 0, 1, 0], [1, 0, 1, 0]],
                                       [[1, 2, 3, 4], [4, 3, 2, 1]]))
    assert float(got) == pytest.approx(0.7)
    recall = keras.metrics.Recall()
    got = await run_metric(recall, ([[0, 1, 1, 0], [1, 0, 0, 1]],
                                    [[1, 0, 1, 0], [0, 1, 0, 1]],
                                    [[1, 2, 3, 4], [4, 3, 2, 1]]))
    assert float(got) == pytest.approx(0.4)
    reset = dt.function(lambda: recall.reset_state())
    await reset()
    assert float(await dt.function(lambda: recall.result())()) == 0.0
    many = keras.metrics.Precision(thresholds=[0.2, 0.8])
    got = await run_metric(many, ([1, 0, 1], [0.5, 0.9, 0.9]))
    np.testing.assert_allclose(got, [2 / 3, 1 / 2])


async def test_mean_sum_accuracy_and_crossentropy_as_tf_keras() -> None:
    mean = keras.metrics.Mean()
    assert float(await run_metric(mean, ([100.0],), ([1.0, 5.0],))) == pytest.approx(106 / 3)
    total = keras.metrics.Sum()
    assert float(await run_metric(total, ([1.0, 2.0], [1.0, 0.5]))) == pytest.approx(2.0)
    acc = keras.metrics.SparseCategoricalAccuracy()
    got = await run_metric(acc, ([[2], [1]], [[0.1, 0.6, 0.3], [0.05, 0.95, 0]],
                                 [[0.5], [0.2]]))
    assert float(got) == pytest.approx(0.2 / 0.7, rel=1e-5)
    xent = keras.metrics.SparseCategoricalCrossentropy(from_logits=True)
    got = await run_metric(xent, ([1, 2], [[1, 9, 0], [1, 8, 1]]))
    logits = np.array([[1, 9, 0], [1, 8, 1]], np.float64)
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    assert float(got) == pytest.approx(-np.mean(log_softmax[[0, 1], [1, 2]]), rel=1e-5)


async def test_the_compiled_metrics_agree_with_metric_objects() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x[:, :1] + 0.3 * rng.standard_normal((64, 1)) > 0).astype(np.float32)
    model = keras.Sequential([keras.layers.Dense(1, activation="sigmoid", input_shape=(4,))])
    auc, precision = keras.metrics.AUC(), keras.metrics.Precision()
    model.compile(optimizer="sgd", loss="binary_crossentropy",
                  metrics=[auc, precision, keras.metrics.BinaryAccuracy()])
    logs = await model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    p = await model.predict(x, verbose=0)
    fresh_auc, fresh_precision = keras.metrics.AUC(), keras.metrics.Precision()
    assert logs["auc"] == pytest.approx(float(await run_metric(fresh_auc, (y, p))), abs=1e-6)
    assert logs["precision"] == pytest.approx(
        float(await run_metric(fresh_precision, (y, p))), abs=1e-6)
    assert logs["binary_accuracy"] == pytest.approx(float(np.mean((p > 0.5) == y)))
    # numpy's ROC AUC over the same 200 thresholds
    bounds = [-1e-7, *[(i + 1) / 199 for i in range(198)], 1 + 1e-7]
    tpr = [np.sum((p > t) & (y == 1)) / np.sum(y == 1) for t in bounds]
    fpr = [np.sum((p > t) & (y == 0)) / np.sum(y == 0) for t in bounds]
    ref = sum((fpr[i] - fpr[i + 1]) * (tpr[i] + tpr[i + 1]) / 2 for i in range(199))
    assert logs["auc"] == pytest.approx(ref, abs=1e-6)
    assert float(np.asarray(auc.result_value())) == pytest.approx(logs["auc"])


async def schedule_value(schedule, step: int) -> float:
    return float(await dt.function(lambda: schedule(step))())


@pytest.mark.parametrize("schedule,reference", [
    (lambda: keras.optimizers.schedules.ExponentialDecay(0.1, 3, 0.5),
     lambda s: 0.1 * 0.5 ** (s / 3)),
    (lambda: keras.optimizers.schedules.ExponentialDecay(0.1, 3, 0.5, staircase=True),
     lambda s: 0.1 * 0.5 ** (s // 3)),
    (lambda: keras.optimizers.schedules.PiecewiseConstantDecay([2, 5], [1.0, 0.5, 0.1]),
     lambda s: 1.0 if s <= 2 else (0.5 if s <= 5 else 0.1)),
    (lambda: keras.optimizers.schedules.PolynomialDecay(0.1, 4, 0.01, power=0.5),
     lambda s: (0.1 - 0.01) * (1 - min(s, 4) / 4) ** 0.5 + 0.01),
    (lambda: keras.optimizers.schedules.PolynomialDecay(0.1, 4, 0.01, cycle=True),
     lambda s: (0.1 - 0.01) * (1 - s / (4 * max(1, math.ceil(s / 4)))) + 0.01),
    (lambda: keras.optimizers.schedules.InverseTimeDecay(0.1, 2, 0.5),
     lambda s: 0.1 / (1 + 0.5 * s / 2)),
    (lambda: keras.optimizers.schedules.CosineDecay(0.1, 5, alpha=0.1),
     lambda s: 0.1 * (0.9 * 0.5 * (1 + math.cos(math.pi * min(s, 5) / 5)) + 0.1)),
])
async def test_schedules_match_their_formulas(schedule, reference) -> None:
    made = schedule()
    for step in (0, 1, 2, 3, 5, 9):
        assert await schedule_value(made, step) == pytest.approx(reference(step), rel=1e-5)
    again = type(made).from_config(made.get_config())
    assert await schedule_value(again, 3) == pytest.approx(reference(3), rel=1e-5)


async def test_an_optimizer_follows_its_schedule_step_by_step() -> None:
    # w' = w - lr(step) * dL/dw with L = w (gradient 1): w moves by each step's rate
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([0, 1], [0.5, 0.25, 0.125])
    opt = keras.optimizers.legacy.SGD(learning_rate=schedule)
    model = keras.Sequential([keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros",
                                                 input_shape=(1,))])
    model.compile(optimizer=opt, loss=keras.losses.MeanAbsoluteError())
    x, y = np.ones((1, 1), np.float32), -np.ones((1, 1), np.float32)   # y_pred > y: grad 1
    await model.fit(x, y, batch_size=1, epochs=3, verbose=0)
    (w,) = await model.get_weights()
    assert float(w[0, 0]) == pytest.approx(-(0.5 + 0.25 + 0.125))
    config = opt.get_config()
    assert config["learning_rate"]["class_name"] == "PiecewiseConstantDecay"
    assert isinstance(keras.optimizers.legacy.SGD.from_config(config).learning_rate,
                      keras.optimizers.schedules.PiecewiseConstantDecay)


async def test_scale_regularization_loss_divides_by_the_replicas(two_cpus) -> None:
    strategy = dt.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    @dt.function
    def step():
        return strategy.run(lambda: dt.nn.scale_regularization_loss([dt.constant(3.0),
                                                                     dt.constant(1.0)]))
    got = await step()
    assert [float(v) for v in got.values] == [2.0, 2.0]
    with strategy.scope(), pytest.raises(RuntimeError, match="cross replica"):
        dt.nn.scale_regularization_loss(dt.constant(1.0))
    alone = dt.function(lambda: dt.nn.scale_regularization_loss(dt.constant(4.0)))
    assert float(await alone()) == 4.0


class Crash(keras.callbacks.Callback):
    """Fails the fit after ``after`` train batches (a worker lost mid-epoch)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after, self.seen = after, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.after:
            raise RuntimeError("crash")


async def test_backup_every_n_batches_resumes_mid_epoch_as_if_never_stopped(tmp_path) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 3)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)

    def model():
        m = keras.Sequential([keras.layers.Dense(1, kernel_initializer="ones",
                                                 input_shape=(3,))])
        m.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return m

    straight = model()
    await straight.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    want = await straight.get_weights()
    backup = str(tmp_path / "backup")
    crashed = model()
    with pytest.raises(RuntimeError, match="crash"):   # backups after batches 3 and 6
        await crashed.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False,
                          callbacks=[keras.callbacks.BackupAndRestore(backup, save_freq=3),
                                     Crash(after=7)])
    resumed = model()
    cb = keras.callbacks.BackupAndRestore(backup, save_freq=3)
    await resumed.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False, callbacks=[cb])
    assert (cb.resume_from_epoch, cb.resume_from_step) == (0, 6)
    for got, ref in zip(await resumed.get_weights(), want):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    with pytest.raises(ValueError, match="save_freq"):
        keras.callbacks.BackupAndRestore(backup, save_freq=0)
