"""model.save(path) / dt.keras.models.load_model(path): a whole Keras model
(architecture, compile arguments, weights, optimizer state) in one folder.

TF's behaviour stated (keras/saving/legacy/save.py, saved_model/load.py and
their tests): ``model.save("folder")`` keeps the model's config, its weights
and its optimizer's state, so ``load_model`` gives a model that predicts the
same and whose ``fit`` continues as the saved one would have (the loss
sequence of an uninterrupted run), in a fresh process and under another
strategy (a checkpoint keyed by object paths: a mirrored variable saved
once); ``include_optimizer=False`` saves no training config, so the loaded
model is not compiled (with a warning); ``compile=False`` loads it
uncompiled; a missing path is "No file or directory found at ..."; an
unknown class is ``ValueError("Unknown layer: 'Name'. Please ensure you are
using a custom_object_scope ...")``; ``custom_objects`` or
``register_keras_serializable`` give it. distrib's differences: the weights
file is a dt.train.Checkpoint file (TF's SavedModel keys), the config is
Keras 3's config.json, ``overwrite=False`` on an existing path raises
(Keras asks at a prompt), a corrupt file is a ``DataLossError``.

Steps run on this process's local server (real sockets, loopback); the
fresh-process test runs a child, stopped by its pid."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.core.values import local_results
from distrib.errors import AlreadyExistsError, DataLossError, NotFoundError
from distrib.keras import model_saving
from tests import helpers
from tests.helpers import ROOT, child_env

keras = dt.keras
BOUND_S = 90


pytestmark = pytest.mark.usefixtures("fresh_keras")


def linear_data(n: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return helpers.linear_data(n, seed)


def small_model(strategy=None, optimizer=None) -> keras.Sequential:
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = keras.Sequential([keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                                  keras.layers.Dense(1)])
        model.compile(optimizer=optimizer or keras.optimizers.Adam(0.05), loss="mse",
                      metrics=["mae"])
    return model


async def epochs(model, n: int = 1) -> list[float]:
    x, y = linear_data()
    history = await model.fit(x, y, batch_size=8, epochs=n, shuffle=False, verbose=0)
    return history.history["loss"]


async def copies(variable) -> list[np.ndarray]:
    return [np.asarray(v) for v in
            await dt.function(lambda: [c.read_value() for c in local_results(variable)])()]


# -- one process ---------------------------------------------------------------------------

async def test_a_loaded_model_predicts_the_same_and_has_the_same_config(tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        await epochs(model, 2)
        path = await model.save(str(tmp_path / "model"))
        assert path == str(tmp_path / "model")
        assert sorted(os.listdir(path)) == ["config.json", "metadata.json", "variables"]
        saved = json.loads((tmp_path / "model" / "config.json").read_text())
        assert saved["class_name"] == "Sequential"
        assert [layer["class_name"] for layer in saved["config"]["layers"]] == ["Dense"] * 2
        assert saved["compile_config"]["loss"] == "mse"            # a name stays a name
        assert saved["compile_config"]["metrics"] == ["mae"]
        assert saved["compile_config"]["optimizer"]["config"]["learning_rate"] == 0.05
        meta = json.loads((tmp_path / "model" / "metadata.json").read_text())
        assert meta["format_version"] == model_saving.FORMAT_VERSION
        assert meta["distrib_version"]
        # TF's SavedModel variables keys: the model is the checkpoint's root
        keys = dict(dt.train.list_variables(os.path.join(path, "variables", "variables")))
        assert keys["layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 4]
        assert "layer_with_weights-1/bias/.OPTIMIZER_SLOT/optimizer/v/.ATTRIBUTES/" \
            "VARIABLE_VALUE" in keys
        assert keys["optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"] == []

        loaded = await keras.models.load_model(path)
        assert isinstance(loaded, keras.Sequential)
        assert loaded.get_config() == model.get_config()
        assert loaded.get_compile_config() == model.get_compile_config()
        assert isinstance(loaded.optimizer, keras.optimizers.Adam)
        assert loaded.optimizer.learning_rate == 0.05
        x, _ = linear_data()
        np.testing.assert_array_equal(await loaded.predict(x, verbose=0),
                                      await model.predict(x, verbose=0))
        for got, want in zip(await loaded.get_weights(), await model.get_weights()):
            np.testing.assert_array_equal(got, want)
        # the optimizer state too: both continue with the same losses
        np.testing.assert_allclose(await epochs(loaded, 2), await epochs(model, 2), rtol=1e-6)


async def test_a_dot_keras_path_is_one_zip_file_with_the_same_entries(tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        await epochs(model)
        path = await model.save(str(tmp_path / "model.keras"))
        assert os.path.isfile(path)
        with zipfile.ZipFile(path) as archive:
            assert sorted(archive.namelist()) == ["config.json", "metadata.json",
                                                  "variables/variables"]
        loaded = await keras.models.load_model(path)
        np.testing.assert_allclose(await epochs(loaded), await epochs(model), rtol=1e-6)
        assert sorted(os.listdir(tmp_path)) == ["model.keras"]   # nothing left beside it


# -- another process -----------------------------------------------------------------------

CHILD = r"""
import asyncio, sys
import distrib as dt
from tests.test_keras_save import epochs

async def main():
    model = await dt.keras.models.load_model(sys.argv[1])
    print("losses", repr(await epochs(model, 2)), flush=True)

asyncio.run(main())
"""


async def test_fit_continues_in_a_fresh_process_as_an_uninterrupted_run(tmp_path) -> None:
    """The saved model, loaded by another program, trains on with the losses the
    uninterrupted run has: Adam's slots, beta powers and iterations came back."""
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        await epochs(model, 2)
        path = await model.save(str(tmp_path / "model"))
        uninterrupted = await epochs(model, 2)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, path], cwd=ROOT, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    line = next(line for line in out.splitlines() if line.startswith("losses "))
    np.testing.assert_allclose(eval(line.split(" ", 1)[1]), uninterrupted, rtol=1e-6)


# -- other strategies ----------------------------------------------------------------------

async def test_mirrored_to_no_strategy_to_mirrored(two_cpus, tmp_path) -> None:
    """Saved from two replicas, loaded with none (the strategy scope open at load
    time decides), saved again and loaded into two: each time fit continues with
    the loss of the run that saved, and both copies of a weight hold its value."""
    async with asyncio.timeout(BOUND_S):
        two = small_model(dt.distribute.MirroredStrategy())
        await epochs(two, 2)
        first = await two.save(str(tmp_path / "two"))
        want = await epochs(two)

        dt.reset_default_graph()
        one = await keras.models.load_model(first)
        assert one.distribute_strategy is None
        np.testing.assert_allclose(await epochs(one), want, rtol=1e-5)
        second = await one.save(str(tmp_path / "one"))
        want_next = await epochs(one)

        dt.reset_default_graph()
        mirrored = dt.distribute.MirroredStrategy()
        with mirrored.scope():
            again = await keras.models.load_model(second)
        assert again.distribute_strategy is mirrored
        kernel = again.layers[0].kernel
        saved = dt.train.load_checkpoint(os.path.join(second, "variables", "variables")) \
            .get_tensor("layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE")
        values = await copies(kernel)
        assert len(values) == 2
        for value in values:
            np.testing.assert_array_equal(value, saved)
        np.testing.assert_allclose(await epochs(again), want_next, rtol=1e-5)


# -- what is saved -------------------------------------------------------------------------

async def test_include_optimizer_false_saves_no_training_config(tmp_path, caplog) -> None:
    """TF: without the optimizer no training config is saved; load_model warns and
    returns an uncompiled model. compile=False loads a full save uncompiled."""
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        await epochs(model)
        path = await model.save(str(tmp_path / "bare"), include_optimizer=False)
        keys = dict(dt.train.list_variables(os.path.join(path, "variables", "variables")))
        assert not any("optimizer" in k for k in keys)
        assert json.loads((tmp_path / "bare" / "config.json").read_text())[
            "compile_config"] is None
        with caplog.at_level(logging.WARNING, logger="distrib.keras.model_saving"):
            bare = await keras.models.load_model(path)
        assert "was *not* compiled" in caplog.text
        assert bare.optimizer is None and bare.loss is None
        with pytest.raises(RuntimeError, match="compile"):
            await epochs(bare)
        x, _ = linear_data()
        np.testing.assert_array_equal(await bare.predict(x, verbose=0),
                                      await model.predict(x, verbose=0))
        bare.compile(optimizer="sgd", loss="mse")
        assert len(await epochs(bare)) == 1

        full = await model.save(str(tmp_path / "full"))
        uncompiled = await keras.models.load_model(full, compile=False)
        assert uncompiled.optimizer is None
        np.testing.assert_array_equal(await uncompiled.predict(x, verbose=0),
                                      await model.predict(x, verbose=0))


async def test_overwrite_false_refuses_and_a_failed_save_keeps_the_previous_model(
        tmp_path, monkeypatch) -> None:
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        path = await model.save(str(tmp_path / "model"))
        before = await model.get_weights()
        with pytest.raises(AlreadyExistsError, match="overwrite=False"):
            await model.save(path, overwrite=False)
        await epochs(model)

        def crash(file: str, data: bytes) -> None:   # dies before the metadata is written
            if file.endswith("metadata.json"):
                raise OSError("disk gone")
            with open(file, "wb") as f:
                f.write(data)
        monkeypatch.setattr(model_saving, "_write_file", crash)
        with pytest.raises(OSError, match="disk gone"):
            await model.save(path)
        monkeypatch.undo()
        assert sorted(os.listdir(tmp_path)) == ["model"]           # no half-written folder
        kept = await keras.models.load_model(path)
        for got, want in zip(await kept.get_weights(), before):     # the previous model
            np.testing.assert_array_equal(got, want)

        await model.save(path)                                      # overwrite=True replaces
        assert sorted(os.listdir(tmp_path)) == ["model"]
        replaced = await keras.models.load_model(path)
        for got, want in zip(await replaced.get_weights(), await model.get_weights()):
            np.testing.assert_array_equal(got, want)

        other = tmp_path / "notes"
        other.mkdir()
        (other / "keep.txt").write_text("mine")
        with pytest.raises(AlreadyExistsError, match="not a model saved by model.save"):
            await model.save(str(other))
        assert (other / "keep.txt").read_text() == "mine"


async def test_a_corrupt_or_missing_file_is_a_typed_error(tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        model = small_model()
        path = await model.save(str(tmp_path / "model"))
        weights = os.path.join(path, "variables", "variables")
        with open(weights, "r+b") as f:
            f.seek(-5, os.SEEK_END)
            byte = f.read(1)
            f.seek(-5, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
        with pytest.raises(DataLossError):
            await keras.models.load_model(path)

        path = await model.save(str(tmp_path / "model"))           # a good one again
        config_file = tmp_path / "model" / "config.json"
        config_file.write_text(config_file.read_text().replace('"units": 4', '"units": 5'))
        with pytest.raises(DataLossError, match="checksum"):
            await keras.models.load_model(path)

        with pytest.raises(NotFoundError, match="No file or directory found at"):
            await keras.models.load_model(str(tmp_path / "nowhere"))
        # a crash between the two renames of an overwrite: the old model is named
        os.rename(path, tmp_path / ".model.previous-0123")
        with pytest.raises(NotFoundError, match=r"interrupted: .*\.model\.previous-0123"):
            await keras.models.load_model(path)
        (tmp_path / "empty").mkdir()
        with pytest.raises(NotFoundError, match="not a model saved by model.save.*metadata"):
            await keras.models.load_model(str(tmp_path / "empty"))
        weights_only = await model.save_weights(str(tmp_path / "w" / "ckpt"))
        with pytest.raises(NotFoundError, match="load_weights"):
            await keras.models.load_model(weights_only)


# -- user classes --------------------------------------------------------------------------

class Scale(keras.layers.Layer):
    """A user's layer with an argument of its own (so it must give get_config)."""

    def __init__(self, factor: float = 2.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs, training=None):
        return inputs * self.factor

    def get_config(self) -> dict:
        return {**super().get_config(), "factor": self.factor}


class NoConfig(keras.layers.Layer):
    def __init__(self, factor: float = 2.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.factor = factor


def halved_mse(y_true, y_pred):
    return keras.losses.mean_squared_error(y_true, y_pred) * 0.5


@keras.utils.register_keras_serializable(package="tests")
class TwoDense(keras.Model):
    """A subclassed model: its layers are attributes, built on first call."""

    def __init__(self, units: int = 4, **kwargs) -> None:
        super().__init__(**kwargs)
        self.units = units
        self.hidden = keras.layers.Dense(units, activation="relu")
        self.head = keras.layers.Dense(1)

    def call(self, inputs, training=None):
        return self.head(self.hidden(inputs))

    def get_config(self) -> dict:
        return {**super().get_config(), "units": self.units}


async def test_an_unknown_class_is_named_and_custom_objects_give_it(tmp_path) -> None:
    async with asyncio.timeout(BOUND_S):
        model = keras.Sequential([keras.layers.Dense(2, input_shape=(3,)), Scale(3.0)])
        model.compile(optimizer="sgd", loss=halved_mse)
        path = await model.save(str(tmp_path / "model"))
        with pytest.raises(ValueError, match=r"Unknown layer: 'Scale'.*custom_objects"):
            await keras.models.load_model(path)
        with pytest.raises(ValueError, match=r"Unknown loss: 'halved_mse'.*custom_objects"):
            await keras.models.load_model(path, custom_objects={"Scale": Scale})
        loaded = await keras.models.load_model(
            path, custom_objects={"Scale": Scale, "halved_mse": halved_mse})
        assert loaded.layers[1].factor == 3.0 and loaded.loss.fn is halved_mse
        x, _ = linear_data()
        np.testing.assert_array_equal(await loaded.predict(x, verbose=0),
                                      await model.predict(x, verbose=0))
        uncompiled = await keras.models.load_model(path, compile=False,
                                                   custom_objects={"Scale": Scale})
        assert uncompiled.loss is None

        with pytest.raises(NotImplementedError, match=r"NoConfig has arguments \['factor'\]"):
            await keras.Sequential([keras.layers.Dense(1, input_shape=(3,)),
                                    NoConfig()]).save(str(tmp_path / "no"))


async def test_a_registered_subclassed_model_loads_and_continues(tmp_path) -> None:
    """Registered: found with no custom_objects. Its layers are built on first call
    after the load; their weights and the optimizer's slots wait for that."""
    async with asyncio.timeout(BOUND_S):
        model = TwoDense(5)
        model.compile(optimizer=keras.optimizers.RMSprop(0.01, momentum=0.5), loss="mse")
        await epochs(model, 2)
        path = await model.save(str(tmp_path / "sub"))
        saved = json.loads((tmp_path / "sub" / "config.json").read_text())
        assert saved["registered_name"] == "tests>TwoDense"
        want = await epochs(model, 2)
        loaded = await keras.models.load_model(path)
        assert type(loaded) is TwoDense and loaded.units == 5
        np.testing.assert_allclose(await epochs(loaded, 2), want, rtol=1e-6)


# -- configs -------------------------------------------------------------------------------

@pytest.mark.parametrize("obj", [
    keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    keras.optimizers.Adam(0.002, beta_1=0.8, epsilon=1e-6),
    keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.2),
    keras.optimizers.RMSprop(0.01, rho=0.8, momentum=0.1, centered=True),
    keras.losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
    keras.losses.SparseCategoricalCrossentropy(reduction="sum"),
    keras.losses.LossFunctionWrapper(keras.losses.mean_absolute_error, name="l1"),
    keras.metrics.BinaryAccuracy(threshold=0.3),
    keras.metrics.SparseCategoricalAccuracy(name="acc"),
    keras.layers.Dropout(0.25, seed=3, name="drop"),
    keras.layers.Activation("tanh", name="act"),
], ids=lambda obj: type(obj).__name__)
def test_get_config_round_trips_through_json(obj) -> None:
    """Keras: cls.from_config(obj.get_config()) makes an equal object; the dict
    serialize gives survives JSON."""
    text = json.dumps(keras.utils.serialize_keras_object(obj))
    modules = {"optimizers": keras.optimizers, "losses": keras.losses,
               "metrics": keras.metrics, "layers": keras.layers}
    module = modules[type(obj).__module__.rsplit(".", 1)[-1]]
    again = module.deserialize(json.loads(text))
    assert type(again) is type(obj)
    assert again.get_config() == obj.get_config()


async def test_model_checkpoint_saves_the_whole_model_unless_weights_only(tmp_path) -> None:
    """Keras' ModelCheckpoint: save_weights_only=False (the default) calls
    model.save, so each epoch's path loads back as a model."""
    x = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    y = x.sum(axis=1, keepdims=True)
    model = dt.keras.Sequential([dt.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(loss="mse", optimizer="sgd")
    ckpt = dt.keras.callbacks.ModelCheckpoint(str(tmp_path / "m.{epoch}"), monitor="loss")
    await model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[ckpt])
    loaded = await dt.keras.models.load_model(str(tmp_path / "m.2"))
    np.testing.assert_allclose(await loaded.predict(x), await model.predict(x), rtol=1e-6)
