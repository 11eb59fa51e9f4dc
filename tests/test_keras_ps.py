"""dt.keras under ParameterServerStrategy: ``fit`` schedules the train step on a
ClusterCoordinator (made implicitly, or the program's), ``steps_per_epoch``
times per epoch, on two workers whose variables live on two ps tasks.

The digits classifier reaches the accuracy it reaches without a strategy;
History holds one value per epoch; arrays, a ``dt.data.Dataset`` and a
``DatasetCreator`` are inputs (one that runs dry ends the fit with Keras'
warning); ``steps_per_epoch`` missing and batch-level callbacks are refused
as TF refuses them; evaluate/predict read the ps variables; save/load
weights and BackupAndRestore work across fits; a partitioned layer lists
its shards as Keras 2 does; a DatasetCreator works without a strategy too; and ``examples/keras_fit.py --strategy ps`` runs
under the launcher (slow).

The ps and worker tasks are real servers in this process (loopback
sockets on free ports); the strategy starts the chief's."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.distribute.functions import def_function
from examples.datasets import load_digits
from tests.helpers import ROOT, child_env
from tests.peers.cli_cluster import cluster_spec

keras = dt.keras
BOUND_S = 60


pytestmark = pytest.mark.usefixtures("fresh_keras")


@pytest.fixture
async def strategy():
    """A ParameterServerStrategy on 2 ps and 2 worker servers (this process's)."""
    async with ps_strategy() as made:
        yield made


@pytest.fixture
async def sharded_strategy():
    """``strategy`` with a partitioner: variables of 8 KiB or more in 2 shards."""
    async with ps_strategy(dt.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=8 << 10, max_shards=2)) as made:
        yield made


@contextlib.asynccontextmanager
async def ps_strategy(partitioner=None):
    spec = cluster_spec(chief=1, ps=2, worker=2)
    servers = [dt.Server(spec, job_name=j, task_index=i)
               for j, n in (("ps", 2), ("worker", 2)) for i in range(n)]
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    made = None
    try:
        made = dt.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
        yield made
    finally:
        coordinator = getattr(made, "coordinator", None)
        if coordinator is not None:
            await coordinator.shutdown()
        await def_function.close_sessions()
        if made is not None:
            made._server.stop()
        for s in servers:
            s.stop()


PS_EPOCHS = 8   # the fit under the strategy; the one without trains 4


def digits_model(strategy=None) -> keras.Sequential:
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(64,)),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def forward(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    k1, b1, k2, b2 = weights
    logits = np.maximum(x @ k1 + b1, 0.0) @ k2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# -- fit --------------------------------------------------------------------------------------
async def test_fit_on_digits_reaches_the_accuracy_of_no_strategy(strategy) -> None:
    dt.set_random_seed(3)
    x, y = load_digits("train")
    xt, yt = load_digits("test")
    steps = len(x) // 32
    async with asyncio.timeout(BOUND_S):
        base = digits_model()
        await base.fit(x, y, batch_size=32, epochs=4, verbose=0)
        _, want = await base.evaluate(xt, yt, verbose=0)

        model = digits_model(strategy)
        history = await model.fit(x, y, batch_size=32, epochs=PS_EPOCHS, steps_per_epoch=steps,
                                  validation_data=(xt, yt), verbose=0)
        loss, accuracy = await model.evaluate(xt, yt, verbose=0)
    assert {w.device.split("/device")[0] for w in model.weights} == {"/job:ps/task:0",
                                                                     "/job:ps/task:1"}
    assert history.epoch == list(range(PS_EPOCHS))
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(v) == PS_EPOCHS for v in history.history.values())
    assert history.history["loss"][-1] < history.history["loss"][0]
    # asynchronous steps (momentum 0.9 on stale gradients) learn slower than
    # synchronous ones: given twice the epochs. Measured with two closures in
    # flight per worker (the default then; one now, as TF): with the same 4 epochs
    # 20 runs on a 2-core VM gave 0.84-0.94 against 0.933 without a strategy, and
    # a loaded CI run 0.80 (failing); with 8, six runs 0.91-0.96
    assert accuracy >= 0.8 and accuracy >= want - 0.1, (accuracy, want)
    assert history.history["val_accuracy"][-1] == pytest.approx(accuracy)
    # the step was traced once per worker: both workers took steps
    assert model._steps.scheduled_train_function().experimental_get_tracing_count() == 2
    iterations = (await model.state_io.read({"i": [model.optimizer.iterations]}))["i"]
    assert int(iterations) == PS_EPOCHS * steps
    assert strategy.coordinator._tasks == []   # the coordinator fit made is stopped


async def test_fit_needs_steps_per_epoch(strategy) -> None:
    model = digits_model(strategy)
    x, y = np.zeros((8, 64), np.float32), np.zeros(8, np.int64)
    with pytest.raises(ValueError, match="`steps_per_epoch` must be specified with "
                                         "`ParameterServerStrategy`"):
        await model.fit(x, y, epochs=1, verbose=0)


async def test_evaluate_and_predict_read_the_ps_variables(strategy) -> None:
    dt.set_random_seed(1)
    x, y = load_digits("train")
    xt, yt = load_digits("test")
    async with asyncio.timeout(BOUND_S):
        model = digits_model(strategy)
        await model.fit(x, y, batch_size=64, epochs=1, steps_per_epoch=10, verbose=0)
        weights = await model.get_weights()
        probabilities = await model.predict(xt, batch_size=100, verbose=0)
        logs = await model.evaluate(xt, yt, batch_size=50, verbose=0, return_dict=True)
    want = forward(weights, xt)
    np.testing.assert_allclose(probabilities, want, rtol=1e-4, atol=1e-5)
    loss = -np.mean(np.log(np.clip(want[np.arange(len(yt)), yt], 1e-7, 1.0)))
    assert logs["loss"] == pytest.approx(loss, rel=1e-4)
    assert logs["accuracy"] == pytest.approx(np.mean(want.argmax(1) == yt))


async def test_dataset_and_dataset_creator_inputs_and_running_dry(strategy, caplog) -> None:
    dt.set_random_seed(2)
    x, y = load_digits("train")
    seen: list[int] = []
    async with asyncio.timeout(BOUND_S):
        with strategy.scope():   # no input_shape: built from the dataset's element spec
            model = keras.Sequential([keras.layers.Dense(32, activation="relu"),
                                      keras.layers.Dense(10)])
            model.compile(optimizer="adam", metrics=["accuracy"],
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        dataset = dt.data.Dataset.from_tensor_slices((x, y)).batch(64)   # finite: repeated
        history = await model.fit(
            dataset, epochs=3, steps_per_epoch=30, verbose=0,
            callbacks=[keras.callbacks.LambdaCallback(
                on_epoch_end=lambda epoch, logs: seen.append(epoch))])
        assert seen == [0, 1, 2] and len(history.history["loss"]) == 3

        def dataset_fn(context: dt.distribute.InputContext) -> dt.data.Dataset:
            rows = slice(context.input_pipeline_id * 100, (context.input_pipeline_id + 1) * 100)
            return dt.data.Dataset.from_tensor_slices((x[rows], y[rows])).batch(10)
        creator = keras.utils.experimental.DatasetCreator(dataset_fn)
        with caplog.at_level(logging.WARNING):
            history = await model.fit(creator, epochs=5, steps_per_epoch=15, verbose=0)
    # 2 workers x 10 batches: the second epoch runs dry, fit stops after it
    assert history.epoch == [0, 1]
    assert "ran out of data" in caplog.text
    with pytest.raises(ValueError, match="steps_per_epoch"):
        await model.fit(x, y, epochs=1, verbose=0)


async def test_batch_level_callbacks_are_refused_and_a_programs_coordinator_is_shared(
        strategy, tmp_path) -> None:
    x, y = load_digits("train")
    coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)
    model = digits_model(strategy)
    batch = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)
    with pytest.raises(ValueError, match="Batch-level `Callback`s are not supported"):
        await model.fit(x, y, epochs=1, steps_per_epoch=5, verbose=0, callbacks=[batch])
    with pytest.raises(ValueError, match="Batch-level"):
        await model.fit(x, y, epochs=1, steps_per_epoch=5, verbose=0, callbacks=[
            keras.callbacks.ModelCheckpoint(str(tmp_path / "w"), save_freq=3)])
    async with asyncio.timeout(BOUND_S):
        await model.fit(x, y, epochs=2, steps_per_epoch=5, verbose=0, callbacks=[
            keras.callbacks.ModelCheckpoint(str(tmp_path / "w.{epoch}"))])
        assert (tmp_path / "w.2").exists()
        assert strategy.coordinator is coordinator and coordinator._tasks   # still running
        v = model.weights[1]

        @dt.function
        def bias_sum():
            return dt.reduce_sum(v)
        result = coordinator.schedule(bias_sum)   # the program's closures still run
        await coordinator.join()
        assert np.isfinite(await result.fetch())


async def test_save_load_weights_and_backup_and_restore(strategy, tmp_path) -> None:
    dt.set_random_seed(4)
    x, y = load_digits("train")
    xt, _ = load_digits("test")
    backup = str(tmp_path / "backup")

    class Crash(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("crash after epoch 2")

    async with asyncio.timeout(BOUND_S):
        model = digits_model(strategy)
        with pytest.raises(RuntimeError, match="crash"):
            await model.fit(x, y, epochs=4, steps_per_epoch=10, verbose=0, callbacks=[
                keras.callbacks.BackupAndRestore(backup), Crash()])
        saved = await model.get_weights()
        again = digits_model(strategy)
        history = await again.fit(x, y, epochs=4, steps_per_epoch=10, verbose=0,
                                  callbacks=[keras.callbacks.BackupAndRestore(backup)])
        assert history.epoch == [2, 3]          # resumed after the backup of epoch 2
        iterations = (await again.state_io.read({"i": [again.optimizer.iterations]}))["i"]
        assert int(iterations) == 40            # the optimizer's state came back too

        path = await again.save_weights(str(tmp_path / "w"))
        third = digits_model(strategy)
        await third.load_weights(path)
        want = await again.predict(xt, verbose=0)
        got = await third.predict(xt, verbose=0)
    assert not np.allclose(saved[0], (await again.get_weights())[0])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


async def test_a_partitioned_layer_lists_its_shards_as_keras_2_does(sharded_strategy) -> None:
    """tf_keras lists a ShardedVariable's shards in ``weights``,
    ``trainable_weights`` and ``variables`` (the tutorial asserts on them); they
    listed the one ShardedVariable. The layer still computes with the whole,
    and fit, get_weights and set_weights work shard by shard."""
    dt.set_random_seed(5)
    x, y = load_digits("train")
    xt, _ = load_digits("test")
    model = digits_model(sharded_strategy)
    first = model.layers[0]
    assert isinstance(first.kernel, dt.distribute.ShardedVariable)   # 64 x 64 x 4 = 16 KiB
    assert len(first.trainable_weights) == 3                          # two shards and the bias
    assert [w.shape.as_list() for w in first.weights] == [[32, 64], [32, 64], [64]]
    assert first.variables == first.weights == first.trainable_variables
    assert [w.device.split("/device")[0] for w in first.weights[:2]] == [
        "/job:ps/task:0", "/job:ps/task:1"]
    assert len(model.trainable_variables) == len(model.weights) == 5
    async with asyncio.timeout(BOUND_S):
        history = await model.fit(x, y, batch_size=32, epochs=3, steps_per_epoch=20,
                                  verbose=0)
        weights = await model.get_weights()
        assert [w.shape for w in weights] == [(32, 64), (32, 64), (64,), (64, 10), (10,)]
        whole = [np.concatenate(weights[:2]), *weights[2:]]
        np.testing.assert_allclose(await model.predict(xt, verbose=0), forward(whole, xt),
                                   rtol=1e-4, atol=1e-5)
        await model.set_weights([w * 0 for w in weights])
        assert all(not w.any() for w in await model.get_weights())
    assert history.history["loss"][-1] < history.history["loss"][0]


async def test_a_dataset_creator_without_a_strategy_needs_steps_and_trains() -> None:
    x, y = load_digits("train")
    contexts: list[tuple[int, int]] = []

    def dataset_fn(context: dt.distribute.InputContext) -> dt.data.Dataset:
        contexts.append((context.num_input_pipelines, context.input_pipeline_id))
        return dt.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
    creator = keras.utils.experimental.DatasetCreator(dataset_fn)
    model = digits_model()
    with pytest.raises(ValueError, match="DatasetCreator.*steps_per_epoch"):
        await model.fit(creator, epochs=1, verbose=0)
    async with asyncio.timeout(BOUND_S):
        history = await model.fit(creator, epochs=2, steps_per_epoch=20, verbose=0)
    assert contexts == [(1, 0)]
    assert history.history["loss"][1] < history.history["loss"][0]
    with pytest.raises(TypeError, match="callable"):
        keras.utils.experimental.DatasetCreator([1, 2])


@pytest.mark.slow
def test_the_keras_example_fits_under_the_launcher_with_a_chief() -> None:
    launch = subprocess.Popen(
        [sys.executable, "-m", "distrib.launch", "--ps", "1", "--workers", "2", "--chief", "--",
         sys.executable, "examples/keras_fit.py", "--strategy", "ps", "--epochs", "8",
         "--verbose", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=child_env())
    try:
        out = launch.communicate(timeout=120)[0]
    finally:
        if launch.poll() is None:   # SIGTERM: the launcher stops its tasks, then itself
            launch.send_signal(signal.SIGTERM)
            try:
                launch.wait(45)
            except subprocess.TimeoutExpired:
                launch.kill()
                launch.wait(10)
    assert launch.returncode == 0, out[-3000:]
    found = re.search(r"\[chief:0\] done strategy=ps replicas=1 accuracy=(\S+)", out)
    assert found, out[-3000:]
    # asynchronous training: the order of the workers' updates varies run to run; 3
    # epochs gave 0.36-0.92 (below 0.7 in 4 of 10 runs, before this session's change
    # too), 8 epochs 0.71-0.96 in 6 runs; far above chance (0.1) is what this checks
    assert float(found.group(1)) >= 0.6
    assert "seed example: loss" in out
    # the chief told the servers to stop (the launcher may tell the ps first)
    assert all(f"{task} finished (exit code 0)" in out
               for task in ("worker:0", "worker:1", "chief:0")), out[-3000:]
