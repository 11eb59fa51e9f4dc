"""The CIFAR-10 model trained by between-graph replication: ps tasks hold the
variables, each worker builds its own copy of the graph and
``SyncReplicasOptimizer`` applies the average of one gradient per worker per
step (TF1's synchronous data parallelism, as the Inception distributed
trainer does it; the tutorial's own trainers are in-graph).

Written the TF1 way: ``replica_device_setter`` places the variables of
``cifar10.inference`` on the ps (``_variable_on_cpu``'s ``/cpu:0`` lands on
the ps task's CPU), ``ExponentialMovingAverage`` of the variables is handed
to the optimizer (``variable_averages=``) so the chief updates the averages
once per aggregated step, and ``MonitoredTrainingSession`` with the
optimizer's ``make_session_run_hook`` runs it; the chief writes checkpoints
to ``--train_dir`` that ``cifar10_eval.py`` reads.

    python -m distrib.launch --ps 1 --workers 2 -- \\
        python examples/cifar10/cifar10_sync_replicas.py --max_steps 100

Without --ps_hosts/--worker_hosts/--job_name/--task_index the cluster and
the task come from TF_CONFIG (what the launcher sets). A worker prints
``done global_step=<int>`` when it ends; the launcher then stops the ps.
"""
from __future__ import annotations

import asyncio
import time
from datetime import datetime

import cifar10
import numpy as np

import distrib as dt

FLAGS = dt.app.flags.FLAGS

dt.app.flags.DEFINE_string('job_name', None, """'ps' or 'worker' (else TF_CONFIG's).""")
dt.app.flags.DEFINE_integer('task_index', None, """Index of the task in its job.""")
dt.app.flags.DEFINE_string('ps_hosts', None, """Comma-separated host:port of the ps job.""")
dt.app.flags.DEFINE_string('worker_hosts', None, """Comma-separated host:port of the workers.""")
dt.app.flags.DEFINE_string('train_dir', '/tmp/cifar10_train',
                           """Directory where the chief writes event logs and checkpoints.""")
dt.app.flags.DEFINE_integer('max_steps', 1000000, """Number of aggregated steps to run.""")
dt.app.flags.DEFINE_integer('log_frequency', 10, """How often to log results to the console.""")


def cluster_and_task():
  """The cluster and this task, from the flags or else from TF_CONFIG."""
  if FLAGS.ps_hosts and FLAGS.worker_hosts:
    cluster = dt.train.ClusterSpec({'ps': FLAGS.ps_hosts.split(','),
                                    'worker': FLAGS.worker_hosts.split(',')})
    return cluster, FLAGS.job_name, FLAGS.task_index
  resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
  return (resolver.cluster_spec(), FLAGS.job_name or resolver.task_type,
          FLAGS.task_index if FLAGS.task_index is not None else resolver.task_id)


def build(cluster, task_index):
  """The replica's graph: the CIFAR-10 model and its synchronous train op."""
  num_workers = cluster.num_tasks('worker')
  is_chief = task_index == 0
  with dt.device(dt.train.replica_device_setter(
      worker_device='/job:worker/task:%d' % task_index, cluster=cluster)):
    global_step = dt.train.get_or_create_global_step()
    with dt.device('/job:worker/task:%d/cpu:0' % task_index):
      images, labels = cifar10.distorted_inputs()
    logits = cifar10.inference(images)
    loss = cifar10.loss(logits, labels)

    num_batches_per_epoch = cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN / FLAGS.batch_size
    decay_steps = int(num_batches_per_epoch * cifar10.NUM_EPOCHS_PER_DECAY / num_workers)
    lr = dt.train.exponential_decay(cifar10.INITIAL_LEARNING_RATE, global_step,
                                    decay_steps, cifar10.LEARNING_RATE_DECAY_FACTOR,
                                    staircase=True)
    variable_averages = dt.train.ExponentialMovingAverage(
        cifar10.MOVING_AVERAGE_DECAY, global_step)
    opt = dt.train.SyncReplicasOptimizer(
        dt.train.GradientDescentOptimizer(lr), replicas_to_aggregate=num_workers,
        total_num_replicas=num_workers, variable_averages=variable_averages,
        variables_to_average=dt.trainable_variables())
    train_op = opt.minimize(loss, global_step=global_step)
    close_tokens = opt.sync_token_queue.close()   # the chief releases waiting replicas with it
  return loss, train_op, global_step, opt.make_session_run_hook(is_chief), close_tokens


async def train(server, cluster, task_index):
  is_chief = task_index == 0
  with dt.Graph().as_default() as graph:
    loss, train_op, global_step, sync_hook, close_tokens = build(cluster, task_index)
    hooks = [sync_hook, dt.train.StopAtStepHook(last_step=FLAGS.max_steps),
             dt.train.NanTensorHook(loss)]
    step, start, loss_value = 0, time.time(), float('nan')
    async with dt.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief,
        checkpoint_dir=FLAGS.train_dir if is_chief else None, hooks=hooks) as mon_sess:
      while not mon_sess.should_stop():
        _, loss_value, gs = await mon_sess.run([train_op, loss, global_step])
        if step % FLAGS.log_frequency == 0:
          duration = time.time() - start
          start = time.time()
          examples_per_sec = FLAGS.log_frequency * FLAGS.batch_size / max(duration, 1e-9)
          print('%s: worker %d: step %d (global %d), loss = %.2f (%.1f examples/sec)'
                % (datetime.now(), task_index, step, gs, loss_value,
                   examples_per_sec if step else float('nan')), flush=True)
        step += 1
    async with dt.Session(server.target, graph=graph) as sess:
      if is_chief:   # the others may wait for a token no aggregation will give
        await sess.run(close_tokens)
      final = await sess.run(global_step)
  assert step == 0 or np.isfinite(loss_value), 'Model diverged with loss = NaN'
  print('done global_step=%d steps=%d loss=%.4f' % (final, step, loss_value), flush=True)


def main(argv=None):  # pylint: disable=unused-argument
  cluster, job_name, task_index = cluster_and_task()
  server = dt.train.Server(cluster, job_name=job_name, task_index=task_index)
  try:
    if job_name == 'ps':
      server.join()
      return 0
    cifar10.maybe_download_and_extract()
    asyncio.run(train(server, cluster, task_index))
    return 0
  finally:
    server.stop()


if __name__ == '__main__':
  dt.app.run()
