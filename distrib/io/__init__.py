"""``dt.io``: TF's ``tf.io``, the part a distributed program reaches for:
``dt.io.gfile`` (files and folders, as the multi-worker tutorials use them).

A layer of its own, placed right after ``errors`` (tests/test_layout.py): it
imports only ``distrib.errors``, so every later layer may use it. Re-exports only.
"""
from __future__ import annotations

from distrib.io import gfile

__all__ = ["gfile"]
