"""The embeddings' GPU kernels (``GatherV2``/``ResourceGather`` along axis 0,
``UnsortedSegmentSum``, ``ScatterAdd``/``ScatterSub`` into a device variable)
against their CPU kernels under numba's CUDA simulator, in a process started
with ``NUMBA_ENABLE_CUDASIM=1`` by ``test_gather_kernels.py`` (collected in a
normal run this module skips without importing numba)."""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    pytest.skip("runs in a subprocess with NUMBA_ENABLE_CUDASIM=1 (see test_gather_kernels.py)",
                allow_module_level=True)

RNG = np.random.default_rng(41)


def _both(op, inputs, attrs):
    import kernels
    from kernels.cuda.devices import is_device_array, to_device, to_host
    cpu = kernels.get_kernel(op, "CPU")([np.array(x) for x in inputs], attrs)
    gpu = kernels.get_kernel(op, "GPU")([to_device(np.array(x)) for x in inputs], attrs)
    assert all(is_device_array(g) for g in gpu)
    return cpu, [to_host(g) for g in gpu]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
def test_gather_rows_match_cpu(dtype, id_dtype):
    params = RNG.standard_normal((7, 3, 2)).astype(dtype)
    ids = np.array([[6, 0, 6], [2, 2, 1]], id_dtype)
    for op, attrs in (("GatherV2", {"axis": 0, "batch_dims": 0}), ("ResourceGather", {})):
        cpu, gpu = _both(op, [params, ids], attrs)
        np.testing.assert_array_equal(gpu[0], cpu[0])


def test_gather_other_axis_and_bad_id():
    import kernels
    from kernels.registry import KernelError
    params = RNG.standard_normal((3, 4)).astype(np.float32)
    cpu, gpu = _both("GatherV2", [params, np.array([3, 0], np.int32)], {"axis": 1})
    np.testing.assert_array_equal(gpu[0], cpu[0])
    with pytest.raises(KernelError, match=r"indices\[1\] = 9"):
        kernels.get_kernel("GatherV2", "GPU")([params, np.array([0, 9], np.int32)], {})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unsorted_segment_sum_matches_cpu(dtype):
    data = RNG.standard_normal((6, 4)).astype(dtype)
    ids = np.array([2, 0, -1, 2, 4, 0], np.int32)
    cpu, gpu = _both("UnsortedSegmentSum", [data, ids, np.array(5, np.int32)], {})
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["ScatterAdd", "ScatterSub"])
def test_scatter_into_a_device_variable_matches_cpu(op):
    import kernels
    from kernels.cuda.devices import to_device, to_host
    var = RNG.standard_normal((5, 3)).astype(np.float32)
    ids = np.array([4, 1, 4], np.int64)
    upd = RNG.standard_normal((3, 3)).astype(np.float32)
    want = kernels.get_kernel(op, "CPU")([var.copy(), ids, upd], {})[0]
    dev = to_device(var.copy())
    out = kernels.get_kernel(op, "GPU")([dev, ids, to_device(upd)], {})
    assert out[0] is dev
    np.testing.assert_allclose(to_host(dev), want, rtol=1e-6, atol=1e-6)
