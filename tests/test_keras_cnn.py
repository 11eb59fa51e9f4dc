"""dt.keras' convolutional layers in one process: Keras 3's shapes, parameter
counts and configs, their values against numpy, BatchNormalization's learning
phase, a small CNN trained by ``fit``, and ``model.save``/``load_model``.

What is checked against what:
* ``compute_output_shape``, the traced output's shape and ``count_params()``
  against Keras' numbers, hard-coded from Keras' formulas (``Conv2D(32, 3)``
  on 28x28x1 has 320 parameters, as Keras' documentation's MNIST model shows).
* ``get_config`` keys against Keras 3's (keras/src/layers/...), and
  ``from_config(get_config())`` / a JSON round trip give the same config.
* Outputs against plain numpy written here (direct loops for the
  convolutions, TF's SAME padding rule), with the layer's own weights: this
  checks the layers' wiring (layouts, strides, data formats, biases); the ops
  themselves are checked against TF's op tests in tests/test_conv_ops.py.
* BatchNormalization: training normalizes by the batch's mean and biased
  variance and moves the moving statistics by ``momentum`` (Keras 3's
  formula), inference (``evaluate``, ``predict``) normalizes by the moving
  statistics: each checked by value.

Steps run on this process's local server; every test takes well under a second
or two but the fit (a few seconds).
"""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

import distrib as dt

keras = dt.keras
L = keras.layers
BOUND_S = 60

pytestmark = pytest.mark.usefixtures("fresh_keras")


# -- numpy references ------------------------------------------------------------------------
def _pads(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int, int]:
    eff = (k - 1) * d + 1
    if padding == "valid":
        return (size - eff) // s + 1, 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return out, total // 2, total - total // 2


def conv_ref(x, k, strides=(1, 1), padding="valid", dilation=(1, 1), depthwise=False):
    """NHWC cross-correlation by direct loops (TF's SAME rule); ``depthwise``: each
    input channel by its own ``k[..., c, :]`` filters, output channel c * m + j."""
    n, h, w, c = x.shape
    kh, kw = k.shape[:2]
    oh, top, _ = _pads(h, kh, strides[0], dilation[0], padding)
    ow, left, _ = _pads(w, kw, strides[1], dilation[1], padding)
    outc = c * k.shape[3] if depthwise else k.shape[3]
    out = np.zeros((n, oh, ow, outc))
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for b in range(kw):
                    r = i * strides[0] + a * dilation[0] - top
                    q = j * strides[1] + b * dilation[1] - left
                    if 0 <= r < h and 0 <= q < w:
                        if depthwise:
                            out[:, i, j] += (x[:, r, q, :, None] * k[a, b]).reshape(n, -1)
                        else:
                            out[:, i, j] += x[:, r, q] @ k[a, b]
    return out


def conv_transpose_ref(x, k, out_hw, strides, padding):
    """The transpose of ``conv_ref``: each input value scattered through the
    kernel [kh, kw, out, in], then the SAME/VALID pads cropped."""
    n, h, w, _ = x.shape
    kh, kw = k.shape[:2]
    _, top, _ = _pads(out_hw[0], kh, strides[0], 1, padding)
    _, left, _ = _pads(out_hw[1], kw, strides[1], 1, padding)
    full = np.zeros((n, out_hw[0] + kh + strides[0], out_hw[1] + kw + strides[1], k.shape[2]))
    for i in range(h):
        for j in range(w):
            for a in range(kh):
                for b in range(kw):
                    full[:, i * strides[0] + a, j * strides[1] + b] += x[:, i, j] @ k[a, b].T
    return full[:, top:top + out_hw[0], left:left + out_hw[1]]


def pool_ref(x, size, strides, padding, op):
    n, h, w, c = x.shape
    oh, top, _ = _pads(h, size[0], strides[0], 1, padding)
    ow, left, _ = _pads(w, size[1], strides[1], 1, padding)
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, q0 = i * strides[0] - top, j * strides[1] - left
            window = x[:, max(r0, 0):r0 + size[0], max(q0, 0):q0 + size[1]]
            out[:, i, j] = op(window, axis=(1, 2))
    return out


def to_nchw(a):
    return np.ascontiguousarray(np.transpose(a, (0, 3, 1, 2)))


def to_nhwc(a):
    return np.transpose(a, (0, 2, 3, 1))


# -- shapes, parameters, configs -------------------------------------------------------------
# (layer factory, input shape without the batch, Keras' output shape, Keras' count_params())
CASES = {
    "conv2d": (lambda: L.Conv2D(32, 3), (28, 28, 1), (None, 26, 26, 32), 320),
    "conv2d_same_strided": (lambda: L.Conv2D(8, (3, 5), strides=2, padding="same"),
                            (9, 10, 3), (None, 5, 5, 8), 368),
    "conv2d_dilated": (lambda: L.Conv2D(4, 3, dilation_rate=2), (9, 9, 2), (None, 5, 5, 4), 76),
    "conv2d_channels_first": (lambda: L.Conv2D(6, 3, data_format="channels_first"),
                              (3, 8, 8), (None, 6, 6, 6), 168),
    "conv2d_transpose": (lambda: L.Conv2DTranspose(16, 3), (5, 5, 8), (None, 7, 7, 16), 1168),
    "conv2d_transpose_same": (lambda: L.Conv2DTranspose(4, 3, strides=2, padding="same"),
                              (5, 5, 2), (None, 10, 10, 4), 76),
    "conv2d_transpose_output_padding": (
        lambda: L.Conv2DTranspose(4, 3, strides=2, output_padding=1), (5, 5, 2),
        (None, 12, 12, 4), 76),
    "depthwise": (lambda: L.DepthwiseConv2D(3, depth_multiplier=2), (8, 8, 8),
                  (None, 6, 6, 16), 160),
    "separable": (lambda: L.SeparableConv2D(16, 3), (8, 8, 8), (None, 6, 6, 16), 216),
    "max_pooling": (lambda: L.MaxPooling2D(), (28, 28, 32), (None, 14, 14, 32), 0),
    "max_pool_same": (lambda: L.MaxPool2D(3, strides=2, padding="same"), (7, 7, 2),
                      (None, 4, 4, 2), 0),
    "average_pooling": (lambda: L.AveragePooling2D((2, 3)), (6, 9, 2), (None, 3, 3, 2), 0),
    "global_average": (lambda: L.GlobalAveragePooling2D(), (4, 4, 3), (None, 3), 0),
    "global_average_keepdims": (lambda: L.GlobalAveragePooling2D(keepdims=True), (4, 4, 3),
                                (None, 1, 1, 3), 0),
    "global_max_channels_first": (lambda: L.GlobalMaxPooling2D(data_format="channels_first"),
                                  (3, 4, 5), (None, 3), 0),
    "batch_norm": (lambda: L.BatchNormalization(), (8, 8, 32), (None, 8, 8, 32), 128),
    "batch_norm_axis1": (lambda: L.BatchNormalization(axis=1), (3, 4, 4), (None, 3, 4, 4), 12),
    "batch_norm_dense": (lambda: L.BatchNormalization(center=False, scale=False), (10,),
                         (None, 10), 20),
    "sync_batch_norm": (lambda: L.experimental.SyncBatchNormalization(), (4, 4, 3),
                        (None, 4, 4, 3), 12),
    "zero_padding": (lambda: L.ZeroPadding2D(((1, 2), (3, 4))), (5, 5, 2), (None, 8, 12, 2), 0),
    "zero_padding_channels_first": (lambda: L.ZeroPadding2D(1, data_format="channels_first"),
                                    (2, 5, 5), (None, 2, 7, 7), 0),
    "reshape": (lambda: L.Reshape((4, -1)), (2, 6), (None, 4, 3), 0),
    "flatten_channels_first": (lambda: L.Flatten(data_format="channels_first"), (2, 3, 4),
                               (None, 24), 0),
    "spatial_dropout": (lambda: L.SpatialDropout2D(0.5), (4, 4, 3), (None, 4, 4, 3), 0),
}


async def outputs(layer, x, training=False):
    """``layer(x)`` run in a dt.function (the layer built first, in this graph)."""
    return np.asarray(await dt.function(lambda v: layer(v, training=training))(x))


async def weights(layer):
    return [np.asarray(v) for v in
            await dt.function(lambda: [w.read_value() for w in layer.weights])()]


@pytest.mark.parametrize("case", sorted(CASES))
async def test_output_shape_and_params_are_keras(case) -> None:
    make, shape, want_shape, want_params = CASES[case]
    layer = make()
    assert layer.compute_output_shape((None, *shape)) == want_shape
    x = np.random.default_rng(0).normal(size=(2, *shape)).astype(np.float32)
    async with asyncio.timeout(BOUND_S):
        y = await outputs(layer, x, training=True)
    assert y.shape == (2, *want_shape[1:])
    assert layer.count_params() == want_params


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trips(case) -> None:
    layer = CASES[case][0]()
    config = layer.get_config()
    again = type(layer).from_config(config)
    assert again.get_config() == config
    saved = json.loads(json.dumps(L.serialize(layer)))
    assert json.loads(json.dumps(L.deserialize(saved).get_config())) == saved["config"]


KERAS_KEYS = {   # Keras 3's get_config keys beyond the base layer's (keras/src/layers/...)
    L.Conv2D: {"filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
               "groups", "activation", "use_bias", "kernel_initializer", "bias_initializer",
               "kernel_regularizer", "bias_regularizer", "activity_regularizer",
               "kernel_constraint", "bias_constraint"},
    L.Conv2DTranspose: {"filters", "kernel_size", "strides", "padding", "output_padding",
                        "data_format", "dilation_rate", "activation", "use_bias",
                        "kernel_initializer", "bias_initializer", "kernel_regularizer",
                        "bias_regularizer", "activity_regularizer", "kernel_constraint",
                        "bias_constraint"},
    L.DepthwiseConv2D: {"depth_multiplier", "kernel_size", "strides", "padding", "data_format",
                        "dilation_rate", "activation", "use_bias", "depthwise_initializer",
                        "bias_initializer", "depthwise_regularizer", "bias_regularizer",
                        "activity_regularizer", "depthwise_constraint", "bias_constraint"},
    L.MaxPooling2D: {"pool_size", "padding", "strides", "data_format"},
    L.GlobalAveragePooling2D: {"data_format", "keepdims"},
    L.BatchNormalization: {"axis", "momentum", "epsilon", "center", "scale",
                           "beta_initializer", "gamma_initializer", "moving_mean_initializer",
                           "moving_variance_initializer", "beta_regularizer",
                           "gamma_regularizer", "beta_constraint", "gamma_constraint",
                           "synchronized", "renorm", "renorm_clipping", "renorm_momentum"},
    L.ZeroPadding2D: {"padding", "data_format"},
    L.Reshape: {"target_shape"},
    L.SpatialDropout2D: {"rate", "seed", "data_format"},
}


def test_configs_have_keras_keys_defaults_and_names() -> None:
    base = set(L.Layer().get_config())
    for cls, keys in KERAS_KEYS.items():
        args = {L.Conv2D: (8, 3), L.Conv2DTranspose: (8, 3), L.DepthwiseConv2D: (3,),
                L.Reshape: ((4,),), L.SpatialDropout2D: (0.1,)}.get(cls, ())
        assert set(cls(*args).get_config()) - base == keys, cls.__name__
    conv = L.Conv2D(8, 3).get_config()
    assert (conv["kernel_size"], conv["strides"], conv["padding"], conv["data_format"]) == \
        ((3, 3), (1, 1), "valid", "channels_last")
    assert conv["kernel_initializer"]["class_name"] == "GlorotUniform"
    bn = L.BatchNormalization().get_config()
    assert (bn["axis"], bn["momentum"], bn["epsilon"], bn["synchronized"]) == (-1, 0.99, 1e-3,
                                                                               False)
    assert L.MaxPooling2D(3).get_config()["strides"] == (3, 3)   # strides default: pool_size
    keras.backend.clear_session()   # Keras' names, counted from scratch
    assert [L.Conv2DTranspose(1, 1).name, L.MaxPool2D().name, L.SeparableConv2D(1, 1).name,
            L.GlobalAveragePooling2D().name] == ["conv2d_transpose", "max_pooling2d",
                                                 "separable_conv2d", "global_average_pooling2d"]
    assert L.deserialize({"class_name": "MaxPool2D", "config": {}}).__class__ is L.MaxPooling2D
    with pytest.raises(NotImplementedError, match="kernel_constraint"):
        L.Conv2D(1, 1, kernel_constraint="non_neg")
    # regularizers are taken (the custom-loop tutorial's Conv2D): in the config and losses
    conv = L.Conv2D(2, 1, kernel_regularizer=keras.regularizers.L2(0.5))
    assert conv.get_config()["kernel_regularizer"]["config"]["l2"] == 0.5
    assert conv.get_config()["bias_regularizer"] is None
    again = L.Conv2D.from_config({**conv.get_config(), "name": "again"})
    assert again.get_config()["kernel_regularizer"] == conv.get_config()["kernel_regularizer"]
    with pytest.raises(ValueError, match="zero or negative"):
        L.Conv2D(1, 5).compute_output_shape((None, 3, 3, 1))


# -- values -------------------------------------------------------------------------------------
async def test_convolutions_match_numpy() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 7, 8, 3)).astype(np.float32)
    async with asyncio.timeout(BOUND_S):
        for layer, ref in [
                (L.Conv2D(4, (3, 2), strides=(2, 1), padding="same", activation="relu"),
                 lambda k, b: np.maximum(conv_ref(x, k, (2, 1), "same") + b, 0)),
                (L.Conv2D(2, 3, dilation_rate=2, use_bias=False),
                 lambda k: conv_ref(x, k, dilation=(2, 2))),
                (L.DepthwiseConv2D(3, depth_multiplier=2, padding="same"),
                 lambda k, b: conv_ref(x, k, padding="same", depthwise=True) + b),
                (L.SeparableConv2D(5, 3, strides=2),
                 lambda d, p, b: conv_ref(conv_ref(x, d, depthwise=True)[:, ::2, ::2], p) + b),
                (L.Conv2DTranspose(4, 3, strides=2, padding="same"),
                 lambda k, b: conv_transpose_ref(x, k, (14, 16), (2, 2), "same") + b),
                (L.Conv2DTranspose(2, 2, strides=2),
                 lambda k, b: conv_transpose_ref(x, k, (14, 16), (2, 2), "valid") + b)]:
            got = await outputs(layer, x)
            np.testing.assert_allclose(got, ref(*await weights(layer)), rtol=1e-4, atol=1e-5,
                                       err_msg=layer.name)
        # channels first: the same numbers, transposed (bias through bias_add NCHW)
        last = L.Conv2D(4, 3, padding="same", bias_initializer="random_normal")
        want = await outputs(last, x)
        first = L.Conv2D(4, 3, padding="same", data_format="channels_first")
        await outputs(first, to_nchw(x))
        model = keras.Sequential([first])
        await model.set_weights(await weights(last))
        np.testing.assert_allclose(to_nhwc(await outputs(first, to_nchw(x))), want, rtol=1e-5,
                                   atol=1e-6)


async def test_poolings_paddings_and_reshapes_match_numpy() -> None:
    x = np.random.default_rng(2).normal(size=(2, 7, 6, 3)).astype(np.float32)
    cases = [
        (L.MaxPooling2D(), pool_ref(x, (2, 2), (2, 2), "valid", np.max)),
        (L.MaxPool2D(3, strides=2, padding="same"), pool_ref(x, (3, 3), (2, 2), "same", np.max)),
        (L.AveragePooling2D((3, 2), strides=1, padding="same"),
         pool_ref(x, (3, 2), (1, 1), "same", np.mean)),
        (L.GlobalAveragePooling2D(), x.mean(axis=(1, 2))),
        (L.GlobalMaxPooling2D(keepdims=True), x.max(axis=(1, 2), keepdims=True)),
        (L.ZeroPadding2D(((1, 2), (0, 3))), np.pad(x, ((0, 0), (1, 2), (0, 3), (0, 0)))),
        (L.Reshape((-1, 3)), x.reshape(2, -1, 3)),
        (L.Flatten(), x.reshape(2, -1)),
        (L.SpatialDropout2D(0.5), x),   # not training: unchanged
    ]
    async with asyncio.timeout(BOUND_S):
        for layer, want in cases:
            np.testing.assert_allclose(await outputs(layer, x), want, rtol=1e-6, atol=1e-6,
                                       err_msg=layer.name)
        for layer, want in [
                (L.MaxPooling2D(data_format="channels_first"),
                 to_nchw(pool_ref(x, (2, 2), (2, 2), "valid", np.max))),
                (L.GlobalAveragePooling2D(data_format="channels_first"), x.mean(axis=(1, 2))),
                (L.ZeroPadding2D(1, data_format="channels_first"),
                 to_nchw(np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))))),
                (L.Flatten(data_format="channels_first"), x.reshape(2, -1))]:
            np.testing.assert_allclose(await outputs(layer, to_nchw(x)), want, rtol=1e-6,
                                       atol=1e-6, err_msg=layer.name)
        # SpatialDropout2D while training: each (example, channel) map kept whole or zeroed
        kept = await outputs(L.SpatialDropout2D(0.5, seed=3), np.ones((4, 3, 3, 8), np.float32),
                             training=True)
        assert set(np.unique(kept)) <= {0.0, 2.0}
        assert (kept == kept[:, :1, :1]).all() and 0 < kept.mean() < 2


def bn_ref(x, mean, var, gamma, beta, eps=1e-3):
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize("shape,axis", [((6, 4, 5, 3), -1), ((6, 3, 4, 5), 1), ((6, 3), -1),
                                        ((6, 3, 4), 1)])
async def test_batch_norm_trains_on_batch_statistics_and_infers_on_the_moving_ones(
        shape, axis) -> None:
    x = np.random.default_rng(3).normal(2.0, 3.0, size=shape).astype(np.float32)
    axes = tuple(i for i in range(len(shape)) if i != axis % len(shape))
    view = [1] * len(shape)
    view[axis] = -1
    bn = L.BatchNormalization(axis=axis, momentum=0.9, beta_initializer="random_normal",
                              gamma_initializer="random_uniform")
    async with asyncio.timeout(BOUND_S):
        train = await outputs(bn, x, training=True)
        gamma, beta, mean, var = await weights(bn)
        np.testing.assert_allclose(train, bn_ref(x, x.mean(axes, keepdims=True),
                                                 x.var(axes, keepdims=True),
                                                 gamma.reshape(view), beta.reshape(view)),
                                   rtol=1e-4, atol=1e-4)
        # the moving statistics moved once, toward the batch's (biased) ones
        np.testing.assert_allclose(mean, 0.1 * x.mean(axes), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(var, 0.9 + 0.1 * x.var(axes), rtol=1e-5)
        infer = await outputs(bn, x)
        np.testing.assert_allclose(infer, bn_ref(x, mean.reshape(view), var.reshape(view),
                                                 gamma.reshape(view), beta.reshape(view)),
                                   rtol=1e-4, atol=1e-4)
        after = await weights(bn)   # inference moved nothing
        np.testing.assert_array_equal(after[2], mean)
        np.testing.assert_array_equal(after[3], var)
        bn.trainable = False   # Keras 3: a frozen BatchNormalization runs in inference mode
        np.testing.assert_allclose(await outputs(bn, x, training=True), infer, rtol=1e-6)


# -- a small CNN: fit, evaluate, save and load ---------------------------------------------------
def stripes(n: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """8x8 one-channel images: class 0 has horizontal stripes, class 1 vertical ones,
    with noise and a random phase."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    phase = rng.integers(0, 2, n)
    idx = np.arange(8)
    rows = ((idx[None, :, None] + phase[:, None, None]) % 2).repeat(8, axis=2)
    x = np.where(y[:, None, None] == 0, rows, rows.transpose(0, 2, 1)).astype(np.float32)
    x = x + rng.normal(0, 0.3, x.shape).astype(np.float32)
    return x[..., None], y.astype(np.int64)


def small_cnn(bn_layer=L.BatchNormalization, optimizer=None) -> keras.Sequential:
    dt.set_random_seed(7)
    model = keras.Sequential([L.Conv2D(4, 3, padding="same", input_shape=(8, 8, 1)),
                              bn_layer(momentum=0.5), L.Activation("relu"), L.MaxPooling2D(),
                              L.Flatten(), L.Dense(2)])
    model.compile(optimizer=optimizer or keras.optimizers.Adam(0.02),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


async def test_a_small_cnn_fits_and_evaluates_with_the_moving_statistics() -> None:
    x, y = stripes()
    async with asyncio.timeout(BOUND_S):
        model = small_cnn()
        assert model.count_params() == 40 + 16 + 130
        history = await model.fit(x, y, batch_size=16, epochs=6, shuffle=False, verbose=0)
        loss, acc = history.history["loss"], history.history["accuracy"]
        assert loss[-1] < 0.5 * loss[0] and acc[-1] > acc[0] and acc[-1] >= 0.9
        assert (await model.evaluate(x, y, verbose=0))[1] >= 0.9
        # evaluate/predict use the moving statistics: predict by hand from the weights
        conv, bn = model.layers[0], model.layers[1]
        k, b = await weights(conv)
        gamma, beta, mean, var = await weights(bn)
        assert not np.allclose(mean, 0) and not np.allclose(var, 1)   # they moved
        h = np.maximum(bn_ref(conv_ref(x, k, padding="same") + b, mean, var, gamma, beta), 0)
        h = pool_ref(h, (2, 2), (2, 2), "valid", np.max).reshape(len(x), -1)
        dk, db = await weights(model.layers[-1])
        np.testing.assert_allclose(await model.predict(x, verbose=0), h @ dk + db, rtol=1e-3,
                                   atol=1e-3)


async def test_a_saved_cnn_loads_with_its_weights_and_moving_statistics(tmp_path) -> None:
    x, y = stripes(32)
    async with asyncio.timeout(BOUND_S):
        dt.set_random_seed(5)
        model = keras.Sequential([
            L.ZeroPadding2D(1, input_shape=(8, 8, 1)), L.Conv2D(4, 3, activation="relu"),
            L.BatchNormalization(), L.DepthwiseConv2D(3, padding="same"),
            L.SeparableConv2D(4, 3, padding="same"), L.Conv2DTranspose(2, 2, strides=2),
            L.AveragePooling2D(), L.SpatialDropout2D(0.2), L.MaxPool2D(),
            L.experimental.SyncBatchNormalization(), L.GlobalAveragePooling2D(keepdims=True),
            L.Reshape((-1,)), L.Dense(2)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        await model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        path = await model.save(str(tmp_path / "cnn"))
        keys = dict(dt.train.list_variables(f"{path}/variables/variables"))
        assert keys["layer_with_weights-1/moving_variance/.ATTRIBUTES/VARIABLE_VALUE"] == [4]
        assert keys["layer_with_weights-3/pointwise_kernel/.ATTRIBUTES/VARIABLE_VALUE"] == \
            [1, 1, 4, 4]
        loaded = await keras.models.load_model(path)
        assert loaded.get_config() == model.get_config()
        assert [type(a) for a in loaded.layers] == [type(a) for a in model.layers]
        for got, want in zip(await loaded.get_weights(), await model.get_weights()):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(await loaded.predict(x, verbose=0),
                                      await model.predict(x, verbose=0))
