"""GPU MatMul (kernels/cuda/matmul.py): both numba kernels against numpy, the
choice ``DISTRIB_GPU_MATMUL`` makes, and every kernel compiled for real GPUs.

- Under numba's CUDA simulator (switched on before numba is imported, so in
  a child: ``test_the_simulator_cases`` runs this file again with
  ``NUMBA_ENABLE_CUDASIM=1``, where only the ``sim_only`` tests run): the
  128x128 kernel and the 64x64 one on shapes that hit every edge (1x1x1; a
  ragged tile of every side, all four transposes, both dtypes; a grid of 2 x 2
  large tiles with ragged M, N and K over three slabs, so a shared buffer is
  reused), the registry's MatMul taking the small path, and the
  setting through the runtime: ``cublas`` where cuBLAS cannot run (here: no
  nvmath-python, and the simulator) is InvalidArgumentError naming what to
  install, at the first GPU MatMul; ``numba`` runs it. The simulator runs
  each of a block's 256 threads in Python, so the shapes stay small (the
  whole child: about 17 s of CPU).
- On the host: the choice between auto, numba and cublas with nvmath absent
  (auto falls back, cublas raises the typed error), and, in two children
  (one per target), ``compile_ptx`` of every variant for compute
  capabilities 8.0 and 9.0 with no local memory in the PTX: the 8x8
  accumulator tile and the staged slabs live in registers. The registry's
  compile test (test_kernels_compile.py) reaches the small kernel only: its
  MatMul cases are too small for the large one.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:     # run as a script (the compile children)
    sys.path.insert(0, ROOT)
from tests import background  # noqa: E402

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
sim_only = pytest.mark.skipif(not SIM, reason="runs in the simulator child (test_the_simulator_cases)")
host_only = pytest.mark.skipif(SIM, reason="runs in the host process, not under the simulator")
RNG = np.random.default_rng(27)
TOL = {np.float32: 2e-5, np.float64: 1e-12}   # relative to the largest |a||b| sum of a row


def _check(m: int, k: int, n: int, ta: bool, tb: bool, dtype: type, kernel: str | None) -> None:
    from kernels.cuda.devices import is_device_array, to_device, to_host
    from kernels.cuda.matmul import matmul_device
    a = RNG.standard_normal((m, k)).astype(dtype)
    b = RNG.standard_normal((k, n)).astype(dtype)
    a_in = np.ascontiguousarray(a.T) if ta else a
    b_in = np.ascontiguousarray(b.T) if tb else b
    out = matmul_device(to_device(a_in), to_device(b_in), ta, tb, kernel=kernel)
    assert is_device_array(out)
    got = to_host(out)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == dtype and got.shape == (m, n)
    scale = max(1.0, float((np.abs(a).astype(np.float64) @ np.abs(b)).max()))
    err = float(np.abs(got - want).max()) / scale
    assert err < TOL[dtype], f"{kernel} {m}x{k}@{k}x{n} ta={ta} tb={tb} {dtype.__name__}: {err:.3g}"


# --- under the simulator -------------------------------------------------------------

TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]


@sim_only
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_large_kernel_ragged_tile_every_transpose(ta, tb, dtype):
    _check(17, 5, 18, ta, tb, dtype, "large")


@sim_only
@pytest.mark.parametrize("kernel", ["large", "small"])
def test_one_by_one(kernel):
    _check(1, 1, 1, False, False, np.float32, kernel)
    _check(1, 1, 1, True, True, np.float64, kernel)


@sim_only
@pytest.mark.parametrize("ta,tb,dtype", [(False, False, np.float32), (True, True, np.float64)])
def test_large_kernel_two_by_two_tiles_and_many_slabs(ta, tb, dtype):
    # 129 x 131: a full and a one-row/three-column tile each way; k = 17: two full
    # slabs and one of a single k, so the first shared buffer is reused
    _check(129, 17, 131, ta, tb, dtype, "large")


@sim_only
@pytest.mark.parametrize("ta,tb", TRANSPOSES)
def test_small_kernel_ragged_tile_every_transpose(ta, tb):
    _check(17, 5, 18, ta, tb, np.float32, "small")
    if ta and tb:
        _check(17, 19, 18, ta, tb, np.float64, "small")   # k past one 16-deep slab


@sim_only
def test_registry_matmul_takes_the_small_path_and_cublas_is_not_chosen_here():
    import kernels
    from kernels.cuda import matmul as cuda_matmul
    from kernels.cuda.devices import to_device, to_host
    assert cuda_matmul.backend() == "numba"   # auto: the simulator is no GPU for cuBLAS
    assert "simulator" in cuda_matmul.cublas_problem()
    a, b = RNG.standard_normal((20, 7)).astype(np.float32), RNG.standard_normal((7, 9)).astype(np.float32)
    out = kernels.get_kernel("MatMul", "GPU")([to_device(a), to_device(b)], {})[0]
    np.testing.assert_allclose(to_host(out), a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(kernels.KernelError, match="no kernel 'tiled'"):
        cuda_matmul.matmul_device(to_device(a), to_device(b), kernel="tiled")


@sim_only
def test_the_setting_through_the_runtime(monkeypatch):
    """A server lists its GPU, so the kernels read DISTRIB_GPU_MATMUL through its
    declaration: cublas (no nvmath-python, no real GPU) fails the first GPU MatMul
    with InvalidArgumentError saying what to install; numba, set while the server
    runs, is seen by the next run."""
    import asyncio

    import distrib as dt
    from distrib.errors import InvalidArgumentError

    async def main() -> tuple[str, list]:
        with dt.Graph().as_default():
            with dt.device("/gpu:0"):
                y = dt.matmul(dt.constant([[1.0, 2.0]]), dt.constant([[3.0], [4.0]]))
            async with dt.serve({"local": ["localhost:0"]}) as srv:
                async with dt.Session(srv.target) as sess:
                    monkeypatch.setenv("DISTRIB_GPU_MATMUL", "cublas")
                    with pytest.raises(InvalidArgumentError) as info:
                        await sess.run(y)
                    monkeypatch.setenv("DISTRIB_GPU_MATMUL", "numba")
                    return str(info.value), (await sess.run(y)).tolist()
    message, value = asyncio.run(main())
    assert "DISTRIB_GPU_MATMUL=cublas" in message and "nvmath-python" in message, message
    assert value == [[11.0]]


# --- on the host -------------------------------------------------------------------

def _simulator_child() -> background.Spec:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    return background.Spec([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/test_cuda_matmul.py"], env, 280)


@host_only
@pytest.mark.timeout(300)
@pytest.mark.background("matmul_simulator")
def test_the_simulator_cases():
    out = background.run("matmul_simulator", _simulator_child())
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) >= 18, tail   # every sim_only case ran


@host_only
def test_the_choice_without_nvmath(monkeypatch):
    pytest.importorskip("numba")
    from kernels.cuda import matmul as cuda_matmul
    from kernels.cuda import options as gpu_options
    if cuda_matmul.SIM:
        pytest.skip("this process runs the simulator")
    try:
        import nvmath  # noqa: F401
        pytest.skip("nvmath-python is installed here: auto would choose cuBLAS")
    except ImportError:
        pass
    from distrib.settings import GPU_MATMUL
    try:
        gpu_options.set_matmul_choice(GPU_MATMUL.get)   # what a server listing GPUs does
        monkeypatch.delenv("DISTRIB_GPU_MATMUL", raising=False)
        assert gpu_options.matmul_choice() == "auto" and cuda_matmul.backend() == "numba"
        assert "nvmath-python is not importable" in cuda_matmul.cublas_problem()
        monkeypatch.setenv("DISTRIB_GPU_MATMUL", "numba")
        assert cuda_matmul.backend() == "numba"
        monkeypatch.setenv("DISTRIB_GPU_MATMUL", "cublas")
        with pytest.raises(gpu_options.CublasUnavailableError, match=r"pip install 'nvmath-python"):
            cuda_matmul.backend()
        assert issubclass(gpu_options.CublasUnavailableError, ValueError)   # -> InvalidArgumentError
        monkeypatch.setenv("DISTRIB_GPU_MATMUL", "blas")
        with pytest.raises(ValueError, match="DISTRIB_GPU_MATMUL must be one of auto, numba, cublas"):
            cuda_matmul.backend()
        gpu_options.set_matmul_choice("cublas")
        with pytest.raises(gpu_options.CublasUnavailableError):
            cuda_matmul.backend()
        with pytest.raises(ValueError, match="not one of"):
            gpu_options.set_matmul_choice("fast")
    finally:
        gpu_options.set_matmul_choice(None)
    assert gpu_options.matmul_choice() == "auto"


@host_only
def test_which_outputs_take_the_large_kernel():
    pytest.importorskip("numba")
    from kernels.cuda.matmul import LARGE_MIN_TILES, use_large
    assert not use_large(256, 512)          # a layer of the bench model: 8 large tiles
    assert not use_large(1, 1)
    assert use_large(4096, 4096)            # the figure's n: 1024 tiles
    assert use_large(1024, 128 * LARGE_MIN_TILES // 8)
    assert not use_large(1024, 128 * LARGE_MIN_TILES // 8 - 128)


# --- compiled for real GPUs ---------------------------------------------------------

def _nvvm_missing() -> str | None:
    try:
        importlib.metadata.version("nvidia-nvvm")
    except importlib.metadata.PackageNotFoundError:
        return "NVIDIA's NVVM compiler wheel (nvidia-nvvm) is not installed: pip install -e '.[test]'"
    return None


def compile_variants(cc: tuple[int, int]) -> dict:
    """The child's work: every matmul kernel of each dtype, compiled for ``cc``:
    its local-memory loads and stores, fused multiply-adds and barriers in the PTX."""
    from numba import cuda, from_dtype, types

    from kernels.cuda import matmul as mm
    out = {}
    for dtype in (np.float32, np.float64):
        arr = types.Array(from_dtype(np.dtype(dtype)), 2, "C")
        sig = (arr, arr, arr, types.boolean, types.boolean)
        for name, kernel in (("large", mm.matmul_large(dtype)), ("small", mm.matmul_small(dtype))):
            t0 = time.perf_counter()
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            out[f"{name} {np.dtype(dtype).name}"] = {
                "ld_local": len(re.findall(r"\bld\.local\b", ptx)),
                "st_local": len(re.findall(r"\bst\.local\b", ptx)),
                "local_decl": len(re.findall(r"^\s*\.local\b", ptx, re.M)),
                "fma": len(re.findall(r"\bfma\.rn\.f(32|64)\b", ptx)),
                "barriers": len(re.findall(r"\bbar\.sync\b", ptx)),
                "seconds": round(time.perf_counter() - t0, 1)}
    return out


def _compile_spec(cc: tuple[int, int]) -> background.Spec | None:
    if _nvvm_missing():
        return None
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(CUDA_VISIBLE_DEVICES="", NUMBA_ENABLE_CUDASIM="0",
               PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
    return background.Spec([sys.executable, os.path.abspath(__file__), json.dumps(cc)], env, 280)


CCS = ((8, 0), (9, 0))
BACKGROUND = {"matmul_simulator": _simulator_child,
              **{f"matmul_ptx_{cc[0]}{cc[1]}": (lambda cc=cc: _compile_spec(cc)) for cc in CCS}}


def _compile_child(cc: tuple[int, int]) -> dict:
    out = background.run(f"matmul_ptx_{cc[0]}{cc[1]}", _compile_spec(cc))
    assert out.returncode == 0, out.stderr[-6000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@host_only
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.background(*(f"matmul_ptx_{cc[0]}{cc[1]}" for cc in CCS))
def test_every_matmul_kernel_compiles_for_real_targets_without_local_memory():
    reason = _nvvm_missing()
    if reason:
        pytest.skip(reason)
    with ThreadPoolExecutor(len(CCS)) as pool:   # one interpreter per target: two cores
        results = dict(zip(CCS, pool.map(_compile_child, CCS)))
    for cc, kernels in results.items():
        print(f"cc {cc[0]}.{cc[1]}: {kernels}")
        assert set(kernels) == {"large float32", "large float64", "small float32", "small float64"}
        for name, r in kernels.items():
            # the register tile stays in registers: any .local is a spill or an
            # addressable local array (an index the compiler could not resolve)
            assert r["ld_local"] == r["st_local"] == r["local_decl"] == 0, (cc, name, r)
            assert r["fma"] >= (64 if name.startswith("large") else 16), (cc, name, r)
        assert kernels["large float32"]["barriers"] == 1, kernels   # one per slab, double buffered


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    json.dump(compile_variants(tuple(json.loads(sys.argv[1]))), sys.stdout)
    print()
