"""TF's tutorial "Parameter server training with ParameterServerStrategy"
(tensorflow/docs, site/en/tutorials/distribute/parameter_server_training.ipynb),
its code cells in order, with README.md's mechanical edits only:

    python -m distrib.launch --ps 2 --workers 3 --chief -- \\
        python examples/tf2/parameter_server_training.py

``tf.`` -> ``dt.``, ``dt.enable_eager_execution()`` after the imports, and
``await`` where a step runs (``model.fit``, ``coordinator.join()``,
``RemoteValue.fetch()``), so the coordinator's cells are the body of
``async def coordinate()``. The sections: Keras ``Model.fit`` with
callbacks, then the custom training loop (``StringLookup`` preprocessing
models, a functional model on dict inputs with an ``Embedding`` sharded by
the ``MinSizePartitioner``, ``ClusterCoordinator.schedule``), inline
evaluation, and distributed evaluation.

Lines that needed more than the mechanical edits (each marked ``# edit:``):

* the cluster: the notebook starts its servers in its own process
  (``create_in_process_cluster``, on ``portpicker``'s ports); under the
  launcher every task is a process of its own, so the program branches as the
  tutorial's "Clusters in the real world" section says ("If you use the same
  binary for all tasks"): ``TFConfigClusterResolver``, the ps and worker
  tasks start a server and ``join()``, the chief runs the coordinator;
* at the end the coordinator tells the servers training is over
  (``dt.server.request_stop``): TF's servers never return from ``join()``,
  and a launcher (as Kubernetes' job) ends when its workers do;
* the notebook's ``/tmp/my_working_dir`` sits under ``$TUTORIAL_DIR``
  (default ``/tmp``), so two runs on one machine do not share it.
"""
import asyncio
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402

dt.enable_eager_execution()

TUTORIAL_DIR = os.environ.get("TUTORIAL_DIR", "/tmp")   # edit: the notebook's /tmp


def serve(cluster_resolver):   # edit: "Clusters in the real world", one binary
  # Set the environment variable to allow reporting worker and ps failure to the
  # coordinator. This is a workaround and won't be necessary in the future.
  os.environ["GRPC_FAIL_FAST"] = "use_caller"

  server = dt.distribute.Server(
      cluster_resolver.cluster_spec(),
      job_name=cluster_resolver.task_type,
      task_index=cluster_resolver.task_id,
      protocol=cluster_resolver.rpc_layer or "grpc",
      start=True)
  server.join()


async def coordinate(cluster_resolver):
  NUM_PS = cluster_resolver.cluster_spec().num_tasks("ps")   # edit: the launcher's cluster

  # -- Instantiate a ParameterServerStrategy ------------------------------------------
  variable_partitioner = (
      dt.distribute.experimental.partitioners.MinSizePartitioner(
          min_shard_bytes=(256 << 10),
          max_shards=NUM_PS))

  strategy = dt.distribute.ParameterServerStrategy(
      cluster_resolver,
      variable_partitioner=variable_partitioner)

  # -- Training with Model.fit --------------------------------------------------------
  global_batch_size = 64

  x = dt.random.uniform((10, 10))
  y = dt.random.uniform((10,))

  dataset = dt.data.Dataset.from_tensor_slices((x, y)).shuffle(10).repeat()
  dataset = dataset.batch(global_batch_size)
  dataset = dataset.prefetch(2)

  with strategy.scope():
    model = dt.keras.models.Sequential([dt.keras.layers.Dense(10)])

    model.compile(dt.keras.optimizers.legacy.SGD(), loss="mse", steps_per_execution=10)

  working_dir = os.path.join(TUTORIAL_DIR, "my_working_dir")   # edit: "/tmp/my_working_dir"
  log_dir = os.path.join(working_dir, "log")
  ckpt_filepath = os.path.join(working_dir, "ckpt")
  backup_dir = os.path.join(working_dir, "backup")

  callbacks = [
      dt.keras.callbacks.TensorBoard(log_dir=log_dir),
      dt.keras.callbacks.ModelCheckpoint(filepath=ckpt_filepath),
      dt.keras.callbacks.BackupAndRestore(backup_dir=backup_dir),
  ]

  history = await model.fit(dataset, epochs=5, steps_per_epoch=20, callbacks=callbacks)
  print("fit losses %s" % " ".join("%.4f" % v for v in history.history["loss"]))  # edit

  # -- Training with a custom training loop ----------------------------------------------
  feature_vocab = [
      "avenger", "ironman", "batman", "hulk", "spiderman", "kingkong", "wonder_woman"
  ]
  label_vocab = ["yes", "no"]

  with strategy.scope():
    feature_lookup_layer = dt.keras.layers.StringLookup(
        vocabulary=feature_vocab,
        mask_token=None)
    label_lookup_layer = dt.keras.layers.StringLookup(
        vocabulary=label_vocab,
        num_oov_indices=0,
        mask_token=None)

    raw_feature_input = dt.keras.layers.Input(
        shape=(3,),
        dtype=dt.string,
        name="feature")
    feature_id_input = feature_lookup_layer(raw_feature_input)
    feature_preprocess_stage = dt.keras.Model(
        {"features": raw_feature_input},
        feature_id_input)

    raw_label_input = dt.keras.layers.Input(
        shape=(1,),
        dtype=dt.string,
        name="label")
    label_id_input = label_lookup_layer(raw_label_input)

    label_preprocess_stage = dt.keras.Model(
        {"label": raw_label_input},
        label_id_input)

  def feature_and_label_gen(num_examples=200):
    examples = {"features": [], "label": []}
    for _ in range(num_examples):
      features = random.sample(feature_vocab, 3)
      label = ["yes"] if "avenger" in features else ["no"]
      examples["features"].append(features)
      examples["label"].append(label)
    return examples

  examples = feature_and_label_gen()

  def dataset_fn(_):
    raw_dataset = dt.data.Dataset.from_tensor_slices(examples)

    train_dataset = raw_dataset.map(
        lambda x: (
            {"features": feature_preprocess_stage(x["features"])},
            label_preprocess_stage(x["label"])
        )).shuffle(200).batch(32).repeat()
    return train_dataset

  # These variables created under the `Strategy.scope` will be placed on parameter
  # servers in a round-robin fashion.
  with strategy.scope():
    # Create the model. The input needs to be compatible with Keras processing layers.
    model_input = dt.keras.layers.Input(
        shape=(3,), dtype=dt.int64, name="model_input")

    emb_layer = dt.keras.layers.Embedding(
        input_dim=len(feature_lookup_layer.get_vocabulary()), output_dim=16384)
    emb_output = dt.reduce_mean(emb_layer(model_input), axis=1)
    dense_output = dt.keras.layers.Dense(
        units=1, activation="sigmoid",
        kernel_regularizer=dt.keras.regularizers.L2(1e-4),
    )(emb_output)
    model = dt.keras.Model({"features": model_input}, dense_output)

    optimizer = dt.keras.optimizers.legacy.RMSprop(learning_rate=0.1)
    accuracy = dt.keras.metrics.Accuracy()

  assert len(emb_layer.weights) == 2
  assert emb_layer.weights[0].shape == (4, 16384)
  assert emb_layer.weights[1].shape == (4, 16384)

  print(emb_layer.weights[0].device)
  print(emb_layer.weights[1].device)

  @dt.function
  def step_fn(iterator):

    def replica_fn(batch_data, labels):
      with dt.GradientTape() as tape:
        pred = model(batch_data, training=True)
        per_example_loss = dt.keras.losses.BinaryCrossentropy(
            reduction=dt.keras.losses.Reduction.NONE)(labels, pred)
        loss = dt.nn.compute_average_loss(per_example_loss)
        model_losses = model.losses
        if model_losses:
          loss += dt.nn.scale_regularization_loss(dt.add_n(model_losses))
      gradients = tape.gradient(loss, model.trainable_variables)

      optimizer.apply_gradients(zip(gradients, model.trainable_variables))

      actual_pred = dt.cast(dt.greater(pred, 0.5), dt.int64)
      accuracy.update_state(labels, actual_pred)
      return loss

    batch_data, labels = next(iterator)
    losses = strategy.run(replica_fn, args=(batch_data, labels))
    return strategy.reduce(dt.distribute.ReduceOp.SUM, losses, axis=None)

  coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)

  @dt.function
  def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)

  per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
  per_worker_iterator = iter(per_worker_dataset)

  num_epochs = 4
  steps_per_epoch = 5
  for i in range(num_epochs):
    accuracy.reset_states()
    for _ in range(steps_per_epoch):
      coordinator.schedule(step_fn, args=(per_worker_iterator,))
    # Wait at epoch boundaries.
    await coordinator.join()
    print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))

  loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
  print("Final loss is %f" % await loss.fetch())

  # -- Evaluation: inline ---------------------------------------------------------------
  eval_dataset = dt.data.Dataset.from_tensor_slices(
      feature_and_label_gen(num_examples=16)).map(
            lambda x: (
                {"features": feature_preprocess_stage(x["features"])},
                label_preprocess_stage(x["label"])
            )).batch(8)

  eval_accuracy = dt.keras.metrics.Accuracy()

  for batch_data, labels in eval_dataset:
    pred = model(batch_data, training=False)
    actual_pred = dt.cast(dt.greater(pred, 0.5), dt.int64)
    eval_accuracy.update_state(labels, actual_pred)

  print("Evaluation accuracy: %f" % eval_accuracy.result())

  # -- Evaluation: distributed ------------------------------------------------------------
  with strategy.scope():
    # Define the eval metric on parameter servers.
    eval_accuracy = dt.keras.metrics.Accuracy()

  @dt.function
  def eval_step(iterator):
    def replica_fn(batch_data, labels):
      pred = model(batch_data, training=False)
      actual_pred = dt.cast(dt.greater(pred, 0.5), dt.int64)
      eval_accuracy.update_state(labels, actual_pred)
    batch_data, labels = next(iterator)
    strategy.run(replica_fn, args=(batch_data, labels))

  def eval_dataset_fn():
    return dt.data.Dataset.from_tensor_slices(
        feature_and_label_gen(num_examples=16)).map(
            lambda x: (
                {"features": feature_preprocess_stage(x["features"])},
                label_preprocess_stage(x["label"])
            )).shuffle(16).repeat().batch(8)

  per_worker_eval_dataset = coordinator.create_per_worker_dataset(eval_dataset_fn)
  per_worker_eval_iterator = iter(per_worker_eval_dataset)

  eval_steps_per_epoch = 2
  for _ in range(eval_steps_per_epoch):
    coordinator.schedule(eval_step, args=(per_worker_eval_iterator,))
  await coordinator.join()
  print("Distributed evaluation accuracy: %f" % eval_accuracy.result())   # edit: "Distributed"

  # edit: training is over: the servers' join() returns (module header)
  cluster = cluster_resolver.cluster_spec()
  for job in ("worker", "ps"):
    for i in cluster.task_indices(job):
      await dt.server.request_stop(cluster.task_address(job, i))


if __name__ == "__main__":
  cluster_resolver = dt.distribute.cluster_resolver.TFConfigClusterResolver()
  if cluster_resolver.task_type in ("worker", "ps"):
    serve(cluster_resolver)
  else:
    asyncio.run(coordinate(cluster_resolver))
