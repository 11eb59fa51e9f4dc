"""The input pipeline (issue 40 item 3): a parallel map in input order (and
out of it when not deterministic), its random draws the same as a sequential
map's; interleave in TF's documented order; cache in memory and in a file;
padded_batch as TF's docs; FILE / AUTO / DATA auto-sharding of readers;
an iterator's position saved in and restored from a dt.train.Checkpoint
without re-reading what it skipped."""
from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import pytest

import distrib as dt
from distrib.data import distribute_input, readers
from distrib.data.options import AutoShardPolicy
from distrib.errors import InvalidArgumentError, NotFoundError


def _seeded(build, seed: int = 7):
    g = dt.Graph()
    with g.as_default():
        dt.set_random_seed(seed)
        return build()


def test_parallel_map_keeps_order_and_draws_what_a_sequential_map_draws():
    def augment(x):
        return dt.image.random_flip_left_right(dt.image.random_crop(x, [4, 4, 1]))
    images = np.arange(30 * 6 * 6, dtype=np.float32).reshape(30, 6, 6, 1)
    seq = _seeded(lambda: dt.data.Dataset.from_tensor_slices(images).map(augment))
    par = _seeded(lambda: dt.data.Dataset.from_tensor_slices(images).map(
        augment, num_parallel_calls=dt.data.AUTOTUNE))
    a, b = list(seq), list(par)
    assert len(a) == 30
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert len({x.tobytes() for x in a}) == 30
    squares = dt.data.Dataset.range(100).map(lambda x: x * x, num_parallel_calls=4)
    assert [int(v) for v in squares] == [i * i for i in range(100)]


def test_a_map_that_is_not_deterministic_hands_out_what_is_ready():
    release = threading.Event()

    def slow_first(x):
        if x == 0:
            release.wait(10)   # element 0 waits until the test has seen another one
        return x
    for options_way in (False, True):
        release.clear()
        ds = dt.data.Dataset.range(6)
        if options_way:
            options = dt.data.Options()
            options.deterministic = False
            ds = ds.map(slow_first, num_parallel_calls=2).with_options(options)
        else:
            ds = ds.map(slow_first, num_parallel_calls=2, deterministic=False)
        it = iter(ds)
        first = next(it)
        release.set()
        rest = list(it)
        assert first != 0 and sorted([int(first), *map(int, rest)]) == list(range(6))


def test_interleave_in_tfs_documented_order():
    # tf.data.Dataset.interleave's docstring: cycle_length=2, block_length=4
    want = [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5,
            5, 5, 5]
    for calls in (None, 2):
        ds = dt.data.Dataset.range(1, 6).interleave(
            lambda x: dt.data.Dataset.from_tensors(x).repeat(6), cycle_length=2,
            block_length=4, num_parallel_calls=calls)
        assert [int(v) for v in ds] == want
    flat = dt.data.Dataset.range(3).flat_map(lambda x: dt.data.Dataset.range(x))
    assert [int(v) for v in flat] == [0, 0, 1]


def test_interleave_reads_files_in_turn(tmp_path):
    names = []
    for i in range(3):
        path = str(tmp_path / f"{i}.tfrecord")
        with dt.io.TFRecordWriter(path) as w:
            for j in range(2):
                w.write(f"{i}{j}".encode())
        names.append(path)
    ds = dt.data.Dataset.from_tensor_slices(names).interleave(
        dt.data.TFRecordDataset, cycle_length=3, num_parallel_calls=3)
    assert [x.item() for x in ds] == [b"00", b"10", b"20", b"01", b"11", b"21"]
    parallel_reads = dt.data.TFRecordDataset(names, num_parallel_reads=3)
    assert [x.item() for x in parallel_reads] == [b"00", b"10", b"20", b"01", b"11", b"21"]


def test_cache_in_memory_and_in_a_file(tmp_path):
    calls = []

    def counted(x):
        calls.append(int(x))
        return x * 10
    ds = dt.data.Dataset.range(5).map(counted).cache()
    assert [int(v) for v in ds.take(2)] == [0, 10]   # abandoned: nothing kept
    assert [int(v) for v in ds] == [0, 10, 20, 30, 40]
    calls.clear()
    assert [int(v) for v in ds] == [0, 10, 20, 30, 40] and calls == []
    path = str(tmp_path / "cache")
    strings = dt.data.Dataset.range(3).map(lambda x: (counted(x), np.array(b"s\x00", dtype=object)))
    first = list(strings.cache(path))
    assert os.path.exists(path + ".dtcache")
    calls.clear()
    again = list(dt.data.Dataset.range(3).map(lambda x: (counted(x), np.array(b"?", dtype=object)))
                 .cache(path))   # a new pipeline reads the file, not its own input
    assert calls == [] and [int(a) for a, _ in again] == [int(a) for a, _ in first]
    assert all(np.asarray(s).item() == b"s\x00" for _, s in again)


def test_padded_batch_as_tfs_docs():
    ds = dt.data.Dataset.range(1, 5).map(lambda x: np.full([int(x)], x))
    got = [b.tolist() for b in ds.padded_batch(2)]
    assert got == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
    wide = [b.tolist() for b in ds.padded_batch(2, padded_shapes=5, padding_values=-1)]
    assert wide[0] == [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]]
    with pytest.raises(InvalidArgumentError, match="larger than its padded shape"):
        list(ds.padded_batch(2, padded_shapes=[2]))


def _record_files(tmp_path, n_files: int, per_file: int) -> list[str]:
    names = []
    for i in range(n_files):
        path = str(tmp_path / f"part-{i}.tfrecord")
        with dt.io.TFRecordWriter(path) as w:
            for j in range(per_file):
                w.write(np.int64(i * 100 + j).tobytes())
        names.append(path)
    return names


def _ints(ds) -> list[int]:
    return [int(np.frombuffer(x.item(), np.int64)[0]) for x in ds]


def test_file_auto_sharding_gives_each_worker_its_files(tmp_path):
    names = _record_files(tmp_path, 4, 3)
    ds = dt.data.TFRecordDataset(names)
    for policy in (AutoShardPolicy.FILE, AutoShardPolicy.AUTO):
        parts = [_ints(distribute_input.auto_shard(ds, 2, w, 1, policy)) for w in range(2)]
        assert parts[0] == [0, 1, 2, 200, 201, 202] and parts[1] == [100, 101, 102, 300, 301, 302]
    batched = dt.data.TFRecordDataset(names).map(
        lambda r: dt.io.decode_raw(r, dt.int64)[0]).batch(4)
    per_replica = list(distribute_input.auto_shard(batched, 2, 1, 2, AutoShardPolicy.FILE))
    # its files' global batches [100 101 102 300] [301 302] cut in 2 workers x 2 replicas
    assert [b.tolist() for b in per_replica] == [[100], [101], [102], [300], [301], [302], [],
                                                 []]
    few = dt.data.TFRecordDataset(names[:1])
    with pytest.raises(InvalidArgumentError, match="not enough for the required 2"):
        distribute_input.auto_shard(few, 2, 0, 1, AutoShardPolicy.FILE)
    few_batched = few.map(lambda r: dt.io.decode_raw(r, dt.int64)[0]).batch(2)
    data_parts = [[int(v) for b in distribute_input.auto_shard(few_batched, 2, w, 1,
                                                               AutoShardPolicy.AUTO) for v in b]
                  for w in range(2)]   # AUTO falls back to DATA: rows of each global batch
    assert data_parts == [[0, 2], [1]]
    with pytest.raises(NotFoundError, match="shardable source"):
        distribute_input.auto_shard(dt.data.Dataset.range(4), 2, 0, 1, AutoShardPolicy.FILE)


def _save_and_restore(it, fresh):
    async def main(tmp):
        path = await dt.train.Checkpoint(iterator=it).save(os.path.join(tmp, "ckpt"))
        await dt.train.Checkpoint(iterator=fresh).restore(path)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(tmp))


def test_an_iterator_restored_from_a_checkpoint_goes_on_where_it_was(tmp_path):
    names = _record_files(tmp_path, 3, 4)

    def pipeline():
        return dt.data.TFRecordDataset(names).map(
            lambda r: dt.io.decode_raw(r, dt.int64)[0], num_parallel_calls=2).batch(2).prefetch(2)
    it = iter(pipeline())
    seen = [next(it).tolist() for _ in range(3)]
    assert seen == [[0, 1], [2, 3], [100, 101]]
    fresh = iter(pipeline())
    _save_and_restore(it, fresh)
    assert [b.tolist() for b in fresh] == [[102, 103], [200, 201], [202, 203]]

    # a seeded shuffle under a repeat replays to the same place: the same elements follow
    def shuffled():
        return _seeded(lambda: dt.data.Dataset.range(10).shuffle(10).repeat(3).batch(4))
    it, reference = iter(shuffled()), list(shuffled())
    for _ in range(4):
        next(it)
    fresh = iter(shuffled())
    _save_and_restore(it, fresh)
    assert [b.tolist() for b in fresh] == [b.tolist() for b in reference[4:]]


def test_a_restore_skips_whole_files_without_reading_them(tmp_path, monkeypatch):
    names = _record_files(tmp_path, 3, 4)
    ds = dt.data.TFRecordDataset(names)
    it = iter(ds)
    for _ in range(9):
        next(it)
    opened = []
    real = readers.tf_record.read_records

    def spy(name, *args, **kwargs):
        opened.append(os.path.basename(name))
        return real(name, *args, **kwargs)
    monkeypatch.setattr(readers.tf_record, "read_records", spy)
    fresh = iter(ds)
    _save_and_restore(it, fresh)
    assert _ints(fresh) == [201, 202, 203]
    assert opened == ["part-2.tfrecord"]   # the first two files were skipped by their headers


_TO_GPU = """
import numpy as np
import distrib as dt
from kernels.cuda import devices
ds = dt.data.Dataset.range(4).map(
    lambda x: (np.full(3, x, np.float32), np.array(b"s", dtype=object))).batch(2)
got = []
for numbers, strings in ds.apply(dt.data.experimental.prefetch_to_device("/gpu:0", 2)):
    assert devices.is_device_array(numbers) and not devices.is_device_array(strings)
    got.append(devices.to_host(numbers)[:, 0].tolist())
print("OK", got)
"""


def test_prefetch_to_device_copies_numbers_to_the_gpu_under_the_simulator():
    import subprocess
    import sys

    from tests.helpers import ROOT, child_env
    out = subprocess.run([sys.executable, "-c", _TO_GPU], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=child_env(NUMBA_ENABLE_CUDASIM="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "OK [[0.0, 1.0], [2.0, 3.0]]" in out.stdout
    with pytest.raises(Exception, match="no GPU:3"):
        list(dt.data.Dataset.range(2).apply(dt.data.experimental.prefetch_to_device("/gpu:3")))


def test_a_map_in_worker_processes_gives_the_sequential_maps_batches(monkeypatch):
    from distrib.data import parallel_map, process_map

    def augment(x):
        return dt.image.random_flip_left_right(dt.image.random_crop(x, [3, 3, 1])), x.sum()
    images = np.arange(20 * 5 * 5, dtype=np.float32).reshape(20, 5, 5, 1)
    seq = [b for b in _seeded(lambda: dt.data.Dataset.from_tensor_slices(images)
                              .map(augment).batch(8))]
    made: list = []
    real = process_map.ProcessMap

    class Spy(real):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(list(self.pids))
    monkeypatch.setattr(process_map, "ProcessMap", Spy)
    original = parallel_map._Tuner.__init__

    def processes_only(self, enabled, processes):
        original(self, False, processes)
        self.mode = "processes"
    monkeypatch.setattr(parallel_map._Tuner, "__init__", processes_only)
    par = [b for b in _seeded(lambda: dt.data.Dataset.from_tensor_slices(images)
                              .map(augment, num_parallel_calls=2).batch(8))]
    assert len(par) == len(seq) == 3
    for (a, sa), (b, sb) in zip(seq, par):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa, sb)
    (pids,) = made
    assert len(pids) == 2
    for pid in pids:   # reaped when the cursor ended: no such child any more
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    it = iter(dt.data.Dataset.from_tensor_slices(images).repeat().map(
        augment, num_parallel_calls=2).batch(4))
    next(it)
    it.close()   # abandoned mid-way: its workers end with it
    for pid in made[-1]:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    ragged = dt.data.Dataset.range(1, 5).map(lambda x: np.full([int(x)], x))
    sums = ragged.map(lambda v: v.sum(), num_parallel_calls=2).batch(2)   # inputs of 4 shapes
    assert [b.tolist() for b in sums] == [[1, 4], [9, 16]]

    def bad(x):
        if x == 5:
            raise ValueError("element five")
        return x
    with pytest.raises(InvalidArgumentError, match="ValueError: element five"):
        list(dt.data.Dataset.range(10).map(bad, num_parallel_calls=2).batch(4))


def test_a_map_moved_to_worker_processes_after_a_batch_gives_the_same_batches(monkeypatch):
    """The tuner's usual way: a batch mapped here first, then worker processes
    that write into shared memory (the first batch's layout) with the next
    block sent before this one is collected; the batches are the sequential
    map's, a short last one included."""
    from distrib.data import parallel_map, process_map

    def augment(x):
        return dt.image.random_flip_left_right(dt.image.random_crop(x, [3, 3, 1])), x.sum()
    images = np.arange(30 * 5 * 5, dtype=np.float32).reshape(30, 5, 5, 1)
    seq = [b for b in _seeded(lambda: dt.data.Dataset.from_tensor_slices(images)
                              .map(augment).batch(4))]
    arenas: list = []
    real = process_map.ProcessMap

    class Spy(real):
        def __init__(self, *args):
            super().__init__(*args)
            arenas.append(self.arena is not None)
    monkeypatch.setattr(process_map, "ProcessMap", Spy)
    original = parallel_map._Tuner.__init__

    def inline_then_processes(self, enabled, processes):
        original(self, False, processes)
        self.mode = "inline"
        self.tick = lambda: setattr(self, "mode", "processes")
    monkeypatch.setattr(parallel_map._Tuner, "__init__", inline_then_processes)
    par = [b for b in _seeded(lambda: dt.data.Dataset.from_tensor_slices(images)
                              .map(augment, num_parallel_calls=2).batch(4))]
    assert arenas == [True] and len(par) == len(seq) == 8
    for (a, sa), (b, sb) in zip(seq, par):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa, sb)


def test_autotune_keeps_the_fastest_way_and_stops_measuring_a_slow_one(monkeypatch):
    from distrib.data import parallel_map
    clock = [0.0]
    monkeypatch.setattr(parallel_map.time, "perf_counter", lambda: clock[0])
    tuner = parallel_map._Tuner(True, processes=True)
    cost = {"threads": 1.0, "inline": 0.5, "processes": 3.0}   # seconds a batch
    seen = []
    for _ in range(3 * (tuner.WINDOW + 1) + tuner.RECHECK + 2 * (tuner.WINDOW + 1)):
        seen.append(tuner.mode)
        clock[0] += cost[tuner.mode]
        tuner.tick()
    first = 3 * (tuner.WINDOW + 1)
    assert seen[:first] == (["threads"] * 5 + ["inline"] * 5 + ["processes"] * 5)
    assert set(seen[first:first + tuner.RECHECK]) == {"inline"}
    # measured again: threads and inline only (processes was more than twice as slow)
    assert "processes" not in seen[first + tuner.RECHECK:]
    assert tuner.mode == "inline"


def test_autotune_takes_the_cheapest_way_that_keeps_up_with_a_slow_consumer(monkeypatch):
    """A trainer in the same process sets the pace: every way hands out a batch
    in about the same time; the one that cost this process the least CPU wins
    (worker processes, whose CPU is theirs), not the marginally fastest."""
    from distrib.data import parallel_map
    clock, cpu = [0.0], [0.0]
    monkeypatch.setattr(parallel_map.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(parallel_map.time, "process_time", lambda: cpu[0])
    tuner = parallel_map._Tuner(True, processes=True)
    cost = {"threads": (1.00, 1.3), "inline": (0.98, 1.2), "processes": (1.05, 0.9)}
    for _ in range(3 * (tuner.WINDOW + 1)):
        wall, used = cost[tuner.mode]
        clock[0] += wall
        cpu[0] += used
        tuner.tick()
    assert tuner.mode == "processes"
    tuner = parallel_map._Tuner(True, processes=True)   # not keeping up: the fastest
    cost["processes"] = (1.5, 0.5)
    for _ in range(3 * (tuner.WINDOW + 1)):
        wall, used = cost[tuner.mode]
        clock[0] += wall
        cpu[0] += used
        tuner.tick()
    assert tuner.mode == "inline"


def test_a_fused_parallel_map_and_batch_keeps_strings_as_bytes():
    ds = dt.data.Dataset.range(5).map(
        lambda x: (x, np.array(b"s%d\x00" % x, dtype=object)), num_parallel_calls=2).batch(2)
    batches = list(ds)
    assert [b[1].tolist() for b in batches] == [[b"s0\x00", b"s1\x00"], [b"s2\x00", b"s3\x00"],
                                                [b"s4\x00"]]
    assert [b[0].tolist() for b in batches] == [[0, 1], [2, 3], [4]]


def test_a_worker_process_that_dies_is_an_error_not_a_hang():
    from distrib.data import process_map
    workers = process_map.ProcessMap(lambda element, epoch, index: os._exit(3), 2)
    try:
        with pytest.raises(dt.errors.InternalError, match="worker process .* died"):
            workers.map_block(0, 0, [np.float32(1), np.float32(2)])
    finally:
        workers.close()
    assert workers.pids == []


# -- from a review of the worker processes ------------------------------------------
def _twice(element, epoch, index):
    if float(element) == 1.0:
        raise ValueError("no ones")
    if float(element) == -1.0:
        raise dt.errors.DataLossError("a damaged element")
    return element * 2


def test_a_later_maps_workers_do_not_hold_an_earlier_maps_pipes(monkeypatch):
    """A worker of a second ProcessMap inherited the first map's pipe ends, so
    the first map's workers never saw their input end: each close of a map
    while another lived waited its whole grace period and then SIGKILLed."""
    from distrib.data import process_map
    kills = []
    real_kill = os.kill
    monkeypatch.setattr(os, "kill", lambda pid, sig: (kills.append((pid, sig)),
                                                      real_kill(pid, sig)))
    monkeypatch.setattr(process_map, "_JOIN_S", 60.0)   # ample: a worker ends on its own
    first = process_map.ProcessMap(_twice, 2)
    second = process_map.ProcessMap(_twice, 2)
    try:
        assert [b[2][0].tolist() for b in second.map_block(0, 0, [np.float32(2),
                                                                  np.float32(3)])] == [[4], [6]]
        if os.path.isdir(f"/proc/{second.pids[0]}/fd"):   # the first map's ends: not there
            ends = {os.readlink(f"/proc/self/fd/{c.fileno()}") for c in first.conns}
            for pid in second.pids:
                held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
                assert not ends & held
        pids = list(first.pids)
        first.close()
        assert kills == []   # every worker of the first map ended by itself
        for pid in pids:
            with pytest.raises(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    finally:
        first.close()
        second.close()


def test_a_failed_or_refused_block_leaves_the_workers_in_step():
    """A block whose first part failed left the other workers' answers in their
    pipes (the next block read them as its own); a block refused as Ragged
    after its first part had gone out did the same. Errors of dt.errors'
    classes keep their class."""
    from distrib.data import process_map
    workers = process_map.ProcessMap(_twice, 2)
    try:
        with pytest.raises(InvalidArgumentError, match="ValueError: no ones"):
            workers.map_block(0, 0, [np.float32(1), np.float32(5)])
        got = workers.map_block(0, 2, [np.float32(3), np.float32(4)])
        assert [(start, leaves[0].tolist()) for start, _, leaves in got] == [(0, [6]), (1, [8])]
        with pytest.raises(process_map.Ragged):
            workers.map_block(0, 4, [np.float32(0), np.float32(0), np.zeros(2), np.zeros(3)])
        got = workers.map_block(0, 4, [np.float32(6), np.float32(7)])
        assert [leaves[0].tolist() for _, _, leaves in got] == [[12], [14]]
        with pytest.raises(dt.errors.DataLossError, match="a damaged element"):
            workers.map_block(0, 6, [np.float32(-1), np.float32(8)])
    finally:
        workers.close()


def _image_and_index(element, epoch, index):
    if float(element) == 7.0:   # not the layout the arena was made for: the pipe takes it
        return np.zeros((2, 2), np.float64), np.int64(index)
    return np.full((2, 3), element, np.float32) + index, np.int64(index)


def test_workers_write_results_in_place_and_take_the_next_block_meanwhile():
    """Given an element the map made, the workers write their results into
    shared memory made before the fork (no /dev/shm file) instead of the pipe;
    two blocks sent before either is collected come back in order (each
    worker reads its requests on a thread of its own: both sides writing to
    full pipes cannot deadlock); an element of another layout goes back
    through the pipe; bigger results than the arena's limit never use one."""
    from distrib.data import process_map
    before = set(os.listdir("/dev/shm"))
    example = _image_and_index(np.float32(0), 0, 0)
    workers = process_map.ProcessMap(_image_and_index, 2, example, rows=4)
    try:
        assert workers.arena is not None
        first = workers.submit(0, 0, [np.float32(v) for v in (1, 2, 3, 4)])
        second = workers.submit(0, 4, [np.float32(v) for v in (5, 6, 7)])
        got = workers.collect(first)
        assert [start for start, _, _ in got] == [0, 2]
        images = np.concatenate([leaves[0] for _, _, leaves in got])
        assert images.dtype == np.float32 and images.shape == (4, 2, 3)
        assert [float(i[0, 0]) for i in images] == [1.0, 3.0, 5.0, 7.0]   # element + index
        assert np.concatenate([leaves[1] for _, _, leaves in got]).tolist() == [0, 1, 2, 3]
        assert all(np.shares_memory(leaves[0], workers.arena.mem) for _, _, leaves in got)
        got = workers.collect(second)   # worker 1's part holds 7: through the pipe, whole
        (s0, _, in_place), (s1, _, piped) = got
        assert (s0, s1) == (0, 2) and [float(i[0, 0]) for i in in_place[0]] == [9.0, 11.0]
        assert np.shares_memory(in_place[0], workers.arena.mem)
        assert piped[0].shape == (1, 2, 2) and not np.shares_memory(piped[0], workers.arena.mem)
        assert piped[1].tolist() == [6]
        assert set(os.listdir("/dev/shm")) == before
    finally:
        workers.close()
    big = (np.zeros((1024, 1024, 8), np.float32),)   # 32 MiB an element
    assert process_map._Arena.for_element(big, 64) is None
    assert process_map._Arena.for_element((np.array(b"x", dtype=object),), 4) is None


def test_padded_batch_takes_shapes_as_tuples_up_to_the_elements_nest():
    """A single component's padded shape given as a tuple, ``(4, None)``, was read
    as two components' shapes (an error); TF flattens padded_shapes only as deep
    as the elements nest. TF's docs example for nested elements, then a 2-D one."""
    pairs = [(np.array([1, 2, 3], np.int32), np.array([10], np.int32)),
             (np.array([4, 5], np.int32), np.array([11, 12], np.int32))]
    ds = dt.data.Dataset.range(2).map(lambda i: pairs[int(i)])
    (a, b), = list(ds.padded_batch(2, padded_shapes=([4], [None]), padding_values=(-1, 100)))
    assert a.tolist() == [[1, 2, 3, -1], [4, 5, -1, -1]]
    assert b.tolist() == [[10, 100], [11, 12]]
    (a, b), = list(ds.padded_batch(2, padded_shapes=((4,), (None,))))
    assert a.tolist() == [[1, 2, 3, 0], [4, 5, 0, 0]]
    grids = dt.data.Dataset.range(1, 3).map(lambda x: np.full([2, int(x)], x))
    (batch,) = list(grids.padded_batch(2, padded_shapes=(3, None)))
    assert batch.shape == (2, 3, 2)
    assert batch[0].tolist() == [[1, 0], [1, 0], [0, 0]]
    with pytest.raises(InvalidArgumentError, match="one entry per component"):
        list(ds.padded_batch(2, padded_shapes=([4],)))


def test_a_fixed_length_reader_restored_mid_file_starts_at_the_record(tmp_path):
    """The restored reader seeks to its record (it read and dropped the records
    before it)."""
    names = []
    for i in range(2):
        path = tmp_path / f"fixed-{i}.bin"
        path.write_bytes(b"HH" + b"".join(bytes([i * 10 + j]) * 4 for j in range(5)) + b"F")
        names.append(str(path))
    ds = dt.data.FixedLengthRecordDataset(names, 4, header_bytes=2, footer_bytes=1)
    it = iter(ds)
    assert [next(it).item()[0] for _ in range(7)] == [0, 1, 2, 3, 4, 10, 11]
    fresh = iter(ds)
    _save_and_restore(it, fresh)
    assert [x.item() for x in fresh] == [bytes([j]) * 4 for j in (12, 13, 14)]


def test_file_sharding_finds_readers_in_an_interleave_and_shards_before_the_shuffle(tmp_path):
    """``list_files`` (shuffled, unseeded: each worker's process draws its own
    seed) then ``interleave(TFRecordDataset)``, the ImageNet trainers' pipeline,
    was not FILE-sharded (no reader in the pipeline's own stages: FILE an
    error, AUTO by data), and a reader over list_files was sharded after the
    shuffle, so the workers' files overlapped. TF shards the file names where
    a reader (or a function that makes one) reads them and moves the shuffle
    after the shard (auto_shard.cc's ProcessDatasetSourceNode)."""
    names = _record_files(tmp_path, 8, 2)
    pattern = str(tmp_path / "part-*.tfrecord")
    everything = sorted(_ints(dt.data.TFRecordDataset(names)))

    def interleaved():
        return dt.data.Dataset.list_files(pattern).interleave(dt.data.TFRecordDataset,
                                                              cycle_length=2)

    def direct():
        return dt.data.TFRecordDataset(dt.data.Dataset.list_files(pattern))
    for build in (interleaved, direct):
        for policy in (AutoShardPolicy.FILE, AutoShardPolicy.AUTO):
            # each worker builds its own dataset (as its process does): its own shuffle seed
            parts = [_ints(distribute_input.auto_shard(build(), 2, w, 1, policy))
                     for w in range(2)]
            assert len(parts[0]) == len(parts[1]) == 8
            assert sorted(parts[0] + parts[1]) == everything
            files = [{v // 100 for v in part} for part in parts]
            assert not files[0] & files[1]


def test_two_cursors_filling_one_file_cache_at_once(tmp_path):
    """Two cursors of one thread filling a file cache wrote one temporary file
    (named by process and thread): the second truncated the first's, and its
    rename at the end failed with a bare FileNotFoundError. Each now writes its
    own; the cache left is one whole iteration."""
    path = str(tmp_path / "cache")
    ds = _seeded(lambda: dt.data.Dataset.range(40).shuffle(40).map(
        lambda x: np.full(64, x)).cache(path))
    first, second = iter(ds), iter(ds)
    orders: list[list[int]] = [[], []]
    for _ in range(40):
        orders[0].append(int(next(first)[0]))
        orders[1].append(int(next(second)[0]))
    for cursor in (first, second):
        with pytest.raises(StopIteration):
            next(cursor)
    assert orders[0] != orders[1]   # reshuffled: the two files differ
    assert [int(x[0]) for x in ds] in orders
    assert os.listdir(tmp_path) == ["cache.dtcache"]


_ORPHANS = """
import os, sys, time
import numpy as np
from distrib.data import process_map

def stuck(element, epoch, index):
    time.sleep(600)   # a map function that never returns

workers = process_map.ProcessMap(stuck, 2)
for w, conn in enumerate(workers.conns):   # each worker inside the function
    conn.send_bytes(process_map.msgpack.packb(
        [0, w, process_map.pack_block([np.float32(w)])], use_bin_type=True))
print(" ".join(map(str, workers.pids)), flush=True)
time.sleep(0.5)
os._exit(0)   # the parent dies without closing anything
"""


def test_workers_inside_a_stuck_map_end_when_their_parent_dies():
    """A worker saw its parent's death only at its pipe, between elements: one
    inside a map function that never returns outlived the parent forever. Its
    watchdog now ends it."""
    import subprocess
    import sys
    import time
    out = subprocess.run([sys.executable, "-c", _ORPHANS], capture_output=True, text=True,
                         timeout=60, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr[-2000:]
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:   # an unreaped zombie has ended too
            return f.read().split(")")[-1].split()[0] != "Z"
    try:
        deadline = time.monotonic() + 30   # ample: the watchdog looks every second
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in pids)
    finally:
        for pid in pids:   # a worker left over (before the fix): ended here, by pid
            if alive(pid):
                os.kill(pid, 9)
