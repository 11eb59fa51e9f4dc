"""``dt.keras.backend``: per-process names and the few global settings Keras keeps.

Keras names a layer after its class (``dense``, ``dense_1``, ...) with one
counter per prefix *per process* (``backend.get_uid``), so two models made in
one program never name a variable alike, and a program run twice names them
alike (which is what lets a restarted fit find its backup by name).
``clear_session()`` starts the counters over, as in Keras.

Also here: the float type of layer weights (``floatx``, float32), the fuzz
factor of the cross-entropies (``epsilon``, 1e-7), and the seed an unseeded
random initializer or dropout draws from: derived from the graph's seed
(``dt.set_random_seed``) and a per-graph counter, so the same model built in
two fresh graphs with the same seed starts from the same values, with or
without a strategy (the copies of a mirrored variable do not count: they take
the first copy's value).
"""
from __future__ import annotations

import re
import threading
import weakref
from typing import Any

from distrib.framework.graph import get_default_graph

__all__ = ["get_uid", "unique_name", "reset_uids", "clear_session", "floatx", "set_floatx",
           "epsilon", "derived_seed", "snake_case", "image_data_format",
           "set_image_data_format"]

_lock = threading.Lock()
_uids: dict[str, int] = {}
_draws: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # graph -> draws so far
_FLOATX = ["float32"]
_EPSILON = 1e-7
_IMAGE_DATA_FORMAT = ["channels_last"]


def get_uid(prefix: str = "") -> int:
    """1 on the first call for ``prefix`` in this process, then 2, 3 ... (Keras')."""
    with _lock:
        _uids[prefix] = _uids.get(prefix, 0) + 1
        return _uids[prefix]


def unique_name(prefix: str) -> str:
    """``prefix`` the first time, then ``prefix_1``, ``prefix_2`` ... (TF's layer names)."""
    uid = get_uid(prefix)
    return prefix if uid == 1 else f"{prefix}_{uid - 1}"


def snake_case(name: str) -> str:
    """``Dense`` -> ``dense``, ``MeanSquaredError`` -> ``mean_squared_error``,
    ``Conv2DTranspose`` -> ``conv2d_transpose`` (Keras' ``to_snake_case``: a digit
    keeps the capital after it, ``MaxPooling2D`` -> ``max_pooling2d``)."""
    out = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", out).lower()


def reset_uids() -> None:
    with _lock:
        _uids.clear()


def clear_session() -> None:
    """Start the layer names over (``dense`` again). The graph is left alone: call
    ``dt.reset_default_graph()`` too for a fresh one."""
    reset_uids()


def floatx() -> str:
    return _FLOATX[0]


def set_floatx(value: str) -> None:
    if value not in ("float16", "float32", "float64"):
        raise ValueError(f"Unknown floatx type: {value!r}; use 'float16', 'float32' or "
                         "'float64'")
    _FLOATX[0] = value


def image_data_format() -> str:
    """The layers' default ``data_format``: ``"channels_last"`` (NHWC), as Keras'."""
    return _IMAGE_DATA_FORMAT[0]


def set_image_data_format(data_format: str) -> None:
    if data_format not in ("channels_first", "channels_last"):
        raise ValueError(f"Unknown data_format: {data_format!r}; use 'channels_first' or "
                         "'channels_last'")
    _IMAGE_DATA_FORMAT[0] = data_format


def epsilon() -> float:
    return _EPSILON


def derived_seed(seed: int | None, graph: Any = None) -> int | None:
    """``seed`` itself; else, with a graph-level seed, the next seed of this graph's
    sequence; else None (fresh entropy on every run)."""
    if seed is not None:
        return int(seed)
    graph = graph if graph is not None else get_default_graph()
    if graph.seed is None:
        return None
    with _lock:
        n = _draws.get(graph, 0)
        _draws[graph] = n + 1
    return (int(graph.seed) * 7_919 + 104_729 * (n + 1)) % (2**31 - 1)
