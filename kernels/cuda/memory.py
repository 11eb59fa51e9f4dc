"""Device memory for the GPU kernels: a caching allocator, cached constants,
and host<->device copies that count themselves (:mod:`kernels.counters`).

A warm step allocates nothing from the driver: a freed device buffer goes
back to a free list of its size class (powers of two from 512 bytes, then
multiples of 2 MiB above 16 MiB), and the next request of that class takes
it. On a real GPU this is numba's External Memory Management interface
(``manager_class()``, installed by :func:`install` before the
driver makes its first context): every device array numba makes, ours and
its own, comes from the cache, and a buffer returns to it when its last view
dies (numba's finaliser on the memory pointer). Reuse is safe without
events because every launch and copy goes to the one default stream, which
runs them in order. Under the CUDA simulator the same pool hands out host
buffers wrapped as the simulator's device arrays (:func:`device_empty`), so
the counters say there what they say on a GPU.

Copies in go through a pinned (page-locked) staging buffer per size class on
a real GPU (a copy from pageable memory runs at a fraction of the bus's
speed); the copy returns once the staging buffer is consumed, so the buffer
is free for the next one. The buffers kept between copies take at most
``STAGING.max_bytes`` of pinned memory, all size classes together (more are
freed; a copy bigger than a quarter of that is not staged): page-locked
memory is the host's, taken from every other process.

The runtime's constants (``kernels.constants.mark_constant``: a ``Const``'s
value, so also what the runtime folded) and scalar hyper-parameters are
copied once per device and kept (:func:`cached_to_device`, :func:`device_scalar`); any
other host array, read-only or not, is copied every time (its owner may
make it writable and change it under the same id).
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections import defaultdict
from typing import Any

import numpy as np

from kernels.constants import is_constant
from kernels.counters import note

__all__ = ["size_class", "device_empty", "to_device", "copy_in", "cached_to_device",
           "device_scalar", "to_host", "install", "manager_class", "pool_stats", "release_cached",
           "current_device", "StagingPool", "STAGING", "staged_copy", "THREAD_GPU"]

_MIN_CLASS = 512
_BIG = 16 << 20
_BIG_STEP = 2 << 20
_MAX_PER_CLASS = 64          # free buffers kept per size class (more go back to the driver)
_MAX_CONSTANTS = 4096
_MAX_STAGING_PER_CLASS = 4
MAX_STAGING_BYTES = 256 << 20   # pinned staging memory kept between copies, all classes


def size_class(nbytes: int) -> int:
    """The bytes a request of ``nbytes`` really takes from the pool."""
    if nbytes <= _MIN_CLASS:
        return _MIN_CLASS
    if nbytes <= _BIG:
        return 1 << (nbytes - 1).bit_length()
    return -(-nbytes // _BIG_STEP) * _BIG_STEP


@functools.cache
def _sim() -> bool:
    """Whether numba.cuda is the simulator (as kernels.cuda.devices decides: numba's
    config; this module is below kernels.cuda.devices and does not import it)."""
    from numba import config, cuda
    holder = getattr(cuda, "config", None) or config
    return bool(getattr(holder, "ENABLE_CUDASIM", False))


# --- the simulator's pool: host buffers posing as device memory -----------------------

class _HostPool:
    """Free host buffers by size class; a buffer returns when the last view of
    the array made on it dies (numpy views keep their base alive)."""

    def __init__(self) -> None:
        self.free: dict[int, list[Any]] = defaultdict(list)
        self.lock = threading.Lock()
        self.driver_allocations = 0

    def take(self, cls: int) -> Any:
        with self.lock:
            free = self.free[cls]
            if free:
                return free.pop()
            self.driver_allocations += 1
        note("allocations")
        return bytearray(cls)

    def give(self, cls: int, storage: Any) -> None:
        with self.lock:
            free = self.free[cls]
            if len(free) < _MAX_PER_CLASS:
                free.append(storage)


_HOST_POOL = _HostPool()


def _sim_empty(shape: tuple[int, ...], dtype: np.dtype) -> Any:
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    cls = size_class(nbytes)
    storage = _HOST_POOL.take(cls)
    root = np.frombuffer(storage, np.uint8)   # every view of the result keeps root alive
    weakref.finalize(root, _HOST_POOL.give, cls, storage)
    return FakeCUDAArray(root[:nbytes].view(dtype).reshape(shape))


# --- a real GPU: numba's External Memory Management plugin ----------------------------

def _manager_base() -> tuple[type, ...]:
    from numba.cuda.cudadrv.driver import GetIpcHandleMixin, HostOnlyCUDAMemoryManager
    return GetIpcHandleMixin, HostOnlyCUDAMemoryManager


_MANAGER: list[type] = []


def manager_class() -> type:
    """The EMM plugin class (made on first use: numba loads only then)."""
    if _MANAGER:
        return _MANAGER[0]
    from numba.cuda.cudadrv import driver as drv

    class CachingMemoryManager(*_manager_base()):  # type: ignore[misc]
        """numba's EMM plugin for a caching allocator (one per context)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.free: dict[int, list[Any]] = defaultdict(list)
            self.lock = threading.Lock()
            self.cached_bytes = 0

        def initialize(self) -> None:
            # (numba may call this more than once per context: nothing cached is reset)
            if not self.deallocations.memory_capacity:   # unset: as numba's own manager
                self.deallocations.memory_capacity = self.get_memory_info().total

        def memalloc(self, size: int) -> Any:
            cls = size_class(max(int(size), 1))
            with self.lock:
                free = self.free.get(cls)
                ptr = free.pop() if free else None
                if ptr is not None:
                    self.cached_bytes -= cls
            if ptr is None:
                note("allocations")
                try:
                    ptr = drv.driver.cuMemAlloc(cls)
                except drv.CudaAPIError:
                    self.release_all()     # out of memory: give the cache back, try once more
                    self.deallocations.clear()
                    ptr = drv.driver.cuMemAlloc(cls)
            ctx = weakref.proxy(self.context)
            return drv.MemoryPointer(ctx, ptr, size, finalizer=self._finalizer(cls, ptr))

        def _finalizer(self, cls: int, ptr: Any) -> Any:
            me = weakref.ref(self)

            def give_back() -> None:
                mgr = me()
                if mgr is None:
                    return
                with mgr.lock:
                    free = mgr.free[cls]
                    if len(free) < _MAX_PER_CLASS:
                        free.append(ptr)
                        mgr.cached_bytes += cls
                        return
                drv.driver.cuMemFree(ptr)
            return give_back

        def release_all(self) -> None:
            with self.lock:
                ptrs = [p for free in self.free.values() for p in free]
                self.free.clear()
                self.cached_bytes = 0
            for p in ptrs:
                drv.driver.cuMemFree(p)

        def get_memory_info(self) -> Any:
            free, total = drv.driver.cuMemGetInfo()
            return drv.MemoryInfo(free=free + self.cached_bytes, total=total)

        def reset(self) -> None:
            self.release_all()
            super().reset()

        @property
        def interface_version(self) -> int:
            return 1

    _MANAGER.append(CachingMemoryManager)
    return CachingMemoryManager


_installed = [False]


def install() -> None:
    """Make the caching allocator numba's memory manager (real GPUs; before
    the first context, so call it before the driver starts: kernels.cuda.devices
    does). Idempotent; a no-op under the simulator."""
    if _installed[0] or _sim():
        return
    from numba import cuda
    cuda.set_memory_manager(manager_class())
    _installed[0] = True


def release_cached() -> None:
    """Give every cached free buffer back (the host pool's, the pinned staging
    buffers; the current GPU context's when one exists)."""
    with _HOST_POOL.lock:
        _HOST_POOL.free.clear()
    STAGING.clear()
    if _installed[0]:
        from numba import cuda
        mgr = getattr(cuda.current_context(), "memory_manager", None)
        if mgr is not None and hasattr(mgr, "release_all"):
            mgr.release_all()


def pool_stats() -> dict[str, int]:
    """The simulator pool's driver allocations and free buffers, and the pinned
    staging bytes kept (for tests and bench)."""
    with _HOST_POOL.lock:
        return {"driver_allocations": _HOST_POOL.driver_allocations,
                "free_buffers": sum(len(v) for v in _HOST_POOL.free.values()),
                "staging_bytes": STAGING.kept_bytes}


# .index: the GPU this thread made current last (kernels.cuda.devices.use_gpu sets it;
# GPU:i is the driver's device i, see kernels.cuda.devices)
THREAD_GPU = threading.local()


def current_device() -> int:
    """The driver's id of the current CUDA device: the one this thread made
    current with ``kernels.cuda.devices.use_gpu`` (no driver call), else the
    driver's answer (the simulator's one GPU: 0). Device copies kept for
    reuse are kept per device: a copy on GPU 0 is no use to a kernel on GPU 1."""
    index = getattr(THREAD_GPU, "index", None)
    if index is not None:
        return index
    if _sim():
        return 0
    from numba import cuda
    return int(cuda.get_current_device().id)


# --- arrays and copies ------------------------------------------------------------------

def device_empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialised device array from the pool."""
    dtype = np.dtype(dtype)
    if _sim():
        return _sim_empty(tuple(shape), dtype)
    from numba import cuda
    return cuda.device_array(tuple(shape), dtype=dtype)


def _pinned(nbytes: int) -> Any:
    from numba import cuda
    return cuda.pinned_array(nbytes, dtype=np.uint8)   # freed when the array dies


class StagingPool:
    """Pinned host buffers for copies in, by size class: at most four per
    class and ``max_bytes`` in all are kept between copies; a buffer given
    back past either limit is dropped (numba frees pinned memory with its
    array). ``alloc(nbytes)`` makes a buffer (default: numba's pinned array)."""

    def __init__(self, max_bytes: int = MAX_STAGING_BYTES, alloc: Any = None) -> None:
        self.max_bytes = int(max_bytes)
        self.alloc = alloc or _pinned
        self.free: dict[int, list[Any]] = defaultdict(list)
        self.kept_bytes = 0
        self.allocations = 0
        self.lock = threading.Lock()

    def stages(self, nbytes: int) -> bool:
        """Whether a copy of ``nbytes`` goes through a staging buffer (one
        bigger than a quarter of the limit goes straight from the host array)."""
        return 4 * size_class(nbytes) <= self.max_bytes

    def take(self, cls: int) -> Any:
        with self.lock:
            free = self.free.get(cls)
            if free:
                self.kept_bytes -= cls
                return free.pop()
            self.allocations += 1
        return self.alloc(cls)

    def give(self, cls: int, buf: Any) -> None:
        with self.lock:
            free = self.free[cls]
            if len(free) < _MAX_STAGING_PER_CLASS and self.kept_bytes + cls <= self.max_bytes:
                free.append(buf)
                self.kept_bytes += cls

    def clear(self) -> None:
        with self.lock:
            self.free.clear()
            self.kept_bytes = 0


STAGING = StagingPool()


def staged_copy(out: Any, host: np.ndarray, pool: StagingPool | None = None) -> None:
    """``host`` into ``out`` through a pinned buffer of ``pool`` (default
    :data:`STAGING`), or straight when the pool does not stage that size."""
    pool = STAGING if pool is None else pool
    if not pool.stages(host.nbytes):
        out.copy_to_device(host)
        return
    cls = size_class(host.nbytes)
    buf = pool.take(cls)
    try:
        stage = buf[:host.nbytes].view(host.dtype).reshape(host.shape)
        np.copyto(stage, host)
        # from pinned memory a copy returns once the buffer is consumed: free to reuse
        out.copy_to_device(stage)
    finally:
        pool.give(cls, buf)


def to_device(host: Any) -> Any:
    """A new device array with ``host``'s contents (one counted copy in)."""
    host = np.asarray(host, order="C")
    out = device_empty(host.shape, host.dtype)
    if host.size:
        note("h2d_copies", 1, host.nbytes)
        if _sim() or host.nbytes < 4096:
            out.copy_to_device(host)
        else:
            staged_copy(out, host)
    return out


def copy_in(out: Any, host: Any) -> None:
    """``host`` into the existing device array ``out`` (one counted copy in)."""
    host = np.asarray(host, order="C")
    if host.size:
        note("h2d_copies", 1, host.nbytes)
        out.copy_to_device(host)


def to_host(array: Any) -> np.ndarray:
    """``array`` (a device array) copied to a new host array: a copy out, and
    a synchronisation (the copy waits for the stream's work)."""
    nbytes = int(getattr(array, "nbytes", 0))
    note("d2h_copies", 1, nbytes)
    note("syncs")
    return array.copy_to_host()


_CONSTANTS: dict[tuple[int, int], Any] = {}
_CONSTANTS_LOCK = threading.Lock()


def cached_to_device(host: Any, device: int | None = None) -> Any:
    """``to_device(host)``, kept while ``host`` lives when ``host`` is a
    runtime constant (``kernels.constants.is_constant``): a constant is
    copied in once per device, not per step. ``device``: the current device's id when the caller
    has it at hand (else :func:`current_device` asks)."""
    if not is_constant(host):
        return to_device(host)
    key = (id(host), current_device() if device is None else int(device))
    with _CONSTANTS_LOCK:
        hit = _CONSTANTS.get(key)
    if hit is not None:
        return hit
    dev = to_device(host)
    with _CONSTANTS_LOCK:
        if len(_CONSTANTS) >= _MAX_CONSTANTS:
            _CONSTANTS.clear()
        _CONSTANTS[key] = dev
    weakref.finalize(host, _forget_constant, key, dev)
    return dev


def _forget_constant(key: tuple[int, int], dev: Any) -> None:
    with _CONSTANTS_LOCK:
        if _CONSTANTS.get(key) is dev:
            del _CONSTANTS[key]


_SCALARS: dict[tuple, Any] = {}


def device_scalar(value: Any, dtype: Any, device: int | None = None) -> Any:
    """A (1,) device array holding ``value`` as ``dtype``, copied in once per
    distinct value and device (the kernels only read it: a learning rate, a
    beta). ``device``: as for :func:`cached_to_device`."""
    a = np.asarray(value).astype(dtype).reshape(1)
    key = (current_device() if device is None else int(device), a.dtype.str, a.tobytes())
    hit = _SCALARS.get(key)
    if hit is None:
        if len(_SCALARS) >= _MAX_CONSTANTS:
            _SCALARS.clear()
        hit = _SCALARS[key] = to_device(a)
    return hit
