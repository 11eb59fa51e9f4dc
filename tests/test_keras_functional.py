"""The functional Keras API: ``keras.Input``, ``keras.Model(inputs, outputs)`` with
several and dict inputs and outputs, shared layers, nested models, the merge
layers, ``Lambda``, ``Reshape``, plain ops between layers, configs, whole-model
save/load, and regularizers in ``fit``'s loss (checked against numpy: each
model's outputs from its own weights, each step's update from the gradient
written out by hand)."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt

keras = dt.keras
pytestmark = pytest.mark.usefixtures("fresh_keras")
RNG = np.random.default_rng(7)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


async def weights_by_name(model) -> dict[str, np.ndarray]:
    values = await model.get_weights()
    return {v.op.name: w for v, w in zip(model.weights, values)}


async def test_two_inputs_two_outputs_a_shared_layer_and_dict_inputs_match_numpy() -> None:
    a = keras.Input(shape=(3,), name="a")
    b = keras.Input(shape=(3,), name="b")
    shared = keras.layers.Dense(4, activation="relu", name="shared")
    ha, hb = shared(a), shared(b)           # one layer, two calls: one set of weights
    joined = keras.layers.Concatenate(name="join")([ha, hb])
    out1 = keras.layers.Dense(2, name="head1")(joined)
    out2 = keras.layers.Add(name="sum")([ha, hb])
    model = keras.Model(inputs={"a": a, "b": b}, outputs=[out1, out2])
    assert [layer.name for layer in model.layers] == ["a", "b", "shared", "join", "head1",
                                                      "sum"]
    assert len(model.weights) == 4          # shared's kernel and bias, head1's
    assert model.output_shape == [(None, 2), (None, 4)]
    xa, xb = RNG.random((10, 3), np.float32), RNG.random((10, 3), np.float32)
    p1, p2 = await model.predict({"a": xa, "b": xb}, batch_size=4, verbose=0)
    w = await weights_by_name(model)
    ra = relu(xa @ w["shared/kernel"] + w["shared/bias"])
    rb = relu(xb @ w["shared/kernel"] + w["shared/bias"])
    np.testing.assert_allclose(p1, np.concatenate([ra, rb], 1) @ w["head1/kernel"]
                               + w["head1/bias"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p2, ra + rb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layer,reference", [
    (lambda: keras.layers.Add(), lambda x, y, z: x + y + z),
    (lambda: keras.layers.Multiply(), lambda x, y, z: x * y * z),
    (lambda: keras.layers.Average(), lambda x, y, z: (x + y + z) / 3),
    (lambda: keras.layers.Maximum(), lambda x, y, z: np.maximum(np.maximum(x, y), z)),
    (lambda: keras.layers.Minimum(), lambda x, y, z: np.minimum(np.minimum(x, y), z)),
    (lambda: keras.layers.Concatenate(axis=1), lambda x, y, z: np.concatenate([x, y, z], 1)),
])
async def test_merge_layers_match_numpy(layer, reference) -> None:
    ins = [keras.Input(shape=(4,)) for _ in range(3)]
    model = keras.Model(ins, layer()(ins))
    xs = [RNG.standard_normal((5, 4)).astype(np.float32) for _ in range(3)]
    got = await model.predict(xs, verbose=0)
    np.testing.assert_allclose(got, reference(*xs), rtol=1e-6)


async def test_subtract_takes_exactly_two_inputs() -> None:
    a, b, c = (keras.Input(shape=(2,)) for _ in range(3))
    model = keras.Model([a, b], keras.layers.subtract([a, b]))
    x, y = RNG.random((3, 2), np.float32), RNG.random((3, 2), np.float32)
    np.testing.assert_allclose(await model.predict([x, y], verbose=0), x - y, rtol=1e-6)
    with pytest.raises(ValueError, match="exactly 2 inputs"):
        keras.layers.Subtract()([a, b, c])


async def test_a_nested_model_lambda_reshape_and_a_plain_op_between_layers() -> None:
    inner_in = keras.Input(shape=(6,))
    inner = keras.Model(inner_in, keras.layers.Dense(6, name="inner_dense")(inner_in),
                        name="inner")
    x = keras.Input(shape=(2, 3))
    flat = keras.layers.Reshape((6,))(x)
    y = inner(flat)
    y = keras.layers.Lambda(lambda t: t * 2.0)(y)
    y = dt.reduce_mean(keras.layers.Reshape((3, 2))(y), axis=2)   # a plain op: replayed
    outer = keras.Model(x, y)
    assert [layer.name for layer in outer.layers][-3:-1] == ["inner", "lambda"]
    data = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    got = await outer.predict(data, verbose=0)
    w = await weights_by_name(inner)
    ref = (data.reshape(4, 6) @ w["inner_dense/kernel"] + w["inner_dense/bias"]) * 2.0
    np.testing.assert_allclose(got, ref.reshape(4, 3, 2).mean(2), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Lambda"):
        outer.get_config()   # the plain op cannot be saved


async def test_config_round_trip_and_whole_model_save_and_load(tmp_path) -> None:
    a = keras.Input(shape=(3,), name="a")
    b = keras.Input(shape=(2,), name="b")
    h = keras.layers.Dense(4, activation="relu")(a)
    g = keras.layers.Dense(4)(b)
    s = keras.layers.Multiply()([h, g])
    shared = keras.layers.Dense(4, activation="tanh")
    s = shared(shared(s))
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([s, h]))
    model = keras.Model({"a": a, "b": b}, out)
    config = model.get_config()
    assert config["input_layers"] == {"a": ["a", 0, 0], "b": ["b", 0, 0]}
    assert [len(entry["inbound_nodes"]) for entry in config["layers"]] == \
        [0, 0, 1, 1, 1, 2, 1, 1]
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    xa, xb = RNG.random((16, 3), np.float32), RNG.random((16, 2), np.float32)
    y = RNG.random((16, 1), np.float32)
    await model.fit({"a": xa, "b": xb}, y, batch_size=8, epochs=2, verbose=0)
    want = await model.predict({"a": xa, "b": xb}, verbose=0)

    again = keras.Model.from_config(config)
    assert type(again).__name__ == "Functional"
    assert [type(layer).__name__ for layer in again.layers] == \
        [type(layer).__name__ for layer in model.layers]
    await again.set_weights(await model.get_weights())
    np.testing.assert_allclose(await again.predict({"a": xa, "b": xb}, verbose=0), want,
                               rtol=1e-6)

    path = str(tmp_path / "functional_model")
    await model.save(path)
    loaded = await keras.models.load_model(path)
    np.testing.assert_allclose(await loaded.predict({"a": xa, "b": xb}, verbose=0), want,
                               rtol=1e-6)
    assert loaded.optimizer is not None   # compiled again: fit resumes
    await loaded.fit({"a": xa, "b": xb}, y, batch_size=8, epochs=1, verbose=0)


async def test_inputs_must_come_from_keras_input_and_the_graph_be_connected() -> None:
    a, b = keras.Input(shape=(2,)), keras.Input(shape=(2,))
    out = keras.layers.Add()([a, b])
    with pytest.raises(ValueError, match="keras.Input"):
        keras.Model(dt.constant(np.zeros((1, 2), np.float32)), out)
    model = keras.Model(a, out)   # b is not an input of the model
    with pytest.raises(ValueError, match="Graph disconnected"):
        await model.predict(np.zeros((2, 2), np.float32), verbose=0)


async def test_input_layer_opens_a_sequential() -> None:
    model = keras.Sequential([keras.layers.InputLayer(input_shape=(3,)),
                              keras.layers.Dense(2)])
    assert model.built and model.layers[0].get_config()["batch_input_shape"] == (None, 3)
    x = RNG.random((4, 3), np.float32)
    w = await model.get_weights()
    np.testing.assert_allclose(await model.predict(x, verbose=0), x @ w[0] + w[1], rtol=1e-5)


async def test_regularizers_enter_fit_loss_and_update_as_numpy() -> None:
    x = RNG.random((8, 3), np.float32)
    y = RNG.random((8, 1), np.float32)
    inp = keras.Input(shape=(3,))
    dense = keras.layers.Dense(1, kernel_regularizer=keras.regularizers.L2(0.1),
                               bias_regularizer=keras.regularizers.L1(0.05),
                               activity_regularizer=keras.regularizers.L1L2(l1=0.01),
                               kernel_initializer="ones", bias_initializer="ones")
    model = keras.Model(inp, dense(inp))
    model.compile(loss="mse", optimizer=keras.optimizers.SGD(0.1))
    assert len(model.losses) == 2 + 1   # the kernel's, the bias's, the symbolic call's
    history = await model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    k, b = np.ones((3, 1)), np.ones(1)
    p = x @ k + b
    r = p - y
    activity = 0.01 * np.abs(p).sum() / 8   # Keras 2 divides by the batch's rows
    loss = np.mean(r ** 2) + 0.1 * np.sum(k ** 2) + 0.05 * np.abs(b).sum() + activity
    np.testing.assert_allclose(history.history["loss"][0], loss, rtol=1e-5)
    grad_p = 2 * r / 8 + 0.01 * np.sign(p) / 8
    gk = x.T @ grad_p + 0.2 * k
    gb = grad_p.sum(0) + 0.05 * np.sign(b)
    kernel, bias = await model.get_weights()
    np.testing.assert_allclose(kernel, k - 0.1 * gk, rtol=1e-5)
    np.testing.assert_allclose(bias, b - 0.1 * gb, rtol=1e-5)
    config = dense.get_config()
    assert config["kernel_regularizer"]["class_name"] == "L2"
    assert config["kernel_regularizer"]["config"] == {"l2": pytest.approx(0.1)}
    again = keras.layers.Dense.from_config(config)
    assert isinstance(again.activity_regularizer, keras.regularizers.L1L2)


def test_regularizer_values_and_configs_as_tf_keras() -> None:
    # tf_keras regularizers_test: L1(0.1) on ones(2, 3) is 0.6, L2(0.1) is 0.6, l1_l2 default
    # factors 0.01
    assert keras.regularizers.L1().get_config() == {"l1": 0.01}
    assert keras.regularizers.L2(0.2).get_config() == {"l2": pytest.approx(0.2)}
    assert keras.regularizers.l1_l2().get_config() == {"l1": 0.01, "l2": 0.01}
    with pytest.raises(ValueError, match="non-negative"):
        keras.regularizers.L2(-1.0)
    assert isinstance(keras.regularizers.get("l2"), keras.regularizers.L2)
