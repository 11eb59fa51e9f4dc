"""TF1's everyday names beyond the ops (issue 39 item 3): ``dt.losses`` against
TF's ``losses_test.py`` numbers, ``dt.layers`` on the Keras layers (UPDATE_OPS,
regularization losses, ``training=``), ``dt.compat.v1``/``v2`` and the string
helpers, and ``dt.train.checkpoints_iterator`` over a trainer's real checkpoints.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import distrib as dt
from distrib.runtime.state.variable_store import VariableStore
from distrib.runtime.step.local_eval import evaluate


class Local:
    """A graph run in this process with a private variable store."""

    def __init__(self) -> None:
        self.graph, self.store = dt.Graph(), VariableStore()

    def __call__(self, fetches, feed_dict=None):
        return evaluate(fetches, feed_dict, graph=self.graph, variables=self.store)


PRED = [[4.0, 8.0, 12.0], [8.0, 1.0, 3.0]]
LABELS = [[1.0, 9.0, 2.0], [-5.0, -2.0, 6.0]]


@pytest.mark.parametrize("fn,weights,want", [
    # losses_test.py: AbsoluteDifferenceLossTest and MeanSquaredErrorTest
    ("absolute_difference", 1.0, 5.5),
    ("absolute_difference", 2.3, 5.5 * 2.3),
    ("absolute_difference", [[1.2], [0.0]], 5.6),
    ("absolute_difference", [[3, 6, 5], [0, 4, 2]], 16.6),
    ("absolute_difference", np.zeros((2, 3)), 0.0),
    ("mean_squared_error", 1.0, 49.5),
    ("mean_squared_error", 2.3, 49.5 * 2.3),
    ("mean_squared_error", [[1.2], [3.4]], 767.8 / 6.0),
    ("mean_squared_error", [[3, 6, 5], [0, 4, 2]], 587 / 5.0),
])
def test_weighted_regression_losses_match_tfs_losses_test(fn, weights, want):
    run = Local()
    with run.graph.as_default():
        loss = getattr(dt.losses, fn)(dt.constant(LABELS), dt.constant(PRED),
                                      weights=dt.constant(np.asarray(weights, np.float32)))
        collected = dt.losses.get_losses()
    assert collected == [loss]
    np.testing.assert_allclose(run(loss), want, rtol=1e-5, atol=1e-6)


def test_classification_losses_match_tfs_losses_test():
    run = Local()
    with run.graph.as_default():
        logits = dt.constant([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0]])
        right = dt.losses.softmax_cross_entropy(np.eye(3, dtype=np.float32), logits)
        wrong = dt.losses.softmax_cross_entropy(
            dt.constant([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=dt.float32), logits, weights=2.3)
        smoothed = dt.losses.softmax_cross_entropy(
            dt.constant([[1.0, 0.0, 0.0]]), dt.constant([[100.0, -100.0, -100.0]]),
            label_smoothing=0.1)
        sparse = dt.losses.sparse_softmax_cross_entropy(dt.constant([[2], [0], [1]]), logits)
        sparse_w = dt.losses.sparse_softmax_cross_entropy(
            dt.constant([2, 0, 1]), logits, weights=dt.constant([[1.2], [3.4], [5.6]]))
        big = dt.constant([[100.0, -100.0, -100.0], [-100.0, 100.0, -100.0],
                           [-100.0, -100.0, 100.0]])
        sig_right = dt.losses.sigmoid_cross_entropy(np.eye(3, dtype=np.float32), big)
        sig_wrong = dt.losses.sigmoid_cross_entropy(
            dt.constant([[0, 0, 1], [1, 0, 0], [0, 1, 0]], dtype=dt.float32), big)
        hinge = dt.losses.hinge_loss(dt.constant([[0.0], [0.0], [1.0], [1.0]]),
                                     dt.constant([[-0.7], [-1.4], [1.4], [0.6]]))
        none = dt.losses.mean_squared_error(dt.constant(LABELS), dt.constant(PRED),
                                            reduction=dt.losses.Reduction.NONE)
    out = run([right, wrong, smoothed, sparse, sparse_w, sig_right, sig_wrong, hinge, none])
    np.testing.assert_allclose(out[0], 0.0, atol=1e-3)
    np.testing.assert_allclose(out[1], 10.0 * 2.3, rtol=1e-3)
    np.testing.assert_allclose(out[2], 400.0 * 0.1 / 3.0, rtol=1e-3)
    np.testing.assert_allclose(out[3], 10.0, rtol=1e-3)
    np.testing.assert_allclose(out[4], (1.2 + 3.4 + 5.6) * 10.0 / 3.0, rtol=1e-3)
    np.testing.assert_allclose(out[5], 0.0, atol=1e-3)
    np.testing.assert_allclose(out[6], 600.0 / 9.0, rtol=1e-3)
    np.testing.assert_allclose(out[7], 0.175, rtol=1e-4)
    np.testing.assert_allclose(out[8], (np.array(PRED) - np.array(LABELS)) ** 2)


def test_huber_and_log_loss_against_numpy():
    run = Local()
    p = np.array([[0.9, 0.2], [0.4, 0.7]], np.float32)
    y = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
    with run.graph.as_default():
        huber = dt.losses.huber_loss(dt.constant(y), dt.constant(p * 4), delta=1.0)
        log = dt.losses.log_loss(dt.constant(y), dt.constant(p))
    err = np.abs(p * 4 - y)
    quad = np.minimum(err, 1.0)
    eps = 1e-7
    want_log = -y * np.log(p + eps) - (1 - y) * np.log(1 - p + eps)
    got = run([huber, log])
    np.testing.assert_allclose(got[0], np.mean(0.5 * quad ** 2 + (err - quad)), rtol=1e-5)
    np.testing.assert_allclose(got[1], want_log.mean(), rtol=1e-5)


def test_regularization_and_total_loss_collect_the_graphs_losses():
    run = Local()
    with run.graph.as_default():
        assert run(dt.losses.get_regularization_loss()) == 0.0
        x = dt.constant(np.ones((2, 3), np.float32))
        y = dt.layers.dense(x, 2, kernel_initializer=dt.ones_initializer(),
                            kernel_regularizer=lambda w: 0.5 * dt.reduce_sum(w))
        mse = dt.losses.mean_squared_error(dt.zeros([2, 2]), y)
        reg = dt.losses.get_regularization_loss()
        total = dt.losses.get_total_loss()
        run(dt.global_variables_initializer())
    reg_v, total_v, mse_v = run([reg, total, mse])
    assert reg_v == pytest.approx(0.5 * 6)
    assert total_v == pytest.approx(mse_v + reg_v) and mse_v == pytest.approx(9.0)


def test_tf1_layers_build_on_keras_with_update_ops_and_training():
    run = Local()
    with run.graph.as_default():
        x = dt.placeholder(dt.float32, [None, 6, 6, 2])
        h = dt.layers.conv2d(x, 3, 3, padding="same", activation=dt.nn.relu, name="conv")
        h = dt.layers.max_pooling2d(h, 2, 2)
        h = dt.layers.average_pooling2d(h, 1, 1)
        bn = dt.layers.batch_normalization(h, training=True, momentum=0.5)
        dropped = dt.layers.dropout(bn, rate=0.5, training=True, seed=1)
        same = dt.layers.dropout(bn, rate=0.5)   # training=False by default: unchanged
        logits = dt.layers.dense(dt.layers.flatten(dropped), 4)
        updates = dt.get_collection(dt.GraphKeys.UPDATE_OPS)
        names = sorted(v.name for v in dt.global_variables())
        mean = next(v for v in dt.global_variables() if "moving_mean" in v.name)
        run(dt.global_variables_initializer())
    assert logits.shape.as_list() == [None, 4] and same is bn
    assert len(updates) == 2 and all(op.type == "Assign" for op in updates)
    assert "conv/kernel:0" in names and "dense/kernel:0" in names
    xv = np.random.default_rng(0).random((2, 6, 6, 2)).astype(np.float32)
    hv, _ = run([h, updates], {x: xv})
    np.testing.assert_allclose(run(mean), 0.5 * hv.mean(axis=(0, 1, 2)), rtol=1e-5)
    with pytest.raises(dt.errors.InvalidArgumentError, match="Python bool"):
        with run.graph.as_default():
            dt.layers.dropout(bn, training=dt.constant(True))


def test_compat_namespaces_and_string_helpers():
    import distrib.compat.v1 as tf
    assert tf.train.FtrlOptimizer is dt.train.FtrlOptimizer and tf.placeholder is dt.placeholder
    assert tf.Session is dt.Session and tf.layers is dt.layers and tf.losses is dt.losses
    assert tf.div_no_nan is dt.math.divide_no_nan and dt.compat.v2.random is dt.random
    assert tf.global_variables_initializer is dt.global_variables_initializer
    tf.disable_v2_behavior()
    assert dt.gfile.Exists is dt.io.gfile.exists and dt.gfile.DeleteRecursively is dt.io.gfile.rmtree
    assert dt.io.gfile.join("a", "b") == "a/b"
    assert dt.compat.as_bytes("é") == "é".encode() and dt.compat.as_text(b"ab") == "ab"
    assert dt.compat.as_str_any(3) == "3"
    with pytest.raises(TypeError):
        dt.compat.as_bytes(3)
    run = Local()
    with run.graph.as_default():
        assert run(tf.to_float(dt.constant([1, 2]))).dtype == np.float32


async def test_checkpoints_iterator_yields_each_new_checkpoint_then_times_out(tmp_path):
    folder = str(tmp_path / "ckpt")
    g = dt.Graph()
    with g.as_default():
        v = dt.Variable(1.0, name="v")
        saver = dt.train.Saver()
    seen: list[str] = []
    calls = []

    def timeout_fn() -> bool:   # the first timeout keeps waiting, the second stops
        calls.append(len(seen))
        return len(calls) >= 2

    def evaluator() -> None:
        for path in dt.train.checkpoints_iterator(folder, timeout=1.5, timeout_fn=timeout_fn):
            seen.append(path)

    async with dt.Session(graph=g) as sess:
        await sess.run(v.initializer)
        first = await saver.save(sess, folder + "/model", global_step=1)
        thread = threading.Thread(target=evaluator)
        thread.start()
        try:
            while not seen:   # (bounded by the thread's own timeouts)
                thread.join(0.05)
                if not thread.is_alive():
                    break
            second = await saver.save(sess, folder + "/model", global_step=2)
        finally:
            thread.join(30)
    assert not thread.is_alive()
    assert seen[0] == first and seen[-1] == second and len(seen) == 2
    assert len(calls) == 2
    # no checkpoint at all and no timeout_fn: it ends after the timeout
    assert list(dt.train.checkpoints_iterator(str(tmp_path / "empty"), timeout=0.2)) == []
