"""TF1's queue-based input: the CIFAR-10 tutorial's input module
(examples/cifar10/cifar10_input.py) on a generated set of CIFAR's binary
format, through its queue runners (batch shape and dtype, labels, images
standardized, the epoch limit, runners stopping with the session); the
reader's header and footer; the queues' rules (capacity, shuffling,
close)."""
from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import distrib as dt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "cifar10"))

import cifar10_input  # noqa: E402
import make_data  # noqa: E402

RECORDS = 40   # per file


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cifar")
    make_data.write_generated_set(str(d), RECORDS)
    return str(d)


@pytest.fixture
def small_queues(monkeypatch):
    # the tutorial keeps 40% of an epoch in its queues: 20,000 images; the
    # generated set's epoch is what min_queue_examples is taken of here
    monkeypatch.setattr(cifar10_input, "NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN", 5 * RECORDS)
    monkeypatch.setattr(cifar10_input, "NUM_EXAMPLES_PER_EPOCH_FOR_EVAL", RECORDS)


def _records(path: str) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, np.uint8).reshape(-1, make_data.RECORD_BYTES)
    return raw[:, 0].astype(np.int32), raw[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def test_generated_set_has_cifars_binary_format(data_dir):
    for name in make_data.FILES:
        size = (Path(data_dir) / name).stat().st_size
        assert size == RECORDS * (1 + 3072)
    labels, images = _records(str(Path(data_dir) / "test_batch.bin"))
    assert labels.min() >= 0 and labels.max() <= 9 and images.shape == (RECORDS, 32, 32, 3)


def test_distorted_inputs_give_standardized_batches_of_the_tutorials_shape(data_dir,
                                                                          small_queues):
    async def main():
        g = dt.Graph()
        with g.as_default():
            images, labels = cifar10_input.distorted_inputs(data_dir, 16)
            assert images.shape.as_list() == [16, 24, 24, 3] and labels.shape.as_list() == [16]
            async with dt.Session() as sess:
                loops = dt.train.start_queue_runners(sess=sess)
                batches = [await sess.run([images, labels]) for _ in range(3)]
            await asyncio.sleep(0.05)
            return batches, loops

    batches, loops = asyncio.run(main())
    for im, lb in batches:
        assert im.shape == (16, 24, 24, 3) and im.dtype == np.float32
        assert lb.shape == (16,) and lb.dtype == np.int32
        assert lb.min() >= 0 and lb.max() < cifar10_input.NUM_CLASSES
        np.testing.assert_allclose(im.mean(axis=(1, 2, 3)), 0, atol=1e-4)
        np.testing.assert_allclose(im.std(axis=(1, 2, 3)), 1, atol=1e-3)
    assert all(t.done() for t in loops)   # the session closed: no runner left


def test_eval_inputs_are_the_files_records_centre_cropped_in_order(data_dir, small_queues):
    """``inputs(eval_data=True)``: test_batch.bin's records in file order (one
    file, FIFO batching), each image's centre 24x24, standardized."""
    labels, images = _records(str(Path(data_dir) / "test_batch.bin"))
    crop = images[:, 4:28, 4:28, :].astype(np.float64)
    mean = crop.mean(axis=(1, 2, 3), keepdims=True)
    std = np.maximum(crop.std(axis=(1, 2, 3), keepdims=True), 1 / np.sqrt(24 * 24 * 3))
    want = (crop - mean) / std

    g = dt.Graph()
    with g.as_default():
        images_t, labels_t = cifar10_input.inputs(True, data_dir, 8)
        with dt.SyncSession() as sess:
            threads = dt.train.start_queue_runners(sess=sess)
            im, lb = sess.run([images_t, labels_t])
    # with one file there is one order; several runners may interleave records,
    # so match each image to its record by label and content
    for k in range(8):
        i = int(np.argmin(np.abs(want - im[k]).sum(axis=(1, 2, 3))))
        np.testing.assert_allclose(im[k], want[i], atol=1e-4)
        assert lb[k] == labels[i]
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


def test_the_epoch_limit_ends_input_with_out_of_range(tmp_path):
    """string_input_producer(num_epochs=2) over one file of 5 records: 10
    records, then OutOfRangeError (batch of 4: two whole batches, the rest
    too few)."""
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(5)) * 1)   # five 1-byte records
    g = dt.Graph()
    with g.as_default():
        q = dt.train.string_input_producer([str(path)], num_epochs=2, shuffle=False)
        _, value = dt.FixedLengthRecordReader(record_bytes=1).read(q)
        byte = dt.reshape(dt.decode_raw(value, dt.uint8), [])
        (batch,) = dt.train.batch([byte], batch_size=4, num_threads=1)
        with dt.SyncSession() as sess:
            sess.run(dt.local_variables_initializer())
            threads = dt.train.start_queue_runners(sess=sess)
            got = [sess.run(batch).tolist() for _ in range(2)]
            with pytest.raises(dt.errors.OutOfRangeError):
                sess.run(batch)
        for t in threads:
            t.join(timeout=10)
    assert got == [[0, 1, 2, 3], [4, 0, 1, 2]]
    assert not any(t.is_alive() for t in threads)


def test_reader_skips_header_and_footer_and_keys_records(tmp_path):
    path = tmp_path / "hf.bin"
    path.write_bytes(b"HDR" + b"aabbcc" + b"F")   # header 3, records of 2, footer 1
    g = dt.Graph()
    with g.as_default():
        q = dt.FIFOQueue(4, dt.string, shapes=[[]])
        enqueue = q.enqueue_many([[str(path)]])
        close = q.close()
        key, value = dt.FixedLengthRecordReader(2, header_bytes=3, footer_bytes=1).read(q)
        with dt.SyncSession() as sess:
            sess.run(enqueue)
            sess.run(close)
            got = [sess.run([key, value]) for _ in range(3)]
            with pytest.raises(dt.errors.OutOfRangeError):
                sess.run(value)
    assert [v for _, v in got] == [b"aa", b"bb", b"cc"]
    assert [k for k, _ in got] == [f"{path}:{i}".encode() for i in range(3)]


def test_a_full_queue_blocks_its_runner_until_the_session_closes():
    g = dt.Graph()
    with g.as_default():
        q = dt.FIFOQueue(3, dt.int32, shapes=[[]])
        dt.train.add_queue_runner(dt.train.QueueRunner(q, [q.enqueue([7])] * 2))
        size = q.size()
        sess = dt.SyncSession()
        threads = dt.train.start_queue_runners(sess=sess)
        for _ in range(100):
            if sess.run(size) == 3:
                break
            threading.Event().wait(0.01)
        assert sess.run(size) == 3
        assert all(t.is_alive() for t in threads)   # blocked on the full queue
        sess.close()
        for t in threads:
            t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)


def test_random_shuffle_queue_keeps_min_after_dequeue_until_closed():
    g = dt.Graph()
    with g.as_default():
        q = dt.RandomShuffleQueue(20, 5, dt.int32, shapes=[[]], seed=3)
        enqueue = q.enqueue_many([list(range(10))])
        take = q.dequeue_many(5)
        rest = q.dequeue_up_to(10)
        close = q.close()
        with dt.SyncSession() as sess:
            sess.run(enqueue)
            first = sess.run(take)
            sess.run(close)
            second = sess.run(rest)
            with pytest.raises(dt.errors.OutOfRangeError):
                sess.run(rest)
    assert sorted([*first, *second]) == list(range(10))
    assert list(first) != [0, 1, 2, 3, 4] or list(second) != [5, 6, 7, 8, 9]


async def test_a_coordinator_stop_ends_runners_blocked_on_a_full_queue():
    """TF's _close_on_stop: the stop cancels the pending enqueues, so the
    coordinator's join returns with the session still open (the CIFAR-10
    eval stops its coordinator before it closes the session)."""
    g = dt.Graph()
    with g.as_default():
        q = dt.FIFOQueue(3, dt.int32, shapes=[[]])
        dt.train.add_queue_runner(dt.train.QueueRunner(q, [q.enqueue([7])] * 2))
        size = q.size()
        async with dt.Session() as sess:
            coord = dt.train.Coordinator()
            loops = dt.train.start_queue_runners(sess=sess, coord=coord)
            for _ in range(500):   # bounded: until the queue is full
                if await sess.run(size) == 3:
                    break
                await asyncio.sleep(0.01)
            assert await sess.run(size) == 3
            assert not any(t.done() for t in loops)   # blocked on the full queue
            coord.request_stop()
            await coord.join(loops, stop_grace_period_secs=30)
            assert all(t.done() for t in loops) and not sess.closed


async def test_a_dequeue_given_back_returns_in_order_and_an_empty_dequeue_takes_nothing():
    """Review: an aborted step's batch came back last-first, a batch of a queue
    without full shapes came back as one element, dequeue_many(0) took one."""
    from distrib.runtime.state.input_queues import InputQueue, queue_spec
    for shapes in ([[]], None):
        q = InputQueue("q", queue_spec("fifo", ["int32"], shapes, 10))
        assert q.enqueue([np.arange(5, dtype=np.int32)], many=True) is None   # room: no wait
        batch = await q.dequeue(3)
        assert batch[0].tolist() == [0, 1, 2]
        q.give_back(batch)
        assert (await q.dequeue(None))[0] == 0 and (await q.dequeue(2))[0].tolist() == [1, 2]
        empty = await q.dequeue(0)
        assert empty[0].shape[0] == 0 and (await q.dequeue(2))[0].tolist() == [3, 4]


def test_a_sync_coordinator_joins_the_runner_threads_as_tf1s(tmp_path):
    """TF1's pattern with a blocking session: ``coord.request_stop()`` then
    ``coord.join(threads)`` blocks until the runner threads end (they stop and
    close their queues); an error given to request_stop is re-raised by join;
    a thread that outlives the grace period is a RuntimeError naming it."""
    import threading
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(16)))
    g = dt.Graph()
    with g.as_default():
        q = dt.train.string_input_producer([str(path)])
        _, value = dt.FixedLengthRecordReader(record_bytes=1).read(q)
        byte = dt.reshape(dt.decode_raw(value, dt.uint8), [])
        (batch,) = dt.train.batch([byte], batch_size=4, num_threads=2)
        with dt.SyncSession() as sess:
            coord = dt.train.Coordinator()
            threads = dt.train.start_queue_runners(sess=sess, coord=coord)
            assert threads and all(isinstance(t, threading.Thread) for t in threads)
            assert len(sess.run(batch)) == 4
            coord.request_stop()
            assert coord.join(threads, stop_grace_period_secs=30) is None   # blocking, done
            assert not any(t.is_alive() for t in threads) and coord.joined
    coord = dt.train.Coordinator()
    coord.request_stop(ValueError("the reader failed"))
    done = threading.Thread(target=lambda: None)
    done.start()
    with pytest.raises(ValueError, match="the reader failed"):
        coord.join([done])
    hold = threading.Event()
    stuck = threading.Thread(target=hold.wait, args=(30,), name="stuck-runner")
    stuck.start()
    try:
        coord = dt.train.Coordinator()
        coord.request_stop()
        with pytest.raises(RuntimeError, match="stuck-runner"):
            coord.join([stuck], stop_grace_period_secs=0.1)
    finally:
        hold.set()
        stuck.join(30)
