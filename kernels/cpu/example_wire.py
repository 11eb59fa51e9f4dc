"""A reader of ``tf.train.Example``'s protobuf wire format, written out by hand.

The parse kernels read Examples here rather than through protobuf's
classes: the kernels package imports nothing of ``distrib`` (where the
message classes live), and an Example is a small, fixed shape of message
(``Example{features=1}``, ``Features{map<string, Feature> feature=1}``,
``Feature{oneof bytes_list=1 | float_list=2 | int64_list=3}``, each list
``{repeated value=1}``, numbers packed or not), so a reader that skips
every feature nobody asked for costs less than building the whole message.
Field numbers are TF's (``tensorflow/core/example/feature.proto``).

Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32; an unknown
field of any of them is skipped (a newer writer's fields), as protobuf
does. Bytes that are not an Example raise ``ValueError`` with what was
wrong; the kernels turn it into TF's "Could not parse example input".
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BYTES", "FLOAT", "INT64", "parse_features"]

BYTES, FLOAT, INT64 = 1, 2, 3   # Feature's field numbers, also the kind of a value


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("a varint runs past the end of the message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint is longer than 10 bytes")


def _skip(buf: bytes, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        n, pos = _varint(buf, pos)
        return pos + n
    if wire == 5:
        return pos + 4
    raise ValueError(f"wire type {wire} is not one an Example uses")


def _fields(buf: bytes, start: int, end: int):
    """(field number, wire type, value start, value end) of each field in buf[start:end];
    a varint's value itself for wire type 0 as the start."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ValueError("a field runs past the end of its message")
            yield number, wire, pos, pos + n
            pos += n
        elif wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value, pos
        else:
            nxt = _skip(buf, pos, wire)
            if nxt > end:
                raise ValueError("a field runs past the end of its message")
            yield number, wire, pos, nxt
            pos = nxt
    if pos != end:
        raise ValueError("a field runs past the end of its message")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _values(buf: bytes, kind: int, start: int, end: int) -> Any:
    """The values of a BytesList / FloatList / Int64List held in buf[start:end]."""
    if kind == BYTES:
        return [buf[s:e] for number, wire, s, e in _fields(buf, start, end)
                if number == 1 and wire == 2]
    floats: list[Any] = []
    ints: list[int] = []
    for number, wire, s, e in _fields(buf, start, end):
        if number != 1:
            continue
        if kind == FLOAT:
            if wire == 2:   # packed
                if (e - s) % 4:
                    raise ValueError("a packed float list is not a whole number of floats")
                floats.append(np.frombuffer(buf, "<f4", (e - s) // 4, s))
            elif wire == 5:
                floats.append(np.frombuffer(buf, "<f4", 1, s))
        elif wire == 2:   # packed int64
            pos = s
            while pos < e:
                v, pos = _varint(buf, pos)
                ints.append(_signed64(v))
        elif wire == 0:
            ints.append(_signed64(s))
    if kind == FLOAT:
        return (np.concatenate(floats) if len(floats) > 1 else
                floats[0].copy() if floats else np.zeros(0, np.float32)).astype(np.float32)
    return np.array(ints, dtype=np.int64)


def parse_features(serialized: Any, wanted: set[str] | frozenset[str] | None = None
                   ) -> dict[str, tuple[int, Any]]:
    """``{name: (kind, values)}`` of an Example's features (only those named in
    ``wanted``, when given): a list of bytes, or a float32 / int64 vector.
    A feature with no kind set is left out, as TF's parser treats it as missing."""
    buf = bytes(serialized) if not isinstance(serialized, bytes) else serialized
    out: dict[str, tuple[int, Any]] = {}
    for number, wire, s, e in _fields(buf, 0, len(buf)):
        if number != 1 or wire != 2:   # Example.features
            continue
        for n2, w2, fs, fe in _fields(buf, s, e):
            if n2 != 1 or w2 != 2:   # Features.feature: a map entry
                continue
            key = None
            value_at = None
            for n3, w3, vs, ve in _fields(buf, fs, fe):
                if n3 == 1 and w3 == 2:
                    key = buf[vs:ve].decode("utf-8", "replace")
                elif n3 == 2 and w3 == 2:
                    value_at = (vs, ve)
            if key is None or (wanted is not None and key not in wanted):
                continue
            out.pop(key, None)   # a later map entry of a key replaces the earlier one
            if value_at is None:
                continue
            for kind, w4, ls, le in _fields(buf, *value_at):
                if kind in (BYTES, FLOAT, INT64) and w4 == 2:
                    out[key] = (kind, _values(buf, kind, ls, le))
    return out
