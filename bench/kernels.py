"""Kernel benchmarks: matmul GFLOP/s and elementwise bandwidth.

    python bench/kernels.py [--sizes 256,512,1024,2048,4096] [--json PATH]
                            [--intra-op-threads N]

CPU: numpy (BLAS) float32 matmul for each n. GPU (only where a real CUDA
device exists): our two matmul kernels (the 128x128 register-blocked one and
the 64x64 one, kernels/cuda/matmul.py) beside cuBLAS FP32 of the same run
(through nvmath-python, else torch with TF32 off, else CuPy: whichever is
importable; none is a dependency), and our elementwise Add against a
device-to-device copy of the same bytes, which is the bandwidth ceiling an
elementwise kernel can reach. The targets
are in kernels/README.md. CPU convolution (kernels/cpu/conv.py) on the
CIFAR-10 tutorial's layers at batch 128: forward, input and filter gradient,
each in GFLOP/s beside numpy matmul's for the same multiply-adds (the
im2col-shaped product, one call; target >= 60%), and torch's CPU convolution
where torch imports (reference only). GPU convolution (kernels/cuda/conv.py,
implicit GEMMs) on the same layers beside cuDNN's through torch (target >= 30%;
rows of n/a without a GPU). Without a GPU it says so and runs the CPU part only;
each measurement stops after ``--seconds`` (default 1 s) of repeats, so the
whole run stays bounded. Prints a table; never asserts anything.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

logger = logging.getLogger("bench.kernels")


def _best_seconds(fn: Callable[[], Any], budget_s: float, sync: Callable[[], None]) -> float:
    """Best wall time of ``fn`` over repeats within ``budget_s`` (after one warm-up)."""
    fn()
    sync()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < 3 or (spent < budget_s and reps < 50):
        t0 = time.perf_counter()
        fn()
        sync()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
        if spent > budget_s and reps >= 1:
            break
    return best


def cpu_matmul(sizes: list[int], budget_s: float) -> list[dict]:
    rows = []
    for n in sizes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), np.float32)
        t = _best_seconds(lambda: np.matmul(a, b, out=c), budget_s, lambda: None)
        rows.append({"device": "CPU", "kernel": "numpy matmul", "n": n, "seconds": t,
                     "gflops": 2 * n ** 3 / t / 1e9})
    return rows


# the CIFAR-10 tutorial's convolutions (cifar10.py) at batch 128: input, filter
CONV_LAYERS = (("conv1", (128, 24, 24, 3), (5, 5, 3, 64)),
               ("conv2", (128, 12, 12, 64), (5, 5, 64, 64)))


def cpu_conv(budget_s: float) -> list[dict]:
    """Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (SAME, stride 1,
    float32) per CIFAR-10 layer, each beside numpy matmul of the im2col shape
    ``(n*oh*ow, kh*kw*c) @ (kh*kw*c, out_c)`` measured in the same run."""
    import kernels
    from kernels.cpu import conv_gemm
    conv_gemm.JIT.prepare(np.float32)   # the numba col2im, as a warm task has it
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    rows = []
    for layer, xs, ws in CONV_LAYERS:
        rng = np.random.default_rng(0)
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32)
        dy = rng.standard_normal(xs[:3] + ws[3:], dtype=np.float32)
        m, k, o = xs[0] * xs[1] * xs[2], ws[0] * ws[1] * ws[2], ws[3]
        flops = 2 * m * k * o
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, o), dtype=np.float32)
        ops = (("Conv2D", [x, w]),
               ("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy]),
               ("Conv2DBackpropFilter", [x, np.array(ws, np.int32), dy]))
        ref = _best_seconds(lambda: np.matmul(a, b), budget_s, lambda: None)
        for op, inputs in ops:
            fn = kernels.get_kernel(op, kernels.CPU)
            t = _best_seconds(lambda fn=fn, inputs=inputs: fn(inputs, attrs), budget_s,
                              lambda: None)
            rows.append({"device": "CPU", "kernel": op, "n": layer, "seconds": t,
                         "gflops": flops / t / 1e9, "input": list(xs), "filter": list(ws)})
        ref = min(ref, _best_seconds(lambda: np.matmul(a, b), budget_s, lambda: None))
        for row in rows[-3:]:
            row["matmul_gflops"] = flops / ref / 1e9
            row["fraction_of_matmul"] = row["gflops"] / row["matmul_gflops"]
        rows += _torch_conv(layer, x, w, dy, flops, budget_s)
    return rows


def _torch_conv(layer: str, x: np.ndarray, w: np.ndarray, dy: np.ndarray, flops: int,
                budget_s: float) -> list[dict]:
    """torch's CPU convolution and its two gradients on the same operands, when
    torch imports (a reference row; never a dependency)."""
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except ImportError:
        return []
    tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    tw = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1)))
    tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2)))
    pad = w.shape[0] // 2
    runs = (("torch conv2d", lambda: F.conv2d(tx, tw, padding=pad)),
            ("torch grad input", lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tdy,
                                                                   padding=pad)),
            ("torch grad filter", lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tdy,
                                                                     padding=pad)))
    rows = []
    with torch.no_grad():
        for name, fn in runs:
            t = _best_seconds(fn, budget_s, lambda: None)
            rows.append({"device": "CPU", "kernel": name, "n": layer, "seconds": t,
                         "gflops": flops / t / 1e9})
    return rows


# our numba kernels, forced (DISTRIB_GPU_MATMUL and the size rule do not pick here)
MATMUL_KERNELS = (("matmul 128x128", "large"), ("matmul 64x64", "small"))


def gpu_matmul(sizes: list[int], budget_s: float) -> list[dict]:
    """Per n: the 128x128 register-blocked kernel (what the 40% target measures)
    and the 64x64 one, float32, each beside cuBLAS FP32 of the same run (through
    nvmath-python on the same arrays, else torch with TF32 off, else CuPy)."""
    from numba import cuda

    from kernels.cuda.matmul import matmul_device
    rows = []
    for n in sizes:
        rng = np.random.default_rng(0)
        a_h = rng.standard_normal((n, n), dtype=np.float32)
        b_h = rng.standard_normal((n, n), dtype=np.float32)
        a, b = cuda.to_device(a_h), cuda.to_device(b_h)
        ref = _cublas_gflops(a, b, a_h, b_h, budget_s)
        for name, kernel in MATMUL_KERNELS:
            t = _best_seconds(lambda kernel=kernel: matmul_device(a, b, kernel=kernel), budget_s,
                              cuda.synchronize)
            row = {"device": "GPU", "kernel": name, "n": n, "seconds": t,
                   "gflops": 2 * n ** 3 / t / 1e9}
            if ref is not None:
                row["cublas_gflops"], row["cublas_via"] = ref
                row["fraction_of_cublas"] = row["gflops"] / row["cublas_gflops"]
            rows.append(row)
    return rows


def _cublas_gflops(a: Any, b: Any, a_h: np.ndarray, b_h: np.ndarray,
                   budget_s: float) -> tuple[float, str] | None:
    """cuBLAS SGEMM GFLOP/s at this n, and through what; None when no library here
    reaches it (the rows then carry no percentage)."""
    from numba import cuda

    from kernels.cuda.matmul import cublas_problem, matmul_device
    n = a_h.shape[0]
    if cublas_problem() is None:
        try:
            t = _best_seconds(lambda: matmul_device(a, b, kernel="cublas"), budget_s,
                              cuda.synchronize)
            return 2 * n ** 3 / t / 1e9, "nvmath"
        except ValueError as e:   # CublasUnavailableError: nvmath imports, cuBLAS did not start
            logger.info("%s", e)
    try:
        import torch
        if torch.cuda.is_available():
            tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = False   # FP32, as our kernels
            try:
                ta, tb = torch.from_numpy(a_h).cuda(), torch.from_numpy(b_h).cuda()
                t = _best_seconds(lambda: ta @ tb, budget_s, torch.cuda.synchronize)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            return 2 * n ** 3 / t / 1e9, "torch"
    except ImportError:
        pass
    cupy = _cupy()
    if cupy is not None:
        ca, cb = cupy.asarray(a_h), cupy.asarray(b_h)
        t = _best_seconds(lambda: ca @ cb, budget_s, cupy.cuda.Device().synchronize)
        return 2 * n ** 3 / t / 1e9, "cupy"
    logger.info("neither nvmath-python, torch nor CuPy reaches cuBLAS here: no %% of cuBLAS")
    return None


def gpu_elementwise(n: int, budget_s: float) -> list[dict]:
    from numba import cuda

    import kernels
    add = kernels.get_kernel("Add", kernels.GPU)
    x = cuda.to_device(np.ones(n, np.float32))
    y = cuda.to_device(np.ones(n, np.float32))
    dst = cuda.device_array(n, np.float32)
    t_add = _best_seconds(lambda: add([x, y], {}), budget_s, cuda.synchronize)
    t_copy = _best_seconds(lambda: dst.copy_to_device(x), budget_s, cuda.synchronize)
    add_gbs = 3 * 4 * n / t_add / 1e9     # two reads, one write
    copy_gbs = 2 * 4 * n / t_copy / 1e9   # one read, one write
    return [{"device": "GPU", "kernel": "elementwise Add", "n": n, "seconds": t_add,
             "gbytes_per_s": add_gbs, "copy_gbytes_per_s": copy_gbs,
             "fraction_of_copy": add_gbs / copy_gbs}]


def _cupy() -> Any:
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def gpu_conv(budget_s: float, reason: str | None = None) -> list[dict]:
    """Our GPU Conv2D and its two gradients (kernels/cuda/conv.py: implicit GEMMs,
    float32, NHWC) on the CIFAR-10 layers (``CONV_LAYERS``), each beside cuDNN's
    (torch, NHWC tensors, TF32 off) of the same run when torch sees the GPU
    (reference only, never a dependency). ``reason``: no GPU here, every row
    says n/a and why."""
    ops = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    if reason is not None:
        return [{"device": "GPU", "kernel": op, "n": layer, "seconds": None, "gflops": None,
                 "na": reason} for layer, _, _ in CONV_LAYERS for op in ops]
    from numba import cuda

    import kernels
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    rows = []
    for layer, xs, ws in CONV_LAYERS:
        rng = np.random.default_rng(0)
        x_h = rng.standard_normal(xs, dtype=np.float32)
        w_h = rng.standard_normal(ws, dtype=np.float32)
        dy_h = rng.standard_normal(xs[:3] + ws[3:], dtype=np.float32)
        x, w, dy = cuda.to_device(x_h), cuda.to_device(w_h), cuda.to_device(dy_h)
        flops = 2 * xs[0] * xs[1] * xs[2] * ws[0] * ws[1] * ws[2] * ws[3]
        inputs = {"Conv2D": [x, w],
                  "Conv2DBackpropInput": [np.array(xs, np.int32), w, dy],
                  "Conv2DBackpropFilter": [x, np.array(ws, np.int32), dy]}
        ref = _cudnn_conv_seconds(x_h, w_h, dy_h, budget_s)
        for op in ops:
            fn = kernels.get_kernel(op, kernels.GPU)
            t = _best_seconds(lambda fn=fn, op=op: fn(inputs[op], attrs), budget_s,
                              cuda.synchronize)
            row = {"device": "GPU", "kernel": op, "n": layer, "seconds": t,
                   "gflops": flops / t / 1e9, "input": list(xs), "filter": list(ws)}
            if ref is not None:
                row["cudnn_gflops"] = flops / ref[op] / 1e9
                row["fraction_of_cudnn"] = row["gflops"] / row["cudnn_gflops"]
            rows.append(row)
    return rows


def _cudnn_conv_seconds(x: np.ndarray, w: np.ndarray, dy: np.ndarray,
                        budget_s: float) -> dict[str, float] | None:
    """cuDNN's best seconds for the forward and both gradients (SAME, stride 1),
    through torch on the GPU in channels-last layout, FP32; None without it."""
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except ImportError:
        logger.info("torch is not importable: the GPU conv rows carry no cuDNN reference")
        return None
    if not torch.cuda.is_available():
        return None
    last = torch.channels_last
    tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).cuda().to(memory_format=last)
    tw = torch.from_numpy(np.ascontiguousarray(w.transpose(3, 2, 0, 1))).cuda().to(memory_format=last)
    tdy = torch.from_numpy(np.ascontiguousarray(dy.transpose(0, 3, 1, 2))).cuda().to(memory_format=last)
    pad = w.shape[0] // 2
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False   # FP32, as our kernels
    try:
        with torch.no_grad():
            sync = torch.cuda.synchronize
            return {
                "Conv2D": _best_seconds(lambda: F.conv2d(tx, tw, padding=pad), budget_s, sync),
                "Conv2DBackpropInput": _best_seconds(
                    lambda: torch.nn.grad.conv2d_input(tx.shape, tw, tdy, padding=pad), budget_s, sync),
                "Conv2DBackpropFilter": _best_seconds(
                    lambda: torch.nn.grad.conv2d_weight(tx, tw.shape, tdy, padding=pad), budget_s, sync)}
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def _print_gpu_conv(rows: list[dict]) -> None:
    """The GPU convolution rows: GFLOP/s and the fraction of cuDNN's (target >= 30%)."""
    print(f"{'device':6} {'kernel':20} {'layer':>10} {'ms':>9} {'result':>14} {'reference':>22}")
    for r in rows:
        if r["seconds"] is None:
            print(f"{r['device']:6} {r['kernel']:20} {r['n']:>10} {'n/a':>9} {'n/a':>14} "
                  f"{'n/a':>22}")
            continue
        ref = (f"cuDNN {r['cudnn_gflops']:.0f} ({r['fraction_of_cudnn']:.0%})"
               if "cudnn_gflops" in r else "")
        result = f"{r['gflops']:.1f} GFLOP/s"
        print(f"{r['device']:6} {r['kernel']:20} {r['n']:>10} {r['seconds'] * 1e3:>9.2f} "
              f"{result:>14} {ref:>22}")
    if rows and rows[0]["seconds"] is None:
        print(f"GPU conv rows (ours and cuDNN's through torch) need a real CUDA GPU: "
              f"{rows[0]['na']}")


def _print_table(rows: list[dict]) -> None:
    print(f"{'device':6} {'kernel':20} {'n':>10} {'ms':>9} {'result':>14} {'reference':>22}")
    for r in rows:
        if "gflops" in r:
            result = f"{r['gflops']:.1f} GFLOP/s"
            ref = (f"cuBLAS {r['cublas_gflops']:.0f} ({r['fraction_of_cublas']:.0%})"
                   if "cublas_gflops" in r else "")
            if "matmul_gflops" in r:
                ref = f"matmul {r['matmul_gflops']:.1f} ({r['fraction_of_matmul']:.0%})"
        else:
            result = f"{r['gbytes_per_s']:.0f} GB/s"
            ref = f"copy {r['copy_gbytes_per_s']:.0f} GB/s ({r['fraction_of_copy']:.0%})"
        print(f"{r['device']:6} {r['kernel']:20} {r['n']:>10} {r['seconds'] * 1e3:>9.2f} "
              f"{result:>14} {ref:>22}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="256,512,1024,2048,4096")
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per measurement")
    parser.add_argument("--elementwise-n", type=int, default=1 << 26)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--intra-op-threads", type=int, default=1,
                        help="threads one CPU convolution may use (kernels.cpu.jit_loader)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sizes = [int(s) for s in args.sizes.split(",") if s]

    from kernels.cuda.devices import backend, gpu_devices
    kind = backend()
    rows = cpu_matmul(sizes, args.seconds)
    from kernels.cpu.jit_loader import set_intra_op_threads
    set_intra_op_threads(args.intra_op_threads)
    rows += cpu_conv(args.seconds)
    if kind == "cuda":
        logger.info("GPU: %s", gpu_devices()[0]["description"])
        rows += gpu_matmul(sizes, args.seconds)
        rows += gpu_elementwise(args.elementwise_n, args.seconds)
        conv_rows = gpu_conv(args.seconds)
    else:
        reason = "the CUDA simulator is not a GPU" if kind == "cudasim" else "no CUDA GPU visible"
        logger.info("%s: GPU benchmarks skipped, CPU only", reason)
        conv_rows = gpu_conv(args.seconds, reason)
    _print_table(rows)
    _print_gpu_conv(conv_rows)
    rows += conv_rows
    if kind != "cuda":
        print(f"GPU rows ({', '.join(name for name, _ in MATMUL_KERNELS)} GFLOP/s and % of cuBLAS "
              f"FP32, elementwise Add against a device copy) need a real CUDA GPU: {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": kind, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
