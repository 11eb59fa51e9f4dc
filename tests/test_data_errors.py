"""A map's error is one element's, as in tf.data: it is raised where the
element comes out and the iterator goes on with the next one; ``ignore_errors``
drops such elements. Cases from TF's own tests (map_test.py testMapError /
testParallelMapError, ignore_errors_test.py), plus the stages between (batch,
take, skip, shuffle, zip, worker processes). And a map's function builds its
ops on values: they run at once, their dtypes kept."""
from __future__ import annotations

import os

import numpy as np
import pytest

import distrib as dt
from distrib.errors import InvalidArgumentError

NANS = np.array([1.0, 2.0, 3.0, np.nan, 5.0], np.float32)   # TF's test components


def _checked(calls: int | None = None) -> dt.data.Dataset:
    return dt.data.Dataset.from_tensor_slices(NANS).map(
        lambda x: dt.debugging.check_numerics(x, "message"), num_parallel_calls=calls)


def _fails_at(bad: int):
    def fn(x):
        if int(x) == bad:
            raise dt.errors.InvalidArgumentError(f"element {bad} is broken")
        return x
    return fn


def _drain(it) -> list:
    """Each element, or the error's class name where one was raised."""
    out = []
    while True:
        try:
            out.append(next(it).tolist())
        except StopIteration:
            return out
        except dt.errors.OpError:
            out.append("error")


@pytest.mark.parametrize("calls", [None, 2])
def test_a_failed_element_is_raised_and_the_iterator_goes_on_as_tfs(calls):
    it = iter(_checked(calls))
    assert [float(next(it)) for _ in range(3)] == [1.0, 2.0, 3.0]
    with pytest.raises(InvalidArgumentError, match="message"):
        next(it)
    assert float(next(it)) == 5.0
    with pytest.raises(StopIteration):
        next(it)
    get_next = iter(_checked(calls)).get_next   # TF's spelling: OutOfRangeError at the end
    assert [float(get_next()) for _ in range(3)] == [1.0, 2.0, 3.0]
    with pytest.raises(InvalidArgumentError):
        get_next()
    assert float(get_next()) == 5.0
    with pytest.raises(dt.errors.OutOfRangeError):
        get_next()


@pytest.mark.parametrize("calls", [None, 2])
def test_ignore_errors_drops_the_failed_elements(calls, tmp_path):
    assert [float(x) for x in _checked(calls).ignore_errors()] == [1.0, 2.0, 3.0, 5.0]
    assert [float(x) for x in _checked(calls).apply(dt.data.experimental.ignore_errors())] == \
        [1.0, 2.0, 3.0, 5.0]
    # ignore_errors_test.testReadFileIgnoreError: a file gone before it is read
    names = []
    for i in range(5):
        path = tmp_path / f"{i}.txt"
        path.write_bytes(b"%d" % i)
        names.append(str(path))
    reads = dt.data.Dataset.from_tensor_slices(names).map(dt.io.read_file,
                                                          num_parallel_calls=calls)
    os.remove(names[2])
    assert [np.asarray(x).item() for x in reads.ignore_errors()] == [b"0", b"1", b"3", b"4"]
    assert _drain(iter(reads.map(lambda s: dt.io.decode_raw(s, dt.uint8)))) == \
        [[48], [49], "error", [51], [52]]


@pytest.mark.parametrize("calls", [None, 2])
def test_a_batch_holding_a_failed_element_fails_whole_and_the_next_batch_goes_on(calls):
    ds = dt.data.Dataset.range(10).map(_fails_at(5), num_parallel_calls=calls).batch(4)
    got = _drain(iter(ds))
    if calls is None:   # TF's batch: the error at element 5 drops 4 with it; 6 starts the next
        assert got == [[0, 1, 2, 3], "error", [6, 7, 8, 9]]
    else:   # TF's fused map-and-batch: the batch of 4..7 fails whole
        assert got == [[0, 1, 2, 3], "error", [8, 9]]


def test_take_skip_and_shard_do_not_count_a_failed_element_and_enumerate_does():
    base = dt.data.Dataset.range(8).map(_fails_at(2))
    assert _drain(iter(base.take(3))) == [0, 1, "error", 3]
    assert _drain(iter(base.skip(3))) == ["error", 4, 5, 6, 7]
    # TF's enumerate is zip((range(start, ...), ds)): the zip advances the range past
    # the failed element too (zip_dataset_op.cc keeps its inputs in step)
    assert _drain(iter(base.enumerate().map(lambda i, x: i).take(4))) == [0, 1, "error", 3, 4]
    assert _drain(iter(base.enumerate(start=10).map(lambda i, x: i - x).take(3))) == \
        [10, 10, "error", 10]
    assert _drain(iter(base.shard(2, 1))) == [1, "error", 4, 6]   # positions of good ones


def test_shuffle_zip_and_filter_pass_a_failed_element_on():
    base = dt.data.Dataset.range(6).map(_fails_at(3))
    shuffled = _drain(iter(base.shuffle(10, seed=1)))
    assert sorted(x for x in shuffled if x != "error") == [0, 1, 2, 4, 5]
    assert shuffled.count("error") == 1
    zipped = dt.data.Dataset.zip((base, dt.data.Dataset.range(6)))
    assert [x if x == "error" else None for x in _drain_pairs(iter(zipped))].count("error") == 1

    def keep_odd(x):
        if int(x) == 4:
            raise InvalidArgumentError("the predicate failed")
        return x % 2 == 1
    assert _drain(iter(dt.data.Dataset.range(6).filter(keep_odd))) == [1, 3, "error", 5]


def _drain_pairs(it) -> list:
    out = []
    while True:
        try:
            a, b = next(it)
            out.append((int(a), int(b)))
        except StopIteration:
            return out
        except InvalidArgumentError:
            out.append("error")


def test_a_failed_batch_in_worker_processes_is_raised_and_the_map_goes_on(monkeypatch):
    from distrib.data import parallel_map
    original = parallel_map._Tuner.__init__

    def processes_only(self, enabled, processes):
        original(self, False, processes)
        self.mode = "processes"
    monkeypatch.setattr(parallel_map._Tuner, "__init__", processes_only)
    ds = dt.data.Dataset.range(12).map(_fails_at(5), num_parallel_calls=2).batch(4)
    assert _drain(iter(ds)) == [[0, 1, 2, 3], "error", [8, 9, 10, 11]]


def test_ops_built_in_a_map_run_on_the_values_with_their_dtypes():
    """A TF program's map: dt.cast, arithmetic on its result, one_hot, reshape;
    in a graph program, no graph op is made."""
    images = np.arange(2 * 4, dtype=np.uint8).reshape(2, 2, 2)
    labels = np.array([3, 1], np.int64)
    g = dt.Graph()
    with g.as_default():
        ds = dt.data.Dataset.from_tensor_slices((images, labels)).map(
            lambda x, y: (dt.reshape(dt.cast(x, dt.float32) / 255.0, [4]),
                          dt.one_hot(y, 4), dt.cast(y, dt.float64)))
        (x, y, z), _ = list(ds)
        assert not g.get_operations()
    assert x.dtype == np.float32 and x.shape == (4,)
    np.testing.assert_allclose(x, images[0].reshape(4) / 255.0, rtol=1e-6)
    assert y.tolist() == [0, 0, 0, 1] and y.dtype == np.float32
    assert z.dtype == np.float64 and float(z) == 3.0


@pytest.mark.parametrize("calls", [None, 2])
def test_a_failing_first_element_leaves_the_element_spec_alone(calls):
    """TF's spec is the function's, never an element's: a first element that
    fails is read past for the spec (it raised from element_spec here), and
    the iterator still raises it where it comes out."""
    ds = dt.data.Dataset.from_tensor_slices(np.array([np.nan, 2.0, 3.0], np.float32)).map(
        lambda x: dt.debugging.check_numerics(x, "message"), num_parallel_calls=calls)
    assert ds.element_spec == dt.TensorSpec([], dt.float32)
    # batch: the next batch starts after the failed element; fused map-and-batch: it fails whole
    assert _drain(iter(ds.batch(2))) == (["error", [2.0, 3.0]] if calls is None
                                         else ["error", [3.0]])
    assert _drain(iter(ds)) == ["error", 2.0, 3.0]
    every = dt.data.Dataset.range(3).map(_fails_at(0)).map(_fails_at(1)).map(_fails_at(2))
    with pytest.raises(InvalidArgumentError, match="element 0 is broken"):
        every.element_spec   # noqa: B018 - nothing but failed elements: the first one's error


def test_a_checkpoint_after_get_next_raised_restores_past_the_failed_element():
    """get_next counts a failed element's position as next() does: a checkpoint
    taken after it restores to the element after it (it restored to the one
    before: 2.0 handed out twice)."""
    ds = dt.data.Dataset.from_tensor_slices(np.array([1.0, np.nan, 2.0, 4.0], np.float32)).map(
        lambda x: dt.debugging.check_numerics(x, "message"))
    it = iter(ds)
    assert float(it.get_next()) == 1.0
    with pytest.raises(InvalidArgumentError):
        it.get_next()
    assert float(it.get_next()) == 2.0
    restored = iter(ds)
    restored.checkpoint_split(it.checkpoint_join([]))
    assert float(restored.get_next()) == 4.0 == float(it.get_next())
    with pytest.raises(dt.errors.OutOfRangeError):
        restored.get_next()
