"""``dt.summary``: summaries TensorBoard reads (TF2's writers and TF1's summary
ops, one spelling for both; see ``distrib.summary.writer``).

Modules: ``proto`` (the event-file messages, made from a descriptor in
Python), ``records`` (TFRecord framing with masked CRC32C), ``event_writer``
(an event file written by a thread of its own), ``values`` (one summary value
from numpy), ``summary_ops`` (TF1's ops, their kernels, ``merge_all``),
``writer`` (TF2's writers and the shared spelling), ``file_writer`` (TF1's
``FileWriter``).
"""
from __future__ import annotations

from types import SimpleNamespace

from distrib.summary.file_writer import FileWriter, FileWriterCache
from distrib.summary.summary_ops import merge, merge_all
from distrib.summary.tracing import trace_export, trace_off, trace_on
from distrib.summary.writer import (
    SummaryWriter,
    create_file_writer,
    create_noop_writer,
    flush,
    get_step,
    histogram,
    image,
    record_if,
    scalar,
    set_step,
    should_record_summaries,
    text,
)

# TF2's tf.summary.experimental
experimental = SimpleNamespace(get_step=get_step, set_step=set_step)

__all__ = ["FileWriter", "FileWriterCache", "merge", "merge_all", "SummaryWriter",
           "create_file_writer", "create_noop_writer", "flush", "histogram", "image", "record_if",
           "scalar", "should_record_summaries", "text", "experimental",
           "trace_on", "trace_off", "trace_export"]
