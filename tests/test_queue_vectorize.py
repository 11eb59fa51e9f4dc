"""A queue runner's per-example subgraph run over a chunk of records
(distrib.train.input.vectorize): ``reader.read_up_to`` across files and at
the end of the epochs; every converted op's batched result equal, element
by element, to the per-example graph's on the same records; random ops
drawing per example (shapes, ranges, different draws, a flip rate near 1/2);
the CIFAR-10 tutorial's ``distorted_inputs`` giving every record of an
epoch once, then ``OutOfRangeError``, as the per-example path does; a graph
with an op that has no converter falling back to the per-example op; the
``BatchSlice`` kernel against a numpy loop."""
from __future__ import annotations

import asyncio
import collections
import functools
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import distrib as dt
from distrib.train.input import queue_runner, vectorize
from kernels.cpu.batch_rows import batch_select, batch_slice
from kernels.registry import KernelError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "cifar10"))

import cifar10_input  # noqa: E402
import make_data  # noqa: E402

TIMEOUT_S = 60   # a pipeline that never ends fails here instead of hanging


def _write(path: Path, records: list[bytes]) -> str:
    path.write_bytes(b"".join(records))
    return str(path)


async def _drain(sess, fetch) -> list:
    """Run ``fetch`` until the input ends with ``OutOfRangeError``."""
    async def run() -> list:
        out = []
        while True:
            try:
                out.append(await sess.run(fetch))
            except dt.errors.OutOfRangeError:
                return out
    return await asyncio.wait_for(run(), TIMEOUT_S)


# -- read_up_to -------------------------------------------------------------------------------
def test_read_up_to_stops_at_the_end_of_a_file_as_tfs(tmp_path):
    """Files of 5 and 2 two-byte records, read 4 at a time: a's 4; a's last (TF's
    ReaderBase::ReadUpTo returns at the end of a file once it has records); b's 2;
    then OutOfRangeError."""
    a = _write(tmp_path / "a.bin", [bytes([1, i]) for i in range(5)])
    b = _write(tmp_path / "b.bin", [bytes([2, i]) for i in range(2)])

    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.train.string_input_producer([a, b], num_epochs=1, shuffle=False)
            keys, values = dt.FixedLengthRecordReader(record_bytes=2).read_up_to(q, 4)
            assert keys.shape.as_list() == [None] and values.dtype == dt.string
            async with dt.Session() as sess:
                await sess.run(dt.local_variables_initializer())
                dt.train.start_queue_runners(sess=sess)
                return await _drain(sess, [keys, values])

    reads = asyncio.run(main())
    assert [[bytes(v) for v in values] for _, values in reads] == [
        [bytes([1, i]) for i in range(4)], [bytes([1, 4])], [bytes([2, 0]), bytes([2, 1])]]
    assert [k.decode() for k in reads[1][0]] == [f"{a}:4"]
    assert [k.decode() for k in reads[2][0]] == [f"{b}:0", f"{b}:1"]


def test_read_up_to_returns_a_files_records_without_waiting_for_the_next_file(tmp_path):
    """One file of 5 records in a file queue that is not closed, read up to 100:
    TF returns the 5 at the file's end; a read that waited for a second file
    would hang holding them (and lose them when cancelled)."""
    a = _write(tmp_path / "a.bin", [bytes([1, i]) for i in range(5)])

    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.FIFOQueue(10, [dt.string], shapes=[[]])
            enqueue = q.enqueue([a])
            keys, values = dt.FixedLengthRecordReader(record_bytes=2).read_up_to(q, 100)
            async with dt.Session() as sess:
                await sess.run(enqueue)
                return await asyncio.wait_for(sess.run([keys, values]), TIMEOUT_S)

    keys, values = asyncio.run(main())
    assert [bytes(v) for v in values] == [bytes([1, i]) for i in range(5)]
    assert [k.decode() for k in keys] == [f"{a}:{i}" for i in range(5)]


def test_read_up_to_takes_one_positive_count(tmp_path):
    """A vector of counts is an InvalidArgumentError when built (its rank known)
    or when run (a placeholder's), as is 0; not a TypeError from int()."""
    a = _write(tmp_path / "a.bin", [bytes([1, i]) for i in range(3)])

    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.FIFOQueue(10, [dt.string], shapes=[[]])
            reader = dt.FixedLengthRecordReader(record_bytes=2)
            with pytest.raises(dt.errors.InvalidArgumentError, match="must be a scalar"):
                reader.read_up_to(q, [4])
            count = dt.placeholder(dt.int64)
            _, values = reader.read_up_to(q, count)
            async with dt.Session() as sess:
                await sess.run(q.enqueue([a]))
                for bad in ([4, 2], 0):
                    with pytest.raises(dt.errors.InvalidArgumentError, match="positive integer"):
                        await asyncio.wait_for(sess.run(values, {count: bad}), TIMEOUT_S)
                return await asyncio.wait_for(sess.run(values, {count: 2}), TIMEOUT_S)

    assert [bytes(v) for v in asyncio.run(main())] == [bytes([1, 0]), bytes([1, 1])]


def test_tf_record_reader_reads_up_to_across_files(tmp_path):
    paths = []
    for f in range(2):
        path = str(tmp_path / f"{f}.tfrecord")
        with dt.io.TFRecordWriter(path) as w:
            for i in range(3):
                w.write(f"{f}-{i}".encode())
        paths.append(path)

    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.train.string_input_producer(paths, num_epochs=1, shuffle=False)
            _, values = dt.TFRecordReader().read_up_to(q, 4)
            async with dt.Session() as sess:
                await sess.run(dt.local_variables_initializer())
                dt.train.start_queue_runners(sess=sess)
                return await _drain(sess, values)

    got = [[bytes(v).decode() for v in chunk] for chunk in asyncio.run(main())]
    assert got == [["0-0", "0-1", "0-2"], ["1-0", "1-1", "1-2"]]   # a file's end ends a read


# -- the converted ops, element by element -------------------------------------------------
RECORD = 1 + 6 * 6 * 2   # a label byte, then a 2x6x6 channel-major image


def _records(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [bytes([i % 10]) + rng.integers(0, 256, RECORD - 1, dtype=np.uint8).tobytes()
            for i in range(n)]


def _deterministic_element(value):
    """A per-example graph of every converter's kind, nothing random in it."""
    raw = dt.decode_raw(value, dt.uint8)                                    # DecodeRaw
    label = dt.cast(dt.strided_slice(raw, [0], [1]), dt.int32)              # StridedSlice, Cast
    scalar = dt.cast(raw[0], dt.float32)                                    # shrink_axis_mask
    image = dt.transpose(dt.reshape(raw[1:], [2, 6, 6]), [1, 2, 0])         # Reshape, Transpose
    image = dt.cast(image, dt.float32)
    fixed = dt.slice(image, [1, 0, 0], [4, 5, 2])                           # Slice, attr begin
    corner = dt.cast(dt.floor(dt.cast(dt.strided_slice(raw, [1], [4]), dt.float32) / 64.0),
                     dt.int32) * dt.constant([1, 1, 0])                     # Floor, RealDiv, Mul
    window = dt.slice(image, corner, [2, 2, 2])                             # BatchSlice
    mean = dt.reduce_mean(image, axis=[0, 1], keepdims=True)                # Mean
    total = dt.reduce_sum(image)                                            # Sum of everything
    flipped = dt.reverse(image, [1])                                        # ReverseV2
    bright = dt.where(dt.less(total, 36 * 2 * 128.0), flipped, image)      # Less, BatchSelect
    dark = dt.where(dt.less(total, 36 * 2 * 128.0), image, dt.zeros([6, 6, 2]))  # SelectV2, lifted
    bright = bright + dark + dt.where(image > 100.0, image, flipped)      # SelectV2, per pixel
    lifted = image + scalar                                                 # a per-example scalar
    contrast = dt.image.adjust_contrast(image, 1.5)                         # an invariant factor
    factor = scalar / 10.0 + 0.5
    per_contrast = dt.image.adjust_contrast(image, factor)                  # a per-example factor
    std = dt.image.per_image_standardization(image)                         # Sub, Square, Sqrt...
    expanded = dt.squeeze(dt.expand_dims(mean, -1), [3])                    # ExpandDims, Squeeze
    return [label, fixed, window, mean, total, bright, lifted, contrast, per_contrast, std,
            expanded, dt.identity(scalar)]


def _run_pipeline(files: list[str], element_fn, batched: bool,
                  loops: int = 1) -> dict[bytes, list[np.ndarray]]:
    """Every record of one epoch through ``element_fn`` and a FIFO queue's runner;
    by key. ``batched``: whether the runner must have taken the batched path."""
    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.train.string_input_producer(files, num_epochs=1, shuffle=False)
            key, value = dt.FixedLengthRecordReader(record_bytes=RECORD).read(q)
            comps = [key, *element_fn(value)]
            queue = dt.FIFOQueue(1000, [c.dtype for c in comps], [c.shape for c in comps])
            enqueue = queue.enqueue(comps)
            runner = dt.train.QueueRunner(queue, [enqueue] * loops)
            dt.train.add_queue_runner(runner)
            out = queue.dequeue_up_to(5)
            async with dt.Session() as sess:
                await sess.run(dt.local_variables_initializer())
                dt.train.start_queue_runners(sess=sess)
                batches = await _drain(sess, out)
            # the op the loops ran (a ReaderReadUpToV2 in the graph is not enough: a
            # conversion that gave up half way leaves the ops it had built unused)
            ran = {op.type for op in runner.loop_ops()}
            assert ran == ({"QueueEnqueueManyV2"} if batched else {"QueueEnqueueV2"})
        return batches

    by_key: dict[bytes, list[np.ndarray]] = {}
    for batch in asyncio.run(main()):
        for i, key in enumerate(batch[0]):
            by_key[bytes(key)] = [np.asarray(c[i]) for c in batch[1:]]
    return by_key


@pytest.fixture
def chunk_of_seven(monkeypatch):
    monkeypatch.setattr(vectorize, "DEFAULT_CHUNK", 7)


def test_each_converted_op_equals_the_per_example_op_on_the_same_records(tmp_path,
                                                                           chunk_of_seven):
    """23 + 12 records (chunks of 7: the last of each file short), once per
    record and once batched: equal element by element."""
    files = [_write(tmp_path / "a.bin", _records(23, 1)), _write(tmp_path / "b.bin",
                                                                  _records(12, 2))]
    vectorize.ENABLED = False
    try:
        want = _run_pipeline(files, _deterministic_element, batched=False)
    finally:
        vectorize.ENABLED = True
    got = _run_pipeline(files, _deterministic_element, batched=True, loops=2)
    assert sorted(got) == sorted(want) and len(want) == 35
    for key in want:
        for k, (w, g) in enumerate(zip(want[key], got[key])):
            assert w.shape == g.shape and w.dtype == g.dtype, (key, k)
            # the per-example factor's contrast is the kernel's formula in ops: its
            # mean may be summed in another order
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-5, err_msg=f"{key} {k}")


def test_the_switch_turns_vectorizing_off(tmp_path, monkeypatch):
    monkeypatch.setenv(vectorize.ENV, "0")
    assert not vectorize.enabled()
    files = [_write(tmp_path / "a.bin", _records(4, 3))]
    got = _run_pipeline(files, _deterministic_element, batched=False)
    assert len(got) == 4   # the per-example op ran: no ReaderReadUpToV2 was built


# -- random ops -------------------------------------------------------------------------------
def _random_element(value):
    raw = dt.decode_raw(value, dt.uint8)
    image = dt.cast(dt.reshape(raw[1:], [6, 6, 2]), dt.float32)
    ramp = dt.constant(np.arange(16, dtype=np.float32).reshape(4, 4, 1))   # row-asymmetric
    ramp = ramp + 0.0 * dt.reduce_sum(image)   # made per example
    return [dt.image.random_flip_left_right(ramp),
            dt.image.random_brightness(ramp, max_delta=0.5) - ramp,
            dt.image.random_crop(ramp, [2, 2, 1]),
            dt.image.random_contrast(image, 0.2, 1.8),
            image,
            dt.random_uniform([3], -2.0, 2.0) + 0.0 * dt.reduce_sum(image)]


def test_random_ops_draw_for_each_example(tmp_path, chunk_of_seven):
    """400 records in chunks of 7: each example its own flip (rate near 1/2),
    brightness delta in [-0.5, 0.5), crop offset (all nine), contrast factor in
    [0.2, 1.8), uniform row in [-2, 2)."""
    files = [_write(tmp_path / "a.bin", _records(400, 4))]
    got = list(_run_pipeline(files, _random_element, batched=True).values())
    assert len(got) == 400
    ramp = np.arange(16, dtype=np.float32).reshape(4, 4, 1)
    flips = [bool(np.array_equal(f, ramp[:, ::-1])) for f, *_ in got]
    assert all(np.array_equal(f, ramp) or flipped for (f, *_), flipped in zip(got, flips))
    assert 0.4 < np.mean(flips) < 0.6   # 400 fair coins: 4 standard deviations either side
    deltas = np.array([d.reshape(-1) for _, d, *_ in got])
    np.testing.assert_allclose(deltas, deltas[:, :1] * np.ones_like(deltas), atol=1e-5)
    assert deltas.min() >= -0.5 and deltas.max() < 0.5 and len(np.unique(deltas[:, 0])) > 390
    offsets = collections.Counter()
    for _, _, crop, *_ in got:
        r, c = divmod(int(crop[0, 0, 0]), 4)
        np.testing.assert_array_equal(crop, ramp[r:r + 2, c:c + 2])
        offsets[(r, c)] += 1
    assert sorted(offsets) == [(r, c) for r in range(3) for c in range(3)]
    assert min(offsets.values()) > 15   # ~44 each
    factors = []
    for _, _, _, contrast, image, _ in got:
        mean = image.mean(axis=(0, 1), keepdims=True)
        i = np.unravel_index(np.argmax(np.abs(image - mean)), image.shape)
        factors.append((contrast - mean)[i] / (image - mean)[i])
    factors = np.array(factors)
    assert factors.min() >= 0.2 - 1e-4 and factors.max() < 1.8 + 1e-4
    assert len(np.unique(np.round(factors, 4))) > 380
    rows = np.array([u for *_, u in got])
    assert rows.shape == (400, 3) and rows.min() >= -2 and rows.max() < 2
    assert len({tuple(r) for r in rows.tolist()}) == 400


def test_random_ops_without_a_converter_still_draw_for_each_example(tmp_path):
    """A random_shuffle of a constant reads nothing of the record, yet each
    record draws its own (it was taken for a constant of the chunk: one
    shuffle for all); it and random_normal have no batched form here, so the
    runner falls back, and runs."""
    def element(value):
        zero = 0.0 * dt.cast(dt.decode_raw(value, dt.uint8)[0], dt.float32)
        return [dt.random_shuffle(dt.constant(np.arange(10, dtype=np.float32))) + zero,
                dt.random_normal([3]) + zero]

    files = [_write(tmp_path / "a.bin", _records(30, 7))]
    got = list(_run_pipeline(files, element, batched=False).values())
    assert len(got) == 30
    assert len({tuple(s.tolist()) for s, _ in got}) > 20   # 30 draws of 10! orders
    assert all(sorted(s.tolist()) == list(range(10)) for s, _ in got)
    assert len({tuple(n.tolist()) for _, n in got}) == 30


def test_an_axis_out_of_range_is_not_converted(tmp_path):
    """``reverse`` of axis 5 of a rank-3 image: the per-example op fails (numpy,
    as TF's); the converter must not wrap it round to another axis."""
    files = [_write(tmp_path / "a.bin", _records(2, 8))]
    g = dt.Graph()
    with g.as_default():
        q = dt.train.string_input_producer(files, num_epochs=1, shuffle=False)
        _, value = dt.FixedLengthRecordReader(record_bytes=RECORD).read(q)
        image = dt.reshape(dt.decode_raw(value, dt.uint8)[1:], [6, 6, 2])
        enqueue = dt.FIFOQueue(10, [dt.uint8]).enqueue([dt.reverse(image, [5])])
        assert vectorize.vectorized_enqueue(enqueue, 4) is None
        ok = dt.FIFOQueue(10, [dt.uint8]).enqueue([dt.reverse(image, [-1])])
        assert vectorize.vectorized_enqueue(ok, 4) is not None


# -- the CIFAR-10 tutorial's input ---------------------------------------------------------
RECORDS = 40   # per file


@pytest.fixture
def one_epoch_tutorial(monkeypatch, tmp_path):
    d = tmp_path / "cifar"
    make_data.write_generated_set(str(d), RECORDS)
    monkeypatch.setattr(cifar10_input, "NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN", 5 * RECORDS)
    monkeypatch.setattr(dt.train, "string_input_producer",
                        functools.partial(dt.train.string_input_producer, num_epochs=1))
    return str(d)


def _one_epoch_of_distorted_inputs(data_dir: str) -> list[tuple[np.ndarray, np.ndarray]]:
    async def main():
        g = dt.Graph()
        with g.as_default():
            images, labels = cifar10_input.distorted_inputs(data_dir, 8)
            async with dt.Session() as sess:
                await sess.run(dt.local_variables_initializer())
                loops = dt.train.start_queue_runners(sess=sess)
                batches = await _drain(sess, [images, labels])
                await asyncio.wait_for(asyncio.gather(*loops, return_exceptions=True),
                                       TIMEOUT_S)
        return batches
    return asyncio.run(main())


def test_distorted_inputs_give_every_record_of_the_epoch_once_then_out_of_range(
        one_epoch_tutorial, monkeypatch):
    want = collections.Counter()
    for i in range(1, 6):
        raw = np.fromfile(Path(one_epoch_tutorial) / f"data_batch_{i}.bin", np.uint8)
        want.update(raw.reshape(-1, make_data.RECORD_BYTES)[:, 0].tolist())
    for on in (True, False):
        monkeypatch.setattr(vectorize, "ENABLED", on)
        batches = _one_epoch_of_distorted_inputs(one_epoch_tutorial)
        assert len(batches) == 5 * RECORDS // 8   # 25 whole batches, then OutOfRangeError
        labels = collections.Counter(np.concatenate([lb for _, lb in batches]).tolist())
        assert labels == want, on
        images = np.concatenate([im for im, _ in batches])
        np.testing.assert_allclose(images.mean(axis=(1, 2, 3)), 0, atol=1e-4)
        np.testing.assert_allclose(images.std(axis=(1, 2, 3)), 1, atol=1e-3)


def test_the_tutorials_enqueue_vectorizes_with_few_loops(one_epoch_tutorial):
    g = dt.Graph()
    with g.as_default():
        cifar10_input.distorted_inputs(one_epoch_tutorial, 8)
        (runner,) = [qr for qr in g.get_collection(dt.GraphKeys.QUEUE_RUNNERS)
                     if qr.name.startswith("shuffle_batch")]
        assert vectorize.describe(runner.enqueue_ops[0])["vectorizes"]
        ops = runner.loop_ops()
    assert len(ops) == min(len(runner.enqueue_ops), queue_runner.VECTORIZED_LOOPS)
    assert {op.type for op in ops} == {"QueueEnqueueManyV2"}


def test_a_monitored_sessions_finalized_graph_gets_the_vectorized_ops(tmp_path):
    """A MonitoredSession finalizes the graph before it starts the runners: the
    batched ops are still added (the graph finalized again after), and the
    epoch's every record comes out once."""
    files = [_write(tmp_path / "a.bin", _records(30, 9))]

    async def main():
        g = dt.Graph()
        with g.as_default():
            q = dt.train.string_input_producer(files, num_epochs=1, shuffle=False)
            key, value = dt.FixedLengthRecordReader(record_bytes=RECORD).read(q)
            raw = dt.decode_raw(value, dt.uint8)
            queue = dt.FIFOQueue(100, [dt.string, dt.uint8], [[], [RECORD]])
            runner = dt.train.QueueRunner(queue, [queue.enqueue([key, raw])])
            dt.train.add_queue_runner(runner)
            out = queue.dequeue_up_to(4)
            keys = []
            async with dt.train.MonitoredSession() as sess:
                assert g.finalized
                while not sess.should_stop():
                    keys.extend(bytes(k) for k in (await sess.run(out))[0])
                assert g.finalized
                assert [op.type for op in runner.loop_ops()] == ["QueueEnqueueManyV2"]
        return keys

    keys = asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))
    assert keys == [f"{files[0]}:{i}".encode() for i in range(30)]


# -- falling back ---------------------------------------------------------------------------
def test_an_op_without_a_converter_falls_back_to_the_per_example_op(tmp_path):
    def padded(value):
        image = dt.reshape(dt.decode_raw(value, dt.uint8)[1:], [6, 6, 2])
        return [dt.pad(image, [[1, 0], [0, 2], [0, 0]])]

    records = _records(6, 5)
    files = [_write(tmp_path / "a.bin", records)]
    g = dt.Graph()
    with g.as_default():
        q = dt.train.string_input_producer(files, num_epochs=1, shuffle=False)
        _, value = dt.FixedLengthRecordReader(record_bytes=RECORD).read(q)
        enqueue = dt.FIFOQueue(10, [dt.uint8]).enqueue(padded(value))
    told = vectorize.describe(enqueue)
    assert not told["vectorizes"] and told["why"] == "no converter for ['Pad']"
    assert vectorize.vectorized_enqueue(enqueue, 4) is None
    got = _run_pipeline(files, padded, batched=False)
    for i, rec in enumerate(records):
        image = np.frombuffer(rec[1:], np.uint8).reshape(6, 6, 2)
        np.testing.assert_array_equal(got[f"{files[0]}:{i}".encode()][0],
                                      np.pad(image, [[1, 0], [0, 2], [0, 0]]))


# -- the BatchSlice kernel -------------------------------------------------------------------
def test_batch_slice_cuts_each_row_at_its_own_begin():
    x = np.arange(4 * 5 * 6 * 2, dtype=np.float32).reshape(4, 5, 6, 2)
    begin = np.array([[0, 0, 0], [2, 3, 0], [1, 4, 0], [2, 0, 0]], dtype=np.int32)
    (out,) = batch_slice([x, begin], {"size": [3, 2, 2]})
    want = np.stack([x[i, b0:b0 + 3, b1:b1 + 2, b2:b2 + 2] for i, (b0, b1, b2) in enumerate(begin)])
    np.testing.assert_array_equal(out, want)
    assert batch_slice([x[:0], begin[:0]], {"size": [3, 2, 2]})[0].shape == (0, 3, 2, 2)
    with pytest.raises(KernelError, match="reaches outside"):
        batch_slice([x, begin + 1], {"size": [3, 2, 2]})
    with pytest.raises(KernelError, match="must be known"):
        batch_slice([x, begin], {"size": [-1, 2, 2]})
    with pytest.raises(KernelError, match="begin must be integers"):
        batch_slice([x, begin[:, :2]], {"size": [3, 2]})


def test_batch_select_takes_whole_rows():
    t = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    e = -t
    cond = np.array([True, False, False, True])
    (out,) = batch_select([cond, t, e], {})
    np.testing.assert_array_equal(out, np.where(cond[:, None, None], t, e))
    assert out is not e and not np.shares_memory(out, e)
    with pytest.raises(KernelError, match="a bool condition per row"):
        batch_select([cond[:3], t, e], {})


# -- stopping -------------------------------------------------------------------------------
def _blocked_runner(tmp_path: Path):
    """A vectorized runner over endless epochs into a queue of 4: it fills the
    queue and waits for room."""
    files = [_write(tmp_path / "a.bin", _records(50, 6))]
    q = dt.train.string_input_producer(files)
    _, value = dt.FixedLengthRecordReader(record_bytes=RECORD).read(q)
    image = dt.cast(dt.reshape(dt.decode_raw(value, dt.uint8)[1:], [6, 6, 2]), dt.float32)
    queue = dt.FIFOQueue(4, [dt.float32], [[6, 6, 2]])
    runner = dt.train.QueueRunner(queue, [queue.enqueue([image])] * 3)
    dt.train.add_queue_runner(runner)
    return runner, queue.size()


async def test_a_coordinator_stop_ends_vectorized_runners_blocked_on_a_full_queue(tmp_path):
    g = dt.Graph()
    with g.as_default():
        runner, size = _blocked_runner(tmp_path)
        async with dt.Session() as sess:
            coord = dt.train.Coordinator()
            loops = dt.train.start_queue_runners(sess=sess, coord=coord)
            assert [op.type for op in runner.loop_ops()] == ["QueueEnqueueManyV2"] * 2
            for _ in range(TIMEOUT_S * 100):   # bounded: until the queue is full
                if await sess.run(size) == 4:
                    break
                await asyncio.sleep(0.01)
            assert await sess.run(size) == 4
            coord.request_stop()
            await coord.join(loops, stop_grace_period_secs=30)
            assert all(t.done() for t in loops) and not sess.closed


def test_closing_the_session_ends_vectorized_runner_threads(tmp_path):
    g = dt.Graph()
    with g.as_default():
        _, size = _blocked_runner(tmp_path)
        sess = dt.SyncSession()
        threads = dt.train.start_queue_runners(sess=sess)
        for _ in range(TIMEOUT_S * 100):   # bounded: until the queue is full
            if sess.run(size) == 4:
                break
            threading.Event().wait(0.01)
        assert sess.run(size) == 4
        sess.close()
        for t in threads:
            t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
