# Copyright 2015 The TensorFlow Authors. All Rights Reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
# ==============================================================================
#
# The TF1 tutorial (tensorflow/models, tutorials/image/cifar10/
# cifar10_multi_gpu_train.py, the revision whose towers read their own batches)
# on distrib, with README.md's mechanical edits only: tf. -> dt., train and
# main are `async def`, and each step is awaited (`await sess.run`,
# `await saver.save`); xrange is Python 3's range. One flag is added:
# --cpu_towers puts tower i on /cpu:i of a session with --num_gpus CPU
# devices (ConfigProto(device_count=...)), where the tutorial's /gpu:i would
# all land on CPU:0 of a machine without GPUs (allow_soft_placement).

"""A binary to train CIFAR-10 using multiple GPUs with synchronous updates.

Accuracy:
cifar10_multi_gpu_train.py achieves ~86% accuracy after 100K steps (256
epochs of data) as judged by cifar10_eval.py.

Speed: With batch_size 128.

System        | Step Time (sec/batch)  |     Accuracy
--------------------------------------------------------------------
1 Tesla K20m  | 0.35-0.60              | ~86% at 60K steps  (5 hours)
1 Tesla K40m  | 0.25-0.35              | ~86% at 100K steps (4 hours)
2 Tesla K20m  | 0.13-0.20              | ~84% at 30K steps  (2.5 hours)
3 Tesla K20m  | 0.13-0.18              | ~84% at 30K steps
4 Tesla K20m  | ~0.10                  | ~84% at 30K steps

Usage:
Please see the tutorial and website for how to download the CIFAR-10
data set, compile the program and train the model.

http://tensorflow.org/tutorials/deep_cnn/
"""
from __future__ import absolute_import, division, print_function

import os.path
import re
import time
from datetime import datetime

import cifar10
import numpy as np

import distrib as dt

FLAGS = dt.app.flags.FLAGS

dt.app.flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                           """Directory where to write event logs """
                           """and checkpoint.""")
dt.app.flags.DEFINE_integer('max_steps', 1000000,
                            """Number of batches to run.""")
dt.app.flags.DEFINE_integer('num_gpus', 1,
                            """How many GPUs to use.""")
dt.app.flags.DEFINE_boolean('log_device_placement', False,
                            """Whether to log device placement.""")
dt.app.flags.DEFINE_boolean('cpu_towers', False,
                            """distrib: tower i on /cpu:i of a session with """
                            """--num_gpus CPU devices, not on /gpu:i.""")


def tower_loss(scope):
  """Calculate the total loss on a single tower running the CIFAR model.

  Args:
    scope: unique prefix string identifying the CIFAR tower, e.g. 'tower_0'

  Returns:
     Tensor of shape [] containing the total loss for a batch of data
  """
  # Get images and labels for CIFAR-10.
  images, labels = cifar10.distorted_inputs()

  # Build inference Graph.
  logits = cifar10.inference(images)

  # Build the portion of the Graph calculating the losses. Note that we will
  # assemble the total_loss using a custom function below.
  _ = cifar10.loss(logits, labels)

  # Assemble all of the losses for the current tower only.
  losses = dt.get_collection('losses', scope)

  # Calculate the total loss for the current tower.
  total_loss = dt.add_n(losses, name='total_loss')

  # Attach a scalar summary to all individual losses and the total loss; do the
  # same for the averaged version of the losses.
  for l in losses + [total_loss]:  # noqa: E741 - the tutorial's name
    # Remove 'tower_[0-9]/' from the name in case this is a multi-GPU training
    # session. This helps the clarity of presentation on tensorboard.
    loss_name = re.sub('%s_[0-9]*/' % cifar10.TOWER_NAME, '', l.op.name)
    dt.summary.scalar(loss_name, l)

  return total_loss


def average_gradients(tower_grads):
  """Calculate the average gradient for each shared variable across all towers.

  Note that this function provides a synchronization point across all towers.

  Args:
    tower_grads: List of lists of (gradient, variable) tuples. The outer list
      is over individual gradients. The inner list is over the gradient
      calculation for each tower.
  Returns:
     List of pairs of (gradient, variable) where the gradient has been averaged
     across all towers.
  """
  average_grads = []
  for grad_and_vars in zip(*tower_grads):
    # Note that each grad_and_vars looks like the following:
    #   ((grad0_gpu0, var0_gpu0), ... , (grad0_gpuN, var0_gpuN))
    grads = []
    for g, _ in grad_and_vars:
      # Add 0 dimension to the gradients to represent the tower.
      expanded_g = dt.expand_dims(g, 0)

      # Append on a 'tower' dimension which we will average over below.
      grads.append(expanded_g)

    # Average over the 'tower' dimension.
    grad = dt.concat(axis=0, values=grads)
    grad = dt.reduce_mean(grad, 0)

    # Keep in mind that the Variables are redundant because they are shared
    # across towers. So .. we will just return the first tower's pointer to
    # the Variable.
    v = grad_and_vars[0][1]
    grad_and_var = (grad, v)
    average_grads.append(grad_and_var)
  return average_grads


async def train():
  """Train CIFAR-10 for a number of steps."""
  with dt.Graph().as_default(), dt.device('/cpu:0'):
    # Create a variable to count the number of train() calls. This equals the
    # number of batches processed * FLAGS.num_gpus.
    global_step = dt.get_variable(
        'global_step', [],
        initializer=dt.constant_initializer(0), trainable=False)

    # Calculate the learning rate schedule.
    num_batches_per_epoch = (cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN /
                             FLAGS.batch_size)
    decay_steps = int(num_batches_per_epoch * cifar10.NUM_EPOCHS_PER_DECAY)

    # Decay the learning rate exponentially based on the number of steps.
    lr = dt.train.exponential_decay(cifar10.INITIAL_LEARNING_RATE,
                                    global_step,
                                    decay_steps,
                                    cifar10.LEARNING_RATE_DECAY_FACTOR,
                                    staircase=True)

    # Create an optimizer that performs gradient descent.
    opt = dt.train.GradientDescentOptimizer(lr)

    # Calculate the gradients for each model tower.
    tower_grads = []
    device = '/cpu:%d' if FLAGS.cpu_towers else '/gpu:%d'
    with dt.variable_scope(dt.get_variable_scope()):
      for i in range(FLAGS.num_gpus):
        with dt.device(device % i):
          with dt.name_scope('%s_%d' % (cifar10.TOWER_NAME, i)) as scope:
            # Calculate the loss for one tower of the CIFAR model. This function
            # constructs the entire CIFAR model but shares the variables across
            # all towers.
            loss = tower_loss(scope)

            # Reuse variables for the next tower.
            dt.get_variable_scope().reuse_variables()

            # Retain the summaries from the final tower.
            summaries = dt.get_collection(dt.GraphKeys.SUMMARIES, scope)

            # Calculate the gradients for the batch of data on this CIFAR tower.
            grads = opt.compute_gradients(loss)

            # Keep track of the gradients across all towers.
            tower_grads.append(grads)

    # We must calculate the mean of each gradient. Note that this is the
    # synchronization point across all towers.
    grads = average_gradients(tower_grads)

    # Add a summary to track the learning rate.
    summaries.append(dt.summary.scalar('learning_rate', lr))

    # Add histograms for gradients.
    for grad, var in grads:
      if grad is not None:
        summaries.append(dt.summary.histogram(var.op.name + '/gradients', grad))

    # Apply the gradients to adjust the shared variables.
    apply_gradient_op = opt.apply_gradients(grads, global_step=global_step)

    # Add histograms for trainable variables.
    for var in dt.trainable_variables():
      summaries.append(dt.summary.histogram(var.op.name, var))

    # Track the moving averages of all trainable variables.
    variable_averages = dt.train.ExponentialMovingAverage(
        cifar10.MOVING_AVERAGE_DECAY, global_step)
    variables_averages_op = variable_averages.apply(dt.trainable_variables())

    # Group all updates to into a single train op.
    train_op = dt.group(apply_gradient_op, variables_averages_op)

    # Create a saver.
    saver = dt.train.Saver(dt.global_variables())

    # Build the summary operation from the last tower summaries.
    summary_op = dt.summary.merge(summaries)

    # Build an initialization operation to run below.
    init = dt.global_variables_initializer()

    # Start running operations on the Graph. allow_soft_placement must be set to
    # True to build towers on GPU, as some of the ops do not have GPU
    # implementations.
    # distrib: --cpu_towers gives the session a CPU device per tower.
    devices = {'device_count': {'CPU': FLAGS.num_gpus}} if FLAGS.cpu_towers else {}
    sess = dt.Session(config=dt.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=FLAGS.log_device_placement, **devices))
    await sess.run(init)

    # Start the queue runners.
    dt.train.start_queue_runners(sess=sess)

    summary_writer = dt.summary.FileWriter(FLAGS.train_dir, sess.graph)

    for step in range(FLAGS.max_steps):
      start_time = time.time()
      _, loss_value = await sess.run([train_op, loss])
      duration = time.time() - start_time

      assert not np.isnan(loss_value), 'Model diverged with loss = NaN'

      if step % 10 == 0:
        num_examples_per_step = FLAGS.batch_size * FLAGS.num_gpus
        examples_per_sec = num_examples_per_step / duration
        sec_per_batch = duration / FLAGS.num_gpus

        format_str = ('%s: step %d, loss = %.2f (%.1f examples/sec; %.3f '
                      'sec/batch)')
        print (format_str % (datetime.now(), step, loss_value,
                             examples_per_sec, sec_per_batch))

      if step % 100 == 0:
        summary_str = await sess.run(summary_op)
        summary_writer.add_summary(summary_str, step)

      # Save the model checkpoint periodically.
      if step % 1000 == 0 or (step + 1) == FLAGS.max_steps:
        checkpoint_path = os.path.join(FLAGS.train_dir, 'model.ckpt')
        await saver.save(sess, checkpoint_path, global_step=step)


async def main(argv=None):  # pylint: disable=unused-argument
  cifar10.maybe_download_and_extract()
  if dt.gfile.Exists(FLAGS.train_dir):
    dt.gfile.DeleteRecursively(FLAGS.train_dir)
  dt.gfile.MakeDirs(FLAGS.train_dir)
  await train()


if __name__ == '__main__':
  dt.app.run()
