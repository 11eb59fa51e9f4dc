"""``dt.data.TFRecordDataset``, ``FixedLengthRecordDataset`` and
``TextLineDataset``: TF's file-reading datasets, each a ``Dataset`` over a
reader node of :mod:`distrib.data.readers` (every element a string scalar,
one record or line). Their transformations return plain Datasets, as TF's.
"""
from __future__ import annotations

from typing import Any

from distrib.data import readers
from distrib.data.dataset_ops import Dataset

__all__ = ["TFRecordDataset", "FixedLengthRecordDataset", "TextLineDataset"]


class TFRecordDataset(Dataset):
    """``TFRecordDataset(filenames, compression_type=None, buffer_size=None,
    num_parallel_reads=None, name=None)``: the records of TFRecord files
    (``""``, ``"ZLIB"`` or ``"GZIP"``), both checksums of each checked."""

    def __init__(self, filenames: Any, compression_type: Any = None, buffer_size: Any = None,
                 num_parallel_reads: Any = None, name: str | None = None) -> None:
        super().__init__(readers.tf_records(filenames, compression_type, buffer_size,
                                            num_parallel_reads))


class FixedLengthRecordDataset(Dataset):
    """``FixedLengthRecordDataset(filenames, record_bytes, header_bytes=None,
    footer_bytes=None, buffer_size=None, compression_type=None,
    num_parallel_reads=None, name=None)``: records of ``record_bytes`` each."""

    def __init__(self, filenames: Any, record_bytes: Any, header_bytes: Any = None,
                 footer_bytes: Any = None, buffer_size: Any = None,
                 compression_type: Any = None, num_parallel_reads: Any = None,
                 name: str | None = None) -> None:
        super().__init__(readers.fixed_length_records(filenames, record_bytes, header_bytes,
                                                      footer_bytes, buffer_size,
                                                      compression_type, num_parallel_reads))


class TextLineDataset(Dataset):
    """``TextLineDataset(filenames, compression_type=None, buffer_size=None,
    num_parallel_reads=None, name=None)``: each line of the files, without its
    line ending."""

    def __init__(self, filenames: Any, compression_type: Any = None, buffer_size: Any = None,
                 num_parallel_reads: Any = None, name: str | None = None) -> None:
        super().__init__(readers.text_lines(filenames, compression_type, buffer_size,
                                            num_parallel_reads))
