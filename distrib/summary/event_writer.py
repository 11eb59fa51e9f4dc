"""An event file and the thread that writes it (TF's ``EventFileWriter``).

The file is ``<logdir>/events.out.tfevents.<time>.<host>.<pid>.<n><suffix>``
(TF's pattern); its first record is an ``Event`` with ``file_version
"brain.Event:2"``. :meth:`EventFileWriter.add_event` only appends the event
to a deque: a thread of the writer, woken once ``max_queue`` events wait
(not at each event), every ``flush_secs``, on :meth:`flush`, on
:meth:`close` and at the process's exit, serializes, frames
(``records.frame``) and appends them in one write. So a task's
event loop that writes a summary never waits for the disk (TF's queue and
flush thread alike); :meth:`flush` and :meth:`close` wait until everything
written before them is on disk.

A write error of the thread (a full disk, a removed folder) cuts the file
back to its last whole record, and from then on nothing more is written to it:
every later ``add_event``/``flush``/``close`` raises it as an
``UnavailableError`` (a new writer starts a new file). A writer nobody holds
is collected: the thread holds only the queue and the file, and the writer's
finalizer has it write what waits and close the file.
"""
from __future__ import annotations

import collections
import itertools
import os
import socket
import threading
import time
import weakref
from typing import Any

from distrib.errors import InvalidArgumentError, UnavailableError
from distrib.server import training_stats
from distrib.summary import proto, records

__all__ = ["EventFileWriter", "event_file_name", "as_summary", "note_scalars",
           "close_writers_at_exit"]

_uid = itertools.count()
# the run folders of evaluation (Keras' TensorBoard "validation", Estimator's "eval"):
# their scalars are noted as "<run>/<tag>", apart from the training ones of the same tag
EVAL_RUNS = ("validation", "eval")
_open: weakref.WeakSet = weakref.WeakSet()   # writers to flush at exit


def event_file_name(logdir: str, suffix: str = "") -> str:
    """A new event file's path in ``logdir`` (TF's name: time, host, pid, a counter)."""
    return os.path.join(logdir, "events.out.tfevents.%010d.%s.%d.%d%s" % (
        int(time.time()), socket.gethostname(), os.getpid(), next(_uid), suffix))


class EventFileWriter:
    """Writes ``Event`` messages to one event file from a thread of its own."""

    def __init__(self, logdir: str, max_queue: int = 10, flush_secs: float = 120.0,
                 filename_suffix: str = "") -> None:
        os.makedirs(logdir, exist_ok=True)
        self.logdir = logdir
        self.path = event_file_name(logdir, filename_suffix or "")
        self._flush_secs = max(float(flush_secs), 0.001)
        self._max_queue = max(int(max_queue), 1)
        self._sink = _Sink(self.path, self._flush_secs)
        self._closed = False
        run = os.path.basename(os.path.normpath(logdir))
        self._note_prefix = f"{run}/" if run in EVAL_RUNS else ""
        # the thread gets the sink only, never the writer: a writer nobody holds
        # is collected, and its finalizer has the thread write what waits and close
        self._thread = threading.Thread(target=_write_loop, args=(self._sink,),
                                        name=f"summary-writer-{self.path}", daemon=True)
        self._finalizer = weakref.finalize(self, _stop, self._sink)
        self._finalizer.atexit = False   # close_writers_at_exit closes (and awaits) what is open
        self._thread.start()
        m = proto.messages()
        self.add_event(m.Event(wall_time=time.time(), file_version="brain.Event:2"))
        _open.add(self)

    def get_logdir(self) -> str:
        return self.logdir

    @property
    def closed(self) -> bool:
        return self._closed

    def add_event(self, event: Any) -> None:
        """Queue ``event`` (an ``Event`` message) to be written; returns at once."""
        self._check()
        if self._closed:
            raise UnavailableError(f"summary writer of {self.path} is closed (reopen it first)")
        self._sink.pending.append(event)
        if len(self._sink.pending) >= self._max_queue:
            self._sink.wake.set()

    def add_summary(self, summary: Any, step: int | None = None, wall_time: float | None = None) -> None:
        """Queue a ``Summary`` (a message, or its serialized bytes) as an event
        at ``step``; its scalars are noted for ``python -m distrib.status``."""
        summary = as_summary(summary)
        note_scalars(summary, step, self._note_prefix)
        event = proto.messages().Event(wall_time=time.time() if wall_time is None else wall_time,
                                       summary=summary)
        if step is not None:
            event.step = int(step)
        self.add_event(event)

    def flush(self, wait: bool = True) -> None:
        """Wait until every event added so far is written and on disk (with
        ``wait`` False: have the thread do it, and return at once)."""
        if self._closed:
            return
        self._drain(wait)
        self._check()

    def close(self) -> None:
        """Flush, then close the file; further events are refused (TF's close).
        The file is closed also when a write failed (then its error is raised)."""
        if self._closed:
            return
        self._drain(True)
        self._closed = True
        # the thread's stop marker, after everything queued: put here, not by calling the
        # finalizer, which does nothing once weakref's own exit hook has run (at exit,
        # close_writers_at_exit would then wait out the join below for every open writer)
        self._finalizer.detach()
        _stop(self._sink)
        self._thread.join(timeout=30)
        _open.discard(self)
        self._check()

    def _drain(self, wait: bool) -> None:
        done = threading.Event()
        self._sink.pending.append(done)
        self._sink.wake.set()
        if not wait:
            return
        while not done.wait(0.5):
            if not self._thread.is_alive():
                break

    def _check(self) -> None:
        """A failed write is raised by every later call: the file ends at its last
        whole record and nothing more is written to it (a new writer starts a new file)."""
        error = self._sink.error
        if error is not None:
            raise UnavailableError(f"writing the event file {self.path} failed: "
                                   f"{type(error).__name__}: {error}; later events are "
                                   "not written") from error


class _Sink:
    """The event file and queue the writing thread uses (see EventFileWriter)."""

    def __init__(self, path: str, flush_secs: float) -> None:
        self.path = path
        self.flush_secs = flush_secs
        self.pending: collections.deque = collections.deque()   # events; flush/stop markers
        self.wake = threading.Event()
        self.error: BaseException | None = None   # the first failed write: nothing written after it
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        self.good = os.fstat(self.fd).st_size   # the end of the last whole record


def _stop(sink: _Sink) -> None:
    """The thread writes what is queued, then closes the file (close, or the writer collected)."""
    sink.pending.append(None)
    sink.wake.set()


def _write_loop(sink: _Sink) -> None:
    """The writing thread: at each wake (``max_queue`` events, ``flush_secs``,
    a flush, the stop) frame everything queued and append it in one write."""
    deadline = time.monotonic() + sink.flush_secs
    try:
        while True:
            sink.wake.wait(max(deadline - time.monotonic(), 0.0))
            sink.wake.clear()
            batch, stop = bytearray(), False
            while sink.pending:
                item = sink.pending.popleft()
                if item is None:
                    stop = True
                    break
                if isinstance(item, threading.Event):   # flush(): written, then wake the caller
                    _append(sink, batch)
                    batch = bytearray()
                    item.set()
                    continue
                if sink.error is None:
                    try:
                        batch += records.frame(item.SerializeToString())
                    except Exception as exc:   # noqa: BLE001 - kept for the writer's next call
                        sink.error = exc
            _append(sink, batch)
            deadline = time.monotonic() + sink.flush_secs
            if stop:
                return
    finally:
        try:
            os.close(sink.fd)
        except OSError as exc:
            sink.error = sink.error or exc


def _append(sink: _Sink, batch: bytearray) -> None:
    """Append ``batch`` (whole records); on a failure cut the file back to its
    last whole record, keep the error and write nothing more (TF's reader
    would stop at a partial record, and everything after it would be lost)."""
    if not batch or sink.error is not None:
        return
    view = memoryview(batch)
    try:
        while view:
            view = view[os.write(sink.fd, view):]
        sink.good += len(batch)
    except OSError as exc:
        sink.error = exc
        try:
            os.ftruncate(sink.fd, sink.good)
        except OSError:
            pass


def as_summary(summary: Any) -> Any:
    """Our ``Summary`` message from bytes, a fetched string scalar, or any
    message with ``SerializeToString`` (TensorBoard's own classes)."""
    m = proto.messages()
    if isinstance(summary, m.Summary):
        return summary
    if hasattr(summary, "SerializeToString"):
        summary = summary.SerializeToString()
    if hasattr(summary, "dtype") and getattr(summary.dtype, "kind", "") == "S":
        summary = summary.tobytes()   # all of it: .item() would drop trailing NULs
    if isinstance(summary, str):
        summary = summary.encode("latin-1")
    if not isinstance(summary, (bytes, bytearray)):
        raise InvalidArgumentError("add_summary takes a Summary or its serialized bytes "
                                   f"(a summary op's value); got {type(summary).__name__}")
    try:
        return m.Summary.FromString(bytes(summary))
    except Exception as exc:   # protobuf's DecodeError
        raise InvalidArgumentError(f"not a serialized Summary: {exc}") from exc


def note_scalars(summary: Any, step: int | None, prefix: str = "") -> None:
    """Note every scalar of ``summary`` (a ``simple_value``, or a one-element
    float tensor of the scalars plugin) with ``training_stats.record_scalar``,
    as ``prefix + tag`` (an evaluation run's writer: "validation/")."""
    for v in summary.value:
        which = v.WhichOneof("value")
        if which == "simple_value":
            training_stats.record_scalar(prefix + v.tag, v.simple_value, step)
        elif which == "tensor" and v.metadata.plugin_data.plugin_name == "scalars":
            vals = list(v.tensor.float_val) or list(v.tensor.double_val)
            if len(vals) == 1:
                training_stats.record_scalar(prefix + v.tag, vals[0], step)


def close_writers_at_exit() -> None:
    """At the process's exit (the process runtime's exit hook calls it first),
    every open writer's events reach the disk."""
    for writer in list(_open):
        try:
            writer.close()
        except Exception:   # noqa: BLE001 - exiting: nothing to report to
            pass
