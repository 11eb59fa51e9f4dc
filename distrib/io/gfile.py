"""``dt.io.gfile``: TF's ``tf.io.gfile`` on the local file system (and any
file system mounted into it, which is how a cluster shares a checkpoint folder).

The multi-worker tutorials use it to give each non-chief worker a temporary
folder for its copy of a save and to delete that folder right after
(``makedirs``, ``rmtree``), then to find the chief's copy (``exists``,
``glob``, ``listdir``). TF's rules are kept where a program can see them: a
path that is not there is a ``NotFoundError`` (``rmtree``, ``remove``,
``listdir``, ``stat``), ``makedirs`` of an existing folder is no error,
``mkdir`` of one is ``AlreadyExistsError``, ``rename``/``copy`` onto an
existing path without ``overwrite=True`` is ``AlreadyExistsError``, and
``GFile`` opens a file as ``open`` does (``"r"``, ``"rb"``, ``"w"``, ...).
TF1's ``tf.gfile`` spellings (``dt.gfile``: ``Exists``, ``MakeDirs``,
``DeleteRecursively``... as the CIFAR-10 tutorial writes them) are the same functions.
Other schemes than local paths (``gs://``, ``hdfs://``) are not supported:
an ``UnimplementedError`` says so.
"""
from __future__ import annotations

import glob as _glob
import os
import shutil
from typing import IO, Any, Iterator

from distrib.errors import AlreadyExistsError, NotFoundError, UnimplementedError

__all__ = ["GFile", "copy", "exists", "glob", "isdir", "listdir", "makedirs", "mkdir",
           "remove", "rename", "rmtree", "stat", "walk", "join",
           # TF1's tf.gfile names
           "Copy", "DeleteRecursively", "Exists", "Glob", "IsDirectory", "ListDirectory",
           "MakeDirs", "MkDir", "Remove", "Rename", "Stat", "Walk", "Open"]


def _local(path: Any) -> str:
    spelled = os.fspath(path)
    if isinstance(spelled, bytes):
        spelled = spelled.decode()
    scheme, sep, _ = spelled.partition("://")
    if sep and scheme != "file":
        raise UnimplementedError(f"dt.io.gfile reads local paths (and mounted ones); "
                                 f"{spelled!r} has the scheme {scheme!r}: mount it and pass "
                                 "the local path")
    return spelled[len("file://"):] if sep else spelled


def _missing(what: str, path: str) -> NotFoundError:
    return NotFoundError(f"{what}: {path} does not exist")


def exists(path: Any) -> bool:
    """Whether ``path`` (a file or a folder) exists."""
    return os.path.exists(_local(path))


def isdir(path: Any) -> bool:
    return os.path.isdir(_local(path))


def listdir(path: Any) -> list[str]:
    """The names in the folder ``path`` (``NotFoundError`` when it is not there)."""
    local = _local(path)
    if not os.path.isdir(local):
        raise _missing("listdir", local)
    return os.listdir(local)


def glob(pattern: Any) -> list[str]:
    """The paths that match ``pattern`` (shell wildcards)."""
    return sorted(_glob.glob(_local(pattern)))


def makedirs(path: Any) -> None:
    """Make the folder ``path`` and any missing parents; no error if it exists."""
    os.makedirs(_local(path), exist_ok=True)


def mkdir(path: Any) -> None:
    """Make the folder ``path`` (its parent must exist); ``AlreadyExistsError`` if it does."""
    local = _local(path)
    try:
        os.mkdir(local)
    except FileExistsError:
        raise AlreadyExistsError(f"mkdir: {local} exists already") from None
    except FileNotFoundError:
        raise NotFoundError(f"mkdir: the parent folder of {local} does not exist; "
                            "dt.io.gfile.makedirs makes parents too") from None


def rmtree(path: Any) -> None:
    """Delete the folder ``path`` and everything in it (``NotFoundError`` if it is
    not there, as TF's ``DeleteRecursively``)."""
    local = _local(path)
    if not os.path.lexists(local):
        raise _missing("rmtree", local)
    if os.path.isdir(local) and not os.path.islink(local):
        shutil.rmtree(local)
    else:
        os.remove(local)


def remove(path: Any) -> None:
    """Delete the file ``path`` (``NotFoundError`` if it is not there)."""
    local = _local(path)
    try:
        os.remove(local)
    except FileNotFoundError:
        raise _missing("remove", local) from None


def rename(src: Any, dst: Any, overwrite: bool = False) -> None:
    """Move ``src`` to ``dst``; an existing ``dst`` only with ``overwrite=True``."""
    source, target = _local(src), _local(dst)
    if not os.path.lexists(source):
        raise _missing("rename", source)
    if os.path.lexists(target) and not overwrite:
        raise AlreadyExistsError(f"rename: {target} exists; pass overwrite=True to replace it")
    os.replace(source, target)


def copy(src: Any, dst: Any, overwrite: bool = False) -> None:
    """Copy the file ``src`` to ``dst``; an existing ``dst`` only with ``overwrite=True``."""
    source, target = _local(src), _local(dst)
    if not os.path.isfile(source):
        raise _missing("copy", source)
    if os.path.lexists(target) and not overwrite:
        raise AlreadyExistsError(f"copy: {target} exists; pass overwrite=True to replace it")
    shutil.copyfile(source, target)


def stat(path: Any) -> os.stat_result:
    local = _local(path)
    try:
        return os.stat(local)
    except FileNotFoundError:
        raise _missing("stat", local) from None


def walk(top: Any, topdown: bool = True) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk``: (folder, subfolder names, file names) for each folder below ``top``."""
    yield from os.walk(_local(top), topdown=topdown)


def join(path: Any, *paths: Any) -> str:
    """``os.path.join`` of the parts (TF2's ``tf.io.gfile.join``)."""
    return os.path.join(_local(path), *(os.fspath(p) for p in paths))


def GFile(name: Any, mode: str = "r") -> IO[Any]:  # noqa: N802 - TF's name
    """``name`` opened in ``mode`` (``NotFoundError`` for a missing file read)."""
    local = _local(name)
    try:
        return open(local, mode)
    except FileNotFoundError:
        raise _missing("GFile", local) from None


# TF1's ``tf.gfile`` names (dt.gfile), the same functions
Copy, DeleteRecursively, Exists, Glob = copy, rmtree, exists, glob
IsDirectory, ListDirectory, MakeDirs, MkDir = isdir, listdir, makedirs, mkdir
Remove, Rename, Stat, Walk, Open = remove, rename, stat, walk, GFile
