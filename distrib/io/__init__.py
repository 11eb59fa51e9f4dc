"""``dt.io``: TF's ``tf.io``, the part a distributed program reaches for:
``dt.io.gfile`` (files and folders, as the multi-worker tutorials use them)
and TFRecord files (``TFRecordWriter``, ``TFRecordOptions``,
``tf_record_iterator``: tf_record.py). The parsing and decoding ops
(``parse_single_example``, ``decode_raw``, ``decode_jpeg`` ...) are op
builders of a later layer, which the ``dt`` namespace puts here too.

A layer of its own, placed right after ``errors`` (tests/test_layout.py): it
imports only ``distrib.errors``, so every later layer may use it. Re-exports only.
"""
from __future__ import annotations

from distrib.io import gfile
from distrib.io.tf_record import TFRecordCompressionType, TFRecordOptions, TFRecordWriter, tf_record_iterator

__all__ = ["gfile", "TFRecordWriter", "TFRecordOptions", "TFRecordCompressionType",
           "tf_record_iterator"]
