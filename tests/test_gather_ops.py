"""The embeddings' ops (GatherV2, ResourceGather, the scatter updates,
UnsortedSegmentSum, SegmentSum, SegmentMean, DynamicPartition, DynamicStitch,
Unique, SparseToDense) against the examples of TF's op documentation and op
tests (their hard-coded values), numpy references written out here, and
central differences for the gradients; and ``IndexedSlices`` as the gradient
of a gather (item 2 of issue 41, in one process)."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt


def run(*fetches, feed=None):
    with dt.SyncSession() as sess:
        return sess.run(list(fetches), feed_dict=feed)


# gather_op_test.py testBatchDims: (batch_dims, params, indices, expected)
BATCH_DIMS = [
    (0, [6, 7, 8, 9], 3, 9),
    (0, [6, 7, 8, 9], [2, 1], [8, 7]),
    (0, [6, 7, 8, 9], [[2, 1], [0, 3]], [[8, 7], [6, 9]]),
    (1, [[10, 11, 12, 13], [20, 21, 22, 23]], [[2, 1], [0, 3]], [[12, 11], [20, 23]]),
    (2, [[[100, 101], [110, 111]], [[200, 201], [210, 211]]],
     [[[0, 1], [1, 0]], [[0, 0], [1, 1]]], [[[100, 101], [111, 110]], [[200, 200], [211, 211]]]),
]


@pytest.mark.parametrize("case", range(len(BATCH_DIMS)))
def test_gather_batch_dims_matches_tfs_test(case):
    batch_dims, params, indices, expected = BATCH_DIMS[case]
    with dt.Graph().as_default():
        y = dt.gather(np.array(params, np.int32), np.array(indices, np.int32),
                      batch_dims=batch_dims)
        assert y.shape.as_list() == list(np.shape(expected))
        (got,) = run(y)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_along_any_axis_is_numpys_take(axis):
    rng = np.random.default_rng(0)
    params = rng.standard_normal((4, 5, 6)).astype(np.float32)
    ids = np.array([[1, 0], [3, 3]], np.int32)
    with dt.Graph().as_default():
        y = dt.gather(params, ids, axis=axis)
        assert y.shape.as_list() == list(np.take(params, ids, axis=axis).shape)
        (got,) = run(y)
    np.testing.assert_array_equal(got, np.take(params, ids, axis=axis))


def test_gather_out_of_range_index_is_an_error_naming_it():
    with dt.Graph().as_default():
        y = dt.gather(np.arange(4.0, dtype=np.float32), [1, 7])
        with pytest.raises(dt.errors.InvalidArgumentError, match=r"indices\[1\] = 7 is not in "
                                                                 r"\[0, 4\)"):
            run(y)


def _numeric_grad(f, x, eps=1e-3):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("axis,batch_dims", [(0, 0), (1, 0), (2, 0), (1, 1)])
def test_gather_gradient_matches_central_differences(axis, batch_dims):
    rng = np.random.default_rng(1)
    params = rng.standard_normal((3, 4, 2))
    ids = np.array([[2, 0, 2], [1, 1, 0], [0, 3, 1]])[:, :2] if batch_dims else np.array([1, 0, 1])
    w = rng.standard_normal(np.shape(np.take(params, ids, axis=axis)) if not batch_dims else
                            (3, 2, 2))

    def forward(p):
        if batch_dims:
            return float(np.sum(w * np.stack([np.take(p[k], ids[k], axis=0) for k in range(3)])))
        return float(np.sum(w * np.take(p, ids, axis=axis)))
    with dt.Graph().as_default():
        p = dt.constant(params)
        loss = dt.reduce_sum(w * dt.gather(p, ids, axis=axis, batch_dims=batch_dims))
        (g,) = dt.gradients(loss, [p])
        want_sparse = axis == 0 and batch_dims == 0
        assert isinstance(g, dt.IndexedSlices) == want_sparse
        (got,) = run(g)
    dense = got.to_dense() if want_sparse else got
    np.testing.assert_allclose(dense, _numeric_grad(forward, params), atol=1e-6)


def test_gather_gradient_is_indexed_slices_value_and_densifies():
    params = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    with dt.Graph().as_default():
        p = dt.constant(params)
        y = dt.gather(p, [2, 0, 2])
        (g,) = dt.gradients(dt.reduce_sum(y * y), [p])
        assert isinstance(g, dt.IndexedSlices) and g.shape.as_list() == [4, 3]
        dense = dt.convert_to_tensor(g)
        assert dense.shape.as_list() == [4, 3]
        got, got_dense = run(g, dense)
    assert isinstance(got, dt.IndexedSlicesValue)
    np.testing.assert_array_equal(got.indices, [2, 0, 2])
    np.testing.assert_array_equal(got.dense_shape, [4, 3])
    want = np.zeros_like(params)
    want[0] = 2 * params[0]
    want[2] = 4 * params[2]
    np.testing.assert_array_equal(got_dense, want)


def test_two_gathers_gradients_join_as_slices_and_add_n_densifies():
    with dt.Graph().as_default():
        p = dt.constant(np.ones((5, 2), np.float32))
        loss = dt.reduce_sum(dt.gather(p, [1, 3])) + dt.reduce_sum(3.0 * dt.gather(p, [3]))
        (g,) = dt.gradients(loss, [p])
        assert isinstance(g, dt.IndexedSlices)
        mixed = dt.gradients(loss + dt.reduce_sum(p * p), [p])[0]
        assert not isinstance(mixed, dt.IndexedSlices)
        got, got_mixed = run(g, mixed)
    np.testing.assert_array_equal(np.sort(got.indices), [1, 3, 3])
    want = np.zeros((5, 2), np.float32)
    want[1], want[3] = 1, 4
    np.testing.assert_array_equal(got.to_dense(), want)
    np.testing.assert_array_equal(got_mixed, want + 2)


def test_variable_gather_reads_rows_where_it_lives_and_tape_gives_slices():
    with dt.Graph().as_default():
        with dt.device("/cpu:0"):
            v = dt.Variable(np.arange(8.0, dtype=np.float32).reshape(4, 2), name="table")
        with dt.GradientTape() as tape:
            rows = dt.gather(v, [3, 1])
            loss = dt.reduce_sum(rows)
        g = tape.gradient(loss, v)
        assert rows.op.type == "ResourceGather" and rows.op.device == v.device
        assert isinstance(g, dt.IndexedSlices)
        with dt.SyncSession() as sess:
            sess.run(v.initializer)
            got_rows, got_g = sess.run([rows, g])
    np.testing.assert_array_equal(got_rows, [[6, 7], [2, 3]])
    np.testing.assert_array_equal(got_g.indices, [3, 1])


# state_ops / scatter ops documentation and scatter_ops_test.py's rules
def test_scatter_updates_of_a_variable():
    with dt.Graph().as_default():
        v = dt.Variable(np.zeros((4, 2), np.float32))
        add = dt.scatter_add(v, [0, 2, 0], [[1, 1], [2, 2], [3, 3]])   # repeated rows add
        sub = dt.scatter_sub(v, [1], [[5, 5]])
        upd = dt.scatter_update(v, [3], [[9, 8]])
        nd = v.scatter_nd_update([[2, 1]], [7.0])
        slices = v.scatter_add(dt.IndexedSlices(dt.constant([[1.0, 1.0]]), dt.constant([1])))
        with dt.SyncSession() as sess:
            sess.run(v.initializer)
            sess.run(add)
            sess.run(sub)
            sess.run(upd)
            sess.run(nd)
            got = sess.run(slices)
    np.testing.assert_array_equal(got, [[4, 4], [-4, -4], [2, 7], [9, 8]])


def test_scatter_out_of_range_and_bad_updates_are_errors():
    with dt.Graph().as_default():
        v = dt.Variable(np.zeros((3, 2), np.float32))
        bad_index = dt.scatter_add(v, [3], [[1.0, 1.0]])
        with pytest.raises(dt.errors.InvalidArgumentError, match="updates"):
            dt.scatter_add(v, [0, 1], [[1.0, 1.0, 1.0]])
        with dt.SyncSession() as sess:
            sess.run(v.initializer)
            with pytest.raises(dt.errors.InvalidArgumentError, match=r"indices\[0\] = 3"):
                sess.run(bad_index)
            np.testing.assert_array_equal(sess.run(v), np.zeros((3, 2)))


def test_segment_ops_match_tfs_documentation():
    c = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [4, 3, 2, 1]], np.float32)
    s = np.array([[1, 2, 3, 4], [4, 3, 2, 1], [5, 6, 7, 8]], np.float32)
    with dt.Graph().as_default():
        uss = dt.unsorted_segment_sum(c, [0, 1, 0], 2)
        assert uss.shape.as_list() == [2, 4]
        ss = dt.segment_sum(s, [0, 0, 1])
        sm = dt.segment_mean(s, [0, 0, 1])
        dropped = dt.unsorted_segment_sum(c, [0, -1, 0], 2)
        got = run(uss, ss, sm, dropped)
    np.testing.assert_array_equal(got[0], [[5, 5, 5, 5], [5, 6, 7, 8]])
    np.testing.assert_array_equal(got[1], [[5, 5, 5, 5], [5, 6, 7, 8]])
    np.testing.assert_array_equal(got[2], [[2.5, 2.5, 2.5, 2.5], [5, 6, 7, 8]])
    np.testing.assert_array_equal(got[3], [[5, 5, 5, 5], [0, 0, 0, 0]])


def test_unsorted_segment_ids_out_of_range_and_unsorted_segments_are_errors():
    with dt.Graph().as_default():
        bad = dt.unsorted_segment_sum(np.ones((2, 2), np.float32), [0, 5], 3)
        unsorted = dt.segment_sum(np.ones((3, 1), np.float32), [1, 0, 1])
        with pytest.raises(dt.errors.InvalidArgumentError, match="segment_ids"):
            run(bad)
        with pytest.raises(dt.errors.InvalidArgumentError, match="not increasing"):
            run(unsorted)


def test_segment_gradients_match_central_differences():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((5, 3))
    w = rng.standard_normal((3, 3))
    ids = np.array([0, 0, 1, 2, 2])
    uids = np.array([2, 0, -1, 2, 1])

    def f_mean(x):
        out = np.stack([x[ids == k].mean(0) for k in range(3)])
        return float(np.sum(w * out))

    def f_uss(x):
        out = np.zeros((3, 3))
        for i, k in enumerate(uids):
            if k >= 0:
                out[k] += x[i]
        return float(np.sum(w * out))
    with dt.Graph().as_default():
        x = dt.constant(data)
        g_mean = dt.gradients(dt.reduce_sum(w * dt.segment_mean(x, ids)), [x])[0]
        g_uss = dt.gradients(dt.reduce_sum(w * dt.unsorted_segment_sum(x, uids, 3)), [x])[0]
        got_mean, got_uss = run(g_mean, g_uss)
    np.testing.assert_allclose(got_mean, _numeric_grad(f_mean, data), atol=1e-6)
    np.testing.assert_allclose(got_uss, _numeric_grad(f_uss, data), atol=1e-6)


def test_dynamic_partition_and_stitch_match_tfs_documentation():
    with dt.Graph().as_default():
        parts = dt.dynamic_partition([10, 20, 30, 40, 50], [0, 0, 1, 1, 0], 2)
        merged = dt.dynamic_stitch(
            [6, [4, 1], [[5, 2], [0, 3]]],
            [[61, 62], [[41, 42], [11, 12]], [[[51, 52], [21, 22]], [[1, 2], [31, 32]]]])
        p0, p1, got = run(parts[0], parts[1], merged)
    np.testing.assert_array_equal(p0, [10, 20, 50])
    np.testing.assert_array_equal(p1, [30, 40])
    np.testing.assert_array_equal(got, [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42],
                                        [51, 52], [61, 62]])


def test_partition_then_stitch_gradient_is_the_identity_fed_shape():
    data = np.arange(12.0).reshape(6, 2)
    with dt.Graph().as_default():
        x = dt.placeholder(dt.float64, [None, 2])
        ids = dt.placeholder(dt.int32, [None])
        parts = dt.dynamic_partition(x, ids, 3)
        pos = dt.dynamic_partition(dt.constant(np.arange(6, dtype=np.int32)), [2, 0, 1, 2, 0, 1],
                                   3)
        y = dt.dynamic_stitch(pos, parts)
        (g,) = dt.gradients(dt.reduce_sum(y * y), [x])
        got_y, got_g = run(y, g, feed={x: data, ids: [2, 0, 1, 2, 0, 1]})
    np.testing.assert_array_equal(got_y, data)
    np.testing.assert_array_equal(got_g, 2 * data)


def test_unique_and_sparse_to_dense_match_tfs_documentation():
    with dt.Graph().as_default():
        y, idx = dt.unique([1, 1, 2, 4, 4, 4, 7, 8, 8])
        dense = dt.sparse_to_dense([[0, 1], [2, 3]], [3, 4], [5.0, 6.0], default_value=-1.0)
        vec = dt.sparse_to_dense([1, 3], [5], 2, 0)
        unsorted = dt.sparse_to_dense([3, 1], [5], 2, 0)
        got = run(y, idx, dense, vec)
        with pytest.raises(dt.errors.InvalidArgumentError, match="out of order"):
            run(unsorted)
    np.testing.assert_array_equal(got[0], [1, 2, 4, 7, 8])
    np.testing.assert_array_equal(got[1], [0, 0, 1, 2, 2, 2, 3, 4, 4])
    np.testing.assert_array_equal(got[2], [[-1, 5, -1, -1], [-1, -1, -1, -1], [-1, -1, -1, 6]])
    np.testing.assert_array_equal(got[3], [0, 2, 0, 2, 0])


def test_clip_by_global_norm_scales_slices_and_keeps_them_sparse():
    with dt.Graph().as_default():
        p = dt.constant(np.ones((4, 2), np.float32))
        (g,) = dt.gradients(dt.reduce_sum(3.0 * dt.gather(p, [1, 2])), [p])
        clipped, norm = dt.clip_by_global_norm([g], 1.0)
        assert isinstance(clipped[0], dt.IndexedSlices)
        got, got_norm = run(clipped[0], norm)
    np.testing.assert_allclose(got_norm, 6.0)           # sqrt(4 entries of 3^2)
    np.testing.assert_allclose(got.values, np.full((2, 2), 0.5))
    np.testing.assert_array_equal(got.indices, [1, 2])
