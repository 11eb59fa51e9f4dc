"""``dt.app``: TF1's ``tf.app``, the entry point of the seeds' trainer skeleton:
``dt.app.flags`` (``DEFINE_string`` ... and ``FLAGS``) and ``dt.app.run``.

A layer of its own, placed right after ``cluster`` (tests/test_layout.py):
it imports nothing of distrib, so it sits with the packages that depend on
nothing, and every later layer (the launcher, the examples' scripts) may use
it; nothing in it may reach for the runtime, which a flags parser has no need
of. Re-exports only.
"""
from __future__ import annotations

from distrib.app import flags
from distrib.app.program import run

__all__ = ["flags", "run"]
