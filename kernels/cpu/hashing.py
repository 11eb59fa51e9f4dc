"""CPU kernels of the lookup layers: ``StringToHashBucketFast`` (TF's: the
FarmHash ``Fingerprint64`` of each string modulo ``num_buckets``),
``LookupTableFindV2`` over a static table, and ``DenseBincount``.

``fingerprint64`` is FarmHash's ``Fingerprint64`` (farmhashna's ``Hash64``,
what TF's ``tf.strings.to_hash_bucket_fast`` and Keras' ``Hashing`` and OOV
buckets use), written in Python integers masked to 64 bits, so ids hash to
TF's buckets (checked against TF's documented examples in the tests). A
table lookup keeps a dict per table (keyed by the table's attrs' identity)
so a step does one dict lookup per key.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels.registry import CPU, KernelError, KernelTable

__all__ = ["fingerprint64", "hash_bucket"]

KERNELS = KernelTable()   # this module's kernels; kernels.cpu.loader registers them

_M = (1 << 64) - 1
K0, K1, K2 = 0xc3a5c85c97cb3127, 0xb492b66fbe98f273, 0x9ae16a3b2f90404f


def _f64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 8], "little")


def _f32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 4], "little")


def _rot(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _M


def _mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M
    b ^= b >> 47
    return (b * mul) & _M


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = K2 + n * 2
        a = (_f64(s, 0) + K2) & _M
        b = _f64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M
        d = ((_rot(a, 25) + b) * mul) & _M
        return _len16(c, d, mul)
    if n >= 4:
        mul = K2 + n * 2
        a = _f32(s, 0)
        return _len16((n + (a << 3)) & _M, _f32(s, n - 4), mul)
    if n > 0:
        a, b, c = s[0], s[n >> 1], s[n - 1]
        y = (a + (b << 8)) & 0xffffffff
        z = (n + (c << 2)) & 0xffffffff
        return (_mix(((y * K2) ^ (z * K0)) & _M) * K2) & _M
    return K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = K2 + n * 2
    a = (_f64(s, 0) * K1) & _M
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M
    d = (_f64(s, n - 16) * K2) & _M
    return _len16((_rot((a + b) & _M, 43) + _rot(c, 30) + d) & _M,
                  (a + _rot((b + K2) & _M, 18) + c) & _M, mul)


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = K2 + n * 2
    a = (_f64(s, 0) * K2) & _M
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * mul) & _M
    d = (_f64(s, n - 16) * K2) & _M
    y = (_rot((a + b) & _M, 43) + _rot(c, 30) + d) & _M
    z = _len16(y, (a + _rot((b + K2) & _M, 18) + c) & _M, mul)
    e = (_f64(s, 16) * mul) & _M
    f = _f64(s, 24)
    g = ((y + _f64(s, n - 32)) * mul) & _M
    h = ((z + _f64(s, n - 24)) * mul) & _M
    return _len16((_rot((e + f) & _M, 43) + _rot(g, 30) + h) & _M,
                  (e + _rot((f + a) & _M, 18) + g) & _M, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = _f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24)
    a = (a + w) & _M
    b = _rot((b + a + z) & _M, 21)
    c = a
    a = (a + x + y) & _M
    b = (b + _rot(a, 44)) & _M
    return (a + z) & _M, (b + c) & _M


def fingerprint64(s: bytes) -> int:
    """FarmHash's Fingerprint64 of ``s`` (an unsigned 64-bit int)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * K1 + 113) & _M
    z = (_mix((y * K2 + 113) & _M) * K2) & _M
    v, w = (0, 0), (0, 0)
    x = (x * K2 + _f64(s, 0)) & _M
    end = ((n - 1) // 64) * 64
    last64 = end + ((n - 1) & 63) - 63
    i = 0
    while True:
        x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M, 37) * K1) & _M
        y = (_rot((y + v[1] + _f64(s, i + 48)) & _M, 42) * K1) & _M
        x ^= w[1]
        y = (y + v[0] + _f64(s, i + 40)) & _M
        z = (_rot((z + w[0]) & _M, 33) * K1) & _M
        v = _weak32(s, i, (v[1] * K1) & _M, (x + w[0]) & _M)
        w = _weak32(s, i + 32, (z + w[1]) & _M, (y + _f64(s, i + 16)) & _M)
        z, x = x, z
        i += 64
        if i == end:
            break
    mul = K1 + ((z & 0xff) << 1)
    i = last64
    w = ((w[0] + ((n - 1) & 63)) & _M, w[1])
    v = ((v[0] + w[0]) & _M, v[1])
    w = ((w[0] + v[0]) & _M, w[1])
    x = (_rot((x + y + v[0] + _f64(s, i + 8)) & _M, 37) * mul) & _M
    y = (_rot((y + v[1] + _f64(s, i + 48)) & _M, 42) * mul) & _M
    x ^= (w[1] * 9) & _M
    y = (y + v[0] * 9 + _f64(s, i + 40)) & _M
    z = (_rot((z + w[0]) & _M, 33) * mul) & _M
    v = _weak32(s, i, (v[1] * mul) & _M, (x + w[0]) & _M)
    w = _weak32(s, i + 32, (z + w[1]) & _M, (y + _f64(s, i + 16)) & _M)
    z, x = x, z
    return _len16((_len16(v[0], w[0], mul) + _mix(y) * K0 + z) & _M,
                  (_len16(v[1], w[1], mul) + x) & _M, mul)


def _as_bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode("utf-8")


def hash_bucket(values: Any, num_buckets: int) -> np.ndarray:
    """``fingerprint64(v) % num_buckets`` of each string (int64, the input's shape)."""
    arr = np.asarray(values, dtype=object)
    out = np.fromiter((fingerprint64(_as_bytes(v)) % num_buckets for v in arr.reshape(-1)),
                      np.int64, arr.size)
    return out.reshape(arr.shape)


@KERNELS("StringToHashBucketFast", CPU)
def string_to_hash_bucket_fast(inputs: list, attrs: dict) -> list:
    n = int(attrs["num_buckets"])
    if n < 1:
        raise KernelError(f"StringToHashBucketFast: num_buckets must be >= 1, got {n}")
    return [hash_bucket(inputs[0], n)]


_TABLES: dict[int, tuple[Any, dict]] = {}


def _table(attrs: dict) -> dict:
    keys, values = attrs["table_keys"], attrs["table_values"]
    held = _TABLES.get(id(keys))
    if held is None or held[0] is not keys:
        held = (keys, {(_as_bytes(k) if isinstance(k, (str, bytes)) else k): v
                       for k, v in zip(np.asarray(keys).tolist(), np.asarray(values).tolist())})
        if len(_TABLES) > 256:
            _TABLES.clear()
        _TABLES[id(keys)] = held
    return held[1]


@KERNELS("LookupTableFindV2", CPU)
def lookup_table_find(inputs: list, attrs: dict) -> list:
    """Each key's value in the static table of attrs ``table_keys``/``table_values``,
    else ``default_value`` (broadcast, or one per key)."""
    table = _table(attrs)
    keys = np.asarray(inputs[0])
    default = np.asarray(inputs[1])
    dtype = np.asarray(attrs["table_values"]).dtype
    flat = keys.reshape(-1).tolist()
    defaults = np.broadcast_to(default, keys.shape).reshape(-1).tolist()
    conv = (lambda k: _as_bytes(k)) if keys.dtype.kind in "OUS" else (lambda k: k)
    out = np.array([table.get(conv(k), d) for k, d in zip(flat, defaults)], dtype=dtype)
    return [out.reshape(keys.shape)]


@KERNELS("DenseBincount", CPU)
def dense_bincount(inputs: list, attrs: dict) -> list:
    """Counts of each value in ``[0, size)`` per row of a 2-d input (a vector: one
    row); ``binary_output``: 1 where present. Values outside are errors."""
    x = np.asarray(inputs[0])
    size = int(np.asarray(inputs[1]).reshape(()))
    weights = np.asarray(inputs[2]) if len(inputs) > 2 and np.size(inputs[2]) else None
    rows = x.reshape(1, -1) if x.ndim <= 1 else x.reshape(x.shape[0], -1)
    if rows.size and (rows.min() < 0 or rows.max() >= size):
        raise KernelError(f"DenseBincount: input values must be in [0, {size}), got "
                          f"{int(rows.min())}..{int(rows.max())}")
    dtype = weights.dtype if weights is not None else np.float32
    out = np.zeros((rows.shape[0], size), dtype)
    w = np.ones_like(rows, dtype) if weights is None else weights.reshape(rows.shape)
    np.add.at(out, (np.arange(rows.shape[0])[:, None].repeat(rows.shape[1], 1), rows), w)
    if attrs.get("binary_output"):
        out = (out > 0).astype(dtype)
    return [out if x.ndim > 1 else out[0]]
