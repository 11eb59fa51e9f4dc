"""GPU MatMul: two numba.cuda kernels, cuBLAS when asked for, and the choice.

``matmul_device`` runs ``op(a) @ op(b)`` for 2-D float32/float64 device
arrays (op = transpose when ``transpose_a``/``transpose_b``; the transposed
operand is read in place, never copied). Which code runs:

- **cuBLAS**, through NVIDIA's ``nvmath-python`` (``nvmath.bindings.cublas``
  ``sgemm``/``dgemm`` on the arrays' device pointers, on numba's default
  stream), when ``DISTRIB_GPU_MATMUL`` is ``cublas``, or ``auto`` and
  nvmath imports and opens a handle. ``cublas`` where it cannot is a
  :class:`kernels.cuda.options.CublasUnavailableError` at the first MatMul,
  saying what to install. nvmath is never a dependency of this project.
- Else a numba kernel, by size (``use_large``):

  * ``matmul_large`` (the register-blocked SGEMM): a 16 x 16 block computes
    a 128 x 128 tile of C, each thread an 8 x 8 block of it in registers
    (64 accumulators), over 8-deep slabs of k. A slab of A (128 x 8) and of
    B (8 x 128) is staged in shared memory, two buffers of each: while a
    slab is multiplied, every thread already holds the next slab's 4 + 4
    values in registers (loaded from global memory before the math, so the
    loads' latency hides behind it), and stores them into the other buffer
    at the top of the next iteration: one ``syncthreads`` per slab. Per k
    a thread reads 8 A and 8 B values from shared memory for 64 fused
    multiply-adds (the small kernel: 8 for 16). Thread (tx, ty) owns rows
    ``ty + 16 i`` and columns ``tx + 16 j``: the shared reads of a warp
    hit distinct banks or broadcast, and the stores to C coalesce. The
    shared slabs are k-major with rows padded to 132, so the stores of an
    operand read along k (A plain, B transposed) do not collide in a bank.
    ``ta``/``tb`` are launch arguments: they change only where a slab's
    values are loaded from (the compiler unswitches the loop on them), so
    one kernel per dtype serves the four layouts.
    128 x 128 rather than 64 x 128: with an 8 x 8 block per thread, 256
    threads make a 128 x 128 tile; a 64 x 128 tile would take 128 threads
    (4 warps) per block or a 4 x 8 block per thread, and 128 x 128 gives
    the higher ratio of math to shared and global loads, which the
    40%-of-cuBLAS target asks for; the small kernel covers the shapes where
    its fewer, larger tiles would leave SMs idle.
  * ``matmul_small``: the 64 x 64 tile, 4 x 4 outputs per thread, 16-deep
    slabs, one shared buffer (the previous kernel), for outputs of fewer
    than ``LARGE_MIN_TILES`` 128-tiles: a layer of the bench model
    (256 x 512) is 8 such tiles but 32 small ones.

Out-of-range elements of an edge tile load as 0 and out-of-range outputs are
not stored, so ragged M, N and K are exact. Every kernel is
``@cuda.jit(cache=True)`` and built on first use per dtype:
``tests/test_cuda_matmul.py`` checks both against numpy under the simulator
and compiles every variant for compute capabilities 8.0 and 9.0.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Any

import numpy as np
from numba import cuda, uint64

from kernels.counters import note
from kernels.cuda import options
from kernels.cuda.launch import SIM, device_empty, device_filled, launch
from kernels.registry import KernelError

__all__ = ["TILE", "REG", "BLOCK", "BLOCK_PAD", "LTHREADS", "LREG", "LBLOCK", "LBK", "LPAD",
           "LARGE_MIN_TILES", "KERNELS", "matmul_small", "matmul_large", "use_large",
           "matmul_device", "backend", "cublas_problem"]

logger = logging.getLogger(__name__)

# a shared or local array's shape must be a compile-time constant: a module
# constant or a literal, never an expression (the simulator accepts one, the
# real compiler not)

# the small kernel
TILE = 16          # threads per block side, and the k-depth of a shared tile
REG = 4            # each thread computes REG x REG outputs (register blocking)
BLOCK = TILE * REG  # output tile side per block: 64
BLOCK_PAD = 65     # BLOCK + 1: the A slab's row, +1 avoids bank conflicts on store

# the large kernel
LTHREADS = 16      # threads per block side: 256 threads
LREG = 8           # each thread computes LREG x LREG outputs
LBLOCK = 128       # LTHREADS * LREG: the output tile's side
LBK = 8            # the k-depth of a slab
LPAD = 132         # LBLOCK + 4: a slab's row in shared memory
LLOADS = 4         # LBLOCK * LBK // 256: values of each operand a thread stages per slab
LBUFS = 2          # shared buffers per operand (double buffering)
# outputs of at least this many 128 x 128 tiles take the large kernel (about
# a wave of blocks on a large GPU); fewer take the small one, whose 4x more
# blocks keep more SMs busy
LARGE_MIN_TILES = 96

KERNELS = ("small", "large", "cublas")


# --- the small kernel: 16x16 threads, 64x64 output tile, 4x4 outputs per thread ----

def matmul_small(acc_dtype: Any) -> Any:
    """``c = op(a) @ op(b)``, op = transpose when ``ta``/``tb``; any M, N, K.

    A block stages a 16-deep slab of A (64 rows) and of B (64 columns) in
    shared memory, then each thread multiplies 4 A values by 4 B values per k
    from registers. A thread owns rows ty + 16*i and columns tx + 16*j.
    Out-of-range tile elements load as 0.
    """
    @cuda.jit(cache=True)
    def kernel(a, b, c, ta, tb):
        sa = cuda.shared.array((TILE, BLOCK_PAD), acc_dtype)  # [k][m]
        sb = cuda.shared.array((TILE, BLOCK), acc_dtype)      # [k][n]
        acc = cuda.local.array((REG, REG), acc_dtype)
        ra = cuda.local.array(REG, acc_dtype)
        rb = cuda.local.array(REG, acc_dtype)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * TILE + tx
        row0 = cuda.blockIdx.y * BLOCK
        col0 = cuda.blockIdx.x * BLOCK
        m_total = c.shape[0]
        n_total = c.shape[1]
        k_total = a.shape[0] if ta else a.shape[1]
        for i in range(REG):
            for j in range(REG):
                acc[i, j] = 0
        for k0 in range(0, k_total, TILE):
            for l in range(REG):  # noqa: E741  (the kernel's load slot)
                e = tid + l * TILE * TILE
                # A slab: consecutive threads walk k when A is row-major (coalesced), m when transposed.
                if ta:
                    kk = e // BLOCK
                    mm = e - kk * BLOCK
                else:
                    mm = e // TILE
                    kk = e - mm * TILE
                gm = row0 + mm
                gk = k0 + kk
                if gm < m_total and gk < k_total:
                    sa[kk, mm] = a[gk, gm] if ta else a[gm, gk]
                else:
                    sa[kk, mm] = 0
                # B slab: consecutive threads walk n when B is row-major, k when transposed.
                if tb:
                    nn = e // TILE
                    kk = e - nn * TILE
                else:
                    kk = e // BLOCK
                    nn = e - kk * BLOCK
                gk = k0 + kk
                gn = col0 + nn
                if gk < k_total and gn < n_total:
                    sb[kk, nn] = b[gn, gk] if tb else b[gk, gn]
                else:
                    sb[kk, nn] = 0
            cuda.syncthreads()
            for kk in range(TILE):
                for i in range(REG):
                    ra[i] = sa[kk, ty + i * TILE]
                for j in range(REG):
                    rb[j] = sb[kk, tx + j * TILE]
                for i in range(REG):
                    for j in range(REG):
                        acc[i, j] += ra[i] * rb[j]
            cuda.syncthreads()
        for i in range(REG):
            r = row0 + ty + i * TILE
            if r < m_total:
                for j in range(REG):
                    col = col0 + tx + j * TILE
                    if col < n_total:
                        c[r, col] = acc[i, j]
    return kernel


# --- the large kernel: 16x16 threads, 128x128 tile, 8x8 outputs per thread,
#     8-deep slabs double-buffered in shared memory ---------------------------------

def matmul_large(acc_dtype: Any) -> Any:
    """``c = op(a) @ op(b)``, op = transpose when ``ta``/``tb``; any M, N, K.

    Launch with a (16, 16) block and a grid of ceil(N/128) x ceil(M/128).
    """
    @cuda.jit(cache=True)
    def kernel(a, b, c, ta, tb):
        sa = cuda.shared.array((LBUFS, LBK, LPAD), acc_dtype)  # [buffer][k][m]
        sb = cuda.shared.array((LBUFS, LBK, LPAD), acc_dtype)  # [buffer][k][n]
        acc = cuda.local.array((LREG, LREG), acc_dtype)
        ra = cuda.local.array(LREG, acc_dtype)
        rb = cuda.local.array(LREG, acc_dtype)
        pa = cuda.local.array(LLOADS, acc_dtype)   # the next slab, staged in registers
        pb = cuda.local.array(LLOADS, acc_dtype)
        # (the masks change nothing, blockDim is 16 x 16: they tell the compiler these
        # are small and non-negative, so an index from them needs no negative-index
        # fix-up and each shared address below is one base plus a constant)
        tx = cuda.threadIdx.x & (LTHREADS - 1)
        ty = cuda.threadIdx.y & (LTHREADS - 1)
        tid = ty * LTHREADS + tx
        row0 = cuda.blockIdx.y * LBLOCK
        col0 = cuda.blockIdx.x * LBLOCK
        m_total = c.shape[0]
        n_total = c.shape[1]
        k_total = a.shape[0] if ta else a.shape[1]
        # Where this thread's staged value l sits in a slab: element tid + 256 l,
        # walked so that consecutive threads read consecutive addresses of the
        # operand as it is stored (along m or n where that is the row, else along k):
        # 256 threads cover 2 k rows of 128 (m or n along the row) or 32 rows of 8 k.
        a_k = tid // LBLOCK if ta else tid % LBK
        a_m = tid % LBLOCK if ta else tid // LBK
        a_step_k = 2 if ta else 0
        a_step_m = 0 if ta else 32
        b_k = tid % LBK if tb else tid // LBLOCK
        b_n = tid // LBK if tb else tid % LBLOCK
        b_step_k = 0 if tb else 2
        b_step_n = 32 if tb else 0
        for i in range(LREG):
            for j in range(LREG):
                acc[i, j] = 0
        n_slabs = (k_total + LBK - 1) // LBK
        for s in range(n_slabs + 1):
            # s == 0: fetch slab 0 only; then store slab s-1, fetch slab s, multiply slab s-1
            if s > 0:
                buf = (s - 1) & 1
                for l in range(LLOADS):  # noqa: E741
                    sa[buf, a_k + l * a_step_k, a_m + l * a_step_m] = pa[l]
                    sb[buf, b_k + l * b_step_k, b_n + l * b_step_n] = pb[l]
                # the one barrier of a slab: these stores are complete before anyone reads
                # them, and everyone finished reading this buffer (slab s-3) before the
                # previous barrier, so no second barrier is needed
                cuda.syncthreads()
            # the next slab into registers: its loads are in flight during the math below
            k0 = s * LBK
            for l in range(LLOADS):  # noqa: E741
                gm = row0 + a_m + l * a_step_m
                gk = k0 + a_k + l * a_step_k
                if gm < m_total and gk < k_total:   # (unsigned: no negative-index fix-up)
                    pa[l] = a[uint64(gk), uint64(gm)] if ta else a[uint64(gm), uint64(gk)]
                else:
                    pa[l] = 0
                gn = col0 + b_n + l * b_step_n
                gk = k0 + b_k + l * b_step_k
                if gn < n_total and gk < k_total:
                    pb[l] = b[uint64(gn), uint64(gk)] if tb else b[uint64(gk), uint64(gn)]
                else:
                    pb[l] = 0
            if s > 0:
                buf = (s - 1) & 1
                for kk in range(LBK):
                    for i in range(LREG):
                        ra[i] = sa[buf, kk, ty + i * LTHREADS]
                    for j in range(LREG):
                        rb[j] = sb[buf, kk, tx + j * LTHREADS]
                    for i in range(LREG):
                        for j in range(LREG):
                            acc[i, j] += ra[i] * rb[j]
        for i in range(LREG):
            r = row0 + ty + i * LTHREADS
            if r < m_total:
                for j in range(LREG):
                    col = col0 + tx + j * LTHREADS
                    if col < n_total:
                        c[uint64(r), uint64(col)] = acc[i, j]
    return kernel


# --- choosing and launching ---------------------------------------------------------

_small_kernels: dict[str, Any] = {}
_large_kernels: dict[str, Any] = {}


def use_large(m: int, n: int) -> bool:
    """Whether an (m, n) output takes the large kernel (enough 128-tiles to fill a GPU)."""
    return math.ceil(m / LBLOCK) * math.ceil(n / LBLOCK) >= LARGE_MIN_TILES


def matmul_device(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False,
                  kernel: str | None = None) -> Any:
    """``op(a) @ op(b)`` for 2-D float device arrays of one dtype.

    ``kernel``: None picks (``backend()``, then ``use_large``); "small",
    "large" or "cublas" forces one (tests and benchmarks)."""
    ta, tb = bool(transpose_a), bool(transpose_b)
    m, k = (tuple(a.shape)[1], tuple(a.shape)[0]) if ta else tuple(a.shape)
    k2, n = (tuple(b.shape)[1], tuple(b.shape)[0]) if tb else tuple(b.shape)
    if k != k2:
        raise KernelError(f"MatMul: inner dimensions differ: {list(a.shape)} @ {list(b.shape)} "
                          f"(transpose_a={ta}, transpose_b={tb})")
    if kernel not in (None, *KERNELS):
        raise KernelError(f"MatMul: no kernel {kernel!r}; one of {', '.join(KERNELS)}")
    dtype = np.dtype(a.dtype)
    auto = kernel is None
    if auto:
        kernel = backend()
    if not (m and n):
        return device_empty((m, n), dtype)
    if k == 0:
        return device_filled((m, n), dtype, 0)
    c = device_empty((m, n), dtype)
    if kernel == "cublas":
        try:
            if _cublas_gemm(a, b, c, ta, tb, m, n, k):
                return c
        except options.CublasUnavailableError:
            if not auto or options.matmul_choice() == "cublas":
                raise
            # auto, and cuBLAS did not start (cublas_problem() says why from now on)
        # (or a strided operand, which the numba kernels read in place)
    if kernel not in ("small", "large"):
        kernel = "large" if use_large(m, n) else "small"
    if kernel == "large":
        kern = _large_kernels.get(dtype.name)
        if kern is None:
            kern = _large_kernels[dtype.name] = matmul_large(dtype.type)
        grid = (math.ceil(n / LBLOCK), math.ceil(m / LBLOCK))
        launch(kern, grid, (LTHREADS, LTHREADS), a, b, c, ta, tb)
    else:
        kern = _small_kernels.get(dtype.name)
        if kern is None:
            kern = _small_kernels[dtype.name] = matmul_small(dtype.type)
        grid = (math.ceil(n / BLOCK), math.ceil(m / BLOCK))
        launch(kern, grid, (TILE, TILE), a, b, c, ta, tb)
    return c


# --- cuBLAS through nvmath-python (optional) ----------------------------------------

_INSTALL = ("install NVIDIA's nvmath-python matching the CUDA driver (pip install "
            "'nvmath-python[cu12]', or [cu13]), or set DISTRIB_GPU_MATMUL=numba (or auto)")
_cublas_lock = threading.Lock()
_cublas_state: dict[str, Any] = {}     # "module" / "problem", once per process
_handles: dict[int, int] = {}           # device id -> cuBLAS handle
_ONE = {np.dtype(np.float32): np.ones(1, np.float32), np.dtype(np.float64): np.ones(1, np.float64)}
_ZERO = {np.dtype(np.float32): np.zeros(1, np.float32), np.dtype(np.float64): np.zeros(1, np.float64)}


def cublas_problem() -> str | None:
    """Why cuBLAS cannot run MatMul here (None: it can): no real GPU, or
    ``nvmath.bindings.cublas`` not importable. Checked once per process."""
    with _cublas_lock:
        if "problem" not in _cublas_state:
            problem = None
            if SIM:
                problem = "the CUDA simulator is not a GPU: cuBLAS needs a real one"
            else:
                try:
                    from nvmath.bindings import cublas
                    _cublas_state["module"] = cublas
                except Exception as e:   # ImportError, or a broken install
                    problem = f"nvmath-python is not importable ({type(e).__name__}: {e})"
            _cublas_state["problem"] = problem
        return _cublas_state["problem"]


def backend() -> str:
    """The backend GPU MatMul uses now: "cublas" or "numba" (``DISTRIB_GPU_MATMUL``
    through ``kernels.cuda.options``: auto = cuBLAS where ``cublas_problem()``
    is None). ``cublas`` where cuBLAS cannot run raises CublasUnavailableError."""
    choice = options.matmul_choice()
    if choice == "numba":
        return "numba"
    problem = cublas_problem()
    if problem is None:
        return "cublas"
    if choice == "cublas":
        raise options.CublasUnavailableError(
            f"MatMul: DISTRIB_GPU_MATMUL=cublas, but {problem}: {_INSTALL}")
    return "numba"


def _handle(cublas: Any) -> int:
    dev = cuda.get_current_device().id
    with _cublas_lock:
        h = _handles.get(dev)
        if h is None:
            try:   # on the current device; numba's default stream (the handle's own default)
                h = _handles[dev] = cublas.create()
            except Exception as e:   # e.g. nvmath present, libcublas not
                problem = f"cuBLAS did not start ({type(e).__name__}: {e})"
                _cublas_state["problem"] = problem
                logger.warning("MatMul: %s; the numba kernels run it", problem)
                raise options.CublasUnavailableError(f"MatMul: {problem}: {_INSTALL}") from e
        return h


def _pointer(x: Any) -> int:
    return int(x.__cuda_array_interface__["data"][0])


def _cublas_gemm(a: Any, b: Any, c: Any, ta: bool, tb: bool, m: int, n: int, k: int) -> bool:
    """C (row-major) = op(A) @ op(B) as cuBLAS's column-major C^T = op(B)^T @ op(A)^T:
    a row-major matrix is its transpose column-major, so no operand moves.
    False (nothing done) for a strided operand: the numba kernels take it."""
    problem = cublas_problem()
    if problem is not None:
        raise options.CublasUnavailableError(f"MatMul through cuBLAS: {problem}: {_INSTALL}")
    if not (a.is_c_contiguous() and b.is_c_contiguous()):
        return False
    cublas = _cublas_state["module"]
    handle = _handle(cublas)
    dtype = np.dtype(a.dtype)
    gemm = cublas.sgemm if dtype == np.float32 else cublas.dgemm
    op_a = cublas.Operation.T if ta else cublas.Operation.N
    op_b = cublas.Operation.T if tb else cublas.Operation.N
    note("launches")
    gemm(handle, op_b, op_a, n, m, k, _ONE[dtype].ctypes.data,
         _pointer(b), tuple(b.shape)[1], _pointer(a), tuple(a.shape)[1],
         _ZERO[dtype].ctypes.data, _pointer(c), n)
    return True
