"""TFRecord framing, as TensorFlow writes event files: each record is its
length (uint64, little-endian), the masked CRC32C of those 8 bytes, the data,
and the masked CRC32C of the data.

The framing itself lives in :mod:`distrib.io.tf_record` (shared with
``dt.io.TFRecordWriter`` and ``dt.data.TFRecordDataset``); this module keeps
the event files' reading rule: :func:`read_records` checks every checksum
(a damaged record is a ``DataLossError``, TensorBoard's loader stops at it
too), and a truncated last record (a writer still appending) ends the
iteration.
"""
from __future__ import annotations

from typing import Iterator

from distrib.io.tf_record import frame, masked_crc
from distrib.io.tf_record import read_records as _read_records

__all__ = ["masked_crc", "frame", "read_records"]


def read_records(path: str) -> Iterator[bytes]:
    """Every record's data in file ``path``, checksums checked; a truncated last
    record (a writer still appending) ends the iteration."""
    return _read_records(path, truncated_ok=True)
