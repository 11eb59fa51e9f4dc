"""The checkpoint file format: what ``Saver`` and ``Checkpoint`` write and read.

A checkpoint is ONE file holding named tensors::

    magic "DTCKPT\\x00\\x01" | header length (u64 LE) | header crc32 (u32 LE)
    | msgpack header | tensor bytes, back to back

The header lists every tensor's name, dtype, shape, offset, size and crc32.
Every byte of the file is covered by a check (magic, header crc32, a tensor's
crc32, the total size), so no flipped byte goes unnoticed; that is why the
tensors are not padded for alignment.
The tensor bytes are the arrays' raw memory, so nothing is ever unpickled: a
dtype read from a file is one of a fixed set of plain kinds (no object or
structured dtypes), and string tensors (object arrays of str/bytes) travel as
a msgpack list. Reading checks the header checksum, the file size and every
tensor's checksum, and a mismatch is a ``DataLossError`` naming the file.

Every file of a checkpoint folder (checkpoints here, the state file in
``state_file.py``) is written by :func:`atomic_write`: to a temporary file in the
same folder, flushed, fsynced, renamed over the target and the folder
fsynced; a crash leaves the old file or the new one, never half of one.
:func:`write_error` turns a failed write into a typed error that says what to do.
"""
from __future__ import annotations

import errno
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgpack
import numpy as np

from distrib.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnknownError,
)

logger = logging.getLogger(__name__)

__all__ = [
    "write_checkpoint", "read_checkpoint", "list_checkpoint_tensors", "verify_checkpoint",
    "checkpoint_exists", "check_header", "atomic_write", "remove_quietly", "write_error",
]

_MAGIC = b"DTCKPT\x00\x01"          # name + format version 1
_PREAMBLE = struct.Struct("<8sQI")  # magic, header length, header crc32
_MAX_HEADER = 1 << 30               # a larger header length can only be a corrupt preamble
# Raw-byte dtype kinds that are safe to rebuild from a file: bool, ints,
# floats, complex, fixed-width bytes/unicode, dates. Never "O" (object) or "V".
_RAW_KINDS = frozenset("biufcSUmM")
_STRING = "string"                  # the dtype tag of object arrays of str/bytes


# -- writing ---------------------------------------------------------------------

def _fsync_dir(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through a temporary file in the same folder, then rename it over."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # not mkstemp: its files are 0600 whatever the umask, and a serving or
    # evaluation job of another user could not read the checkpoints
    while True:
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    # The rename is durable only once the folder's entry is on disk.
    _fsync_dir(directory)


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


@dataclass(frozen=True)
class _Payload:
    """One tensor ready to write: its header entry's fields and its bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    data: memoryview


def _payload(name: str, value: Any) -> _Payload:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"Checkpoint tensor names must be non-empty strings, got {name!r}")
    array = np.asarray(value)
    if array.dtype.kind == "O":
        return _Payload(name, _STRING, array.shape, memoryview(_pack_strings(name, array)))
    if array.dtype.kind not in _RAW_KINDS:
        raise InvalidArgumentError(
            f"Tensor {name!r} has dtype {array.dtype} that a checkpoint cannot hold; "
            "use a numeric, bool or string tensor")
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return _Payload(name, array.dtype.str, array.shape, memoryview(flat))


def _pack_strings(name: str, array: np.ndarray) -> bytes:
    items = array.reshape(-1).tolist()
    if not all(isinstance(item, (str, bytes)) for item in items):
        raise InvalidArgumentError(
            f"Tensor {name!r} is an object array holding non-string items; a checkpoint holds "
            "numeric, bool and string tensors only")
    return msgpack.packb(items, use_bin_type=True)


def _layout(payloads: list[_Payload], global_step: int | None) -> bytes:
    """The msgpack header: each tensor's entry, its offset in the data section, that section's size."""
    entries, offset = [], 0
    for p in payloads:
        entries.append({"name": p.name, "dtype": p.dtype, "shape": list(p.shape),
                        "offset": offset, "nbytes": p.data.nbytes, "crc32": zlib.crc32(p.data)})
        offset += p.data.nbytes
    header = {"version": 1, "global_step": global_step, "data_size": offset, "tensors": entries}
    return msgpack.packb(header, use_bin_type=True)


def _checkpoint_path(path_prefix: str, global_step: int | None) -> str:
    path = os.fspath(path_prefix)
    if global_step is None:
        return path
    if isinstance(global_step, bool) or not isinstance(global_step, (int, np.integer)):
        raise InvalidArgumentError(f"global_step must be an int, got {global_step!r}; pass sess.run(global_step)")
    return f"{path}-{int(global_step)}"


def write_checkpoint(path_prefix: str, tensors: Mapping[str, np.ndarray], *,
                     global_step: int | None = None) -> str:
    """Write ``tensors`` to ``path_prefix`` (``path_prefix-<step>`` with ``global_step``), atomically.

    Creates the folder if needed. Returns the path written.
    """
    path = _checkpoint_path(path_prefix, global_step)
    payloads = [_payload(name, value) for name, value in tensors.items()]
    header = _layout(payloads, None if global_step is None else int(global_step))

    def write(f: BinaryIO) -> None:
        f.write(_PREAMBLE.pack(_MAGIC, len(header), zlib.crc32(header)))
        f.write(header)
        for p in payloads:
            f.write(p.data)

    atomic_write(path, write)
    logger.debug("wrote checkpoint %s (%d tensors)", path, len(payloads))
    return path


# -- reading ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    crc32: int

    def numpy_dtype(self) -> np.dtype:
        return np.dtype(object) if self.dtype == _STRING else np.dtype(self.dtype)


@dataclass(frozen=True)
class _Header:
    path: str
    data_start: int
    global_step: int | None
    entries: dict[str, _Entry]


def _loss(path: str, what: str) -> DataLossError:
    return DataLossError(
        f"Checkpoint file {path!r} is unusable: {what}. Restore from an earlier checkpoint "
        "(latest_checkpoint skips bad files) or write a new one")


def _open(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise NotFoundError(f"Checkpoint file {path!r} does not exist; check the path "
                            "(latest_checkpoint(dir) gives the newest one)") from None
    except IsADirectoryError:
        raise NotFoundError(f"Checkpoint path {path!r} is a folder, not a checkpoint file; "
                            "pass latest_checkpoint(folder)") from None


def _read_header(f: BinaryIO, path: str) -> _Header:
    preamble = f.read(_PREAMBLE.size)
    if len(preamble) < _PREAMBLE.size or not preamble.startswith(_MAGIC[:6]):
        raise _loss(path, "it is not a distrib checkpoint (bad magic bytes)")
    magic, length, crc = _PREAMBLE.unpack(preamble)
    if magic != _MAGIC:
        raise _loss(path, f"unsupported checkpoint format version {magic[6:]!r}")
    if length > _MAX_HEADER:
        raise _loss(path, f"header length {length} is implausible (corrupted preamble)")
    raw = f.read(length)
    if len(raw) != length:
        raise _loss(path, "the file is truncated inside its header")
    if zlib.crc32(raw) != crc:
        raise _loss(path, "header checksum mismatch (the file is corrupted)")
    header = _decode_header(raw, path)
    data_start = _PREAMBLE.size + length
    size = os.fstat(f.fileno()).st_size
    if size != data_start + header["data_size"]:
        state = "truncated" if size < data_start + header["data_size"] else "longer than its header says"
        raise _loss(path, f"the file is {state} ({size} bytes, expected {data_start + header['data_size']})")
    entries = {e.name: e for e in (_entry(d, path, header["data_size"]) for d in header["tensors"])}
    return _Header(path, data_start, header.get("global_step"), entries)


def _decode_header(raw: bytes, path: str) -> dict[str, Any]:
    try:
        header = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad bytes
        raise _loss(path, f"header does not decode ({type(exc).__name__})") from None
    if not (isinstance(header, dict) and isinstance(header.get("tensors"), list)
            and isinstance(header.get("data_size"), int)):
        raise _loss(path, "header has the wrong structure")
    return header


def _entry(d: Any, path: str, data_size: int) -> _Entry:
    try:
        entry = _Entry(str(d["name"]), str(d["dtype"]), tuple(int(n) for n in d["shape"]),
                       int(d["offset"]), int(d["nbytes"]), int(d["crc32"]))
    except (KeyError, TypeError, ValueError):
        raise _loss(path, f"header entry {d!r} is malformed") from None
    _check_entry(entry, path, data_size)
    return entry


def _check_entry(e: _Entry, path: str, data_size: int) -> None:
    if e.offset < 0 or e.nbytes < 0 or e.offset + e.nbytes > data_size or any(n < 0 for n in e.shape):
        raise _loss(path, f"tensor {e.name!r} lies outside the file's data")
    if e.dtype == _STRING:
        return
    try:
        dtype = np.dtype(e.dtype)
    except (TypeError, ValueError):
        raise _loss(path, f"tensor {e.name!r} has an unknown dtype {e.dtype!r}") from None
    if dtype.kind not in _RAW_KINDS:
        raise _loss(path, f"tensor {e.name!r} has a dtype {e.dtype!r} that checkpoints never hold")
    if int(np.prod(e.shape, dtype=np.int64)) * dtype.itemsize != e.nbytes:
        raise _loss(path, f"tensor {e.name!r}: its size does not match shape {list(e.shape)} and dtype {dtype}")


def _read_tensor(f: BinaryIO, header: _Header, e: _Entry) -> np.ndarray:
    f.seek(header.data_start + e.offset)
    buf = bytearray(e.nbytes)
    if f.readinto(buf) != e.nbytes:
        raise _loss(header.path, f"tensor {e.name!r} is truncated")
    if zlib.crc32(buf) != e.crc32:
        raise _loss(header.path, f"checksum mismatch in tensor {e.name!r} (the file is corrupted)")
    if e.dtype == _STRING:
        return _unpack_strings(buf, e, header.path)
    if e.nbytes == 0:
        return np.zeros(e.shape, dtype=np.dtype(e.dtype))
    # frombuffer over a bytearray gives a writable array that owns no copy.
    return np.frombuffer(buf, dtype=np.dtype(e.dtype)).reshape(e.shape)


def _unpack_strings(buf: bytearray, e: _Entry, path: str) -> np.ndarray:
    try:
        items = msgpack.unpackb(bytes(buf), raw=False)
    except Exception:  # msgpack raises several unrelated types on bad bytes
        raise _loss(path, f"string tensor {e.name!r} does not decode") from None
    if not isinstance(items, list) or len(items) != int(np.prod(e.shape, dtype=np.int64)) \
            or not all(isinstance(i, (str, bytes)) for i in items):
        raise _loss(path, f"string tensor {e.name!r} has the wrong contents")
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(e.shape)


def read_checkpoint(path: str, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The tensors of the checkpoint at ``path`` (only ``names`` when given), checksums verified.

    Raises ``NotFoundError`` for a missing file or name and ``DataLossError``
    for a truncated, corrupted or foreign file.
    """
    path = os.fspath(path)
    with _open(path) as f:
        header = _read_header(f, path)
        wanted = list(header.entries) if names is None else list(names)
        missing = [n for n in wanted if n not in header.entries]
        if missing:
            raise NotFoundError(
                f"Key(s) {missing} not found in checkpoint {path!r}; it holds {sorted(header.entries)}")
        return {name: _read_tensor(f, header, header.entries[name]) for name in wanted}


def verify_checkpoint(path: str) -> None:
    """Read every tensor of ``path`` and check its checksum; raise like :func:`read_checkpoint`."""
    read_checkpoint(path)


def list_checkpoint_tensors(path: str) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` of the checkpoint at ``path``, from its header alone."""
    path = os.fspath(path)
    with _open(path) as f:
        header = _read_header(f, path)
    return {name: (e.numpy_dtype(), e.shape) for name, e in header.entries.items()}


def check_header(path: str) -> None:
    """Read and check ``path``'s header and size (not the data): ``NotFoundError``
    when it is missing, ``DataLossError`` when it is truncated or corrupt."""
    path = os.fspath(path)
    with _open(path) as f:
        _read_header(f, path)


def checkpoint_exists(path: str) -> bool:
    """Whether ``path`` is a checkpoint whose header and size check out (data not read)."""
    try:
        check_header(path)
    except (NotFoundError, DataLossError, OSError):
        return False
    return True


def write_error(exc: OSError, path: Any, fewer: str = "keep fewer checkpoints") -> Exception:
    """A failed write of a checkpoint or its state file as a typed error that says
    what to do (``fewer``: how this writer keeps fewer files, for a full disk)."""
    what = f"could not write checkpoint {os.fspath(path)!r}: {exc}"
    if isinstance(exc, PermissionError):
        return PermissionDeniedError(what + "; choose a folder this process may write to")
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(what)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceExhaustedError(f"{what}; free some disk space or {fewer}")
    return UnknownError(what)
