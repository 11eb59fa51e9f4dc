"""The kernels own a task's threads: above one intra-op thread BLAS runs on
one and MatMul splits its product over the intra-op threads
(kernels/cpu/blas_threads.py, jit_loader.split_matmul); back at one, BLAS has
the count it started with. Two busy BLAS threads under each of two kernel
threads is what made the CIFAR-10 step slower at two threads than at one."""
from __future__ import annotations

import numpy as np
import pytest

from kernels.cpu import blas_threads, jit_loader
from kernels.registry import CPU, get_kernel


@pytest.fixture
def intra_op():
    before = jit_loader.intra_op_threads()
    yield jit_loader.set_intra_op_threads
    jit_loader.set_intra_op_threads(before)


@pytest.mark.skipif(not blas_threads.available(), reason="numpy's BLAS is not OpenBLAS here")
def test_blas_runs_on_one_thread_while_kernels_split(intra_op):
    intra_op(1)
    start = blas_threads.blas_threads()
    assert start >= 1
    intra_op(2)
    assert blas_threads.blas_threads() == 1
    intra_op(3)
    assert blas_threads.blas_threads() == 1
    intra_op(1)
    assert blas_threads.blas_threads() == start


def test_a_bad_count_is_refused():
    with pytest.raises(ValueError, match=">= 1"):
        blas_threads.set_blas_threads(0)
    with pytest.raises(ValueError, match=">= 1"):
        jit_loader.set_intra_op_threads(0)


@pytest.mark.parametrize("shape", [(512, 700, 300),    # rows split
                                   (3, 1024, 2048),    # a short a: columns split
                                   (3, 5, 7)])         # too small to split
def test_split_matmul_is_the_product(intra_op, shape):
    m, k, n = shape
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    intra_op(2)
    out = np.full((m, n), np.nan, np.float32)
    got = jit_loader.split_matmul(a, b, out)
    assert got is out
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.sqrt(k))
    # through the kernel, transposed operands included
    (t,) = get_kernel("MatMul", CPU)([b, a],
                                     {"transpose_a": True, "transpose_b": True})
    np.testing.assert_allclose(t, want.T, rtol=1e-4, atol=1e-3 * np.sqrt(k))
