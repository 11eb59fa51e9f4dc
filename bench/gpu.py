"""GPU step benchmark: one SGD step of an MLP, steps per second, on distrib's
GPU and CPU paths (torch's beside them when importable: the reference row,
never a dependency), the kernel figures of bench/kernels.py and a traced
step's device counters, in one run.

    python bench/gpu.py [--models bench,wide] [--seconds 3] [--json PATH]

Models (``MODELS``): ``bench``, bench/train.py's 784-512-512-10 MLP at batch
256; ``wide``, 4096-4096-4096-10 at batch 1024. Both: relu layers, a last
linear layer, sparse softmax cross-entropy, mean loss, plain SGD(0.01), one
fixed host batch fed every step (``feed_dict``), an in-process server and
session. Rows (``who``/``device``): ``distrib /gpu:0``, ``distrib /cpu:0``,
``torch cuda``, ``torch cpu``; each after 3 untimed steps (compilation on a
GPU), then steps for ``--seconds``, at least 2. The GPU rows also carry the
counters of one traced warm step (``RunOptions(trace_level=FULL_TRACE)``:
kernel launches, driver allocations, copies in and out, synchronizations)
and ``vs_torch``, the ratio to torch cuda of the same run (issue targets:
>= 0.5 for ``bench``, >= 0.6 for ``wide``).

Kernel figures (a real GPU only): the tiled matmul at n = 1024..4096 against
cuBLAS (through CuPy when installed) and elementwise Add against a device
copy (bench/kernels.py). Without a real GPU (no device, or the CUDA
simulator, which is not one) the GPU rows are skipped with the reason and
the CPU rows still run: exit code 0. Prints a table; asserts nothing.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

logger = logging.getLogger("bench.gpu")

# name -> (inputs, hidden, classes, batch)
MODELS = {"bench": (784, 512, 10, 256), "wide": (4096, 4096, 10, 1024)}


def _batch(d_in: int, n_out: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal((bs, d_in)).astype(np.float32),
            rng.integers(0, n_out, bs).astype(np.int64))


def _weights(d_in: int, hidden: int, n_out: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((d_in, hidden)) * 0.02).astype(np.float32),
            np.zeros(hidden, np.float32),
            (rng.standard_normal((hidden, hidden)) * 0.02).astype(np.float32),
            np.zeros(hidden, np.float32),
            (rng.standard_normal((hidden, n_out)) * 0.02).astype(np.float32)]


async def distrib_steps(device: str, model: tuple[int, int, int, int], seconds: float,
                        counters: bool) -> dict[str, Any]:
    import distrib as dt
    d_in, hidden, n_out, bs = model
    x_np, y_np = _batch(d_in, n_out, bs)
    g = dt.Graph()
    with g.as_default(), dt.device(device):
        x = dt.placeholder(dt.float32, [None, d_in])
        y = dt.placeholder(dt.int64, [None])
        w1, b1, w2, b2, w3 = (dt.Variable(w) for w in _weights(d_in, hidden, n_out))
        h = dt.nn.relu(dt.matmul(x, w1) + b1)
        h = dt.nn.relu(dt.matmul(h, w2) + b2)
        loss = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=dt.matmul(h, w3)))
        train = dt.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = dt.global_variables_initializer()
    out: dict[str, Any] = {}
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        async with dt.Session(srv.target, graph=g) as sess:
            await sess.run(init)
            feed = {x: x_np, y: y_np}
            t0 = time.perf_counter()
            for _ in range(3):
                first = float((await sess.run([loss, train], feed_dict=feed))[0])
            out["warmup_s"] = time.perf_counter() - t0
            n, t0 = 0, time.perf_counter()
            while n < 2 or time.perf_counter() - t0 < seconds:
                await sess.run(train, feed_dict=feed)
                n += 1
            out["steps_per_s"] = n / (time.perf_counter() - t0)
            out["loss_after_warmup"] = first
            if counters and hasattr(dt, "RunMetadata"):
                md = dt.RunMetadata()
                await sess.run([loss, train], feed_dict=feed,
                               options=dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
                               run_metadata=md)
                found = [d for d in md.step_stats.dev_stats if d.counters]
                if found:
                    out["counters"] = found[0].counters
                    out["gpu_ops_run"] = sum(1 for s in found[0].node_stats if s.kind == "op")
    return out


def torch_steps(device: str, model: tuple[int, int, int, int], seconds: float) -> dict[str, Any]:
    import torch
    d_in, hidden, n_out, bs = model
    x_np, y_np = _batch(d_in, n_out, bs)
    net = torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, n_out, bias=False)).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    lossf = torch.nn.CrossEntropyLoss()

    def step() -> None:
        xb = torch.from_numpy(x_np).to(device)
        yb = torch.from_numpy(y_np).to(device)
        opt.zero_grad(set_to_none=True)
        lossf(net(xb), yb).backward()
        opt.step()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        step()
    sync()
    n, t0 = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - t0 < seconds:
        step()
        n += 1
    sync()
    return {"steps_per_s": n / (time.perf_counter() - t0)}


def _torch_devices() -> list[str]:
    try:
        import torch
    except ImportError:
        logger.info("torch not importable: no reference rows")
        return []
    return (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]


def step_rows(models: list[str], seconds: float, gpu: bool) -> list[dict[str, Any]]:
    rows = []
    torch_devs = _torch_devices()
    for name in models:
        model = MODELS[name]
        runs: list[tuple[str, str]] = ([("distrib", "/gpu:0")] if gpu else []) + [
            ("distrib", "/cpu:0")] + [("torch", d) for d in torch_devs]
        for who, dev in runs:
            try:
                if who == "distrib":
                    r = asyncio.run(distrib_steps(dev, model, seconds, counters=dev != "/cpu:0"))
                else:
                    r = torch_steps(dev, model, seconds)
            except Exception as e:   # a row that fails is reported, the run goes on
                r = {"error": f"{type(e).__name__}: {e}"[:300]}
            r.update(model=name, who=who, device=dev, batch=model[3])
            rows.append(r)
            logger.info("%s", json.dumps(r))
        ref = next((r for r in rows if r["model"] == name and r["device"] == "cuda"
                    and "steps_per_s" in r), None)
        for r in rows:
            if r["model"] == name and r["device"] == "/gpu:0" and ref and "steps_per_s" in r:
                r["vs_torch"] = r["steps_per_s"] / ref["steps_per_s"]
    return rows


def kernel_rows(seconds: float) -> list[dict[str, Any]]:
    from bench.kernels import gpu_elementwise, gpu_matmul
    return gpu_matmul([1024, 2048, 4096], seconds) + gpu_elementwise(1 << 26, seconds)


def _print(rows: list[dict], kernel: list[dict], gpu_note: str | None) -> None:
    print(f"{'model':6} {'who':8} {'device':7} {'steps/s':>9} {'vs torch':>9}  counters")
    for r in rows:
        rate = f"{r['steps_per_s']:.1f}" if "steps_per_s" in r else "error"
        vs = f"{r['vs_torch']:.2f}x" if "vs_torch" in r else ""
        c = r.get("counters")
        extra = (f"launches {c['launches']}, allocs {c['allocations']}, h2d {c['h2d_copies']}, "
                 f"d2h {c['d2h_copies']}, syncs {c['syncs']}" if c else r.get("error", ""))
        print(f"{r['model']:6} {r['who']:8} {r['device']:7} {rate:>9} {vs:>9}  {extra}")
    for k in kernel:
        if "gflops" in k:
            ref = f" ({k['fraction_of_cublas']:.0%} of cuBLAS)" if "fraction_of_cublas" in k else ""
            print(f"kernel {k['kernel']} n={k['n']}: {k['gflops']:.0f} GFLOP/s{ref}")
        else:
            print(f"kernel {k['kernel']}: {k['gbytes_per_s']:.0f} GB/s "
                  f"({k['fraction_of_copy']:.0%} of a device copy)")
    if gpu_note:
        print(f"GPU rows: {gpu_note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bench,wide", help="of: " + ",".join(MODELS))
    parser.add_argument("--seconds", type=float, default=3.0, help="timed steps per row")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {list(MODELS)}")
    from kernels.cuda.devices import backend
    kind = backend()
    gpu = kind == "cuda"
    note = None if gpu else ("need a real CUDA device: "
                             + ("the CUDA simulator is not one" if kind == "cudasim"
                                else "none visible") + "; CPU rows only")
    rows = step_rows(models, args.seconds, gpu)
    kernel = kernel_rows(min(args.seconds, 1.0)) if gpu else []
    _print(rows, kernel, note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": kind, "steps": rows, "kernels": kernel, "gpu_note": note},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
