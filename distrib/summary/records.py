"""TFRecord framing, as TensorFlow writes event files: each record is its
length (uint64, little-endian), the masked CRC32C of those 8 bytes, the data,
and the masked CRC32C of the data (``crc32c`` computes the checksums).

:func:`read_records` reads a file back and checks every checksum: a record
whose bytes were damaged is a ``DataLossError`` (TensorBoard's loader stops
at it too).
"""
from __future__ import annotations

import struct
from typing import Iterator

import crc32c

from distrib.errors import DataLossError

__all__ = ["masked_crc", "frame", "read_records"]

_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TF's masked CRC32C: the checksum rotated right by 15 bits plus a constant."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One record's bytes on disk."""
    header = struct.pack("<Q", len(data))
    return b"".join((header, struct.pack("<I", masked_crc(header)), data,
                     struct.pack("<I", masked_crc(data))))


def read_records(path: str) -> Iterator[bytes]:
    """Every record's data in file ``path``, checksums checked; a truncated last
    record (a writer still appending) ends the iteration."""
    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            length, crc = struct.unpack("<QI", header)
            if masked_crc(header[:8]) != crc:
                raise DataLossError(f"{path}: a record's length fails its checksum (damaged file)")
            body = f.read(length + 4)
            if len(body) < length + 4:
                return
            if masked_crc(body[:length]) != struct.unpack("<I", body[length:])[0]:
                raise DataLossError(f"{path}: a record's data fails its checksum (damaged file)")
            yield body[:length]
