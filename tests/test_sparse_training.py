"""Sparse gradients applied where the variable lives (issue 41 items 2 and 3):
every TF1 optimizer's sparse rule against a numpy reference of TF's kernel
(``SparseApply*``: the rows of a repeated index summed first), Adam's TF1
sparse rule against its dense rule (TF1's sparse Adam decays the whole
slots, so the two agree), and a step of an embedding model on a ps process
that moves only the rows it touches (the step trace's send bytes)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import distrib as dt

ROWS, DIM = 6, 3
IDS = np.array([4, 1, 4, 0], np.int32)      # row 4 twice: its rows add first
INIT = (np.arange(ROWS * DIM, dtype=np.float64).reshape(ROWS, DIM) - 7) / 10
W = np.linspace(-1, 1, len(IDS) * DIM).reshape(len(IDS), DIM)


def _summed_grad():
    """d(sum(W * table[IDS])) / d table, the rows of a repeated id summed."""
    uniq = np.unique(IDS)
    return uniq, np.stack([W[IDS == i].sum(0) for i in uniq])


def _train(opt, steps=2, sparse=True):
    with dt.Graph().as_default():
        table = dt.Variable(INIT, name="table")
        if sparse:
            rows = dt.gather(table, IDS)
        else:   # the same loss through a one-hot product: a dense gradient
            rows = dt.matmul(dt.constant(np.eye(ROWS)[IDS]), table)
        loss = dt.reduce_sum(W * rows)
        grads = opt.compute_gradients(loss, [table])
        assert isinstance(grads[0][0], dt.IndexedSlices) == sparse
        train = opt.apply_gradients(grads)
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            for _ in range(steps):
                sess.run(train)
            return sess.run(table)


def test_gradient_descent_scatters_the_rows():
    uniq, g = _summed_grad()
    want = INIT.copy()
    want[uniq] -= 2 * 0.5 * g
    np.testing.assert_allclose(_train(dt.train.GradientDescentOptimizer(0.5)), want)


def test_adagrad_updates_touched_rows_with_summed_duplicates():
    uniq, g = _summed_grad()
    var, acc = INIT.copy(), np.full_like(INIT, 0.1)
    for _ in range(2):
        acc[uniq] += g * g
        var[uniq] -= 0.3 * g / np.sqrt(acc[uniq])
    np.testing.assert_allclose(_train(dt.train.AdagradOptimizer(0.3)), var, rtol=1e-12)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_updates_only_touched_rows(nesterov):
    uniq, g = _summed_grad()
    var, acc = INIT.copy(), np.zeros_like(INIT)
    for _ in range(2):
        acc[uniq] = acc[uniq] * 0.9 + g
        var[uniq] -= (0.2 * g + 0.2 * 0.9 * acc[uniq]) if nesterov else 0.2 * acc[uniq]
    got = _train(dt.train.MomentumOptimizer(0.2, 0.9, use_nesterov=nesterov))
    np.testing.assert_allclose(got, var, rtol=1e-12)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_updates_only_touched_rows(centered):
    uniq, g = _summed_grad()
    var, ms, mom, mg = INIT.copy(), np.ones_like(INIT), np.zeros_like(INIT), np.zeros_like(INIT)
    for _ in range(2):
        ms[uniq] += (g * g - ms[uniq]) * (1 - 0.9)
        denom = ms[uniq] + 1e-10
        if centered:
            mg[uniq] += (g - mg[uniq]) * (1 - 0.9)
            denom = denom - mg[uniq] ** 2
        mom[uniq] = 0.5 * mom[uniq] + 0.01 * g / np.sqrt(denom)
        var[uniq] -= mom[uniq]
    got = _train(dt.train.RMSPropOptimizer(0.01, momentum=0.5, centered=centered))
    np.testing.assert_allclose(got, var, rtol=1e-10)


def test_tf1_sparse_adam_equals_its_dense_rule():
    sparse = _train(dt.train.AdamOptimizer(0.1), steps=3)
    dense = _train(dt.train.AdamOptimizer(0.1), steps=3, sparse=False)
    np.testing.assert_allclose(sparse, dense, rtol=1e-10, atol=1e-12)
    assert not np.allclose(sparse, INIT)


@pytest.mark.parametrize("name", ["sgd", "adam", "adagrad", "rmsprop"])
def test_keras_optimizers_apply_sparse_gradients(name):
    """Keras 2's rules: sparse and dense agree where Keras' are not lazy (Adam, RMSprop
    without momentum decay the whole slots; SGD and Adagrad leave untouched rows)."""
    def keras_train(sparse):
        opt = dt.keras.optimizers.get(name)
        with dt.Graph().as_default():
            table = dt.Variable(INIT, name="table")
            rows = dt.gather(table, IDS) if sparse else dt.matmul(
                dt.constant(np.eye(ROWS)[IDS]), table)
            loss = dt.reduce_sum(W * rows)
            train = opt.minimize(loss, [table])
            with dt.SyncSession() as sess:
                sess.run(dt.global_variables_initializer())
                for _ in range(2):
                    sess.run(train)
                return sess.run(table)
    sparse, dense = keras_train(True), keras_train(False)
    np.testing.assert_allclose(sparse, dense, rtol=1e-6, atol=1e-9)
    assert not np.allclose(sparse, INIT)


def test_sparse_gradient_of_the_wrong_dtype_is_an_error():
    with dt.Graph().as_default():
        table = dt.Variable(INIT)
        bad = dt.IndexedSlices(dt.constant(np.ones((1, DIM), np.float32)), dt.constant([0]))
        with pytest.raises(dt.errors.InvalidArgumentError, match="dtype"):
            dt.train.AdagradOptimizer(0.1).apply_gradients([(bad, table)])


# -- a step on a ps process: only the rows cross the wire ---------------------------------
def _embedding_step(spec, table_rows: int, batch: int, dim: int = 16):
    cluster = dt.ClusterSpec(spec)
    g = dt.Graph()
    with g.as_default():
        with dt.device(dt.train.replica_device_setter(cluster=cluster,
                                                      worker_device="/job:worker/task:0")):
            table = dt.Variable(dt.random_uniform([table_rows, dim], -0.1, 0.1, seed=3),
                                name="emb")
            w = dt.Variable(np.ones((dim, 1), np.float32), name="w")
            ids = dt.placeholder(dt.int64, [None], name="ids")
            logits = dt.matmul(dt.gather(table, ids), w)
            loss = dt.reduce_mean(logits * logits)
            step = dt.train.AdagradOptimizer(0.1).minimize(loss)
            init = dt.global_variables_initializer()
    return g, table, ids, loss, step, init


def test_a_step_moves_the_rows_it_touches_not_the_table(ps_worker_cluster):
    spec = ps_worker_cluster
    rows, batch, dim = 20_000, 64, 16
    g, table, ids, loss, step, init = _embedding_step(spec, rows, batch, dim)
    feed = {ids: np.random.default_rng(0).integers(0, rows, batch)}
    with dt.SyncSession("distrib://" + spec["worker"][0], graph=g) as sess:
        sess.run(init)
        before = sess.run(table)
        sess.run(step, feed)        # warm: partitions registered
        md = dt.RunMetadata()
        sess.run([loss, step], feed, options=dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
                 run_metadata=md)
        after = sess.run(table)
        graphs = dt.RunMetadata()
        sess.run(step, feed, options={"output_partition_graphs": True}, run_metadata=graphs)
    sent = sum(n.output_bytes for d in md.step_stats.dev_stats for n in d.node_stats
               if n.kind == "send")
    touched = 2 * batch * (dim * 4 + 8)   # rows and int64 ids, forward and backward
    assert 0 < sent <= 1.5 * touched, (sent, touched)
    assert sent < rows * dim * 4 / 50     # the table (1.28 MB) never moves
    changed = np.flatnonzero(np.any(after != before, axis=1))
    assert set(changed) <= set(feed[ids].tolist()) and len(changed) > 0
    ps_ops = {n["op"] for p in graphs.partition_graphs if p.task == "/job:ps/task:0"
              for n in p.nodes}
    assert {"ResourceGather", "SparseApplyAdagrad"} <= ps_ops, sorted(ps_ops)


# -- SyncReplicasOptimizer aggregates the rows (SparseConditionalAccumulator) ------------
async def test_sync_replicas_average_sparse_gradients_as_rows():
    from distrib.train.optimizers.global_step import get_or_create_global_step
    from tests.test_sync_replicas import GUARD, cluster

    class SparseReplica:
        def __init__(self, spec, task):
            self.graph = dt.Graph()
            with self.graph.as_default(), dt.device(dt.train.replica_device_setter(
                    cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
                self.table = dt.Variable(INIT, name="table")
                self.gs = get_or_create_global_step()
                self.ids = dt.placeholder(dt.int32, [None], name="ids")
                loss = dt.reduce_sum(dt.gather(self.table, self.ids))
                self.opt = dt.train.SyncReplicasOptimizer(
                    dt.train.GradientDescentOptimizer(1.0), replicas_to_aggregate=2,
                    total_num_replicas=2)
                grads = self.opt.compute_gradients(loss, [self.table])
                assert isinstance(grads[0][0], dt.IndexedSlices)
                self.train = self.opt.apply_gradients(grads, global_step=self.gs)
                self.init = dt.global_variables_initializer()
                self.tokens = self.opt.get_init_tokens_op()
            self.target = f"distrib://{spec['worker'][task]}"

    async with cluster(2) as spec:
        r0, r1 = SparseReplica(spec, 0), SparseReplica(spec, 1)
        async with dt.Session(r0.target, graph=r0.graph) as s0, \
                dt.Session(r1.target, graph=r1.graph) as s1:
            await s0.run(r0.init)
            await s0.run(r0.opt.chief_init_op)
            await s0.run(r0.tokens)
            await s1.run(r1.opt.local_step_init_op)
            await asyncio.wait_for(asyncio.gather(s0.run(r0.train, {r0.ids: [1, 1, 3]}),
                                                  s1.run(r1.train, {r1.ids: [3, 5]})), GUARD)
            await asyncio.wait_for(s0.run(r0.opt.get_chief_queue_runner().step_op), GUARD)
            table, gs = await s0.run([r0.table, r0.gs])
    # TF's element-wise average (SparseConditionalAccumulator's DivideAccumGradByCounter):
    # each row over the gradients that had it; replica 0 sends row 1 twice (summed: 2)
    want = INIT.copy()
    want[1] -= 2.0                # replica 0's alone
    want[3] -= (1.0 + 1.0) / 2    # both replicas'
    want[5] -= 1.0                # replica 1's alone, not halved
    np.testing.assert_allclose(table, want)
    assert gs == 1


@pytest.mark.parametrize("kind", ["mirrored", "central_storage"])
async def test_mirrored_replicas_gather_their_rows_and_match_one_replica(two_cpus, kind):
    """Two replicas' sparse gradients are gathered (concatenated), not densified: both
    copies (CentralStorageStrategy: its one variable) take the Adagrad step of the
    global batch, by SparseApplyAdagrad, and nothing densifies a gradient."""
    ids = np.array([[1, 4], [4, 0], [2, 2], [5, 1]], np.int32)   # 4 examples of 2 ids

    async def train(strategy):
        with strategy.scope():
            table = dt.Variable(INIT, name="table")
            opt = dt.train.AdagradOptimizer(0.2)
        seen = []

        def step(batch):
            with dt.GradientTape() as tape:
                loss = dt.reduce_sum(dt.gather(table, batch)) / 4.0
            grads = tape.gradient(loss, [table])
            seen.append(type(grads[0]))
            opt.apply_gradients(zip(grads, [table]))
            return loss

        @dt.function
        def run(batch):
            return strategy.run(step, args=(batch,))

        @dt.function
        def copies():
            return list(strategy.experimental_local_results(table))
        for batch in strategy.experimental_distribute_dataset(
                dt.data.Dataset.from_tensor_slices(ids).batch(4)):
            await run(batch)
        return await copies(), seen

    strategy = dt.distribute.MirroredStrategy() if kind == "mirrored" else \
        dt.distribute.experimental.CentralStorageStrategy()
    async with asyncio.timeout(60):
        mirrored, seen = await train(strategy)
    assert seen and all(t is dt.IndexedSlices for t in seen)
    made = {op.type for op in dt.get_default_graph().get_operations()}
    assert "SparseApplyAdagrad" in made and not made & {"ApplyAdagrad", "UnsortedSegmentSum"}
    g = np.bincount(ids.ravel(), minlength=ROWS)[:, None] / 4.0 * np.ones((1, DIM))
    want = INIT - 0.2 * g / np.sqrt(0.1 + g * g)     # one Adagrad step on the global batch
    assert len(mirrored) == (2 if kind == "mirrored" else 1)
    np.testing.assert_allclose(mirrored[0], mirrored[-1])
    np.testing.assert_allclose(mirrored[0], want, rtol=1e-12)


# -- FTRL's sparse rule (SparseApplyFtrl / V2): TF's ftrl_test sparse cases ---------------
def test_ftrl_sparse_with_l1_l2_shrinkage_matches_tfs_ftrl_test():
    """TF's testFtrlWithL1_L2_L2ShrinkageSparse: 10 steps; the untouched rows stay."""
    with dt.Graph().as_default():
        var0 = dt.Variable([[1.0], [2.0]], dtype=dt.float32)
        var1 = dt.Variable([[4.0], [3.0]], dtype=dt.float32)
        grads0 = dt.IndexedSlices(dt.constant([[0.1]], dtype=dt.float32), dt.constant([0]),
                                  dt.constant([2, 1]))
        grads1 = dt.IndexedSlices(dt.constant([[0.02]], dtype=dt.float32), dt.constant([1]),
                                  dt.constant([2, 1]))
        opt = dt.train.FtrlOptimizer(3.0, initial_accumulator_value=0.1,
                                     l1_regularization_strength=0.001,
                                     l2_regularization_strength=2.0,
                                     l2_shrinkage_regularization_strength=0.1)
        update = opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
        assert any(op.type == "SparseApplyFtrlV2" for op in dt.get_default_graph().get_operations())
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            for _ in range(10):
                sess.run(update)
            v0, v1 = sess.run([var0, var1])
    np.testing.assert_allclose(v0, [[-0.22578995], [2.0]], rtol=1e-5)
    np.testing.assert_allclose(v1, [[4.0], [-0.13229476]], rtol=1e-5)


def test_ftrl_minimizes_a_sparse_lookup_as_tfs_ftrl_test():
    """TF's testMinimizeSparseResourceVariable: one step from [[1, 2]] gives [[0, 1]]."""
    with dt.Graph().as_default():
        var0 = dt.Variable([[1.0, 2.0]], dtype=dt.float64)
        x = dt.constant([[4.0], [5.0]], dtype=dt.float64)
        pred = dt.matmul(dt.nn.embedding_lookup([var0], [0]), x)
        loss = pred * pred
        step = dt.train.FtrlOptimizer(1.0).minimize(loss)
        assert any(op.type == "SparseApplyFtrl" for op in dt.get_default_graph().get_operations())
        with dt.SyncSession() as sess:
            sess.run(dt.global_variables_initializer())
            sess.run(step)
            np.testing.assert_allclose(sess.run(var0), [[0.0, 1.0]], atol=0.01)


def test_ftrl_sparse_sums_repeated_rows_and_equals_its_dense_rule():
    """The rows of a repeated id summed once (TF1's deduplication), so a sparse step is
    the dense step of the same gradient on the touched rows, and leaves the rest."""
    opt = lambda: dt.train.FtrlOptimizer(0.5, l1_regularization_strength=0.01,  # noqa: E731
                                         l2_regularization_strength=0.1)
    sparse = _train(opt(), steps=3)
    dense = _train(opt(), steps=3, sparse=False)
    uniq = np.unique(IDS)
    np.testing.assert_allclose(sparse[uniq], dense[uniq], rtol=1e-10)
    rest = np.setdiff1d(np.arange(ROWS), uniq)
    np.testing.assert_array_equal(sparse[rest], INIT[rest])   # FTRL's dense rule moves them
    assert not np.allclose(sparse[uniq], INIT[uniq])


# -- the sparse accumulator on the ps: the dense one's rules and bookkeeping ---------------
ACC_ATTRS = {"acc": "emb/grad_accum", "dtype": "float64", "shape": [ROWS, DIM]}


def _resource_op(store, op, args, channel=None, **attrs):
    from distrib.runtime.state.resources import run_resource_op
    return run_resource_op({"op": op, "name": op, "attrs": {**ACC_ATTRS, **attrs}}, args, store,
                           channel, "/job:ps/task:0")


async def test_a_stalled_token_queue_names_the_replicas_a_sparse_accumulator_waits_for():
    """The token queue's stall message asks every accumulator whom it waits for; the
    sparse one answers as the dense one does (it had no waiting()/missing())."""
    from types import SimpleNamespace

    from distrib.runtime.state.resources import ResourceStore
    store = ResourceStore("/job:ps/task:0")
    _resource_op(store, "SparseAccumulatorApplyGradient", [0, np.array([1]), np.ones((1, DIM))],
                 replica="/job:worker/task:0")
    take = _resource_op(store, "SparseAccumulatorTakeGradient", [2], num_replicas=2)
    dequeue = _resource_op(store, "QueueDequeue", [], SimpleNamespace(timeout=0.2),
                           queue="sync_token_q", dtype="int64")
    try:
        with pytest.raises(dt.errors.DeadlineExceededError,
                           match=r"emb/grad_accum waits for 1 replica\(s\) never heard from"):
            await dequeue
        assert not take.done()
    finally:
        take.cancel()


async def test_sparse_accumulator_keeps_a_step_set_before_its_first_gradient():
    """The chief sets the accumulators' step (a restored global step) before any
    replica's gradient reaches a sparse one: a gradient older than it is dropped."""
    from distrib.runtime.state.resources import ResourceStore
    store = ResourceStore()
    _resource_op(store, "AccumulatorSetGlobalStep", [np.array(7)])
    _resource_op(store, "SparseAccumulatorApplyGradient", [3, np.array([1]), np.ones((1, DIM))])
    _resource_op(store, "SparseAccumulatorApplyGradient", [7, np.array([2]), np.ones((1, DIM))])
    idx, values, shape = await _resource_op(store, "SparseAccumulatorTakeGradient", [1])
    np.testing.assert_array_equal(idx, [2])     # the step-3 gradient was stale
    assert store.accumulators["emb/grad_accum"].dropped == 1
    np.testing.assert_array_equal(shape, [ROWS, DIM])
