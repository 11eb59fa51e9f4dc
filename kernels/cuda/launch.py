"""Launching numba.cuda kernels: grid sizes, device arrays, and the
registration wrapper every GPU kernel goes through (strings and uncovered
cases go to the CPU kernel on a host copy). Shared by ``kernels.cuda.elementwise`` and
``kernels.cuda.nn``; imported only once a GPU kernel is wanted."""
from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable

import numpy as np
from numba import cuda

from kernels.counters import note
from kernels.cuda import math as cm
from kernels.cuda import memory
from kernels.cuda.devices import CUDASIM, backend, is_device_array, to_host
from kernels.registry import CPU, GPU, KernelError, get_kernel, register

__all__ = ["SIM", "launch", "launch_1d", "run_1d", "typed_kernel", "covered", "FLOAT_DTYPES", "scalar_operand",
           "repeat_plan", "as_device", "flat", "device_empty", "device_filled",
           "host_fallback", "gpu_kernel", "register_gpu"]

logger = logging.getLogger(__name__)

SIM = backend() == CUDASIM
# The simulator runs every CUDA thread as a Python thread: keep grids tiny
# there (grid-stride loops make any size correct with any grid).
THREADS = 64 if SIM else 256
MAX_BLOCKS = 4 if SIM else 8192
_fallback_logged: set[str] = set()


def launch_1d(n: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``n`` elements."""
    return max(1, min(math.ceil(n / THREADS), MAX_BLOCKS)), THREADS


def run_1d(kernel: Any, n: int, *args: Any) -> None:
    """Launch grid-stride ``kernel`` over ``n`` elements (``launch_1d``'s grid)."""
    blocks, threads = launch_1d(n)
    launch(kernel, blocks, threads, *args)


# (factory, dtype name) -> the kernel ``factory`` built for that storage type
_TYPED: dict[tuple[Any, str], Any] = {}


def typed_kernel(factory: Any, dtype: Any) -> Any:
    """``factory(t)``'s kernel for ``dtype``'s scalar type ``t``, built once."""
    key = (factory, np.dtype(dtype).name)
    kern = _TYPED.get(key)
    if kern is None:
        kern = _TYPED[key] = factory(np.dtype(dtype).type)
    return kern


# the dtypes the floating-point device kernels (conv, pooling, normalization) cover
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def covered(*arrays: Any, ndim: int = 4) -> bool:
    """Rank ``ndim``, one of ``FLOAT_DTYPES`` for all, no empty operand."""
    dt = np.dtype(arrays[0].dtype)
    return (dt in FLOAT_DTYPES and all(x.ndim == ndim and x.size > 0 for x in arrays)
            and all(np.dtype(x.dtype) == dt for x in arrays))


def scalar_operand(op: str, name: str, x: Any, dtype: Any) -> Any:
    """A hyper-parameter as a 1-element device array, read inside the kernel
    (so a device-resident lr never costs a synchronizing copy to the host)."""
    if is_device_array(x):
        if x.size != 1:
            raise KernelError(f"{op}: {name} must be a scalar, got shape {list(x.shape)}")
        return x.reshape(1)
    a = np.asarray(x)
    if a.size != 1:
        raise KernelError(f"{op}: {name} must be a scalar, got shape {list(a.shape)}")
    return memory.device_scalar(a, dtype)


def as_device(x: Any) -> Any:
    """``x`` as a device array on the current device (copied if on the host;
    a runtime constant once per device: ``memory.cached_to_device``)."""
    if is_device_array(x):
        return x if hasattr(x, "copy_to_host") else cuda.as_cuda_array(x)
    return memory.cached_to_device(x)


def flat(x: Any) -> Any:
    return x.reshape(x.size)


def device_empty(shape: tuple[int, ...], dtype: Any) -> Any:
    return memory.device_empty(tuple(shape), dtype)


# --- launches: the configuration bound once, the compiled kernel looked up once -------

# (kernel, grid, block) -> numba's bound launch configuration (real GPUs)
_BOUND: dict[tuple, Any] = {}
# (kernel, grid, block, the arguments' kinds) -> the compiled kernel, or None when the
# launch must go through numba's dispatcher (see _arg_kind)
_PREPARED: dict[tuple, Any] = {}


def _arg_kind(a: Any) -> Any:
    """What decides the type numba gives ``a``, cheaply; None when only numba's
    own typing can tell (a non-contiguous or broadcast array)."""
    dtype = getattr(a, "dtype", None)
    if dtype is None:
        return type(a)
    if hasattr(a, "is_c_contiguous"):
        if not a.is_c_contiguous() or 0 in a.strides:
            return None
        return (np.dtype(dtype).str, a.ndim)
    return (type(a), np.dtype(dtype).str)   # a numpy scalar


def launch(kernel: Any, grid: Any, block: Any, *args: Any) -> None:
    """``kernel[grid, block](*args)``, counted (``kernels.counters``).

    On a real GPU the launch configuration is bound once per (kernel, grid,
    block), and after the first launch with arguments of some kinds (dtype,
    rank, contiguous) the compiled kernel is launched directly: numba's
    dispatcher types every argument and looks up the overload on each call,
    which is most of a small launch's cost. The simulator launches through
    its own dispatcher (its configured kernel is one shared object)."""
    note("launches")
    if SIM:
        kernel[grid, block](*args)
        return
    kinds = tuple(_arg_kind(a) for a in args)
    key = (id(kernel), grid, block, kinds)
    prepared = _PREPARED.get(key)
    if prepared is not None:   # (kinds with None never get an entry)
        compiled, cfg = prepared
        compiled.launch(args, cfg.griddim, cfg.blockdim, cfg.stream, cfg.sharedmem)
        return
    bkey = (id(kernel), grid, block)
    cfg = _BOUND.get(bkey)
    if cfg is None:
        if len(_BOUND) >= 4096:
            _BOUND.clear()
        cfg = _BOUND[bkey] = kernel[grid, block]
    cfg(*args)
    if None in kinds or key in _PREPARED:
        return
    overloads = getattr(kernel, "overloads", None)
    compiled = None
    if overloads and hasattr(cfg, "griddim"):
        compiled = overloads.get(tuple(kernel.typeof_pyval(a) for a in args))
    if len(_PREPARED) >= 4096:
        _PREPARED.clear()
    # None: this launch stays with the dispatcher (no overload it would pick for sure)
    _PREPARED[key] = (compiled, cfg) if hasattr(compiled, "launch") else None


def repeat_plan(s: tuple, out: tuple) -> tuple[int, int] | None:
    """``(div, n)`` such that ``out[i]`` reads ``x[(i // div) % n]`` for an
    operand of shape ``s`` broadcast to ``out``: a block of ``out``'s axes
    with size-1 axes (or none) on both sides; None for other broadcasts."""
    padded = (1,) * (len(out) - len(s)) + tuple(s)
    kept = [j for j, d in enumerate(padded) if d != 1]
    if not kept:
        return 1, 1
    lo, hi = kept[0], kept[-1] + 1
    if any(padded[j] != out[j] for j in range(lo, hi)):
        return None
    return math.prod(out[hi:]), math.prod(out[lo:hi])


def _is_host_only(x: Any) -> bool:
    # Strings and objects have no device representation.
    return not is_device_array(x) and np.asarray(x).dtype.kind in "UOS"


def host_fallback(op: str, inputs: list, attrs: dict) -> list:
    if op not in _fallback_logged:
        _fallback_logged.add(op)
        logger.debug("%s: case not covered on the GPU, running the CPU kernel on a host copy", op)
    outs = get_kernel(op, CPU)([to_host(x) for x in inputs], attrs)
    return [o if o.dtype.kind in "UOS" else memory.to_device(o) for o in outs]


# The simulator swaps numba.cuda for its fake module in a kernel's globals
# while the kernel runs, so two kernels at once on two threads (the kernel
# pool runs a GPU op's first launch, see distrib's kernel_pool) break each
# other: there, one GPU op runs at a time.
_SIM_LOCK = threading.RLock()


def register_gpu(op: str, fn: Callable[[list, dict], list]) -> Callable[[list, dict], list]:
    """Register ``fn`` for ``op``; string inputs go to the CPU kernel."""
    def kernel(inputs: list, attrs: dict) -> list:
        if any(_is_host_only(x) for x in inputs):
            return get_kernel(op, CPU)(inputs, attrs)
        if SIM:
            with _SIM_LOCK:
                return fn(inputs, attrs)
        return fn(inputs, attrs)
    kernel.__name__ = kernel.__qualname__ = f"{op}_gpu"
    return register(op, GPU)(kernel)


def gpu_kernel(op: str) -> Callable[[Callable], Callable]:
    return lambda fn: register_gpu(op, fn)


def device_filled(shape: tuple[int, ...], dtype: np.dtype, value: int) -> Any:
    out = device_empty(shape, dtype)
    if out.size:
        blocks, threads = launch_1d(out.size)
        launch(cm.fill, blocks, threads, flat(out), dtype.type(value))
    return out
