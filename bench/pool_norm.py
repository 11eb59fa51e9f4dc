"""Pooling, LRN and batch-norm CPU kernels on the CIFAR-10 tutorial's shapes
(issue 38): each kernel's numba path beside its numpy path (what runs until
numba has compiled), float32, batch 128, the calling thread only.

    python bench/pool_norm.py [--seconds 1.0] [--threads 1] [--json PATH]

Shapes: cifar10.py's pool1 (max pool 3x3, stride 2, SAME, on 24x24x64) and
norm1 (LRN, depth_radius 4, bias 1, alpha 0.001/9, beta 0.75, on 12x12x64);
batch norm (training) on the pool1 input, a Keras CNN's layer. GB/s counts
the bytes each kernel reads and writes once, against the numba time. Best of
repeats within ``--seconds`` each; prints a table and never asserts.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _best_seconds(fn: Callable[[], Any], budget_s: float) -> float:
    """Best wall time of ``fn`` over repeats within ``budget_s`` (after one warm-up)."""
    fn()
    best, spent, reps = float("inf"), 0.0, 0
    while reps < 3 or (spent < budget_s and reps < 50):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return best


def _pool_norm_cases() -> list[tuple[str, str, Callable[[], Any], int]]:
    """(kernel, shape, run, bytes read and written) at batch 128: cifar10.py's
    pool1 (3x3/2 SAME on 24x24x64) and norm1 (LRN radius 4 on 12x12x64), and
    batch norm on the pool1 input (a Keras CNN's layer)."""
    from kernels import CPU, get_kernel
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((128, 24, 24, 64), dtype=np.float32)
    x2 = rng.standard_normal((128, 12, 12, 64), dtype=np.float32)
    pool = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    lrn = {"depth_radius": 4, "bias": 1.0, "alpha": 0.001 / 9.0, "beta": 0.75}
    ones, empty = np.ones(64, np.float32), np.empty(0, np.float32)

    def k(op: str) -> Callable[..., list]:
        return lambda *ins, **attrs: get_kernel(op, CPU)(list(ins), attrs)
    y1 = k("MaxPool")(x1, **pool)[0]
    n2 = k("LRN")(x2, **lrn)[0]
    bn = k("FusedBatchNormV3")(x1, ones, ones, empty, empty)
    b1, b2 = x1.nbytes, x2.nbytes
    shape1, shape2 = "128x24x24x64 3x3/2 SAME", "128x12x12x64 r4"
    return [
        ("MaxPool", shape1, lambda: k("MaxPool")(x1, **pool), b1 + y1.nbytes),
        ("MaxPoolGrad", shape1, lambda: k("MaxPoolGrad")(x1, y1, y1, **pool),
         2 * b1 + 2 * y1.nbytes),
        ("AvgPool", shape1, lambda: k("AvgPool")(x1, **pool), b1 + y1.nbytes),
        ("AvgPoolGrad", shape1,
         lambda: k("AvgPoolGrad")(np.array(x1.shape, np.int32), y1, **pool), b1 + y1.nbytes),
        ("LRN", shape2, lambda: k("LRN")(x2, **lrn), 2 * b2),
        ("LRNGrad", shape2, lambda: k("LRNGrad")(x2, x2, n2, **lrn), 4 * b2),
        ("FusedBatchNormV3", "128x24x24x64 train",
         lambda: k("FusedBatchNormV3")(x1, ones, ones, empty, empty), 3 * b1),
        ("FusedBatchNormGradV3", "128x24x24x64 train",
         lambda: k("FusedBatchNormGradV3")(x1, x1, ones, bn[3], bn[4], bn[5]), 5 * b1),
    ]


def cpu_pool_norm(budget_s: float) -> list[dict]:
    """Each case on the numpy path (what runs while numba compiles) and the
    numba path, float32."""
    from kernels.cpu import normalization, pooling
    jits = (pooling.JIT, normalization.JIT)
    cases = _pool_norm_cases()
    times: dict[str, list[float]] = {}
    for path in ("numpy", "numba"):
        for jit in jits:
            if path == "numpy":
                jit.ready = lambda dtype: None   # an instance attribute: the numpy path
            else:
                del jit.ready
                jit.prepare(np.float32)
        for kernel, _, fn, _ in cases:
            times.setdefault(kernel, []).append(_best_seconds(fn, budget_s))
    return [{"device": "CPU", "kernel": kernel, "shape": shape, "numpy_seconds": times[kernel][0],
             "numba_seconds": times[kernel][1], "gbytes_per_s": nbytes / times[kernel][1] / 1e9}
            for kernel, shape, _, nbytes in cases]


def _print_pool_norm(rows: list[dict]) -> None:
    print(f"{'kernel':22} {'shape':26} {'numpy ms':>9} {'numba ms':>9} {'numba GB/s':>10}")
    for r in rows:
        print(f"{r['kernel']:22} {r['shape']:26} {r['numpy_seconds'] * 1e3:>9.2f} "
              f"{r['numba_seconds'] * 1e3:>9.2f} {r['gbytes_per_s']:>10.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per measurement")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads the numba kernels split a batch over")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    from kernels.cpu.jit_loader import set_intra_op_threads
    set_intra_op_threads(args.threads)
    rows = cpu_pool_norm(args.seconds)
    _print_pool_norm(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
