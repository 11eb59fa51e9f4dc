"""numba-compiled CPU kernels, loaded off the step: the pattern of
:mod:`kernels.cpu.fused` (which keeps its own copy), as an object a kernel
module owns, one per numba module.

A kernel asks :meth:`BackgroundJit.ready` for the numba module of a dtype.
The first ask starts a thread that imports the module (and so numba, half a
second) and compiles its functions for that dtype, or loads them from
numba's disk cache (every function is ``njit(cache=True)``); until that
thread is done the kernel runs its numpy path, which gives the same numbers
within float rounding, so no step waits for the compiler. When numba cannot
be imported every run stays on numpy.

The numba module provides ``warm(dtype)``, which calls each of its functions
once on tiny arrays of ``dtype``. Its functions release the GIL
(``nogil=True``), so :func:`split_batch` can run slices of a batch on the
task's intra-op threads (:func:`set_intra_op_threads`; 1 by default, as the
runtime hands a task's threads to kernels explicitly: this package reads no
environment), and :func:`split_matmul` splits a matrix product over
them while BLAS runs on one thread.
"""
from __future__ import annotations

import atexit
import importlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, Callable

import numpy as np

from kernels.cpu import blas_threads

__all__ = ["BackgroundJit", "JIT_DTYPES", "LOADER_EXIT_WAIT_S", "join_loaders",
           "set_intra_op_threads", "intra_op_threads", "split_batch", "split_matmul"]

logger = logging.getLogger(__name__)

JIT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
LOADER_EXIT_WAIT_S = 30.0
# below this many elements a batch is not split: a thread hop costs ~50 us
_SPLIT_MIN_ELEMENTS = 1 << 16

_loaders: list[threading.Thread] = []   # joined (bounded) at exit: see join_loaders
_loaders_lock = threading.Lock()
_threads = [1]
# the one pool of intra-op helpers (threads - 1 of them), replaced when the count changes
# (the old one finishes what it was given, then its threads end)
_pool: list[ThreadPoolExecutor | None] = [None]
_pool_lock = threading.Lock()
_blas_start: list[int | None] = [None]   # BLAS's own thread count, read before the first change


class BackgroundJit:
    """The numba module ``name`` (a module of this package), imported and
    compiled per dtype on a background thread."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._module: list[ModuleType | None] = []   # [module or None] once imported
        self._ready: set[np.dtype] = set()
        self._loading: set[np.dtype] = set()

    def module(self) -> ModuleType | None:
        """The numba module (imported on the first call), or None when numba
        cannot be imported."""
        if self._module:
            return self._module[0]
        with self._lock:
            if not self._module:
                try:
                    self._module.append(importlib.import_module(self.name))
                except ImportError as e:   # numba missing or broken: the numpy path
                    logger.info("%s: CPU kernels run on numpy: numba unavailable (%s)",
                                self.name, e)
                    self._module.append(None)
        return self._module[0]

    def prepare(self, dtype: Any) -> bool:
        """Compile (or load from the disk cache) the functions for ``dtype``,
        waiting for it; False when numba is unavailable or ``dtype`` is not
        one numba runs here."""
        dt = np.dtype(dtype)
        if dt not in JIT_DTYPES:
            return False
        mod = self.module()
        if mod is None:
            return False
        if dt not in self._ready:
            mod.warm(dt)
            self._ready.add(dt)
        return True

    def ready(self, dtype: Any) -> ModuleType | None:
        """The numba module when its functions for ``dtype`` are compiled,
        else None, after starting a thread that compiles them."""
        dt = np.dtype(dtype)
        if dt in self._ready:
            return self._module[0]
        if dt not in JIT_DTYPES:
            return None
        with self._lock:
            if dt in self._loading or (self._module and self._module[0] is None):
                return None
            self._loading.add(dt)
        thread = threading.Thread(target=self._load, args=(dt,), daemon=True,
                                  name=f"jit-loader-{self.name.rsplit('.', 1)[-1]}")
        with _loaders_lock:
            if not _loaders:
                atexit.register(join_loaders)
            _loaders.append(thread)
        thread.start()
        return None

    def _load(self, dt: np.dtype) -> None:
        try:
            t0 = time.perf_counter()
            self.prepare(dt)
            logger.debug("%s ready for %s in %.1f s", self.name, dt, time.perf_counter() - t0)
        except Exception:   # a broken numba: every run stays on numpy
            logger.warning("could not compile %s for %s", self.name, dt, exc_info=True)


def join_loaders(timeout: float = LOADER_EXIT_WAIT_S) -> None:
    """At exit: wait (bounded) for loader threads still inside numba (a
    daemon thread left compiling while the interpreter finalizes can crash
    the process)."""
    deadline = time.monotonic() + timeout
    with _loaders_lock:
        loaders = list(_loaders)
    for thread in loaders:
        thread.join(max(0.0, deadline - time.monotonic()))


def set_intra_op_threads(n: int) -> None:
    """How many threads one kernel of these modules may use (>= 1). Above one,
    BLAS runs on one thread and the kernels split their GEMMs over these
    (:mod:`kernels.cpu.blas_threads`: no thread of a kernel starts BLAS
    threads of its own); at one, BLAS gets back the count it started with."""
    if int(n) < 1:
        raise ValueError(f"intra-op threads must be >= 1, got {n}")
    with _pool_lock:
        if _blas_start[0] is None:
            _blas_start[0] = blas_threads.blas_threads() or 0
        if int(n) > 1:
            blas_threads.set_blas_threads(1)
        elif _blas_start[0]:
            blas_threads.set_blas_threads(_blas_start[0])
    _threads[0] = int(n)


def intra_op_threads() -> int:
    """The current intra-op thread count."""
    return _threads[0]


def _executor(workers: int) -> ThreadPoolExecutor:
    """The intra-op pool: ``workers`` threads however many slices a call makes."""
    with _pool_lock:
        pool = _pool[0]
        if pool is None or pool._max_workers != workers:   # noqa: SLF001 - the stdlib's field
            if pool is not None:
                pool.shutdown(wait=False)
            pool = _pool[0] = ThreadPoolExecutor(max_workers=workers,
                                                 thread_name_prefix="intra-op")
        return pool


def split_batch(fn: Callable[[int, int], None], batch: int, elements: int) -> None:
    """Run ``fn(start, stop)`` over ``[0, batch)``: in one call, or in slices
    on the intra-op threads (the calling thread takes the first) when there
    are several and ``elements`` (the work's size) is worth a hop."""
    n = min(_threads[0], batch)
    if n <= 1 or elements < _SPLIT_MIN_ELEMENTS:
        fn(0, batch)
        return
    bounds = [batch * i // n for i in range(n + 1)]
    pool = _executor(_threads[0] - 1)
    futures = [pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, n)]
    fn(bounds[0], bounds[1])
    for f in futures:
        f.result()


# a product of fewer multiply-adds than this runs whole: a thread hop costs ~50 us,
# about 2.5 M multiply-adds of one BLAS thread
_SPLIT_MIN_MACS = 1 << 22


def split_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` of two matrices, its rows (or, for a short ``a``, its
    columns) split over the intra-op threads when there are several and the
    product is worth a hop; each part is one BLAS call on one thread, and
    the parts write disjoint blocks of ``out``."""
    m, k = a.shape
    n = b.shape[1]
    threads = _threads[0]
    if out is None:
        out = np.empty((m, n), np.result_type(a, b))
    if threads <= 1 or m * k * n < _SPLIT_MIN_MACS:
        return np.matmul(a, b, out=out)
    if m >= 2 * threads:
        split_batch(lambda i, j: np.matmul(a[i:j], b, out=out[i:j]), m, _SPLIT_MIN_ELEMENTS)
    elif n >= 2 * threads:
        def columns(i: int, j: int) -> None:
            out[:, i:j] = a @ b[:, i:j]
        split_batch(columns, n, _SPLIT_MIN_ELEMENTS)
    else:
        np.matmul(a, b, out=out)
    return out
