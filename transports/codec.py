"""Messages to bytes and back: a msgpack header plus out-of-band buffers.

A message is any nesting of None, bool, int, float, str, bytes, list, tuple
(arrives as a list), dict and numpy arrays. An array never enters the msgpack
blob: the header holds a msgpack *ext* record ``[dtype, shape, index, fortran]``
that points at raw buffer ``index`` sent after the header (or, on shared-memory
connections, at a segment; see :mod:`transports.shm`). The receiver wraps those
bytes with ``np.frombuffer`` - no copy on either side beyond the socket itself.

Decoding never builds anything but the types above: no pickle, a whitelist of
dtype kinds, shapes checked against buffer sizes, unknown ext types refused.

Numpy scalars: those that subclass a Python type (``np.float64``, ``np.str_``,
``np.bytes_``) arrive as that Python scalar; every other numpy scalar
(``np.float32(1)``, ``np.int64(3)``, ``np.bool_``...) arrives as a 0-d array of
its dtype. Object arrays of str arrive as ``<U`` arrays.
"""
from __future__ import annotations

import math
import mmap
import struct
from typing import Any, Callable, Sequence

import msgpack
import numpy as np

from .errors import FrameError

__all__ = ["Encoder", "Decoder", "EXT_INLINE", "EXT_SHM", "ALIGN", "buffer_spans", "huge_pages"]

EXT_INLINE = 1  # [dtype, shape, buffer index, fortran]
EXT_SHM = 2     # [dtype, shape, segment id, nbytes, fortran]
ALIGN = 64      # out-of-band buffers start at multiples of this in a frame's payload

# bool, ints, uints, floats, complex, bytes, unicode, datetime, timedelta
_KINDS = frozenset("biufcSUMm")
_MAX_DIMS = 64
_dtype_cache: dict[str, np.dtype] = {}

# A sink gets (contiguous array, fortran) and returns a segment id, or None to
# send the array inline instead (pool exhausted).
ShmSink = Callable[[np.ndarray, bool], "int | None"]
# A source gets (dtype, shape, segment id, nbytes, fortran) and returns the array.
ShmSource = Callable[[np.dtype, tuple, int, int, bool], np.ndarray]


def _sendable(obj: Any) -> np.ndarray:
    """The contiguous-or-Fortran array that stands for ``obj`` on the wire."""
    if isinstance(obj, np.ndarray):
        arr = obj
    elif isinstance(obj, np.generic):
        arr = np.asarray(obj)
    else:
        raise TypeError(
            f"cannot send a {type(obj).__name__}: messages hold None, bool, int, float, "
            "str, bytes, list, tuple, dict and numpy arrays")
    dt = arr.dtype
    if dt.kind == "O":
        if not all(type(x) is str for x in arr.flat):
            raise TypeError("cannot send an object array unless every element is a str")
        arr = arr.astype(np.str_)
    elif dt.kind not in _KINDS or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"cannot send arrays of dtype {dt}")
    return arr


class Encoder:
    """Packs messages; reusable, one per connection (it owns a msgpack Packer).

    After :meth:`encode`, :attr:`buffers` lists the out-of-band buffers (byte
    memoryviews) in order; they must be written before the next ``encode``.

    The packer's ``default`` is a closure over the buffer list, not a bound
    method: ``self -> packer -> self._default -> self`` was a reference cycle
    that kept every encoder (and, before the handshake, nothing else needs
    the cycle collector) alive until a collection ran (issue 21).
    """

    def __init__(self, shm_sink: ShmSink | None = None, shm_threshold: int = 0) -> None:
        self.buffers: list[memoryview] = []
        self._packer = msgpack.Packer(default=_array_packer(self.buffers, shm_sink, shm_threshold),
                                      use_bin_type=True, autoreset=True)

    def encode(self, obj: Any) -> bytes:
        if self.buffers:
            self.buffers.clear()
        return self._packer.pack(obj)


def _array_packer(buffers: list, shm_sink: ShmSink | None, shm_threshold: int) -> Callable[[Any], Any]:
    """The packer's ``default``: an array becomes an ext record, its memory an
    entry of ``buffers`` (or a segment of ``shm_sink``)."""
    meta = msgpack.Packer(use_bin_type=True, autoreset=True)
    threshold = max(shm_threshold, 1)

    def default(obj: Any) -> msgpack.ExtType:
        arr = _sendable(obj)
        if arr.flags.c_contiguous:
            fortran = False
        elif arr.flags.f_contiguous:
            fortran = True
        else:
            arr = np.ascontiguousarray(arr)  # the one copy a strided array costs
            fortran = False
        nbytes = arr.nbytes
        if shm_sink is not None and nbytes >= threshold:
            seg = shm_sink(arr, fortran)
            if seg is not None:
                return msgpack.ExtType(EXT_SHM, meta.pack((arr.dtype.str, arr.shape, seg, nbytes, fortran)))
        index = len(buffers)
        if nbytes:
            flat = arr.T if fortran else arr
            buffers.append(memoryview(flat.reshape(-1).view(np.uint8)))
        else:
            buffers.append(memoryview(b""))
        return msgpack.ExtType(EXT_INLINE, meta.pack((arr.dtype.str, arr.shape, index, fortran)))

    return default


def _dtype(name: Any) -> np.dtype:
    dt = _dtype_cache.get(name)  # type: ignore[arg-type]
    if dt is not None:
        return dt
    if not isinstance(name, str) or len(name) > 32:
        raise FrameError(f"bad dtype {name!r:.40}")
    try:
        dt = np.dtype(name)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise FrameError(f"bad dtype {name!r}: {exc}") from None
    if dt.kind not in _KINDS or dt.fields is not None or dt.subdtype is not None:
        raise FrameError(f"dtype {name!r} is not allowed on the wire")
    if len(_dtype_cache) < 1024:
        _dtype_cache[name] = dt
    return dt


def _shape(shape: Any) -> tuple:
    if (not isinstance(shape, list) or len(shape) > _MAX_DIMS
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise FrameError(f"bad shape {shape!r:.80}")
    return tuple(shape)


def _meta(data: bytes, n: int) -> list:
    try:
        meta = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:
        raise FrameError(f"bad array record: {exc}") from None
    if not isinstance(meta, list) or len(meta) != n:
        raise FrameError(f"bad array record {meta!r:.80}")
    return meta


class Decoder:
    """Unpacks headers, resolving array records against the frame's buffers."""

    def __init__(self, shm_source: ShmSource | None = None) -> None:
        self._shm_source = shm_source
        self._block: Any = None
        self._spans: Sequence[tuple[int, int]] = ()

    def decode(self, header: Any, block: Any = None, spans: Sequence[tuple[int, int]] = ()) -> Any:
        """``block`` holds the payload, ``spans[i]`` = (offset, length) of buffer i."""
        self._block = block
        self._spans = spans
        try:
            # timestamp=1: msgpack's built-in timestamp ext decodes to a float,
            # so a peer cannot make us build any type beyond the documented ones.
            return msgpack.unpackb(header, ext_hook=self._ext, raw=False,
                                   strict_map_key=False, timestamp=1)
        except FrameError:
            raise
        except Exception as exc:
            raise FrameError(f"undecodable message: {type(exc).__name__}: {exc}") from None
        finally:
            self._block = None
            self._spans = ()

    def _ext(self, code: int, data: bytes) -> np.ndarray:
        if code == EXT_INLINE:
            name, shape, index, fortran = _meta(data, 4)
            dt, shape = _dtype(name), _shape(shape)
            if type(index) is not int or not 0 <= index < len(self._spans):
                raise FrameError(f"array references missing buffer {index!r:.20}")
            offset, length = self._spans[index]
            if length != math.prod(shape) * dt.itemsize:
                raise FrameError(f"buffer {index} holds {length} bytes, not an array {shape} of {dt}")
            if length == 0:
                return np.empty(shape, dt)
            flat = np.frombuffer(self._block, dt, length // dt.itemsize, offset)
            return flat.reshape(shape, order="F" if fortran else "C")
        if code == EXT_SHM and self._shm_source is not None:
            name, shape, seg, nbytes, fortran = _meta(data, 5)
            dt, shape = _dtype(name), _shape(shape)
            if type(seg) is not int or type(nbytes) is not int or nbytes != math.prod(shape) * dt.itemsize:
                raise FrameError(f"bad shared-memory record {seg!r:.20} {nbytes!r:.20}")
            return self._shm_source(dt, shape, seg, nbytes, bool(fortran))
        raise FrameError(f"unknown msgpack ext type {code}")


def buffer_spans(buf: bytearray, at: int, nbufs: int, plen: int) -> list[tuple[int, int]]:
    """(offset, length) of each buffer in a frame's payload of ``plen`` bytes,
    the ``nbufs`` u64 lengths read at ``at`` of ``buf`` (each buffer starts at
    a multiple of ALIGN; see :mod:`transports.frames`)."""
    spans = []
    off = 0
    for (length,) in struct.iter_unpack("<Q", memoryview(buf)[at:at + 8 * nbufs]):
        off += -off % ALIGN
        spans.append((off, length))
        off += length
    if off != plen:
        raise FrameError(f"buffer lengths add up to {off} bytes, the frame says {plen}")
    return spans


def huge_pages(block: mmap.mmap) -> None:
    """Ask for transparent huge pages on a big receive block: as numpy does
    for big arrays, a 2 MiB page faults in once, not 512 times."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            block.madvise(advice)
        except OSError:
            pass
