"""dt.data: every transformation against a plain-Python reference, TF's edge cases,
iteration (blocking, async, prefetch threads) and the by-data split between workers."""
from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import logging
import threading
import time
from typing import Any, Iterator

import numpy as np
import pytest

import distrib as dt
from distrib.data import AutoShardPolicy, Dataset, Options
from distrib.data.distribute_input import ReplicaSteps
from distrib.errors import InvalidArgumentError, NotFoundError, OutOfRangeError


def values(ds: Dataset) -> list:
    """Elements as plain Python (ints, floats, lists, tuples, dicts) for comparisons."""
    def plain(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(plain(v) for v in x)
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return np.asarray(x).tolist()
    return [plain(x) for x in ds]


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dt.data.prefetch"]


def wait_for_no_prefetch_threads(timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while prefetch_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert prefetch_threads() == []


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    yield
    wait_for_no_prefetch_threads()


# -- sources ---------------------------------------------------------------------------

def test_namespace_is_dt_data() -> None:
    assert dt.data.Dataset is Dataset
    assert dt.data.AUTOTUNE == -1
    assert dt.data.INFINITE_CARDINALITY == -1 and dt.data.UNKNOWN_CARDINALITY == -2
    assert dt.data.experimental.AutoShardPolicy.DATA == 2


def test_from_tensor_slices_slices_every_component_along_axis_0() -> None:
    x = np.arange(12, dtype=np.float64).reshape(4, 3)
    ds = Dataset.from_tensor_slices((x, {"b": np.arange(4), "a": np.arange(4) * 10}))
    got = list(ds)
    assert len(got) == 4 and ds.cardinality() == 4 and len(ds) == 4
    for i, (row, d) in enumerate(got):
        np.testing.assert_array_equal(row, x[i])
        assert row.dtype == np.float64
        assert d == {"b": i, "a": i * 10} and list(d) == ["b", "a"]


def test_lists_become_tensors_with_tf_dtypes() -> None:
    ints = list(Dataset.from_tensor_slices([1, 2, 3]))
    floats = list(Dataset.from_tensor_slices([[1.0, 2.0], [3.0, 4.0]]))
    assert [int(v) for v in ints] == [1, 2, 3] and ints[0].dtype == np.int32
    assert floats[1].tolist() == [3.0, 4.0] and floats[0].dtype == np.float32
    assert list(Dataset.from_tensor_slices([2**40]))[0].dtype == np.int64
    assert Dataset.from_tensor_slices(np.zeros((2, 5))).element_spec.dtype == dt.float64


def test_from_tensor_slices_rejects_mismatched_first_dims_and_scalars() -> None:
    with pytest.raises(InvalidArgumentError, match="component 0 has 3 and component 1 has 4"):
        Dataset.from_tensor_slices((np.zeros(3), np.zeros(4)))
    with pytest.raises(InvalidArgumentError, match="rank >= 1"):
        Dataset.from_tensor_slices(np.float32(1.0))
    with pytest.raises(InvalidArgumentError, match="rectangular"):
        Dataset.from_tensor_slices([[1, 2], [3]])


def test_a_dataset_is_a_value_later_writes_do_not_change_it() -> None:
    x = np.arange(4)
    ds = Dataset.from_tensor_slices(x)
    x[:] = 99
    assert values(ds) == [0, 1, 2, 3]
    row = next(iter(Dataset.from_tensor_slices(np.zeros((2, 2)))))
    with pytest.raises(ValueError):
        row[0] = 1.0     # a yielded slice is read-only: it cannot corrupt the next epoch


def test_from_tensors_is_one_element() -> None:
    ds = Dataset.from_tensors((np.arange(3), 5.0))
    (only,) = list(ds)
    assert only[0].tolist() == [0, 1, 2] and only[1] == 5.0 and only[1].dtype == np.float32
    assert ds.cardinality() == 1


@pytest.mark.parametrize("args", [(5,), (2, 9), (2, 9, 3), (9, 2, -2), (3, 3), (5, 0)])
def test_range_matches_python_range(args: tuple) -> None:
    ds = Dataset.range(*args)
    assert values(ds) == list(range(*args))
    assert ds.cardinality() == len(range(*args))
    assert ds.element_spec.dtype == dt.int64 and ds.element_spec.shape == dt.TensorShape([])


def test_range_step_zero_and_output_type() -> None:
    with pytest.raises(InvalidArgumentError, match="step cannot be 0"):
        Dataset.range(0, 5, 0)
    assert next(iter(Dataset.range(3, output_type=dt.int32))).dtype == np.int32


def test_from_generator_calls_the_generator_per_iteration() -> None:
    calls = []

    def gen() -> Iterator[list[int]]:
        calls.append(1)
        yield from ([i, i * 2] for i in range(3))
    ds = Dataset.from_generator(gen)
    assert values(ds) == values(ds) == [[0, 0], [1, 2], [2, 4]]
    assert len(calls) == 2


# -- batch / unbatch -------------------------------------------------------------------

@pytest.mark.parametrize("n, b, drop", [(10, 3, False), (10, 3, True), (9, 3, False),
                                        (2, 5, False), (2, 5, True), (0, 2, False)])
def test_batch_against_reference(n: int, b: int, drop: bool) -> None:
    ds = Dataset.range(n).batch(b, drop_remainder=drop)
    ref = [list(range(i, min(i + b, n))) for i in range(0, n, b)]
    if drop:
        ref = [chunk for chunk in ref if len(chunk) == b]
    assert values(ds) == ref
    assert ds.cardinality() == len(ref)
    assert ds.element_spec.shape.as_list() == [b if drop else None]


def test_batch_stacks_structures_and_rejects_ragged_shapes() -> None:
    ds = Dataset.from_tensor_slices({"x": np.ones((5, 2)), "y": np.arange(5)}).batch(2)
    first = next(iter(ds))
    assert first["x"].shape == (2, 2) and first["y"].tolist() == [0, 1]
    ragged = Dataset.range(1, 4).map(lambda n: np.zeros(int(n))).batch(3)
    with pytest.raises(InvalidArgumentError, match="different shapes in component 0"):
        list(ragged)
    with pytest.raises(InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).batch(0)


def test_unbatch_inverts_batch() -> None:
    ds = Dataset.from_tensor_slices((np.arange(7), np.arange(7) * 2)).batch(3).unbatch()
    assert values(ds) == [(i, 2 * i) for i in range(7)]
    assert values(Dataset.range(6).batch(2, drop_remainder=True).unbatch()) == list(range(6))
    assert Dataset.range(6).batch(2, drop_remainder=True).unbatch().cardinality() == 6


# -- shuffle ---------------------------------------------------------------------------

def test_shuffle_with_a_seed_is_deterministic_and_covers_each_element_once() -> None:
    a = values(Dataset.range(50).shuffle(10, seed=7))
    b = values(Dataset.range(50).shuffle(10, seed=7))
    assert a == b and sorted(a) == list(range(50)) and a != list(range(50))
    assert values(Dataset.range(50).shuffle(10, seed=8)) != a


def test_shuffle_buffer_bounds_how_far_an_element_can_move_forward() -> None:
    # TF's buffer: output i is drawn from the first i + buffer_size input elements
    for seed in range(5):
        out = values(Dataset.range(200).shuffle(8, seed=seed))
        assert all(x < i + 8 for i, x in enumerate(out))
    assert values(Dataset.range(20).shuffle(1, seed=3)) == list(range(20))
    with pytest.raises(InvalidArgumentError, match="buffer_size"):
        Dataset.range(3).shuffle(0)


def test_reshuffle_each_iteration() -> None:
    ds = Dataset.range(30).shuffle(30, seed=1)
    first, second = values(ds), values(ds)
    assert first != second and sorted(first) == sorted(second) == list(range(30))
    fresh = Dataset.range(30).shuffle(30, seed=1)
    assert (values(fresh), values(fresh)) == (first, second)   # the epoch sequence is seeded
    fixed = Dataset.range(30).shuffle(30, seed=1, reshuffle_each_iteration=False)
    assert values(fixed) == values(fixed)


def test_shuffle_then_repeat_keeps_epochs_apart_repeat_then_shuffle_mixes_them() -> None:
    per_epoch = values(Dataset.range(10).shuffle(10, seed=2).repeat(3))
    epochs = [per_epoch[i:i + 10] for i in range(0, 30, 10)]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert epochs[0] != epochs[1]
    mixed = values(Dataset.range(10).repeat(3).shuffle(30, seed=2))
    assert sorted(mixed) == sorted(list(range(10)) * 3)
    assert any(sorted(mixed[i:i + 10]) != list(range(10)) for i in (0, 10, 20))


def test_global_seed_makes_unseeded_shuffles_reproducible() -> None:
    def run() -> list:
        dt.reset_default_graph()
        dt.set_random_seed(42)
        return values(Dataset.range(20).shuffle(20)) + values(Dataset.range(20).shuffle(20))
    try:
        assert run() == run()
    finally:
        dt.reset_default_graph()


def test_reading_element_spec_does_not_change_the_shuffle_order() -> None:
    plain = Dataset.range(20).shuffle(20, seed=5).map(lambda x: x * 2)
    probed = Dataset.range(20).shuffle(20, seed=5).map(lambda x: x * 2)
    assert probed.element_spec.dtype == dt.int64
    assert values(probed) == values(plain)


# -- repeat, shard, take, skip ---------------------------------------------------------

def test_repeat() -> None:
    assert values(Dataset.range(3).repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert values(Dataset.range(3).repeat(0)) == []
    forever = Dataset.range(3).repeat()
    assert values(forever.take(8)) == [0, 1, 2, 0, 1, 2, 0, 1]
    assert forever.cardinality() == dt.data.INFINITE_CARDINALITY
    assert Dataset.range(3).repeat(-1).cardinality() == dt.data.INFINITE_CARDINALITY
    assert values(Dataset.range(0).repeat()) == []       # an empty epoch ends forever
    assert Dataset.range(3).repeat(4).cardinality() == 12
    with pytest.raises(TypeError, match="infinite"):
        len(forever)
    assert bool(forever)


@pytest.mark.parametrize("n, shards, index", [(10, 3, 0), (10, 3, 2), (2, 5, 3), (7, 1, 0)])
def test_shard_against_reference(n: int, shards: int, index: int) -> None:
    ds = Dataset.range(n).shard(shards, index)
    assert values(ds) == list(range(n))[index::shards]
    assert ds.cardinality() == len(list(range(n))[index::shards])


@pytest.mark.parametrize("shards, index, message", [
    (0, 0, "greater than zero"), (-1, 0, "greater than zero"), (3, 3, "between 0 and 2"),
    (3, -1, "between 0 and 2")])
def test_shard_rejects_bad_arguments(shards: int, index: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Dataset.range(10).shard(shards, index)


def test_take_skip_enumerate_and_cardinality() -> None:
    assert values(Dataset.range(10).take(3)) == [0, 1, 2]
    assert values(Dataset.range(10).take(-1)) == list(range(10))
    assert values(Dataset.range(10).skip(7)) == [7, 8, 9]
    assert values(Dataset.range(10).skip(-1)) == []
    assert Dataset.range(10).skip(4).cardinality() == 6
    assert Dataset.range(10).repeat().take(5).cardinality() == 5
    assert values(Dataset.range(3, 6).enumerate(start=1)) == [(1, 3), (2, 4), (3, 5)]
    unknown = Dataset.range(10).filter(lambda x: x % 2 == 0)
    assert unknown.cardinality() == dt.data.UNKNOWN_CARDINALITY
    assert dt.data.experimental.cardinality(unknown).numpy() == -2
    with pytest.raises(TypeError, match="unknown"):
        len(unknown)


# -- map, filter, zip, concatenate, reduce ---------------------------------------------

def test_map_unpacks_tuples_but_not_dicts_or_namedtuples() -> None:
    pairs = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10))
    assert values(pairs.map(lambda a, b: a + b)) == [0, 11, 22]
    dicts = Dataset.from_tensor_slices({"a": np.arange(3), "b": np.ones(3)})
    assert values(dicts.map(lambda d: d["a"] * 2)) == [0, 2, 4]
    Point = collections.namedtuple("Point", "x y")
    points = Dataset.from_tensors(Point(np.int64(1), np.int64(2)))
    assert values(points.map(lambda p: p.x + p.y)) == [3]
    assert type(next(iter(points))) is Point


def test_map_output_is_converted_as_tf_converts() -> None:
    ds = Dataset.range(3).map(lambda x: (float(x), [int(x), 1], {"k": x}))
    first = next(iter(ds))
    assert first[0].dtype == np.float32 and first[1].dtype == np.int32
    assert first[2]["k"].dtype == np.int64
    spec = ds.element_spec
    assert spec[1].shape.as_list() == [2] and spec[0].dtype == dt.float32
    with pytest.raises(InvalidArgumentError, match="None"):
        list(Dataset.range(2).map(lambda x: None))


def test_filter_zip_concatenate_reduce() -> None:
    assert values(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    with pytest.raises(InvalidArgumentError, match="scalar bool"):
        list(Dataset.range(3).filter(lambda x: x))
    z = Dataset.zip((Dataset.range(5), Dataset.range(10, 13)))
    assert values(z) == [(0, 10), (1, 11), (2, 12)] and z.cardinality() == 3
    zd = Dataset.zip({"a": Dataset.range(2), "b": Dataset.range(2).repeat()})
    assert values(zd) == [{"a": 0, "b": 0}, {"a": 1, "b": 1}] and zd.cardinality() == 2
    c = Dataset.range(3).concatenate(Dataset.range(7, 9))
    assert values(c) == [0, 1, 2, 7, 8] and c.cardinality() == 5
    with pytest.raises(InvalidArgumentError, match="dtype"):
        Dataset.range(3).concatenate(Dataset.from_tensor_slices(np.zeros(2)))
    assert int(Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10
    assert values(Dataset.range(3).apply(lambda d: d.map(lambda x: x + 1))) == [1, 2, 3]


# -- iteration -------------------------------------------------------------------------

def test_each_for_loop_is_a_fresh_iterator_and_get_next_raises_out_of_range() -> None:
    ds = Dataset.range(3)
    assert values(ds) == values(ds) == [0, 1, 2]
    it = iter(ds)
    assert [int(it.get_next()) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OutOfRangeError):
        it.get_next()
    assert [int(x) for x in ds.as_numpy_iterator()] == [0, 1, 2]


def test_prefetch_yields_the_same_elements_and_its_thread_ends_with_the_data() -> None:
    ds = Dataset.range(100).map(lambda x: x * 3).prefetch(4)
    assert values(ds) == [3 * i for i in range(100)]
    assert values(Dataset.range(5).prefetch(dt.data.AUTOTUNE)) == list(range(5))
    assert values(Dataset.range(5).prefetch(0)) == list(range(5))
    wait_for_no_prefetch_threads()
    with pytest.raises(InvalidArgumentError, match="AUTOTUNE"):
        Dataset.range(3).prefetch(-2)


def test_prefetch_thread_stops_when_the_iterator_is_dropped_or_closed() -> None:
    ds = Dataset.range(10**9).prefetch(2)
    it = iter(ds)
    assert int(next(it)) == 0
    assert len(prefetch_threads()) == 1
    del it
    wait_for_no_prefetch_threads()
    it = iter(Dataset.range(10**9).prefetch(2).map(lambda x: x).prefetch(3))
    next(it)
    assert len(prefetch_threads()) == 2
    it.close()
    wait_for_no_prefetch_threads()
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_passes_errors_to_the_consumer() -> None:
    def boom(x: np.int64) -> np.int64:
        if x == 3:
            raise ValueError("bad element 3")
        return x
    it = iter(Dataset.range(10).map(boom).prefetch(2))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="bad element 3"):
        next(it)


async def test_async_for_yields_elements_without_blocking_the_loop() -> None:
    ticks = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    def slow(x: np.int64) -> np.int64:
        time.sleep(0.01)
        return x
    task = asyncio.create_task(ticker())
    try:
        got = [int(x) async for x in Dataset.range(20).map(slow)]
    finally:
        task.cancel()
    assert got == list(range(20))
    assert len(ticks) >= 10          # the loop kept running while elements were made
    assert [int(x) async for x in Dataset.range(1000).prefetch(8)] == list(range(1000))


async def test_async_iterator_get_next_errors_and_aclose() -> None:
    it = Dataset.range(2).__aiter__()
    assert int(await it.get_next()) == 0 and int(await it.get_next()) == 1
    with pytest.raises(OutOfRangeError):
        await it.get_next()
    failing = Dataset.range(5).map(lambda x: 1 // (int(x) - 2)).__aiter__()
    assert int(await failing.__anext__()) == -1
    assert int(await failing.__anext__()) == -1
    with pytest.raises(ZeroDivisionError):
        await failing.__anext__()
    endless = Dataset.range(10**9).prefetch(2).__aiter__()
    await endless.__anext__()
    await endless.aclose()
    wait_for_no_prefetch_threads()


# -- options ---------------------------------------------------------------------------

def test_options_merge_later_wins_and_typos_raise() -> None:
    ds = Dataset.range(4)
    assert ds.options().experimental_distribute.auto_shard_policy == AutoShardPolicy.AUTO
    o1 = Options()
    o1.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    o1.deterministic = False
    o2 = Options()
    o2.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    ds2 = ds.with_options(o1).with_options(o2).batch(2)
    assert ds2.options().experimental_distribute.auto_shard_policy == AutoShardPolicy.DATA
    assert ds2.options().deterministic is False
    assert ds.options().experimental_distribute.auto_shard_policy == AutoShardPolicy.AUTO
    with pytest.raises(AttributeError, match="Cannot set"):
        Options().experimental_distibute = 1
    with pytest.raises(AttributeError, match="Cannot set"):
        Options().experimental_distribute.auto_shard = 1


# -- distribution: TF's auto-shard by data plus rebatching ----------------------------

def _global_batches(ds: Dataset) -> list[list[int]]:
    return [b.tolist() for b in ds]


@pytest.mark.parametrize("workers, replicas, n, b", [
    (2, 1, 16, 8), (2, 2, 16, 8), (3, 2, 25, 7), (2, 3, 13, 4), (1, 4, 10, 3), (4, 1, 9, 2)])
def test_every_global_batch_is_split_disjointly_over_all_replicas(
        workers: int, replicas: int, n: int, b: int) -> None:
    ds = Dataset.range(n).batch(b)
    per_worker = [list(dt.data.rebatch_and_shard(ds, workers, w, replicas))
                  for w in range(workers)]
    batches = _global_batches(ds)
    assert all(len(steps) == len(batches) for steps in per_worker)   # one step per batch
    big_n = workers * replicas
    for g, global_batch in enumerate(batches):
        parts = {(w, r): per_worker[w][g][r].tolist()
                 for w in range(workers) for r in range(replicas)}
        flat = [x for part in parts.values() for x in part]
        assert sorted(flat) == global_batch and len(flat) == len(set(flat))
        m = -(-len(global_batch) // big_n)
        for (w, r), part in parts.items():     # TF's order: replica (w, r) gets sub-batch w + r*W
            k = w + r * workers
            assert part == global_batch[k * m:(k + 1) * m]


def test_workers_see_the_same_global_batches_when_the_shuffle_is_seeded(
        caplog: pytest.LogCaptureFixture) -> None:
    ds = Dataset.range(40).shuffle(40, seed=3).batch(8)
    reference = _global_batches(ds)
    with caplog.at_level(logging.WARNING):
        steps = [list(dt.data.rebatch_and_shard(ds, 2, w, 2)) for w in range(2)]
    assert "without a seed" not in caplog.text
    for g, global_batch in enumerate(reference):
        union = [x for w in range(2) for part in steps[w][g] for x in part.tolist()]
        assert sorted(union) == sorted(global_batch)
    with caplog.at_level(logging.WARNING):
        dt.data.rebatch_and_shard(Dataset.range(8).shuffle(8).batch(4), 2, 0, 1)
    assert "without a seed" in caplog.text


def test_structures_are_split_component_wise() -> None:
    ds = Dataset.from_tensor_slices({"x": np.arange(8) * 1.5, "y": np.arange(8)}).batch(8)
    (step,) = list(dt.data.rebatch_and_shard(ds, 2, 1, 2))
    assert [r["y"].tolist() for r in step] == [[2, 3], [6, 7]]
    assert step[0]["x"].tolist() == [3.0, 4.5]


def test_data_sharding_errors_and_other_policies() -> None:
    with pytest.raises(InvalidArgumentError, match="not batched"):
        list(dt.data.rebatch_and_shard(Dataset.range(8), 2, 0, 1))
    with pytest.raises(InvalidArgumentError, match="fewer than the 2 workers"):
        list(dt.data.rebatch_and_shard(Dataset.range(0).batch(4), 2, 0, 1))
    with pytest.raises(InvalidArgumentError, match="worker_index"):
        dt.data.rebatch_and_shard(Dataset.range(8).batch(4), 2, 2, 1)
    with pytest.raises(NotFoundError, match="AutoShardPolicy.DATA"):
        dt.data.rebatch_and_shard(Dataset.range(8).batch(4), 2, 0, 1, AutoShardPolicy.FILE)
    off = Options()
    off.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    ds = Dataset.range(8).batch(4).with_options(off)
    # OFF: no sharding; every worker reads all of it, split by TF's rotated batch sizes
    assert [[p.tolist() for p in s] for s in dt.data.rebatch_and_shard(ds, 2, 1, 1)] == \
        [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]]


def test_batch_sizes_for_worker_is_tfs_rotation() -> None:
    assert dt.data.batch_sizes_for_worker(7, 2, 2, 0) == [2, 2, 2, 1]
    assert dt.data.batch_sizes_for_worker(7, 2, 2, 1) == [2, 1, 2, 2]
    off = dt.data.auto_shard(Dataset.range(14).batch(7), 2, 1, 2, AutoShardPolicy.OFF)
    assert [b.tolist() for b in off] == [[0, 1], [2], [3, 4], [5, 6],
                                         [7, 8], [9], [10, 11], [12, 13]]


def test_a_partial_last_step_pads_missing_replicas_with_empty_batches() -> None:
    ds = Dataset.range(5).batch(2)        # three per-replica batches for two replicas
    steps = list(Dataset(ReplicaSteps(ds.node, 2)))
    assert [[p.tolist() for p in s] for s in steps] == [[[0, 1], [2, 3]], [[4], []]]
    assert steps[1][1].dtype == np.int64 and steps[1][1].shape == (0,)


def test_iterating_many_elements_stays_fast() -> None:
    start = time.monotonic()
    ds = Dataset.range(20000).shuffle(1000, seed=0).batch(32).prefetch(2)
    assert sum(b.shape[0] for b in ds) == 20000
    assert time.monotonic() - start < 3.0
    # each epoch of a shuffled, repeated pipeline sees every element exactly once
    epochs = values(Dataset.range(12).shuffle(5, seed=9).repeat(4))
    assert all(sorted(epochs[i:i + 12]) == list(range(12)) for i in range(0, 48, 12))
    assert len({tuple(epochs[i:i + 12]) for i in range(0, 48, 12)}) > 1
    assert list(itertools.islice(iter(Dataset.range(3).repeat()), 5)) == [0, 1, 2, 0, 1]
