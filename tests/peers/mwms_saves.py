"""A MultiWorkerMirroredStrategy worker that saves as TF's tutorials do
(tests/test_mwms_saves.py): run with TF_CONFIG set, ``ROOT`` the folder.

``--mode keras`` ("Multi-worker training with Keras"): one epoch of ``fit``,
then ``model.save(write_filepath(...))``, where a non-chief gets the
temporary ``workertemp_<id>`` folder; it checks its copy, deletes that folder
with ``dt.io.gfile.rmtree``, and every worker loads the chief's model at once;
then the same with ``save_weights``/``load_weights``. ``--mode custom``
("Custom training loop with MultiWorkerMirroredStrategy"): a
``CheckpointManager`` in ``write_filepath(checkpoint_dir)``, ``save``, the
non-chief's ``rmtree``, then ``restore(latest_checkpoint(checkpoint_dir))``;
then ``Checkpoint.write``/``read`` the same way, then a ``write`` the chief
cannot make (every worker's fails). ``--chief-delay S``: the
chief sleeps that long before each save, so a worker that did not wait for
the chief's copy would look for it too early. Prints ``KEY VALUE`` lines.
``--mode grad``: d/dx of ``all_reduce(SUM, x) * c`` in a replica, printed as
``grad [..]`` (TF's: the sum of every worker's ``c``).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402
from distrib import keras  # noqa: E402


def is_chief(task_type: str | None, task_id: int | None) -> bool:   # the tutorial's
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_filepath(filepath: str, task_type: str, task_id: int) -> str:   # the tutorial's
    dirpath, base = os.path.dirname(filepath), os.path.basename(filepath)
    if not is_chief(task_type, task_id):
        dirpath = os.path.join(dirpath, f"workertemp_{task_id}")
        dt.io.gfile.makedirs(dirpath)
    return os.path.join(dirpath, base)


def small_model() -> keras.Model:
    model = keras.Sequential([keras.layers.Dense(4, activation="relu", input_shape=(3,)),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    return model


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    return x, (x @ np.array([[1.0], [2.0], [-1.0]], np.float32)).astype(np.float32)


async def weights_sum(model: keras.Model) -> str:
    weights = await model.get_weights()
    return repr(float(sum(np.asarray(w, np.float64).sum() for w in weights)))


async def chief_delay(chief: bool, seconds: float) -> None:
    if chief and seconds:
        await asyncio.sleep(seconds)


async def keras_saves(strategy: any, root: str, delay: float) -> None:
    task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
    chief = is_chief(task_type, task_id)
    with strategy.scope():
        model = small_model()
    x, y = data()
    await model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    print("trained", await weights_sum(model), flush=True)

    model_path = os.path.join(root, "keras-model")
    write_model_path = write_filepath(model_path, task_type, task_id)
    await chief_delay(chief, delay)
    print("saved", await model.save(write_model_path), flush=True)
    print("own_copy", sorted(os.listdir(write_model_path)), flush=True)
    if not chief:
        dt.io.gfile.rmtree(os.path.dirname(write_model_path))
    loaded = await keras.models.load_model(model_path)
    print("loaded", await weights_sum(loaded), flush=True)

    weights_path = os.path.join(root, "weights", "w")
    write_weights_path = write_filepath(weights_path, task_type, task_id)
    await chief_delay(chief, delay)
    await model.save_weights(write_weights_path)
    print("own_weights", os.path.exists(write_weights_path), flush=True)
    if not chief:
        dt.io.gfile.rmtree(os.path.dirname(write_weights_path))
    with strategy.scope():
        again = small_model()
    again.build((None, 3))
    await again.load_weights(weights_path)
    print("weights_loaded", await weights_sum(again), flush=True)


async def custom_saves(strategy: any, root: str, delay: float) -> None:
    task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
    chief = is_chief(task_type, task_id)
    with strategy.scope():
        v = dt.Variable(np.float32(1.5), name="v")
    checkpoint = dt.train.Checkpoint(v=v)
    checkpoint_dir = os.path.join(root, "ckpt")
    write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
    manager = dt.train.CheckpointManager(checkpoint, directory=write_checkpoint_dir,
                                         max_to_keep=1)
    await chief_delay(chief, delay)
    print("saved", await manager.save(), flush=True)
    print("own_copy", sorted(os.listdir(write_checkpoint_dir)), flush=True)
    if not chief:
        dt.io.gfile.rmtree(write_checkpoint_dir)
    latest = dt.train.latest_checkpoint(checkpoint_dir)
    print("latest", latest, flush=True)
    status = await checkpoint.restore(latest)
    status.assert_consumed()

    write_prefix = write_filepath(os.path.join(root, "plain", "state"), task_type, task_id)
    await chief_delay(chief, delay)
    await checkpoint.write(write_prefix)
    print("own_write", os.path.exists(write_prefix), flush=True)
    if not chief:
        dt.io.gfile.rmtree(os.path.dirname(write_prefix))
    status = await checkpoint.read(os.path.join(root, "plain", "state"))
    status.assert_consumed()
    print("read ok", flush=True)

    # every worker given the one shared folder: the chief writes and deletes, the
    # others keep its list
    shared = dt.train.CheckpointManager(checkpoint, directory=os.path.join(root, "shared"),
                                        max_to_keep=1)
    for _ in range(2):
        await chief_delay(chief, delay)
        await shared.save()
    print("shared", sorted(os.listdir(os.path.join(root, "shared"))), shared.checkpoints,
          flush=True)

    # the chief cannot write (its folder is a file): every worker's write fails
    blocker = os.path.join(root, "blocker")
    if chief:
        with open(blocker, "w") as f:
            f.write("not a folder")
    try:
        await checkpoint.write(os.path.join(blocker, "state") if chief
                               else os.path.join(root, f"workertemp_{task_id}", "state"))
        print("failed_write none", flush=True)
    except Exception as exc:   # noqa: BLE001 - what the test reads
        print("failed_write", type(exc).__name__, flush=True)


async def grad(strategy: any) -> None:
    index = strategy.worker_index

    @dt.function
    def step() -> dt.Tensor:
        def replica() -> dt.Tensor:
            ctx = dt.distribute.get_replica_context()
            x = dt.constant([1.0, 2.0]) * float(index + 1)
            c = dt.constant([2.0, 3.0]) * float(10 ** index)    # 2, 3 and 20, 30
            with dt.GradientTape() as tape:
                tape.watch(x)
                loss = dt.reduce_sum(ctx.all_reduce("SUM", x) * c)
            return tape.gradient(loss, x)
        return strategy.run(replica)

    out = await step()
    print("grad", list(np.asarray(strategy.experimental_local_results(out)[0]).tolist()),
          flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("keras", "custom", "grad"), required=True)
    parser.add_argument("--root", default="")
    parser.add_argument("--chief-delay", type=float, default=0.0)
    args = parser.parse_args()
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    if args.mode == "keras":
        await keras_saves(strategy, args.root, args.chief_delay)
    elif args.mode == "custom":
        await custom_saves(strategy, args.root, args.chief_delay)
    else:
        await grad(strategy)
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
