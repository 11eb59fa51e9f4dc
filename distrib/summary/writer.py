"""TF2's summary writers (``dt.summary.create_file_writer``) and the one
spelling of ``scalar`` / ``histogram`` / ``text`` / ``image`` both forms share.

    writer = dt.summary.create_file_writer("logs/train")
    with writer.as_default(step=0):
        dt.summary.scalar("loss", 0.25)               # written now (a value)
    with writer.as_default():
        @dt.function
        def step(x):
            dt.summary.scalar("loss", loss_of(x), step=it)   # written each call
            ...

* **A default writer set** (``as_default`` / ``set_as_default``): a value is
  written through it at once (a buffered append, see ``event_writer``); a
  tensor inside a traced ``dt.function`` becomes a summary op of the step,
  fetched each call and written by this process (:func:`capture` is the
  hook ``dt.function`` opens around a trace). The step is the ``step``
  argument, else ``experimental.get_step()`` (an int, or a variable read
  in the step); with neither TF's ``ValueError``. ``record_if(condition)``
  (a bool, or a callable asked at each write) turns writing off and on.
* **No default writer**: TF1's summary op (``summary_ops``), added to
  ``GraphKeys.SUMMARIES`` for ``merge_all``; its value is a serialized
  ``Summary``.

The default writer, step and recording conditions are process-wide, as in
TF2's eager context.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator, Sequence

from distrib.errors import InvalidArgumentError
from distrib.framework import auto_deps, dtypes
from distrib.framework.graph import Tensor
from distrib.ops import math_ops
from distrib.summary import summary_ops
from distrib.summary import values as summary_values
from distrib.summary.event_writer import EventFileWriter

__all__ = ["SummaryWriter", "create_file_writer", "create_noop_writer", "scalar", "histogram",
           "text", "image", "flush", "record_if", "should_record_summaries", "get_step",
           "set_step", "FunctionSummaries", "capture"]

logger = logging.getLogger(__name__)

_writers: list[Any] = []        # the default-writer stack (as_default nests)
_conditions: list[Any] = []     # record_if's stack
_step: list[Any] = [None]       # experimental.set_step's value
_captures: list[FunctionSummaries] = []   # the traces open now (innermost last)


class SummaryWriter:
    """A writer of one event file (``create_file_writer``'s result)."""

    def __init__(self, logdir: str, max_queue: int = 10, flush_millis: int = 120000,
                 filename_suffix: str = ".v2") -> None:
        self._logdir = logdir
        self._options = (max_queue, flush_millis / 1000.0, filename_suffix)
        self._events: EventFileWriter | None = EventFileWriter(logdir, *self._options)

    @property
    def logdir(self) -> str:
        return self._logdir

    @contextlib.contextmanager
    def as_default(self, step: Any = None) -> Iterator[SummaryWriter]:
        """The default writer inside (and ``step`` the default step, when given)."""
        _writers.append(self)
        saved = _step[0]
        if step is not None:
            _step[0] = step
        try:
            yield self
        finally:
            _writers.remove(self)
            if step is not None:
                _step[0] = saved
            if self._events is not None:   # TF flushes at the block's end: here without waiting
                self._events.flush(wait=False)

    def set_as_default(self, step: Any = None) -> None:
        """The default writer from now on (TF2's ``set_as_default``)."""
        _writers.append(self)
        if step is not None:
            _step[0] = step

    def init(self) -> None:
        """TF's no-op for a file writer (its file opens when made)."""

    def write(self, summary: Any, step: Any) -> None:
        """Write a ``Summary`` (message or serialized bytes) at ``step``."""
        if self._events is None:
            raise InvalidArgumentError(f"the summary writer of {self._logdir} is closed")
        self._events.add_summary(summary, None if step is None else int(step))

    def flush(self) -> None:
        """Everything written so far reaches the disk (waits for it)."""
        if self._events is not None:
            self._events.flush()

    def close(self) -> None:
        """Flush and close the file; the writer is no longer the default."""
        while self in _writers:
            _writers.remove(self)
        if self._events is not None:
            events, self._events = self._events, None
            events.close()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class NoopWriter(SummaryWriter):
    """``create_noop_writer()``: a default writer that writes nothing."""

    def __init__(self) -> None:   # no file
        self._logdir = ""
        self._events = None

    def write(self, summary: Any, step: Any) -> None:
        pass


def create_file_writer(logdir: str, max_queue: int | None = None, flush_millis: int | None = None,
                       filename_suffix: str | None = None, name: str | None = None,
                       experimental_trackable: bool = False) -> SummaryWriter:
    """A writer of a new event file in ``logdir`` (TF2's ``create_file_writer``)."""
    return SummaryWriter(logdir, 10 if max_queue is None else max_queue,
                         120000 if flush_millis is None else flush_millis,
                         ".v2" if filename_suffix is None else filename_suffix)


def create_noop_writer() -> SummaryWriter:
    return NoopWriter()


def default_writer() -> SummaryWriter | None:
    return _writers[-1] if _writers else None


def flush(writer: SummaryWriter | None = None, name: str | None = None) -> None:
    """Flush ``writer`` (the default writer when None)."""
    w = writer if writer is not None else default_writer()
    if w is not None:
        w.flush()


# -- step and recording ---------------------------------------------------------------------
def get_step() -> Any:
    """The default step (``experimental.get_step``): an int, a variable, or None."""
    return _step[0]


def set_step(step: Any) -> None:
    """Set the default step (``experimental.set_step``)."""
    _step[0] = step


@contextlib.contextmanager
def record_if(condition: bool | Callable[[], bool]) -> Iterator[None]:
    """Write summaries inside only while ``condition`` holds (a bool, or a
    callable asked at each write: inside a traced function, at each call)."""
    _conditions.append(condition)
    try:
        yield
    finally:
        _conditions.pop()


def _holds(conditions: Sequence[Any]) -> bool:
    return all(bool(c()) if callable(c) else bool(c) for c in conditions)


def should_record_summaries() -> bool:
    """Whether a summary written now would be written (a default writer, every condition)."""
    return default_writer() is not None and _holds(_conditions)


def _step_value(step: Any) -> int:
    step = get_step() if step is None else step
    if step is None:
        raise ValueError("No step set. Please specify one either through the `step` argument "
                         "or through dt.summary.experimental.set_step()")
    if isinstance(step, (Tensor,)) or hasattr(step, "_as_tensor"):
        raise InvalidArgumentError("outside a dt.function a summary's step is a number; "
                                   "a variable step is read in a traced function's step")
    return int(step)


# -- one spelling, two forms ----------------------------------------------------------------
def _is_graph_value(data: Any) -> bool:
    return isinstance(data, Tensor) or hasattr(data, "_as_tensor")


def _write(kind: str, name: str, data: Any, step: Any, build: Callable[[str, Any], list],
           op_attrs: dict) -> Any:
    writer = default_writer()
    if auto_deps.tracing():   # record_if's conditions are asked at each call
        _capture_op(kind, writer, name, data, step, op_attrs)
        return True
    if not _holds(_conditions):
        return False
    if _is_graph_value(data):
        raise InvalidArgumentError(f"summary {name!r}: a tensor is written through a writer inside "
                                   "a dt.function; outside one pass its value")
    writer.write(summary_values.serialize(build(name, data)), _step_value(step))
    return True


def scalar(name: str, data: Any = None, step: Any = None, description: str | None = None, *,
           tensor: Any = None, collections: Sequence[str] | None = None,
           family: str | None = None) -> Any:
    """TF2's ``scalar`` with a default writer, else TF1's ``ScalarSummary`` op."""
    data = tensor if data is None else data
    if default_writer() is None:
        return summary_ops.scalar_op(name, data, collections, family)
    return _write("ScalarSummary", name, data, step,
                  lambda n, d: [summary_values.scalar_value(n, d, "v2", description)], {})


def histogram(name: str, data: Any = None, step: Any = None, buckets: int | None = None,
              description: str | None = None, *, values: Any = None,
              collections: Sequence[str] | None = None, family: str | None = None) -> Any:
    """TF2's ``histogram`` with a default writer, else TF1's ``HistogramSummary`` op."""
    data = values if data is None else data
    if default_writer() is None:
        return summary_ops.histogram_op(name, data, collections, family)
    return _write("HistogramSummary", name, data, step,
                  lambda n, d: [summary_values.histogram_value(n, d, "v2", buckets, description)],
                  {"buckets": buckets})


def image(name: str, data: Any = None, step: Any = None, max_outputs: int = 3,
          description: str | None = None, *, tensor: Any = None,
          collections: Sequence[str] | None = None, family: str | None = None) -> Any:
    """TF2's ``image`` with a default writer, else TF1's ``ImageSummary`` op."""
    data = tensor if data is None else data
    if default_writer() is None:
        return summary_ops.image_op(name, data, max_outputs, collections, family)
    return _write("ImageSummary", name, data, step,
                  lambda n, d: summary_values.image_values(n, d, "v2", max_outputs, description),
                  {"max_images": int(max_outputs)})


def text(name: str, data: Any = None, step: Any = None, description: str | None = None, *,
         tensor: Any = None, collections: Sequence[str] | None = None) -> Any:
    """TF2's ``text`` with a default writer, else a TF1 ``TextSummary`` op."""
    data = tensor if data is None else data
    if default_writer() is None:
        return summary_ops.text_op(name, data, collections)
    return _write("TextSummary", name, data, step,
                  lambda n, d: [summary_values.text_value(n, d, description)], {})


# -- inside a traced dt.function ------------------------------------------------------------
class FunctionSummaries:
    """What one trace of a ``dt.function`` writes at each call: per summary,
    its writer, its op's output, its step (a fetched tensor, a number baked in,
    or the default step read at the call) and the recording conditions."""

    def __init__(self) -> None:
        self.entries: list[tuple[SummaryWriter, Tensor, Tensor | None, Any, tuple]] = []

    def __bool__(self) -> bool:
        return bool(self.entries)

    def fetches(self) -> list[Tensor]:
        out: list[Tensor] = []
        for _, summary, step_tensor, _, _ in self.entries:
            out.append(summary)
            if step_tensor is not None:
                out.append(step_tensor)
        return out

    def write(self, fetched: list[Any]) -> None:
        """Write one call's fetched summaries (in :meth:`fetches`' order)."""
        i = 0
        for writer, _, step_tensor, step, conditions in self.entries:
            summary = fetched[i]
            i += 1
            if step_tensor is not None:
                step = fetched[i]
                i += 1
            if not _holds(conditions):
                continue
            writer.write(summary_ops.summary_bytes(summary), _step_value(step))


@contextlib.contextmanager
def capture() -> Iterator[FunctionSummaries]:
    """Collect the summaries a trace writes (``dt.function`` opens it)."""
    found = FunctionSummaries()
    _captures.append(found)
    try:
        yield found
    finally:
        _captures.remove(found)


def _capture_op(kind: str, writer: SummaryWriter, name: str, data: Any, step: Any, attrs: dict) -> None:
    x = math_ops.convert_operand(data)
    with x.graph.colocate_with(x.op):   # computed where its input lives
        out = x.graph.create_op(kind, [x], {"tag": name, "form": "v2", **attrs}, name,
                                output_specs=[(dtypes.string, [])]).outputs[0]
    if not _captures:
        logger.warning("summary %r made while tracing outside dt.function: it is not written", name)
        return
    chosen = get_step() if step is None else step
    if chosen is None:   # as TF: at trace time, not at a call
        _step_value(None)
    if _is_graph_value(chosen):   # a variable or tensor: read in the step, fetched with it
        step_tensor, step = math_ops.convert_operand(chosen), None
    else:   # a number given here, else the default step as it is at each call
        step_tensor = None
    _captures[-1].entries.append((writer, out, step_tensor, step, tuple(_conditions)))
