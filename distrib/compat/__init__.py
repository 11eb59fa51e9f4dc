"""``dt.compat``: TF's ``tf.compat``: the ``v1`` and ``v2`` namespaces and the
string helpers (``as_bytes``, ``as_text``, ``as_str``, ``as_str_any``,
``path_to_str``).

``dt.compat.v1`` is the ``dt`` namespace itself plus TF1's few names that
TF2 moved (``disable_v2_behavior``, ``div_no_nan`` ...), so
``import distrib.compat.v1 as tf`` ports ``import tensorflow.compat.v1 as tf``;
``dt.compat.v2`` is the ``dt`` namespace too (distrib has one vocabulary for
both: TF1's names and TF2's side by side). The namespaces read ``dt``'s names
when asked (``sys.modules``), so this package imports nothing of distrib
above it and ``import distrib`` stays light.
"""
from __future__ import annotations

import os
from typing import Any

from distrib.compat import v1, v2

__all__ = ["v1", "v2", "as_bytes", "as_text", "as_str", "as_str_any", "path_to_str",
           "forward_compatible", "bytes_or_text_types", "integral_types", "real_types"]

bytes_or_text_types = (bytes, str)
integral_types = (int,)
real_types = (int, float)


def as_bytes(bytes_or_text: Any, encoding: str = "utf-8") -> bytes:
    """``bytes_or_text`` as bytes (text encoded); a TypeError for anything else, as TF's."""
    if isinstance(bytes_or_text, bytearray):
        return bytes(bytes_or_text)
    if isinstance(bytes_or_text, str):
        return bytes_or_text.encode(encoding)
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


def as_text(bytes_or_text: Any, encoding: str = "utf-8") -> str:
    """``bytes_or_text`` as str (bytes decoded); a TypeError for anything else."""
    if isinstance(bytes_or_text, str):
        return bytes_or_text
    if isinstance(bytes_or_text, bytes):
        return bytes_or_text.decode(encoding)
    raise TypeError(f"Expected binary or unicode string, got {bytes_or_text!r}")


as_str = as_text


def as_str_any(value: Any, encoding: str = "utf-8") -> str:
    """``str(value)``, bytes decoded first."""
    return as_text(value, encoding) if isinstance(value, bytes) else str(value)


def path_to_str(path: Any) -> Any:
    """A path-like object as its string (anything else unchanged)."""
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def forward_compatible(year: int, month: int, day: int) -> bool:
    """TF's forward-compatibility window: every date is within it here."""
    return True
