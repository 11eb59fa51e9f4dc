"""TF's "Parameter server training" tutorial, its custom training loop, ported
as a user would: ``tf.`` -> ``dt.``, ``await`` where a step runs.

The tutorial's cluster (``create_in_process_cluster``): 3 worker and 2 ps
servers in this process and a ``SimpleClusterResolver`` of that cluster with
no task, so the strategy's process, the coordinator, is no task of it (it
failed: "this ParameterServerStrategy runs no server"). Its variables are
sharded by ``MinSizePartitioner(256 KiB, max_shards=2)``: the embedding
(8 x 16384 float32, 512 KiB) becomes two shards of 4 rows, one per ps, that
the layer's ``weights`` list (they listed one ShardedVariable). Its
per-worker dataset is a ``@dt.function`` returning
``strategy.distribute_datasets_from_function(dataset_fn)`` (it raised
TypeError, then yielded one value instead of ``(features, labels)``). Its
coordinator runs the default one closure per worker (with two, the default
then, the loop converged in 11 of 30 runs; with one in 79 of 80). Converged:
after the loop, the tutorial's direct evaluation on the coordinator is right
on every example (16 new ones and the 200 trained on).

The loop trains 10 epochs of 5 steps where the tutorial trains 4: the
asynchronous loop first sits on a plateau (one class predicted) for as many
epochs as the order of its closures makes it, and 4 were too few for about
one run in 40 (the measured failures: right on 15 of 16 new examples and 195
of 200 trained on, the training still moving). Measured over 200 runs, with
the model evaluated on the 200 examples after every epoch: right on all of
them first after epoch 1-3 in 168 runs, 4 in 18, 5 in 11, 6 in 3, never
later; once right, it stayed right to the end in 199 (one was right after
epoch 1, wrong after 2 and 3, right from 4 on). 10 epochs leave 4 beyond the
slowest. Converged as the test asks: 39 of 40 runs of 4 epochs, 150 of 150
of 8, 40 of 40 of 10.

Where the port is not mechanical (each a missing piece, not a change of
behaviour): no Keras preprocessing layers (``StringLookup``), so the
features and labels are made as ids directly, as the lookups would; no
``dt.keras.layers.Embedding`` (nor ``embedding_lookup``/``gather``), so the
embedding is a user layer computing the lookup as a one-hot matmul; no
functional ``Model``/``Input``, so the model is a subclass called on the
features; no ``Metric.update_state`` inside a step (distrib's metrics keep
totals in the client), so each step returns its correct predictions and
the loop adds them up; no ``dt.compat.v1.ConfigProto`` (``dt.ConfigProto``)
nor Keras' "uniform" initializer name ("random_uniform"); the tutorial
asserts a shard's device as ``/job:ps/replica:0/task:0/device:CPU:0``,
distrib's variable names its device ``/job:ps/task:0`` (not canonicalized).

Each of those fixes is also pinned by a test of its own: a ``dt.function``
dataset_fn of distributed datasets, the coordinator as a client of the
cluster (no task, or task chief of a cluster without one; in-process
servers, and server processes that do not know it). The one closure per
worker is pinned in ``test_coordinator.py``, the shards in ``test_keras_ps.py``.

``python -m tests.test_ps_tutorial [RUNS] [CLOSURES_PER_WORKER] [EPOCHS]`` runs
the loop RUNS times (seeds 0, 1, ...) and prints how many converged; EPOCHS=4
is the tutorial's own length."""
from __future__ import annotations

import asyncio
import dataclasses
import random
import sys

import numpy as np
import pytest

import distrib as dt
from tests.helpers import shut_down_strategy
from tests.peers.cli_cluster import cli_task, cluster_spec, free_ports, write_cluster
from tests.test_coordinator import linear_data, linear_model

BOUND_S = 120
pytestmark = pytest.mark.usefixtures("fresh_graph")
NUM_WORKERS, NUM_PS = 3, 2
FEATURE_VOCAB = ["avenger", "ironman", "batman", "hulk", "spiderman", "kingkong",
                 "wonder_woman"]
VOCAB_SIZE = len(FEATURE_VOCAB) + 1   # StringLookup's: one OOV id (0), then the vocabulary
NUM_EPOCHS, STEPS_PER_EPOCH = 10, 5   # the tutorial's 4 epochs converge too seldom: above


def create_in_process_cluster(num_workers: int, num_ps: int):
    """The tutorial's: worker and ps servers here, a resolver of their cluster
    (no chief, no task). Also returns the servers, which the test stops."""
    ports = iter(free_ports(num_workers + num_ps))
    cluster_dict = {"worker": [f"localhost:{next(ports)}" for _ in range(num_workers)]}
    if num_ps > 0:
        cluster_dict["ps"] = [f"localhost:{next(ports)}" for _ in range(num_ps)]
    cluster_spec = dt.train.ClusterSpec(cluster_dict)
    worker_config = dt.ConfigProto()   # (TF: tf.compat.v1.ConfigProto; no dt.compat)
    servers = [dt.distribute.Server(cluster_spec, job_name="worker", task_index=i,
                                    config=worker_config, protocol="grpc")
               for i in range(num_workers)]
    servers += [dt.distribute.Server(cluster_spec, job_name="ps", task_index=i,
                                     protocol="grpc") for i in range(num_ps)]
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec,
                                                                    rpc_layer="grpc")
    return resolver, servers


def feature_and_label_gen(rng: random.Random, num_examples: int = 200) -> dict:
    """The tutorial's examples, as the lookups give them: feature ids 1..7 (three
    distinct words), label 0 ("yes") when "avenger" is among them, else 1."""
    features, labels = [], []
    for _ in range(num_examples):
        words = rng.sample(FEATURE_VOCAB, 3)
        features.append([FEATURE_VOCAB.index(w) + 1 for w in words])
        labels.append([0 if "avenger" in words else 1])
    return {"features": np.array(features, np.int64), "label": np.array(labels, np.int64)}


class Embedding(dt.keras.layers.Layer):
    """Keras' ``Embedding(input_dim, output_dim)`` (its "uniform" initializer), its
    lookup as a one-hot matmul: ``dt.keras.layers.Embedding`` is missing."""

    def __init__(self, input_dim: int, output_dim: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = input_dim, output_dim

    def get_config(self) -> dict:
        return {**super().get_config(), "input_dim": self.input_dim,
                "output_dim": self.output_dim}

    def build(self, input_shape) -> None:
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          initializer="random_uniform")

    def call(self, ids):
        onehot = dt.cast(dt.equal(dt.reshape(ids, [-1, 1]),
                                  dt.constant(np.arange(self.input_dim, dtype=np.int64))),
                         dt.float32)
        rows = dt.matmul(onehot, self.embeddings)
        return dt.reshape(rows, [-1, int(ids.shape[1]), self.output_dim])


class TutorialModel(dt.keras.Model):
    """``Model({"features": model_input}, Dense(1, sigmoid)(reduce_mean(emb(x), 1)))``."""

    def __init__(self) -> None:
        super().__init__()
        self.emb_layer = Embedding(input_dim=VOCAB_SIZE, output_dim=16384)
        self.dense = dt.keras.layers.Dense(units=1, activation="sigmoid")

    def call(self, features, training=None):
        emb_output = dt.reduce_mean(self.emb_layer(features), axis=1)
        return self.dense(emb_output)


async def run_tutorial(seed: int, closures_per_worker: int | None = None,
                       epochs: int = NUM_EPOCHS) -> Outcome:
    """The custom loop, once, and the tutorial's direct evaluation after it."""
    dt.reset_default_graph()
    dt.keras.backend.clear_session()
    cluster_resolver, servers = create_in_process_cluster(NUM_WORKERS, NUM_PS)
    strategy = coordinator = None
    try:
        variable_partitioner = dt.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=(256 << 10), max_shards=NUM_PS)
        strategy = dt.distribute.experimental.ParameterServerStrategy(
            cluster_resolver, variable_partitioner=variable_partitioner)
        examples = feature_and_label_gen(random.Random(seed))

        def dataset_fn(_):
            raw_dataset = dt.data.Dataset.from_tensor_slices(examples)
            return raw_dataset.map(lambda x: ({"features": x["features"]}, x["label"])
                                   ).shuffle(200, seed=seed).batch(32).repeat()

        with strategy.scope():
            model = TutorialModel()
            model(np.zeros((1, 3), np.int64))   # builds the weights, as Keras' Input does
            optimizer = dt.keras.optimizers.RMSprop(learning_rate=0.1)
        emb_layer = model.emb_layer
        assert len(emb_layer.weights) == 2
        assert emb_layer.weights[0].shape == (4, 16384)
        assert emb_layer.weights[1].shape == (4, 16384)
        assert emb_layer.weights[0].device.startswith("/job:ps/task:0")
        assert emb_layer.weights[1].device.startswith("/job:ps/task:1")
        assert len(model.trainable_variables) == 4   # two shards, kernel, bias

        @dt.function
        def step_fn(iterator):
            def replica_fn(batch_data, labels):
                with dt.GradientTape() as tape:
                    pred = model(batch_data["features"], training=True)
                    per_example_loss = dt.keras.losses.BinaryCrossentropy(
                        reduction=dt.keras.losses.Reduction.NONE)(labels, pred)
                    loss = dt.nn.compute_average_loss(per_example_loss)
                    gradients = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
                actual_pred = dt.cast(dt.greater(pred, 0.5), dt.int64)
                correct = dt.reduce_sum(dt.cast(dt.equal(labels, actual_pred), dt.float32))
                return loss, correct, dt.reduce_sum(dt.ones_like(pred))
            batch_data, labels = next(iterator)
            losses, correct, count = strategy.run(replica_fn, args=(batch_data, labels))
            return strategy.reduce(dt.distribute.ReduceOp.SUM, losses, axis=None), correct, count


        kwargs = {} if closures_per_worker is None else {
            "closures_per_worker": closures_per_worker}
        coordinator = dt.distribute.experimental.coordinator.ClusterCoordinator(strategy,
                                                                               **kwargs)

        @dt.function
        def per_worker_dataset_fn():
            return strategy.distribute_datasets_from_function(dataset_fn)

        per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
        per_worker_iterator = iter(per_worker_dataset)
        accuracies = []
        async with asyncio.timeout(BOUND_S):
            for _ in range(epochs):
                results = [coordinator.schedule(step_fn, args=(per_worker_iterator,))
                           for _ in range(STEPS_PER_EPOCH)]
                await coordinator.join()   # Wait at epoch boundaries.
                fetched = [await r.fetch() for r in results]   # (loss, correct, examples)
                accuracies.append(sum(float(f[1]) for f in fetched) /
                                  sum(float(f[2]) for f in fetched))
            loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
            final_loss = float((await loss.fetch())[0])

            # the tutorial's direct evaluation: the model on the coordinator, on 16
            # new examples (of the same generator), and here on the 200 trained on
            eval_examples = feature_and_label_gen(random.Random(seed + 1000), 16)

            @dt.function
            def predict(features):
                return model(features, training=False)
            with strategy.scope():
                evaluated = []
                for data in (eval_examples, examples):
                    pred = await predict(data["features"])
                    evaluated.append(float(np.mean((pred > 0.5) == data["label"])))
        return Outcome(accuracies, final_loss, *evaluated)
    finally:
        if coordinator is not None:
            await coordinator.shutdown()
        try:
            if strategy is not None:
                await shut_down_strategy(strategy)
        finally:
            for s in servers:
                s.stop()
            dt.reset_default_graph()


@dataclasses.dataclass
class Outcome:
    """One run: each epoch's accuracy (predictions made before each step's own
    update, as the tutorial's metric), the last step's loss, and the trained
    model's accuracy on the 16 evaluation examples and on the 200 trained on."""
    epochs: list[float]
    final_loss: float
    eval_accuracy: float
    train_accuracy: float

    @property
    def converged(self) -> bool:
        """The trained model right on every example, new or trained on."""
        return self.eval_accuracy == 1.0 and self.train_accuracy == 1.0


@pytest.mark.slow
async def test_the_tutorial_custom_loop_converges_with_the_default_coordinator() -> None:
    """The issue's target, 10 of 10 runs converged: every run must (the margin
    measured is in the module header)."""
    outcomes = [await run_tutorial(seed=seed) for seed in range(10)]
    assert all(o.converged for o in outcomes), [o for o in outcomes if not o.converged]


# -- the tutorial's pieces, each pinned ---------------------------------------------------
@pytest.fixture
async def tutorial_strategy():
    """The tutorial's strategy on its in-process cluster (2 workers, 2 ps, no chief)."""
    resolver, servers = create_in_process_cluster(2, 2)
    strategy = None
    try:
        strategy = dt.distribute.experimental.ParameterServerStrategy(resolver)
        yield strategy
    finally:
        await shut_down_strategy(strategy, *servers)


async def read_variable(strategy, var) -> np.ndarray:
    @dt.function
    def read():
        return var.read_value()
    with strategy.scope():
        return await read()


async def test_a_dt_function_dataset_fn_of_distributed_datasets_keeps_the_elements(
        tutorial_strategy) -> None:
    """The tutorial's per-worker dataset: a ``@dt.function`` (it raised TypeError:
    its call is a coroutine) returning ``distribute_datasets_from_function``
    (its elements came as one value, not ``(features, labels)``); and a
    ``@dt.function`` returning a plain dataset."""
    strategy = tutorial_strategy
    coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
    try:
        x = np.arange(16, dtype=np.float32).reshape(8, 2)
        y = np.arange(8, dtype=np.int64).reshape(8, 1)

        def dataset_fn(context):
            assert context.num_replicas_in_sync == 1
            return dt.data.Dataset.from_tensor_slices(({"features": x}, y)).batch(4).repeat()

        @dt.function
        def per_worker_dataset_fn():
            return strategy.distribute_datasets_from_function(dataset_fn)

        @dt.function
        def plain_dataset_fn(context):
            return dt.data.Dataset.from_tensor_slices((x, y)).batch(4).repeat()

        @dt.function
        def step(iterator):
            batch_data, labels = next(iterator)
            features = batch_data["features"] if isinstance(batch_data, dict) else batch_data
            return dt.reduce_sum(features), dt.reduce_sum(labels)

        async with asyncio.timeout(BOUND_S):
            for fn in (per_worker_dataset_fn, plain_dataset_fn):
                it = iter(coord.create_per_worker_dataset(fn))
                results = [coord.schedule(step, args=(it,)) for _ in range(4)]
                await coord.join()
                got = [tuple(int(v) for v in await r.fetch()) for r in results]
                # each worker reads its own dataset from its first batch: batch 0
                # (features 0..7, labels 0..3) or batch 1 (8..15, 4..7)
                assert set(got) <= {(28, 6), (92, 22)} and (28, 6) in got, (fn, got)
    finally:
        await coord.shutdown()


async def test_a_dataset_fn_returning_no_dataset_is_refused(tutorial_strategy) -> None:
    coord = dt.distribute.coordinator.ClusterCoordinator(tutorial_strategy)

    async def not_a_dataset():
        return None
    with pytest.raises(TypeError, match="returned an awaitable"):
        coord.create_per_worker_dataset(not_a_dataset)
    with pytest.raises(TypeError, match="must return a dt.data.Dataset"):
        coord.create_per_worker_dataset(lambda: [1, 2, 3])


async def train_linear(strategy, steps: int):
    """The linear model trained by ``steps`` closures of a coordinator of ``strategy``
    (a per-worker dataset): (the losses, the weight read on the coordinator's server,
    the step function)."""
    coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
    (w, b), step = linear_model(strategy)
    x, y = linear_data()
    it = iter(coord.create_per_worker_dataset(
        lambda: dt.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()))
    async with asyncio.timeout(BOUND_S):
        results = [coord.schedule(step, args=(it,)) for _ in range(steps)]
        await coord.join()
        losses = [float(await r.fetch()) for r in results]
        got = await read_variable(strategy, w)   # read on the coordinator's own server
    await coord.shutdown()
    return losses, got, step


@pytest.mark.parametrize("task", [None, "chief"])
async def test_a_coordinator_that_is_no_task_of_the_cluster_runs_it(task) -> None:
    """The tutorial's cluster: workers and ps only, the coordinator a client of it
    (a resolver with no task, or with task chief as TF_CONFIG names the
    coordinator); it failed: "this ParameterServerStrategy runs no server".
    As TF's strategy, it joins as /job:chief/task:0 on a free port."""
    spec = cluster_spec(ps=2, worker=2)
    servers = [dt.Server(spec, job_name=j, task_index=i) for j in ("ps", "worker")
               for i in range(2)]
    kwargs = {} if task is None else {"task_type": task, "task_id": 0}
    strategy = None
    try:
        strategy = dt.distribute.ParameterServerStrategy(
            dt.distribute.cluster_resolver.SimpleClusterResolver(dt.ClusterSpec(spec), **kwargs))
        assert strategy.cluster == dt.ClusterSpec(spec)   # the user's cluster, as given
        losses, got, step = await train_linear(strategy, 60)
        assert losses[-1] < losses[0]
        assert got.shape == (4, 1) and np.abs(got).sum() > 0
        assert step.experimental_get_tracing_count() == 2
    finally:
        await shut_down_strategy(strategy, *servers)


@pytest.mark.slow
async def test_a_client_coordinates_server_processes_that_do_not_know_it(tmp_path) -> None:
    """The real-world form: ps and worker processes (``python -m distrib.server``)
    whose cluster has no chief; the coordinator, a client with no task, trains
    through them and reads the ps's variables on its own server."""
    spec = cluster_spec(ps=1, worker=2)
    cfg = write_cluster(tmp_path, spec)
    procs, strategy = [], None
    try:
        for job, index in (("ps", 0), ("worker", 0), ("worker", 1)):
            procs.append(cli_task(cfg, job, index))
        strategy = dt.distribute.ParameterServerStrategy(
            dt.distribute.cluster_resolver.SimpleClusterResolver(dt.ClusterSpec(spec)))
        losses, got, _ = await train_linear(strategy, 120)
        assert losses[-1] < 1e-2 < losses[0]
        np.testing.assert_allclose(got.ravel(), [1.0, 2.0, -1.0, 0.5], atol=0.1)
    finally:
        await shut_down_strategy(strategy, *procs)



if __name__ == "__main__":
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    closures = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] != "default" else None
    epochs = int(sys.argv[3]) if len(sys.argv) > 3 else NUM_EPOCHS

    async def main() -> None:
        ok = 0
        for i in range(runs):
            result = await run_tutorial(seed=i, closures_per_worker=closures, epochs=epochs)
            ok += result.converged
            print(f"run {i}: accuracy per epoch {[round(a, 3) for a in result.epochs]}, "
                  f"final loss {result.final_loss:.4f}, evaluation accuracy "
                  f"{result.eval_accuracy:.3f} (on the training set {result.train_accuracy:.3f})"
                  f", converged {result.converged}", flush=True)
        print(f"converged {ok}/{runs} (closures_per_worker="
              f"{closures if closures is not None else 'default'}, {epochs} epochs)")
    asyncio.run(main())
