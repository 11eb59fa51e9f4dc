"""``dt.summary``: event files that TensorBoard's own loaders read back.

The files are written by our writers (TF2's ``create_file_writer``, TF1's
summary ops + ``merge_all`` + ``FileWriter``) and read by TensorBoard's
``EventFileLoader`` and ``EventAccumulator`` (the ``tensorboard`` test
dependency): framing, checksums, the first ``file_version`` event, and every
kind of summary as TensorBoard's plugins see it. Real local servers run the
graph forms.
"""
from __future__ import annotations

import asyncio
import gc
import glob
import os
import re
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import distrib as dt
from distrib.errors import DataLossError, InvalidArgumentError
from distrib.server import training_stats
from distrib.summary import records, summary_ops
from distrib.summary.event_writer import EventFileWriter
from tests.helpers import child_env


def event_files(logdir) -> list[str]:
    return sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")))


def accumulator(logdir) -> EventAccumulator:
    acc = EventAccumulator(str(logdir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    return acc


def scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar tag, TF1's simple_value and TF2's tensor alike
    (the plugin accumulator migrates both to tensors, as TensorBoard does)."""
    return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]


def plugin_of(acc: EventAccumulator, tag: str) -> str:
    return acc.SummaryMetadata(tag).plugin_data.plugin_name


@pytest.fixture(autouse=True)
def no_default_writer():
    """Each test starts and ends without a default writer, step or stats."""
    dt.summary.experimental.set_step(None)
    training_stats.clear()
    yield
    dt.summary.experimental.set_step(None)
    training_stats.clear()


# -- the file ---------------------------------------------------------------------------------
def test_event_file_name_first_record_and_framing_as_tensorboard_reads_them(tmp_path):
    writer = dt.summary.create_file_writer(str(tmp_path))
    with writer.as_default(step=3):
        dt.summary.scalar("loss", 0.0)   # a 0.0: the value's bytes end in NULs
    writer.close()
    (path,) = event_files(tmp_path)
    name = os.path.basename(path)
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\.%s\.%d\.\d+\.v2" % (
        re.escape(socket.gethostname()), os.getpid()), name), name
    events = list(event_file_loader.EventFileLoader(path).Load())
    assert events[0].file_version == "brain.Event:2"
    assert events[1].step == 3 and events[1].summary.value[0].tag == "loss"
    assert [len(r) for r in records.read_records(path)] == [len(e.SerializeToString()) for e in events]


def test_a_damaged_record_is_detected_by_our_reader_and_by_tensorboards(tmp_path):
    events = EventFileWriter(str(tmp_path))
    for step in range(3):
        events.add_summary(dt.summary.proto.messages().Summary(value=[
            dt.summary.proto.messages().Summary.Value(tag="x", simple_value=float(step))]), step)
    events.close()
    good = list(event_file_loader.EventFileLoader(events.path).Load())
    assert [e.step for e in good[1:]] == [0, 1, 2]
    with open(events.path, "r+b") as f:   # flip a byte inside the last record's data
        f.seek(-8, os.SEEK_END)
        byte = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(DataLossError):
        list(records.read_records(events.path))
    # TensorBoard's loader stops at the damaged record: the last step never shows
    loaded = [e.step for e in event_file_loader.EventFileLoader(events.path).Load()]
    assert loaded[1:] == [0, 1]


def test_writes_are_queued_and_reach_the_disk_on_flush(tmp_path):
    writer = dt.summary.create_file_writer(str(tmp_path), max_queue=1000, flush_millis=3_600_000)
    with writer.as_default():
        for step in range(5):
            dt.summary.scalar("loss", 1.0 / (step + 1), step=step)
        size_before = os.path.getsize(event_files(tmp_path)[0])
        writer.flush()
    assert size_before == 0   # nothing but the buffered appends before the flush
    assert scalars(accumulator(tmp_path), "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(5)]
    writer.close()
    with pytest.raises(InvalidArgumentError):
        writer.write(b"", 0)


# -- TF2 ----------------------------------------------------------------------------------------
def test_tf2_values_scalar_histogram_text_image(tmp_path):
    writer = dt.summary.create_file_writer(str(tmp_path))
    data = np.random.default_rng(0).normal(size=1000)
    image = np.zeros((2, 4, 6, 3), np.uint8)
    image[1, :, :, 0] = 255
    with writer.as_default(step=7):
        assert dt.summary.scalar("loss", np.float32(0.5)) is True
        dt.summary.histogram("weights", data, buckets=20)
        dt.summary.text("note", "hello **summary**")
        dt.summary.image("picture", image, max_outputs=2)
        with dt.summary.record_if(False):
            assert dt.summary.scalar("hidden", 1.0) is False
    writer.close()
    acc = accumulator(tmp_path)
    assert set(acc.Tags()["tensors"]) == {"loss", "weights", "note", "picture"}
    assert scalars(acc, "loss") == [(7, 0.5)]
    assert plugin_of(acc, "loss") == "scalars"
    (histo,) = acc.Tensors("weights")
    table = tensor_util.make_ndarray(histo.tensor_proto)
    assert table.shape == (20, 3) and table[:, 2].sum() == 1000
    assert table[0, 0] == pytest.approx(data.min()) and table[-1, 1] == pytest.approx(data.max())
    assert plugin_of(acc, "weights") == "histograms"
    (text,) = acc.Tensors("note")
    assert tensor_util.make_ndarray(text.tensor_proto).item() == b"hello **summary**"
    assert plugin_of(acc, "note") == "text"
    (img,) = acc.Tensors("picture")
    blobs = tensor_util.make_ndarray(img.tensor_proto)
    assert blobs[0] == b"6" and blobs[1] == b"4" and len(blobs) == 4
    assert all(b.startswith(b"\x89PNG\r\n\x1a\n") for b in blobs[2:])
    assert plugin_of(acc, "picture") == "images"
    assert training_stats.last_scalars()["loss"]["value"] == 0.5


def test_float_images_convert_as_tf_does():
    """TF2's image: convert_image_dtype(saturate=True), trunc(clip(x * 255.5));
    TF1's ImageSummary op: each image normalized (largest to 255; with
    negatives 0 to 128), truncated, a non-finite pixel in bad_color."""
    from distrib.summary import values

    def png(row) -> bytes:
        return values.encode_png(np.array(row, np.uint8).reshape(1, -1, 1))

    x = np.array([0, 0.25, 0.5, 1.0, 1.2, -0.1], np.float32).reshape(1, 1, 6, 1)
    (v2,) = values.image_values("i", x, "v2", 1)
    assert v2.tensor.string_val[2] == png([0, 63, 127, 255, 255, 0])
    (v1,) = values.image_values("i", np.array([0, 0.5, 1, 2], np.float32).reshape(1, 1, 4, 1), "v1", 1)
    assert v1.image.encoded_image_string == png([0, 63, 127, 255])
    signed = np.array([-1, 0, 0.5, 1, np.inf], np.float32).reshape(1, 1, 5, 1)
    (v1,) = values.image_values("i", signed, "v1", 1)
    assert v1.image.encoded_image_string == png([1, 128, 191, 255, 255])


def test_tf2_needs_a_step_as_tf_does(tmp_path):
    writer = dt.summary.create_file_writer(str(tmp_path))
    with writer.as_default(), pytest.raises(ValueError, match="No step set"):
        dt.summary.scalar("loss", 1.0)
    writer.close()


async def test_tf2_inside_a_dt_function_written_at_each_call(tmp_path):
    from distrib.distribute.functions.def_function import close_sessions
    writer = dt.summary.create_file_writer(str(tmp_path))
    step = dt.Variable(0, dtype=dt.int64, name="summary_step")
    recording = {"on": True}

    @dt.function
    def train(x):
        mean = dt.reduce_mean(x)
        dt.summary.scalar("mean", mean, step=step)
        with dt.summary.record_if(lambda: recording["on"]):
            dt.summary.histogram("xs", x, step=step)
        step.assign_add(1)
        return mean

    try:
        with writer.as_default():
            for i in range(4):
                recording["on"] = i not in (0, 2)   # off at the first call, the trace's
                assert await train(np.full(5, float(i), np.float32)) == float(i)
        # a Python step: the default step as it is at each call
        @dt.function
        def other(x):
            dt.summary.scalar("plain", dt.reduce_sum(x))
            return x

        with writer.as_default():
            for i in (10, 20):
                dt.summary.experimental.set_step(i)
                await other(np.ones(2, np.float32) * i)
        assert train.experimental_get_tracing_count() == 1
    finally:
        await close_sessions()
        writer.close()
    acc = accumulator(tmp_path)
    assert scalars(acc, "mean") == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]
    assert [e.step for e in acc.Tensors("xs")] == [1, 3]   # record_if asked at each call
    assert scalars(acc, "plain") == [(10, 20.0), (20, 40.0)]


# -- TF1 ------------------------------------------------------------------------------------
def test_tf1_summary_ops_merge_all_and_file_writer(tmp_path, server):
    g = dt.Graph()
    with g.as_default():
        x = dt.placeholder(dt.float32, [None], name="x")
        with dt.name_scope("stats"):
            mean = dt.summary.scalar("mean", dt.reduce_mean(x))
        dt.summary.histogram("xs", x)
        dt.summary.image("img", dt.constant(np.linspace(0, 1, 2 * 3 * 4).reshape(2, 3, 4, 1)
                                            .astype(np.float32)), max_outputs=2)
        dt.summary.text("note", dt.constant("text"))
        dt.summary.scalar("elsewhere", dt.reduce_sum(x), collections=["other"])
        merged = dt.summary.merge_all()
        assert mean.dtype == dt.string and mean.op.type == "ScalarSummary"
        assert len(g.get_collection(dt.GraphKeys.SUMMARIES)) == 4
        assert dt.summary.merge_all("nothing here") is None
        assert dt.merge_all_summaries is dt.summary.merge_all   # the seeds' spelling
    writer = dt.summary.FileWriter(str(tmp_path), graph=g)
    with dt.SyncSession(server.target, graph=g) as sess:
        for step in range(3):
            summary = sess.run(merged, {x: np.arange(4, dtype=np.float32) + step})
            assert isinstance(summary, bytes)
            writer.add_summary(summary, step)
        only_mean = sess.run(mean, {x: np.zeros(2, np.float32)})
    writer.close()
    writer.reopen()   # TF's: a closed FileWriter writes on, to a new file
    writer.add_summary(only_mean, 9)
    writer.close()
    assert len(event_files(tmp_path)) == 2
    acc = accumulator(tmp_path)
    assert scalars(acc, "stats/mean") == [(0, 1.5), (1, 2.5), (2, 3.5), (9, 0.0)]
    assert {"xs", "img/image/0", "img/image/1", "note"} <= set(acc.Tags()["tensors"])
    assert "elsewhere" not in acc.Tags()["tensors"]
    (h, *_) = acc.Tensors("xs")   # TF1's HistogramProto, as TensorBoard migrates it
    assert tensor_util.make_ndarray(h.tensor_proto)[:, 2].sum() == 4
    assert training_stats.last_scalars()["stats/mean"] == pytest.approx(
        {"value": 0.0, "step": 9, "wall_time": training_stats.last_scalars()["stats/mean"]["wall_time"]})


def test_summary_op_is_computed_where_its_input_lives():
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:ps/task:1"):
            v = dt.Variable(1.0, name="v")
            loss = dt.square(v)
        s = dt.summary.scalar("loss", loss)
    assert "/job:ps/task:1" in loss.op.device
    assert s.op.device == loss.op.device   # only the serialized bytes leave that task


def test_merge_refuses_a_tag_twice(server):
    g = dt.Graph()
    with g.as_default():
        a = dt.summary.scalar("same", dt.constant(1.0))
        b = dt.summary.scalar("same", dt.constant(2.0))
        merged = dt.summary.merge([a, b])
    with dt.SyncSession(server.target, graph=g) as sess, pytest.raises(InvalidArgumentError,
                                                                     match="duplicate tag"):
        sess.run(merged)


def test_file_writer_cache_and_a_bad_summary(tmp_path):
    w = dt.summary.FileWriterCache.get(str(tmp_path))
    assert dt.summary.FileWriterCache.get(str(tmp_path)) is w
    with pytest.raises(InvalidArgumentError):
        w.add_summary(12, 0)
    dt.summary.FileWriterCache.clear()
    assert dt.summary.FileWriterCache.get(str(tmp_path)) is not w
    dt.summary.FileWriterCache.clear()


def test_summary_bytes_keep_a_trailing_nul():
    raw = np.array(b"ab\x00\x00", dtype=np.bytes_)
    assert summary_ops.summary_bytes(raw) == b"ab\x00\x00"   # .item() would give b"ab"


async def test_writing_does_not_wait_for_the_disk(tmp_path):
    """A write from an event loop is a queue append: the thread does the I/O."""
    writer = dt.summary.create_file_writer(str(tmp_path), max_queue=1)
    with writer.as_default(step=0):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for i in range(200):
            dt.summary.scalar("x", float(i), step=i)
        spent = loop.time() - t0
    writer.close()
    assert len(scalars(accumulator(tmp_path), "x")) == 200
    assert spent < 5.0   # a bound, not a speed claim: the bench measures the cost


def test_a_writer_nobody_holds_is_collected_and_its_file_closed(tmp_path):
    """The thread holds the queue and the file, not the writer: a dropped writer
    (a Keras fit that raised, say) ends its thread and its file has its events."""
    logdirs = [str(tmp_path / str(i)) for i in range(3)]
    for logdir in logdirs:
        writer = dt.summary.create_file_writer(logdir)
        with writer.as_default(step=1):
            dt.summary.scalar("x", 1.0)
        del writer
    gc.collect()
    paths = [event_files(logdir)[0] for logdir in logdirs]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            t.name == f"summary-writer-{p}" for t in threading.enumerate() for p in paths):
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("summary-writer-")
                and any(t.name.endswith(p) for p in paths)]
    assert all(scalars(accumulator(logdir), "x") == [(1, 1.0)] for logdir in logdirs)


_OPEN_AT_EXIT = """
import sys, weakref
import distrib as dt
writers = [dt.summary.create_file_writer(d) for d in sys.argv[1:]]
for w in writers:
    with w.as_default(step=3):
        dt.summary.scalar("x", 2.0)
class Later:
    pass
keep = Later()
weakref.finalize(keep, print)   # a later finalize: weakref's exit hook runs before ours
print("end", flush=True)
"""


def test_writers_left_open_are_closed_at_exit_at_once_with_their_events(tmp_path):
    """A program that ends with writers open (TF's own scripts often do) exits at
    once, their events on disk: closing one at exit waited out a 30 s join
    before, each, when weakref's exit hook had already turned the stop off."""
    logdirs = [str(tmp_path / str(i)) for i in range(3)]
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", _OPEN_AT_EXIT, *logdirs], capture_output=True,
                         text=True, timeout=120, env=child_env())
    took = time.monotonic() - t0
    assert out.returncode == 0 and out.stdout.split() == ["end"], out.stderr[-2000:]
    assert took < 25, took     # 3 x 30 s before; a start-up and exit, now
    assert all(scalars(accumulator(logdir), "x") == [(3, 2.0)] for logdir in logdirs)


_FULL_DISK = """
import resource, signal, sys
from distrib.errors import UnavailableError
from distrib.summary import proto, records
from distrib.summary.event_writer import EventFileWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # past the limit: EFBIG, a short write first
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
m = proto.messages()
w = EventFileWriter(sys.argv[1])
w.add_summary(m.Summary(value=[m.Summary.Value(tag="t", simple_value=1.0)]), 1)
w.flush()
w.add_summary(m.Summary(value=[m.Summary.Value(tag="big" * 2000, simple_value=2.0)]), 2)
errors = 0
for call in (w.flush, lambda: w.add_summary(m.Summary(), 3), w.flush, w.close):
    try:
        call()
    except UnavailableError:
        errors += 1
print(errors, [m.Event.FromString(r).step for r in records.read_records(w.path)])
"""


def test_a_failed_write_leaves_whole_records_and_is_raised_on_every_later_call(tmp_path):
    """A write that fails halfway (a file size limit: a short write, then EFBIG)
    cuts the file back to its last whole record; nothing more is written to it,
    and every later call raises (TF's reader would stop at a partial record)."""
    out = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.split(maxsplit=1) == ["4", "[0, 1]\n"], out.stdout + out.stderr


@pytest.mark.slow
async def test_a_ps_tasks_summary_in_a_real_cluster(ps_worker_cluster, tmp_path):
    """The summary of a variable on the ps (another process) runs there: its
    kernel is registered in every task, only the serialized bytes travel."""
    spec = ps_worker_cluster
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:ps/task:0"):
            v = dt.Variable(np.array([1.0, 2.0, 6.0], np.float32), name="v")
            total = dt.reduce_sum(v)
        merged = dt.summary.merge([dt.summary.scalar("total", total),
                                   dt.summary.histogram("v", v)])
    assert "/job:ps/task:0" in merged.op.inputs[0].op.device
    writer = dt.summary.FileWriter(str(tmp_path))
    async with asyncio.timeout(30):
        async with dt.Session(f"distrib://{spec['worker'][0]}", graph=g) as sess:
            await sess.run(v.initializer)
            writer.add_summary(await sess.run(merged), 1)
    writer.close()
    assert scalars(accumulator(tmp_path), "total") == [(1, 9.0)]
