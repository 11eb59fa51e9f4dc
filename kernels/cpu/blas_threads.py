"""The threads of numpy's BLAS, set at run time.

A task's kernels split their work over the task's intra-op threads
(:mod:`kernels.cpu.jit_loader`); when each of those threads calls a BLAS that
starts threads of its own, two cores run four busy threads and a step takes
1.5-3x longer (the CIFAR-10 step, bench/cnn.py: 680 examples/s with 2
intra-op threads over a one-thread BLAS, 400 or less with both at 2). So the
runtime owns the threads, as TF's Eigen pool does: while a kernel may use
more than one intra-op thread, BLAS runs on one and the kernels split their
GEMMs themselves; back at one intra-op thread, BLAS gets the count it started
with (``OPENBLAS_NUM_THREADS``, else the cores).

numpy's wheels carry OpenBLAS (``scipy_openblas``), whose
``*_set_num_threads`` is found through ctypes in the library the process has
already loaded (read from ``/proc/self/maps``); a numpy on another BLAS, or
a platform without that file, leaves the count alone (:func:`available`
says so) and the kernels still give the same numbers.
"""
from __future__ import annotations

import ctypes
import logging
import threading

__all__ = ["available", "blas_threads", "set_blas_threads"]

logger = logging.getLogger(__name__)

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")

_lock = threading.Lock()
_found: list = []   # [(setter, getter)] or [None] once looked for


def _library_paths() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if len(line.split()) >= 6}
    except OSError:
        return []
    return sorted(p for p in paths if "openblas" in p.rsplit("/", 1)[-1].lower() and ".so" in p)


def _functions() -> tuple | None:
    with _lock:
        if _found:
            return _found[0]
        import numpy  # noqa: F401 - loads the BLAS whose threads these are
        found = None
        for path in _library_paths():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            setter = next((getattr(lib, s) for s in _SETTERS if hasattr(lib, s)), None)
            getter = next((getattr(lib, g) for g in _GETTERS if hasattr(lib, g)), None)
            if setter is not None and getter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                getter.argtypes, getter.restype = [], ctypes.c_int
                found = (setter, getter)
                break
        if found is None:
            logger.debug("numpy's BLAS threads cannot be set here (no OpenBLAS found)")
        _found.append(found)
        return found


def available() -> bool:
    """Whether this process's BLAS thread count can be read and set."""
    return _functions() is not None


def blas_threads() -> int | None:
    """BLAS's thread count now, or None where it cannot be read."""
    fns = _functions()
    return int(fns[1]()) if fns is not None else None


def set_blas_threads(n: int) -> bool:
    """Give BLAS ``n`` threads (>= 1); False where the count cannot be set."""
    if int(n) < 1:
        raise ValueError(f"BLAS threads must be >= 1, got {n}")
    fns = _functions()
    if fns is None:
        return False
    fns[0](int(n))
    return True
