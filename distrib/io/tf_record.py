"""TFRecord files: TF's record framing, shared by ``dt.io.TFRecordWriter``,
``dt.data.TFRecordDataset``, TF1's ``TFRecordReader`` and the summary event
files (``distrib/summary/records.py`` frames through here).

A record on disk is its length (uint64, little-endian), the masked CRC32C of
those 8 bytes, the data, and the masked CRC32C of the data: TF's
``core/lib/io/record_writer.cc``, byte for byte, so files written here read
in TF and the other way round. A whole file may be compressed (``ZLIB``: one
zlib stream, ``GZIP``: one gzip member), as TF's ``TFRecordOptions`` says;
offsets in errors are offsets in the uncompressed stream, as TF's.

Reading checks both checksums of every record (TF's reader does too): a
damaged length or body is a ``DataLossError`` naming the file and the
record's offset, and so is a file that ends inside a record ("truncated
record at N", TF's words), except for :func:`read_records` with
``truncated_ok`` (an event file a writer is still appending to).
The checksums come from the ``crc32c`` package (C, SSE4.2): a pure-Python
CRC would cost more than the rest of reading a record.
"""
from __future__ import annotations

import enum
import gzip
import io
import os
import struct
import zlib
from typing import IO, Any, Iterator

import crc32c

from distrib.errors import DataLossError, InvalidArgumentError, NotFoundError

__all__ = ["masked_crc", "frame", "read_records", "record_offsets", "TFRecordWriter", "TFRecordOptions",
           "TFRecordCompressionType", "tf_record_iterator", "compression_of", "open_read"]

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_READ_BUFFER = 256 * 1024   # TF's default buffer_size for TFRecordDataset


def masked_crc(data: bytes | memoryview) -> int:
    """TF's masked CRC32C: the checksum rotated right by 15 bits plus a constant."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record's bytes on disk."""
    header = _LENGTH.pack(len(data))
    return b"".join((header, _CRC.pack(masked_crc(header)), data, _CRC.pack(masked_crc(data))))


class TFRecordCompressionType(enum.IntEnum):
    """TF1's ``tf.io.TFRecordCompressionType``."""

    NONE = 0
    ZLIB = 1
    GZIP = 2


def compression_of(value: Any) -> str:
    """``""``, ``"ZLIB"`` or ``"GZIP"`` from any of TF's spellings (a string, None,
    a ``TFRecordCompressionType``, a ``TFRecordOptions``)."""
    if isinstance(value, TFRecordOptions):
        return value.compression_type
    if value is None:
        return ""
    if isinstance(value, TFRecordCompressionType):
        return "" if value == TFRecordCompressionType.NONE else value.name
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value.upper() in ("", "NONE", "ZLIB", "GZIP"):
        return "" if value.upper() == "NONE" else value.upper()
    raise InvalidArgumentError(f"compression_type must be '', 'ZLIB' or 'GZIP', got {value!r}")


class TFRecordOptions:
    """``dt.io.TFRecordOptions(compression_type=None, flush_mode=None,
    input_buffer_size=None, output_buffer_size=None, window_bits=None,
    compression_level=None, compression_method=None, mem_level=None,
    compression_strategy=None)``: how a TFRecord file is compressed (TF's;
    the zlib tuning fields other than ``compression_level`` are accepted and
    left to zlib's defaults)."""

    def __init__(self, compression_type: Any = None, flush_mode: Any = None,
                 input_buffer_size: int | None = None, output_buffer_size: int | None = None,
                 window_bits: int | None = None, compression_level: int | None = None,
                 compression_method: Any = None, mem_level: int | None = None,
                 compression_strategy: Any = None) -> None:
        self.compression_type = compression_of(compression_type)
        self.compression_level = -1 if compression_level is None else int(compression_level)
        self.window_bits = window_bits
        self.input_buffer_size = input_buffer_size
        self.output_buffer_size = output_buffer_size

    @classmethod
    def get_compression_type_string(cls, options: Any) -> str:
        """TF's helper: the compression name of options (or a compression type)."""
        return compression_of(options)


def _local(path: Any) -> str:
    spelled = os.fspath(path.item() if hasattr(path, "item") else path)
    return spelled.decode() if isinstance(spelled, bytes) else spelled


class TFRecordWriter:
    """``dt.io.TFRecordWriter(path, options=None)``: writes records to a new file
    (``write``, ``flush``, ``close``; a context manager), as TF's."""

    def __init__(self, path: Any, options: Any = None) -> None:
        self._path = _local(path)
        kind = compression_of(options)
        level = options.compression_level if isinstance(options, TFRecordOptions) else -1
        try:
            self._raw: IO[bytes] = open(self._path, "wb")   # noqa: SIM115 (closed by close())
        except OSError as e:
            raise NotFoundError(f"TFRecordWriter cannot create {self._path}: {e.strerror}") from None
        self._out: IO[bytes] = self._raw
        self._zlib = None
        if kind == "GZIP":
            self._out = gzip.GzipFile(fileobj=self._raw, mode="wb",
                                      compresslevel=9 if level < 0 else level, mtime=0)
        elif kind == "ZLIB":
            self._zlib = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS)
        self._closed = False

    def write(self, record: Any) -> None:
        """Append one record (bytes; a str is written as UTF-8)."""
        if self._closed:
            raise InvalidArgumentError(f"TFRecordWriter for {self._path} is closed")
        data = record.encode() if isinstance(record, str) else bytes(record)
        framed = frame(data)
        if self._zlib is not None:
            self._raw.write(self._zlib.compress(framed))
        else:
            self._out.write(framed)

    def flush(self) -> None:
        """Push what was written to the file (a compressed stream: a sync flush)."""
        if self._closed:
            return
        if self._zlib is not None:
            self._raw.write(self._zlib.flush(zlib.Z_SYNC_FLUSH))
        elif self._out is not self._raw:
            self._out.flush()
        self._raw.flush()

    def close(self) -> None:
        """Finish the file (the compressed stream's end) and close it."""
        if self._closed:
            return
        self._closed = True
        if self._zlib is not None:
            self._raw.write(self._zlib.flush())
        if self._out is not self._raw:
            self._out.close()
        self._raw.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _ZlibReader(io.RawIOBase):
    """A readable stream of a zlib-compressed file's uncompressed bytes."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # output made at most a buffer at a time (max_length; the rest of the input waits
        # in unconsumed_tail): a highly compressed chunk never becomes megabytes of
        # pending bytes sliced again on every read
        n = len(buffer)
        while not self._pending and not self._inflate.eof:
            chunk = self._inflate.unconsumed_tail or self._raw.read(_READ_BUFFER)
            if not chunk:   # the file ends before the stream does: what is left, then 0
                self._pending = self._inflate.flush()
                break
            self._pending = self._inflate.decompress(chunk, max(n, _READ_BUFFER))
        take = self._pending[:n]
        self._pending = self._pending[n:]
        buffer[:len(take)] = take
        return len(take)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _GzipReader(gzip.GzipFile):
    """A gzip stream that closes the file it reads (``GzipFile`` leaves a file it
    was given open, to the garbage collector)."""

    def close(self) -> None:
        raw = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


def open_read(path: str, compression_type: str = "", buffer_size: int | None = None) -> IO[bytes]:
    """A buffered binary stream of ``path``'s (uncompressed) bytes; ``NotFoundError``
    naming the file when it cannot be opened."""
    try:
        raw = open(path, "rb", buffering=buffer_size or _READ_BUFFER)   # noqa: SIM115
    except OSError as e:
        raise NotFoundError(f"{path}: {e.strerror}; check the file name "
                            "(dt.io.gfile.glob lists what is there)") from None
    if compression_type == "GZIP":
        return _GzipReader(fileobj=raw, mode="rb")   # type: ignore[return-value]
    if compression_type == "ZLIB":
        return io.BufferedReader(_ZlibReader(raw), _READ_BUFFER)
    return raw


def record_offsets(path: Any) -> Iterator[int]:
    """The offset after each record of an uncompressed TFRecord file, from the
    records' headers only (no data read, no checksum checked)."""
    name = _local(path)
    with open_read(name) as f:
        offset = 0
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            offset += 16 + _LENGTH.unpack_from(header)[0]
            f.seek(offset)
            yield offset


def read_records(path: Any, compression_type: Any = "", truncated_ok: bool = False,
                 buffer_size: int | None = None, offset: int = 0) -> Iterator[bytes]:
    """Every record's data in ``path`` (from the record at byte ``offset`` of an
    uncompressed file), both checksums checked (see the header)."""
    name = _local(path)
    f = open_read(name, compression_of(compression_type), buffer_size)
    if offset:
        f.seek(offset)
    try:
        read, unpack, crc = f.read, _HEADER.unpack, masked_crc
        while True:
            header = read(12)
            if not header:
                return
            if len(header) < 12:
                if truncated_ok:
                    return
                raise DataLossError(f"{name}: truncated record at {offset} (the file ends "
                                    "inside a record's header)")
            length, length_crc = unpack(header)
            if crc(header[:8]) != length_crc:
                raise DataLossError(f"{name}: corrupted record at {offset}: its length fails "
                                    "its checksum (a damaged file, or not a TFRecord file; "
                                    "is it compressed? pass compression_type)")
            body = read(length + 4)
            if len(body) < length + 4:
                if truncated_ok:
                    return
                raise DataLossError(f"{name}: truncated record at {offset} ({length} bytes "
                                    f"announced, {max(len(body) - 4, 0)} there)")
            data = body[:length]
            if crc(data) != _CRC.unpack_from(body, length)[0]:
                raise DataLossError(f"{name}: corrupted record at {offset}: its data fails its "
                                    "checksum (a damaged file)")
            offset += 16 + length
            yield data
    except (OSError, EOFError, zlib.error) as e:
        raise DataLossError(f"{name}: cannot decompress at record offset {offset}: {e}") from None
    finally:
        f.close()


def tf_record_iterator(path: Any, options: Any = None) -> Iterator[bytes]:
    """TF1's ``tf.compat.v1.io.tf_record_iterator(path, options=None)``."""
    return read_records(path, compression_of(options))
