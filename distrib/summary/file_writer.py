"""TF1's ``dt.summary.FileWriter`` (``tf.compat.v1.summary.FileWriter``) and
``FileWriterCache``.

    writer = dt.summary.FileWriter(logdir)
    summary = sess.run(merged)                 # a summary op's value: bytes
    writer.add_summary(summary, global_step)

``add_summary`` takes a serialized ``Summary`` (what a summary op or
``merge_all`` evaluates to) or a ``Summary`` message; the events go through
an ``EventFileWriter`` (a buffered append; a thread writes the file). The
``graph`` argument is accepted and not written: our GraphDef is not TF's
protocol buffer, so TensorBoard's graph view has nothing to show.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from distrib.summary import proto
from distrib.summary.event_writer import EventFileWriter

__all__ = ["FileWriter", "FileWriterCache"]


class FileWriter:
    """Writes summaries and events of a TF1 program to a new event file in ``logdir``."""

    def __init__(self, logdir: str, graph: Any = None, max_queue: int = 10, flush_secs: float = 120,
                 graph_def: Any = None, filename_suffix: str | None = None, session: Any = None) -> None:
        self._logdir = str(logdir)
        self._options = (max_queue, flush_secs, filename_suffix or "")
        self._events: EventFileWriter = EventFileWriter(self._logdir, *self._options)

    def get_logdir(self) -> str:
        return self._logdir

    def add_summary(self, summary: Any, global_step: int | None = None) -> None:
        """Write a ``Summary`` (serialized bytes, or the message) at ``global_step``."""
        self._events.add_summary(summary, global_step)

    def add_event(self, event: Any) -> None:
        """Write an ``Event`` (our message, or any with ``SerializeToString``)."""
        m = proto.messages()
        if not isinstance(event, m.Event):
            event = m.Event.FromString(event.SerializeToString() if hasattr(event, "SerializeToString")
                                       else bytes(event))
        self._events.add_event(event)

    def add_session_log(self, session_log: Any, global_step: int | None = None) -> None:
        """Write a ``SessionLog`` event (START, STOP, CHECKPOINT)."""
        m = proto.messages()
        if not isinstance(session_log, m.SessionLog):
            session_log = m.SessionLog.FromString(session_log.SerializeToString())
        event = m.Event(wall_time=time.time(), session_log=session_log)
        if global_step is not None:
            event.step = int(global_step)
        self._events.add_event(event)

    def add_graph(self, graph: Any = None, global_step: int | None = None, graph_def: Any = None) -> None:
        """Accepted and ignored (see the module header)."""

    def add_run_metadata(self, run_metadata: Any, tag: str, global_step: int | None = None) -> None:
        """Accepted and ignored: the step's timeline is ``dt.client.timeline``'s."""

    def flush(self) -> None:
        """Everything added so far reaches the disk (waits for it)."""
        self._events.flush()

    def close(self) -> None:
        """Flush and close the event file; ``reopen`` starts a new one."""
        self._events.close()

    def reopen(self) -> None:
        """After ``close``: write on, to a new event file in the same logdir."""
        if self._events.closed:
            self._events = EventFileWriter(self._logdir, *self._options)

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FileWriterCache:
    """One ``FileWriter`` per logdir, shared by whoever asks (TF's cache)."""

    _cache: dict[str, FileWriter] = {}
    _lock = threading.Lock()

    @staticmethod
    def get(logdir: str) -> FileWriter:
        with FileWriterCache._lock:
            writer = FileWriterCache._cache.get(str(logdir))
            if writer is None:
                writer = FileWriterCache._cache[str(logdir)] = FileWriter(logdir)
            return writer

    @staticmethod
    def clear() -> None:
        """Close every cached writer and forget them."""
        with FileWriterCache._lock:
            writers, FileWriterCache._cache = list(FileWriterCache._cache.values()), {}
        for w in writers:
            w.close()
