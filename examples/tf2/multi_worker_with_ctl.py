"""TF's tutorial "Custom training loop with Keras and MultiWorkerMirroredStrategy"
(tensorflow/docs, site/en/tutorials/distribute/multi_worker_with_ctl.ipynb):
its ``mnist.py`` and ``main.py`` cells, with README.md's mechanical edits only:

    python -m distrib.launch --workers 2 -- python examples/tf2/multi_worker_with_ctl.py

``tf.`` -> ``dt.``, ``dt.enable_eager_execution()`` after the imports, and
``await`` where a step runs: the training step (``await train_step(iterator)``)
and the checkpoint's ``save``/``restore``, so ``main.py``'s top level is the
body of ``async def main()``.

Lines that needed more than the mechanical edits (each marked ``# edit:``):

* the data: ``tf.keras.datasets.mnist.load_data()`` is a download and this
  machine is offline, so ``mnist_data.load_data()`` gives the 8x8 digits of
  ``examples/data`` in MNIST's form (28x28 ``uint8``, see ``mnist_data.py``).
  There are 1437 of them, not 60000: one epoch of the tutorial's 70 steps
  of 64 per worker needs more than one pass, so ``mnist_dataset`` repeats
  (``.repeat()`` added after its ``shuffle``).

Everything else is the tutorial's: the regularized model, RMSprop, the
metric, the ``epoch``/``step_in_epoch`` variables (eager, outside the
strategy), the checkpoint in ``multiprocessing.util.get_temp_dir()`` (so,
as in TF, each worker's own temporary folder).
"""
import asyncio
import json
import os
import sys
from multiprocessing import util

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402
from examples.tf2 import mnist_data  # noqa: E402  (edit: the data, see above)

dt.enable_eager_execution()


# -- mnist.py -------------------------------------------------------------------------

def mnist_dataset(batch_size):
  (x_train, y_train), _ = mnist_data.load_data()   # edit: tf.keras.datasets.mnist
  # The `x` arrays are in uint8 and have values in the range [0, 255].
  # You need to convert them to float32 with values in the range [0, 1]
  x_train = x_train / np.float32(255)
  y_train = y_train.astype(np.int64)
  train_dataset = dt.data.Dataset.from_tensor_slices(
      (x_train, y_train)).shuffle(60000).repeat()   # edit: repeat(), 1437 images
  return train_dataset

def dataset_fn(global_batch_size, input_context):
  batch_size = input_context.get_per_replica_batch_size(global_batch_size)
  dataset = mnist_dataset(batch_size)
  dataset = dataset.shard(input_context.num_input_pipelines,
                          input_context.input_pipeline_id)
  dataset = dataset.batch(batch_size)
  return dataset

def build_cnn_model():
  regularizer = dt.keras.regularizers.L2(1e-5)
  return dt.keras.Sequential([
      dt.keras.Input(shape=(28, 28)),
      dt.keras.layers.Reshape(target_shape=(28, 28, 1)),
      dt.keras.layers.Conv2D(32, 3,
                             activation='relu',
                             kernel_regularizer=regularizer),
      dt.keras.layers.Flatten(),
      dt.keras.layers.Dense(128,
                            activation='relu',
                            kernel_regularizer=regularizer),
      dt.keras.layers.Dense(10, kernel_regularizer=regularizer)
  ])


# -- main.py --------------------------------------------------------------------------

async def main():
  per_worker_batch_size = 64
  tf_config = json.loads(os.environ['TF_CONFIG'])
  num_workers = len(tf_config['cluster']['worker'])
  global_batch_size = per_worker_batch_size * num_workers

  num_epochs = 3
  num_steps_per_epoch=70

  # Checkpoint saving and restoring
  def _is_chief(task_type, task_id, cluster_spec):
    return (task_type is None
            or task_type == 'chief'
            or (task_type == 'worker'
                and task_id == 0
                and 'chief' not in cluster_spec.as_dict()))

  def _get_temp_dir(dirpath, task_id):
    base_dirpath = 'workertemp_' + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    dt.io.gfile.makedirs(temp_dir)
    return temp_dir

  def write_filepath(filepath, task_type, task_id, cluster_spec):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id, cluster_spec):
      dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)

  checkpoint_dir = os.path.join(util.get_temp_dir(), 'ckpt')

  # Define Strategy
  strategy = dt.distribute.MultiWorkerMirroredStrategy()

  with strategy.scope():
    # Model building/compiling need to be within `tf.distribute.Strategy.scope`.
    multi_worker_model = build_cnn_model()

    multi_worker_dataset = strategy.distribute_datasets_from_function(
        lambda input_context: dataset_fn(global_batch_size, input_context))
    optimizer = dt.keras.optimizers.RMSprop(learning_rate=0.001)
    train_accuracy = dt.keras.metrics.SparseCategoricalAccuracy(
        name='train_accuracy')

  @dt.function
  def train_step(iterator):
    """Training step function."""

    def step_fn(inputs):
      """Per-Replica step function."""
      x, y = inputs
      with dt.GradientTape() as tape:
        predictions = multi_worker_model(x, training=True)
        per_example_loss = dt.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True,
            reduction=dt.keras.losses.Reduction.NONE)(y, predictions)
        loss = dt.nn.compute_average_loss(per_example_loss)
        model_losses = multi_worker_model.losses
        if model_losses:
          loss += dt.nn.scale_regularization_loss(dt.add_n(model_losses))

      grads = tape.gradient(loss, multi_worker_model.trainable_variables)
      optimizer.apply_gradients(
          zip(grads, multi_worker_model.trainable_variables))
      train_accuracy.update_state(y, predictions)

      return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(
        dt.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

  epoch = dt.Variable(
      initial_value=dt.constant(0, dtype=dt.dtypes.int64), name='epoch')
  step_in_epoch = dt.Variable(
      initial_value=dt.constant(0, dtype=dt.dtypes.int64),
      name='step_in_epoch')

  task_type, task_id, cluster_spec = (strategy.cluster_resolver.task_type,
                                      strategy.cluster_resolver.task_id,
                                      strategy.cluster_resolver.cluster_spec())

  checkpoint = dt.train.Checkpoint(
      model=multi_worker_model, epoch=epoch, step_in_epoch=step_in_epoch)

  write_checkpoint_dir = write_filepath(checkpoint_dir, task_type, task_id,
                                        cluster_spec)
  checkpoint_manager = dt.train.CheckpointManager(
      checkpoint, directory=write_checkpoint_dir, max_to_keep=1)

  # Restoring the checkpoint
  latest_checkpoint = dt.train.latest_checkpoint(checkpoint_dir)
  if latest_checkpoint:
    await checkpoint.restore(latest_checkpoint)

  # Resume our CTL training
  while epoch.numpy() < num_epochs:
    iterator = iter(multi_worker_dataset)
    total_loss = 0.0
    num_batches = 0

    while step_in_epoch.numpy() < num_steps_per_epoch:
      total_loss += await train_step(iterator)
      num_batches += 1
      step_in_epoch.assign_add(1)

    train_loss = total_loss / num_batches
    print('Epoch: %d, accuracy: %f, train_loss: %f.'
                  %(epoch.numpy(), train_accuracy.result(), train_loss))

    train_accuracy.reset_states()

    await checkpoint_manager.save()
    if not _is_chief(task_type, task_id, cluster_spec):
      dt.io.gfile.rmtree(write_checkpoint_dir)

    epoch.assign_add(1)
    step_in_epoch.assign(0)


if __name__ == '__main__':
  asyncio.run(main())
