"""``Model.summary()`` against tf_keras' own expected text
(``tf_keras/utils/layer_utils_test.py``: the long-names Sequential, the
``show_trainable`` column, the nested functional models with
``expand_nested``), the graph layout's ``Connected to`` column, the
sequential-like layout of a chain-shaped functional model, ``layer_range``,
the default output (stdout) and tf_keras' error for an unbuilt model."""
from __future__ import annotations

import pytest

import distrib as dt

keras = dt.keras
pytestmark = pytest.mark.usefixtures("fresh_keras")


def captured(model, **kwargs) -> str:
    lines: list[str] = []
    model.summary(print_fn=lines.append, **kwargs)
    return "".join(line + "\n" for line in lines)


def test_sequential_with_long_names_wraps_cells_as_tf_keras() -> None:
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        keras.layers.Conv2D(4, 3, name="Really-Long-name-test"),
        keras.layers.Conv2D(4, 3, name="Another-long-name-test"),
        keras.layers.Flatten(),
        keras.layers.Dense(2, name="long-name-test-output"),
    ])
    want = (  # tf_keras layer_utils_test.test_print_summary_format_long_names
        'Model: "sequential"\n'
        "_________________________________________________________________\n"
        " Layer (type)                Output Shape              Param #   \n"
        "=================================================================\n"
        " Really-Long-name-test (Con  (None, 6, 6, 4)           112       \n"
        " v2D)                                                            \n"
        "                                                                 \n"
        " Another-long-name-test (Co  (None, 4, 4, 4)           148       \n"
        " nv2D)                                                           \n"
        "                                                                 \n"
        " flatten (Flatten)           (None, 64)                0         \n"
        "                                                                 \n"
        " long-name-test-output (Den  (None, 2)                 130       \n"
        " se)                                                             \n"
        "                                                                 \n"
        "=================================================================\n"
        "Total params: 390 (1.52 KB)\n"
        "Trainable params: 390 (1.52 KB)\n"
        "Non-trainable params: 0 (0.00 Byte)\n"
        "_________________________________________________________________\n")
    assert captured(model) == want


def test_show_trainable_adds_a_column_and_splits_the_counts() -> None:
    model = keras.Sequential(name="trainable")
    untrained = keras.layers.Conv2D(filters=2, kernel_size=(2, 3), input_shape=(3, 5, 5),
                                    name="conv")
    model.add(untrained)
    model.add(keras.layers.Flatten(name="flat"))
    model.add(keras.layers.Dense(5, name="dense"))
    untrained.trainable = False
    want = (  # tf_keras layer_utils_test.test_print_summary_show_trainable
        'Model: "trainable"\n'
        "____________________________________________________________________________\n"
        " Layer (type)                Output Shape              Param #   Trainable  \n"
        "============================================================================\n"
        " conv (Conv2D)               (None, 2, 3, 2)           62        N          \n"
        "                                                                            \n"
        " flat (Flatten)              (None, 12)                0         Y          \n"
        "                                                                            \n"
        " dense (Dense)               (None, 5)                 65        Y          \n"
        "                                                                            \n"
        "============================================================================\n"
        "Total params: 127 (508.00 Byte)\n"
        "Trainable params: 65 (260.00 Byte)\n"
        "Non-trainable params: 62 (248.00 Byte)\n"
        "____________________________________________________________________________\n")
    assert captured(model, show_trainable=True) == want


def _nested_models(trainable_conv: bool = True):
    shape = (None, None, 3)

    def make_model():
        x = inputs = keras.Input(shape)
        conv = keras.layers.Conv2D(3, 1)
        conv.trainable = trainable_conv
        x = conv(x)
        x = keras.layers.BatchNormalization()(x)
        return keras.Model(inputs, x)

    x = inner_inputs = keras.Input(shape)
    x = make_model()(x)
    inner_model = keras.Model(inner_inputs, x)
    inputs = keras.Input(shape)
    return keras.Model(inputs, inner_model(inputs))


def test_expand_nested_draws_nested_models_in_borders() -> None:
    want = (  # tf_keras layer_utils_test.test_print_summary_expand_nested
        'Model: "model_2"\n'
        "_________________________________________________________________\n"
        " Layer (type)                Output Shape              Param #   \n"
        "=================================================================\n"
        " input_3 (InputLayer)        [(None, None, None, 3)]   0         \n"
        "                                                                 \n"
        " model_1 (Functional)        (None, None, None, 3)     24        \n"
        "|¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯|\n"
        "| input_1 (InputLayer)       [(None, None, None, 3)]   0        |\n"
        "|                                                               |\n"
        "| model (Functional)         (None, None, None, 3)     24       |\n"
        "||¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯||\n"
        "|| input_2 (InputLayer)      [(None, None, None, 3)]   0       ||\n"
        "||                                                             ||\n"
        "|| conv2d (Conv2D)           (None, None, None, 3)     12      ||\n"
        "||                                                             ||\n"
        "|| batch_normalization (Bat  (None, None, None, 3)     12      ||\n"
        "|| chNormalization)                                            ||\n"
        "|¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯|\n"
        "¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯¯\n"
        "=================================================================\n"
        "Total params: 24 (96.00 Byte)\n"
        "Trainable params: 18 (72.00 Byte)\n"
        "Non-trainable params: 6 (24.00 Byte)\n"
        "_________________________________________________________________\n")
    assert captured(_nested_models(), expand_nested=True) == want


def test_expand_nested_with_show_trainable_as_tf_keras() -> None:
    text = captured(_nested_models(trainable_conv=False), expand_nested=True,
                    show_trainable=True)
    # tf_keras layer_utils_test.test_print_summary_expand_nested_show_trainable's rows
    assert "| model (Functional)         (None, None, None, 3)     24        Y         |\n" \
        in text
    assert "|| conv2d (Conv2D)           (None, None, None, 3)     12        N        ||\n" \
        in text
    assert "Trainable params: 6 (24.00 Byte)\nNon-trainable params: 18 (72.00 Byte)\n" \
        in text
    assert len(text.splitlines()) == 25


def test_graph_models_get_a_connected_to_column() -> None:
    a = keras.Input(shape=(3,), name="a")
    b = keras.Input(shape=(3,), name="b")
    shared = keras.layers.Dense(4, activation="relu", name="shared")
    ha, hb = shared(a), shared(b)
    out1 = keras.layers.Dense(2, name="head1")(keras.layers.Concatenate(name="join")([ha, hb]))
    model = keras.Model(inputs={"a": a, "b": b}, outputs=[out1, ha], name="two")
    lines = captured(model).splitlines()
    assert lines[2] == (" Layer (type)                Output Shape                 Param #   "
                        "Connected to                  ")
    assert all(len(line) == 98 for line in lines[1:-5] if not line.startswith("Total"))
    rows = "\n".join(lines)
    assert " a (InputLayer)              [(None, 3)]                  0         []" in rows
    # a cell wraps after "'," as Keras wraps it: one input per line
    assert (" shared (Dense)              (None, 4)                    16        "
            "['a[0][0]',                   \n"
            "                                                                     "
            "'b[0][0]']                   ") in rows
    assert "['join[0][0]']" in rows
    assert lines[-4:] == ["Total params: 34 (136.00 Byte)", "Trainable params: 34 (136.00 Byte)",
                          "Non-trainable params: 0 (0.00 Byte)", "_" * 98]


def test_a_chain_shaped_functional_model_is_listed_as_a_sequence() -> None:
    inputs = keras.Input(shape=(32,))
    x = keras.layers.Dense(4, name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(x))
    text = captured(model)
    assert "Connected to" not in text
    assert " input_1 (InputLayer)        [(None, 32)]              0         \n" in text
    assert " hidden (Dense)              (None, 4)                 132       \n" in text
    assert "Total params: 137 (548.00 Byte)\n" in text


def test_layer_range_and_line_length() -> None:
    model = keras.Sequential([keras.layers.Dense(3, input_shape=(2,), name="one"),
                              keras.layers.Dense(3, name="two"),
                              keras.layers.Dense(1, name="three")])
    text = captured(model, layer_range=["two", "three"], line_length=80)
    assert "one (Dense)" not in text and "two (Dense)" in text and "three (Dense)" in text
    assert text.splitlines()[1] == "_" * 80
    with pytest.raises(ValueError, match="do not match the layer names"):
        model.summary(layer_range=["nope", "two"], print_fn=lambda line: None)


def test_default_output_is_stdout(capsys) -> None:
    model = keras.Sequential([keras.layers.Dense(5, input_shape=(10,), name="dense")])
    model.summary()
    out = capsys.readouterr().out
    assert "dense (Dense)" in out and "Total params: 55 (220.00 Byte)" in out


def test_subclassed_model_shapes_are_multiple() -> None:
    class Two(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="two")
            self.first = keras.layers.Dense(3, name="first")
            self.second = keras.layers.Dense(1, name="second")

        def call(self, x):
            return self.second(self.first(x))

    model = Two()
    model(dt.placeholder(dt.float32, [None, 2]))
    text = captured(model)
    assert " first (Dense)               multiple                  9         \n" in text


def test_an_unbuilt_model_raises_tf_keras_error() -> None:
    model = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"This model has not yet been built\. Build the model "
                       r"first by calling `build\(\)` or by calling the model on a batch of "
                       r"data\."):
        model.summary()
