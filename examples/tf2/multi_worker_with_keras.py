"""TF's tutorial "Multi-worker training with Keras" (tensorflow/docs,
site/en/tutorials/distribute/multi_worker_with_keras.ipynb), its code cells
in order, with README.md's mechanical edits only:

    python -m distrib.launch --workers 2 -- python examples/tf2/multi_worker_with_keras.py

``tf.`` -> ``dt.``, ``dt.enable_eager_execution()`` after the imports, and
``await`` where a step runs (``fit``, ``save``, ``load_model``, a checkpoint's
``save``/``restore``), so the notebook's top-level cells are the body of
``async def main()``. The cells are the notebook's ``mnist_setup.py``, its
``main.py``, then the sections that follow it (saving and loading the
model, ``Checkpoint``/``CheckpointManager``, ``BackupAndRestore`` at epoch
boundaries and with ``save_freq=30``), run by every worker of the cluster.

Lines that needed more than the mechanical edits (each marked ``# edit:``):

* the data: ``tf.keras.datasets.mnist.load_data()`` is a download and this
  machine is offline, so ``mnist_data.load_data()`` gives the 8x8 digits of
  ``examples/data`` in MNIST's form (28x28 ``uint8``, see ``mnist_data.py``);
* the notebook's paths under ``/tmp`` sit under ``$TUTORIAL_DIR`` (default
  ``/tmp``), so two runs on one machine do not share a model folder;
* the notebook's extra prints are one line per fit (``fit N: loss L
  accuracy A``) and a last ``done`` line, which the test reads;
* the notebook's ``single_worker_dataset`` (made in an earlier cell for its
  one-process run) is made here before the reload's ``fit``.
"""
import asyncio
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402
from examples.tf2 import mnist_data  # noqa: E402  (edit: the data, see above)

dt.enable_eager_execution()

TUTORIAL_DIR = os.environ.get("TUTORIAL_DIR", "/tmp")   # edit: the notebook's /tmp


# -- mnist_setup.py -------------------------------------------------------------------

def mnist_dataset(batch_size):
  (x_train, y_train), _ = mnist_data.load_data()   # edit: tf.keras.datasets.mnist
  # The `x` arrays are in uint8 and have values in the [0, 255] range.
  # You need to convert them to float32 with values in the [0, 1] range.
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = dt.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
  return train_dataset

def build_and_compile_cnn_model():
  model = dt.keras.Sequential([
      dt.keras.layers.InputLayer(input_shape=(28, 28)),
      dt.keras.layers.Reshape(target_shape=(28, 28, 1)),
      dt.keras.layers.Conv2D(32, 3, activation='relu'),
      dt.keras.layers.Flatten(),
      dt.keras.layers.Dense(128, activation='relu'),
      dt.keras.layers.Dense(10)
  ])
  model.compile(
      loss=dt.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      optimizer=dt.keras.optimizers.SGD(learning_rate=0.001),
      metrics=['accuracy'])
  return model


def report(name, history):   # edit: one line per fit, for the test
  print('%s: loss %.4f accuracy %.4f' % (name, history.history['loss'][-1],
                                         history.history['accuracy'][-1]), flush=True)


# -- main.py and the sections after it ---------------------------------------------------

async def main():
  per_worker_batch_size = 64
  tf_config = json.loads(os.environ['TF_CONFIG'])
  num_workers = len(tf_config['cluster']['worker'])

  strategy = dt.distribute.MultiWorkerMirroredStrategy()

  global_batch_size = per_worker_batch_size * num_workers
  multi_worker_dataset = mnist_dataset(global_batch_size)

  with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

  history = await multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)
  report('fit main', history)

  # Dataset sharding
  options = dt.data.Options()
  options.experimental_distribute.auto_shard_policy = dt.data.experimental.AutoShardPolicy.OFF

  global_batch_size = 64
  multi_worker_dataset = mnist_dataset(batch_size=64)
  dataset_no_auto_shard = multi_worker_dataset.with_options(options)  # noqa: F841 (as written)

  # Model saving and loading
  model_path = os.path.join(TUTORIAL_DIR, 'keras-model')   # edit: '/tmp/keras-model'

  def _is_chief(task_type, task_id):
    # Note: there are two possible `TF_CONFIG` configurations.
    #   1) In addition to `worker` tasks, a `chief` task type is use;
    #      in this case, this function should be modified to
    #      `return task_type == 'chief'`.
    #   2) Only `worker` task type is used; in this case, worker 0 is
    #      regarded as the chief. The implementation demonstrated here
    #      is for this case.
    # For the purpose of this Colab section, the `task_type` is `None` case
    # is added because it is effectively run with only a single worker.
    return (task_type == 'worker' and task_id == 0) or task_type is None

  def _get_temp_dir(dirpath, task_id):
    base_dirpath = 'workertemp_' + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    dt.io.gfile.makedirs(temp_dir)
    return temp_dir

  def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
      dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)

  task_type, task_id = (strategy.cluster_resolver.task_type,
                        strategy.cluster_resolver.task_id)
  write_model_path = write_filepath(model_path, task_type, task_id)

  await multi_worker_model.save(write_model_path)

  if not _is_chief(task_type, task_id):
    dt.io.gfile.rmtree(os.path.dirname(write_model_path))

  single_worker_dataset = mnist_dataset(64)   # edit: made in the notebook's first cells
  loaded_model = await dt.keras.models.load_model(model_path)

  # Now that the model is restored, and can continue with the training.
  history = await loaded_model.fit(single_worker_dataset, epochs=2, steps_per_epoch=20)
  report('fit loaded', history)

  # Checkpoint saving and restoring
  checkpoint_dir = os.path.join(TUTORIAL_DIR, 'ckpt')   # edit: '/tmp/ckpt'

  checkpoint = dt.train.Checkpoint(model=multi_worker_model)
  write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id)
  checkpoint_manager = dt.train.CheckpointManager(
      checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

  await checkpoint_manager.save()
  if not _is_chief(task_type, task_id):
    dt.io.gfile.rmtree(write_checkpoint_dir)

  latest_checkpoint = dt.train.latest_checkpoint(checkpoint_dir)
  await checkpoint.restore(latest_checkpoint)
  history = await multi_worker_model.fit(multi_worker_dataset, epochs=2, steps_per_epoch=20)
  report('fit restored', history)

  # BackupAndRestore callback
  # Multi-worker training with `MultiWorkerMirroredStrategy`
  # and the `BackupAndRestore` callback. The training state
  # is backed up at epoch boundaries by default.

  backup_dir = os.path.join(TUTORIAL_DIR, 'backup')   # edit: '/tmp/backup'
  callbacks = [dt.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)]
  with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
  history = await multi_worker_model.fit(multi_worker_dataset,
                                         epochs=3,
                                         steps_per_epoch=70,
                                         callbacks=callbacks)
  report('fit backup epoch', history)

  # The training state is backed up at every 30 steps because `save_freq` is set
  # to an integer value of `30`.

  callbacks = [dt.keras.callbacks.BackupAndRestore(backup_dir=backup_dir, save_freq=30)]
  with strategy.scope():
    multi_worker_model = build_and_compile_cnn_model()
  history = await multi_worker_model.fit(multi_worker_dataset,
                                         epochs=3,
                                         steps_per_epoch=70,
                                         callbacks=callbacks)
  report('fit backup 30', history)
  print('done workers=%d' % num_workers, flush=True)


if __name__ == '__main__':
  asyncio.run(main())
