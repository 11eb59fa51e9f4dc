"""TF1's readers and raw decoding: ``dt.FixedLengthRecordReader``,
``dt.TFRecordReader``, ``dt.WholeFileReader`` (TF's ``io_ops``) and ``dt.decode_raw`` / ``dt.io.decode_raw`` (``parsing_ops``).

``reader.read(queue)`` is one ``ReaderReadV2`` op colocated with the queue
of file names (a reader takes its files from that queue on the queue's
task, as TF's resource placement puts it there): each run returns the next
record as ``(key, value)`` strings, the key ``"<file>:<record index>"``
as TF's; ``reader.read_up_to(queue, n)`` (``ReaderReadUpToV2``) up to ``n``
of them as two string vectors. The reader reads the files of the task it
runs on.
"""
from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from distrib.errors import InvalidArgumentError
from distrib.framework import dtypes
from distrib.framework.graph import Tensor, get_default_graph
from distrib.ops import math_ops as ops
from distrib.ops import value_mode
from distrib.ops.data_flow_ops import QueueBase

__all__ = ["ReaderBase", "FixedLengthRecordReader", "TFRecordReader", "WholeFileReader",
           "decode_raw"]


class ReaderBase:
    """A reader of records from files named by a queue (TF1's ``ReaderBase``)."""

    def __init__(self, kind: str, spec: dict[str, Any], name: str) -> None:
        graph = get_default_graph()
        self._graph = graph
        self._name = graph.unique_name(name)
        self._spec = {"kind": kind, **spec}
        self._reads = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def supports_serialize(self) -> bool:
        return False

    def read(self, queue: QueueBase, name: str | None = None) -> tuple[Tensor, Tensor]:
        """The next record: ``(key, value)``, two string scalars; the reader
        takes its next file from ``queue`` when it needs one."""
        if not isinstance(queue, QueueBase):
            raise InvalidArgumentError(f"{type(self).__name__}.read takes a queue of file names "
                                       f"(dt.train.string_input_producer), got {queue!r}")
        graph = self._graph
        attrs = {"reader": self._name, "reader_spec": dict(self._spec)}
        with graph.as_default():
            op = queue.colocated_op("ReaderReadV2", [], [(dtypes.string, []), (dtypes.string, [])],
                                    name or "ReaderReadV2", attrs)
        return op.outputs[0], op.outputs[1]

    def read_up_to(self, queue: QueueBase, num_records: Any, name: str | None = None
                   ) -> tuple[Tensor, Tensor]:
        """Up to ``num_records`` records: ``(keys, values)``, two string vectors
        of one length ``n <= num_records`` (TF's ``ReaderReadUpToV2``): fewer
        where a file ends (as TF's, a read does not go on into the next file
        once it has records), ``OutOfRangeError`` once ``queue`` is closed and
        empty."""
        if not isinstance(queue, QueueBase):
            raise InvalidArgumentError(f"{type(self).__name__}.read_up_to takes a queue of "
                                       f"file names, got {queue!r}")
        graph = self._graph
        attrs = {"reader": self._name, "reader_spec": dict(self._spec)}
        with graph.as_default():
            count = ops.convert_to_tensor(num_records, dtype=dtypes.int64)
            if count.shape.rank not in (None, 0):
                raise InvalidArgumentError(f"{type(self).__name__}.read_up_to: num_records "
                                           f"must be a scalar, got shape {count.shape}")
            op = queue.colocated_op("ReaderReadUpToV2", [count],
                                    [(dtypes.string, [None]), (dtypes.string, [None])],
                                    name or "ReaderReadUpToV2", attrs)
        return op.outputs[0], op.outputs[1]


class FixedLengthRecordReader(ReaderBase):
    """``dt.FixedLengthRecordReader(record_bytes, header_bytes=None,
    footer_bytes=None, hop_bytes=None, name=None, encoding=None)``: records
    of ``record_bytes`` each, after a file's ``header_bytes`` and before its
    ``footer_bytes`` (TF1's; ``encoding`` other than none is not supported)."""

    def __init__(self, record_bytes: int, header_bytes: int | None = None,
                 footer_bytes: int | None = None, hop_bytes: int | None = None,
                 name: str | None = None, encoding: str | None = None) -> None:
        if encoding:
            raise InvalidArgumentError(f"FixedLengthRecordReader: encoding {encoding!r} is not "
                                       "supported here; decompress the files first")
        if int(record_bytes) <= 0:
            raise InvalidArgumentError(f"FixedLengthRecordReader: record_bytes must be "
                                       f"positive, got {record_bytes}")
        spec = {"record_bytes": int(record_bytes), "header_bytes": int(header_bytes or 0),
                "footer_bytes": int(footer_bytes or 0), "hop_bytes": int(hop_bytes or 0)}
        super().__init__("fixed_length", spec, name or "FixedLengthRecordReaderV2")


class TFRecordReader(ReaderBase):
    """``dt.TFRecordReader(name=None, options=None)``: the records of TFRecord
    files, keyed ``"<file>:<offset>"`` (TF1's; ``options`` a
    ``dt.io.TFRecordOptions`` or compression type)."""

    def __init__(self, name: str | None = None, options: Any = None) -> None:
        from distrib.io.tf_record import compression_of
        super().__init__("tf_record", {"compression_type": compression_of(options)},
                         name or "TFRecordReaderV2")


class WholeFileReader(ReaderBase):
    """``dt.WholeFileReader(name=None)``: each file whole, keyed by its name (TF1's)."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__("whole_file", {}, name or "WholeFileReaderV2")


def decode_raw(input_bytes: Any = None, out_type: Any = None, little_endian: bool = True,
               name: str | None = None, bytes: Any = None) -> Tensor:  # noqa: A002 - TF1's name
    """Each string of ``input_bytes`` as a vector of ``out_type`` numbers
    (shape ``input.shape + [n]``); TF1's ``bytes=`` spelling too."""
    value = input_bytes if input_bytes is not None else bytes
    if value is None or out_type is None:
        raise InvalidArgumentError("decode_raw needs input_bytes and out_type")
    if value_mode.values_now(value):   # in a dataset function: the kernel, at once
        one = value.item() if isinstance(value, np.ndarray) and value.ndim == 0 else value
        if isinstance(one, builtins.bytes) and little_endian:   # one record: a view of it
            want = np.dtype(dtypes.as_dtype(out_type).as_numpy_dtype)
            if len(one) % want.itemsize == 0:
                return np.frombuffer(one, dtype=want)
        from kernels.cpu.image import decode_raw as kernel
        from kernels.registry import KernelError
        try:
            return kernel([value_mode.as_value(value)], {"out_type": dtypes.as_dtype(out_type),
                                                         "little_endian": little_endian})[0]
        except KernelError as e:
            raise InvalidArgumentError(str(e)) from None
    t = ops.convert_to_tensor(value, dtype=dtypes.string)
    return ops.op_output("DecodeRaw", [t], {"out_type": dtypes.as_dtype(out_type),
                                          "little_endian": bool(little_endian)},
                         name or "DecodeRaw")
