"""Partitioned variables and the embedding lookups (issue 41 item 4):
``get_variable(..., partitioner=)`` and TF's three partitioners,
``dt.nn.embedding_lookup`` with the ``mod`` and ``div`` strategies and
``max_norm``, ``embedding_lookup_sparse`` and ``safe_embedding_lookup_sparse``
with ``dt.SparseTensor``, each against a numpy reference of TF's rule (TF's
embedding_ops_test builds its expected values the same way)."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt

FULL = np.arange(10 * 3, dtype=np.float64).reshape(10, 3) / 7 - 2


def run(*fetches, init=True):
    with dt.SyncSession() as sess:
        if init:
            sess.run(dt.global_variables_initializer())
        return sess.run(list(fetches))


def _shards_of(strategy: str, n: int) -> list[np.ndarray]:
    if strategy == "mod":                       # id i: shard i % n, row i // n
        return [FULL[p::n] for p in range(n)]
    sizes = [10 // n + (1 if i < 10 % n else 0) for i in range(n)]
    return np.split(FULL, np.cumsum(sizes)[:-1])  # contiguous, the first 10 % n one longer


def test_fixed_size_partitioner_makes_tf_named_shards_of_tf_sizes():
    with dt.Graph().as_default():
        v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(3))
        assert isinstance(v, dt.PartitionedVariable) and len(v) == 3
        assert [s.op.name for s in v] == ["emb/part_0", "emb/part_1", "emb/part_2"]
        assert [s.shape.as_list() for s in v] == [[4, 3], [3, 3], [3, 3]]
        assert v.shape.as_list() == [10, 3] and v._get_partitions() == [3, 1]
        assert {s.op.name for s in dt.trainable_variables()} == {s.op.name for s in v}
        with dt.variable_scope("", reuse=True):
            assert dt.get_variable("emb", [10, 3], dtype=dt.float64) is v
        (whole,) = run(v.as_tensor())
    np.testing.assert_array_equal(whole, FULL)


def test_partitioners_follow_tfs_sizes():
    f32 = dt.float32
    # TF's variable_axis_size_partitioner: 4 bytes x 256 per row, 1 KiB shards -> a row each
    assert dt.variable_axis_size_partitioner(1024)([10, 256], f32) == [10, 1]
    assert dt.variable_axis_size_partitioner(1024 * 3)([10, 256], f32) == [4, 1]
    assert dt.variable_axis_size_partitioner(1024, max_shards=2)([10, 256], f32) == [2, 1]
    # min_max: at least min_slice_size bytes a shard, at most max_partitions shards
    part = dt.min_max_variable_partitioner(max_partitions=4, min_slice_size=4096)
    assert part([100, 32], f32) == [3, 1]       # 12800 bytes / 4096
    assert part([1000, 32], f32) == [4, 1]
    assert dt.fixed_size_partitioner(5)([3, 2], f32) == [3, 1]


def test_replica_device_setter_spreads_the_shards_over_the_ps_tasks():
    cluster = dt.ClusterSpec({"ps": ["a:1", "b:1"], "worker": ["c:1"]})
    with dt.Graph().as_default(), dt.device(dt.train.replica_device_setter(cluster=cluster)):
        v = dt.get_variable("emb", [10, 3], partitioner=dt.fixed_size_partitioner(2))
        assert [s.device for s in v] == ["/job:ps/task:0", "/job:ps/task:1"]
        # each shard's initializer runs beside it (TF colocates it): a table is made on its ps
        inits = [op for op in v.graph.get_operations() if "/Initializer/" in op.name]
        assert inits and all(op.device == ("/job:ps/task:0" if "part_0" in op.name
                                           else "/job:ps/task:1") for op in inits)
        rows = dt.nn.embedding_lookup(v, [1, 2])
        gathers = [op for op in rows.graph.get_operations() if op.type == "ResourceGather"]
        assert sorted(op.device for op in gathers) == ["/job:ps/task:0", "/job:ps/task:1"]


@pytest.mark.parametrize("strategy", ["mod", "div"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_embedding_lookup_over_shards_matches_tfs_rule(strategy, n):
    ids = np.array([[0, 9, 4], [7, 7, 1]], np.int64)
    with dt.Graph().as_default():
        shards = [dt.Variable(s, name=f"shard{i}") for i, s in enumerate(_shards_of(strategy, n))]
        out = dt.nn.embedding_lookup(shards if n > 1 else shards[0], ids,
                                     partition_strategy=strategy)
        assert out.shape.as_list() == [2, 3, 3]
        fed = dt.placeholder(dt.int64, [None])
        out_fed = dt.nn.embedding_lookup(shards, fed, partition_strategy=strategy)
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            got = sess.run(out)
            got_fed = sess.run(out_fed, {fed: ids.ravel()})
    np.testing.assert_array_equal(got, FULL[ids])
    np.testing.assert_array_equal(got_fed, FULL[ids.ravel()])


def test_lookup_gradient_is_one_indexed_slices_per_shard_and_trains_the_rows():
    ids = np.array([3, 8, 3], np.int64)
    with dt.Graph().as_default():
        v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(2))
        loss = dt.reduce_sum(dt.nn.embedding_lookup(v, ids, partition_strategy="div"))
        grads = dt.gradients(loss, list(v))
        assert all(isinstance(g, dt.IndexedSlices) for g in grads)
        train = dt.train.GradientDescentOptimizer(0.5).minimize(loss)
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            sess.run(train)
            (whole,) = sess.run([v.as_tensor()])
    want = FULL.copy()
    want[3] -= 2 * 0.5
    want[8] -= 0.5
    np.testing.assert_allclose(whole, want)


def test_max_norm_clips_each_embedding():
    with dt.Graph().as_default():
        v = dt.Variable(FULL)
        (got,) = run(dt.nn.embedding_lookup(v, [9, 0, 1], max_norm=2.0))
    rows = FULL[[9, 0, 1]]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.testing.assert_allclose(got, rows * 2.0 / np.maximum(norms, 2.0))


def _sparse(indices, values, shape, dtype=dt.int64):
    return dt.SparseTensor(dt.constant(np.array(indices, np.int64).reshape(-1, 2)),
                           dt.constant(np.array(values), dtype=dtype),
                           dt.constant(np.array(shape, np.int64)))


SP_INDICES = [[0, 0], [0, 1], [0, 2], [2, 0], [2, 1], [3, 0]]
SP_IDS = [1, 4, 1, 9, 0, 6]
SP_WEIGHTS = [2.0, 0.5, 1.0, 3.0, 1.0, 0.25]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_embedding_lookup_sparse_combines_each_row(combiner, weighted):
    with dt.Graph().as_default():
        v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(3))
        sp_ids = _sparse(SP_INDICES, SP_IDS, [4, 3])
        sp_w = _sparse(SP_INDICES, SP_WEIGHTS, [4, 3], dt.float64) if weighted else None
        # (the shards are contiguous slices of FULL: "div" reads them as FULL's rows)
        (got,) = run(dt.nn.embedding_lookup_sparse(v, sp_ids, sp_w, partition_strategy="div",
                                                   combiner=combiner))
    want = np.zeros((4, 3))
    for r in range(4):
        sel = [k for k, (row, _) in enumerate(SP_INDICES) if row == r]
        if not sel:
            continue
        w = np.array([SP_WEIGHTS[k] if weighted else 1.0 for k in sel])
        total = (FULL[[SP_IDS[k] for k in sel]] * w[:, None]).sum(0)
        scale = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w * w).sum())}[combiner]
        want[r] = total / scale
    np.testing.assert_allclose(got, want)   # row 1 has no ids: zeros (SegmentSum's gap)


@pytest.mark.parametrize("default_id", [None, 5])
def test_safe_embedding_lookup_sparse_drops_invalid_ids_and_fills_empty_rows(default_id):
    indices = [[0, 0], [0, 1], [1, 0], [3, 0], [3, 1]]
    ids = [2, -1, -1, 7, 3]        # row 1: only an invalid id; row 2: none at all
    weights = [1.0, 4.0, 1.0, 2.0, 0.0]   # a zero weight is invalid too
    with dt.Graph().as_default():
        v = dt.Variable(FULL)
        out = dt.nn.safe_embedding_lookup_sparse(
            v, _sparse(indices, ids, [4, 2]), _sparse(indices, weights, [4, 2], dt.float64),
            combiner="mean", default_id=default_id)
        (got,) = run(out)
    fill = np.zeros(3) if default_id is None else FULL[default_id]
    np.testing.assert_allclose(got, [FULL[2], fill, fill, FULL[7]])


async def test_parameter_server_strategy_looks_up_a_sharded_embedding_per_shard(fresh_graph):
    """A ``ShardedVariable`` table (``FixedShardsPartitioner(2)``): ``embedding_lookup`` and
    Keras' ``Embedding`` gather from each shard on its ps (``div``, as TF's lookup of a
    ShardedVariable), the gradients stay sparse, and a scheduled step moves only the rows."""
    import asyncio

    from tests.helpers import shut_down_strategy
    from tests.peers.cli_cluster import cluster_spec
    spec = cluster_spec(chief=1, ps=2, worker=1)
    servers = [dt.Server(spec, job_name=j, task_index=i) for j, i in (("ps", 0), ("ps", 1),
                                                                    ("worker", 0))]
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    strategy = dt.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=dt.distribute.experimental.partitioners
        .FixedShardsPartitioner(2))
    try:
        coord = dt.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            layer = dt.keras.layers.Embedding(10, 3, embeddings_initializer=dt.keras
                                              .initializers.Constant(0.0))
            layer.build((None, 2))
            table = layer.embeddings
            opt = dt.train.GradientDescentOptimizer(1.0)
        assert isinstance(table, dt.distribute.ShardedVariable)
        seen = []

        @dt.function
        def step():
            def replica_fn():
                with dt.GradientTape() as tape:
                    loss = dt.reduce_sum(layer(np.array([[1, 8], [8, 4]], np.int64)))
                grads = tape.gradient(loss, table)
                seen.extend(type(g) for g in grads)
                opt.apply_gradients([(grads, table)])
                return loss
            return strategy.run(replica_fn)

        @dt.function
        def read():
            return dt.nn.embedding_lookup(table, np.arange(10))

        async with asyncio.timeout(60):
            coord.schedule(step)
            await coord.join()
            with strategy.scope():
                got = await read()
        gathers = [op for op in dt.get_default_graph().get_operations()
                   if op.type == "ResourceGather"]
        assert {op.device.split("/device")[0] for op in gathers} == {"/job:ps/task:0",
                                                                      "/job:ps/task:1"}
        assert seen == [dt.IndexedSlices, dt.IndexedSlices]
        want = np.zeros((10, 3))
        want[[1, 4]] -= 1.0
        want[8] -= 2.0
        np.testing.assert_allclose(got, want)
        await coord.shutdown()
    finally:
        await shut_down_strategy(strategy)
        for s in servers:
            s.stop()


def test_saver_saves_a_partitioned_variable_whole_and_restores_another_partitioning(tmp_path):
    path = str(tmp_path / "model")
    with dt.Graph().as_default():
        v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(3))
        saver = dt.train.Saver()
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            written = saver.save_sync(sess, path)
    assert dict(dt.train.list_variables(written)) == {"emb": [10, 3]}
    with dt.Graph().as_default():
        v = dt.get_variable("emb", [10, 3], dtype=dt.float64,
                            partitioner=dt.fixed_size_partitioner(2))
        saver = dt.train.Saver()
        with dt.SyncSession() as sess:
            saver.restore_sync(sess, written)
            (whole,) = sess.run([v.as_tensor()])
    np.testing.assert_array_equal(whole, FULL)


@pytest.mark.parametrize("as_list", [True, False])
def test_saver_takes_a_partitioned_variable_in_its_var_list(tmp_path, as_list):
    """TF1's Saver([emb, w]) and Saver({"emb": emb}) save the shards as one entry."""
    path = str(tmp_path / "model")
    with dt.Graph().as_default():
        v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(3))
        w = dt.Variable(2.0, name="w")
        saver = dt.train.Saver([v, w] if as_list else {"emb": v})
        with pytest.raises(dt.errors.InvalidArgumentError, match="under its own name"):
            dt.train.Saver({"renamed": v})
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            written = saver.save_sync(sess, path)
            sess.run([p.assign(np.zeros(p.shape.as_list())) for p in v])
            saver.restore_sync(sess, written)
            whole = sess.run(v.as_tensor())
    want = {"emb": [10, 3], "w": []} if as_list else {"emb": [10, 3]}
    assert dict(dt.train.list_variables(written)) == want
    np.testing.assert_array_equal(whole, FULL)


async def test_checkpoint_saves_a_partitioned_variable_whole(tmp_path, fresh_graph):
    """dt.train.Checkpoint writes the shards as one entry and restores it into
    another partitioning (TF's re-partitionable restore)."""
    from distrib.distribute.functions import def_function
    v = dt.get_variable("emb", initializer=FULL, partitioner=dt.fixed_size_partitioner(2))
    split = v.checkpoint_split(FULL)
    assert [s.op.name for s, _ in split] == ["emb/part_0", "emb/part_1"]
    path = await dt.train.Checkpoint(emb=v).save(str(tmp_path / "ckpt"))
    assert dict(dt.train.list_variables(path))["emb/.ATTRIBUTES/VARIABLE_VALUE"] == [10, 3]
    await def_function.close_sessions()
    dt.reset_default_graph()
    again = dt.get_variable("emb", [10, 3], dtype=dt.float64,
                            initializer=dt.zeros_initializer(),
                            partitioner=dt.fixed_size_partitioner(3))
    await dt.train.Checkpoint(emb=again).restore(path)
    assert [p.shape.as_list() for p in again] == [[4, 3], [3, 3], [3, 3]]
    np.testing.assert_array_equal(await dt.function(lambda: again.as_tensor())(), FULL)
