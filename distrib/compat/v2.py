"""``dt.compat.v2``: TF's ``tf.compat.v2``: the ``dt`` namespace, whose TF2
names (``dt.math``, ``dt.random``, ``dt.io``, ``dt.function`` ...) sit beside
TF1's; read from the ``distrib`` package when asked."""
from __future__ import annotations

import sys
from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    return getattr(sys.modules["distrib"], name)


def __dir__() -> list[str]:
    return sorted(dir(sys.modules["distrib"]))
