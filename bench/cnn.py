"""The CIFAR-10 tutorial's training step (issue 38, item 7): examples/s of
cifar10.py's model at batch 128 on each path distrib has, in one run.

The model is cifar10.py's (conv1 5x5x3x64, max pool 3x3/2, LRN, conv2
5x5x64x64, LRN, max pool, local3 2304x384, local4 384x192, softmax_linear
192x10, weight decay 0.004 on local3/local4, sparse softmax cross-entropy),
written here with its variables as plain arguments so every path builds the
same graph; SGD at 0.1. Input: one fixed random batch of 24x24x3 images
(the tutorial's crop) and labels, fed each step (the input pipeline is not
measured here).

Rows (examples/s summed over workers; ``vs`` the row named, same round):
- ``local-1thread``: one process, a session with no target (its own
  server), one thread (``OMP/OPENBLAS/MKL_NUM_THREADS=1``): one worker's
  figure at one thread, what the two-worker rows are set against;
- ``local-1proc``: the same with the machine's default threads (every core:
  intra-op threads and BLAS);
- ``towers-2cpu``: cifar10_multi_gpu_train.py's shape in one process: a
  session with ``device_count={"CPU": 2}``, a tower of 128 on each of
  /cpu:0 and /cpu:1, gradients averaged on /cpu:0, default threads;
- ``mwms-w2``: two processes, one thread each, ``MultiWorkerMirroredStrategy``
  with a ``dt.function`` custom loop (``GradientTape``, ``apply_gradients``
  all-reduces the gradients), 128 per worker; synchronous: a window is a
  number of steps both run;
- ``ps1-w2``: a ps (``python -m distrib.server``) and two worker processes,
  one thread each, between-graph with ``replica_device_setter``,
  asynchronous SGD, 128 per worker;
- ``torch``: the same model in torch (when importable; reference only),
  default threads.

Configurations take turns in rounds (a window of ``--seconds`` each) and a
row reports the median over rounds, so load from other processes hits all of
them alike. TF 2.21 on the issue's 2-core VM: 1920 examples/s at its default
threads, 1057 at one; torch 2.13: 733 (issue 38's figures, printed for
reference, not measured here). Never asserts; ``--json PATH`` writes the rows.

    python bench/cnn.py [--rounds 3] [--seconds 3] [--only local-1proc,towers-2cpu] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH = 128
LR = 0.1
WARMUP_STEPS = 3
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "DISTRIB_INTER_OP_THREADS": "1"}
# (name, what it is set against, threads of each process)
ROWS = [("local-1thread", None), ("local-1proc", None), ("towers-2cpu", "local-1proc"),
        ("mwms-w2", "local-1thread"), ("ps1-w2", "local-1thread"), ("torch", "local-1proc")]
REFERENCE = "TF 2.21 (issue 38, this VM): 1920 examples/s default threads, 1057 one thread; torch 2.13: 733"


# -- the model ------------------------------------------------------------------------

SHAPES = {"conv1/weights": ([5, 5, 3, 64], 5e-2), "conv1/biases": ([64], 0.0),
          "conv2/weights": ([5, 5, 64, 64], 5e-2), "conv2/biases": ([64], 0.1),
          "local3/weights": ([6 * 6 * 64, 384], 0.04), "local3/biases": ([384], 0.1),
          "local4/weights": ([384, 192], 0.04), "local4/biases": ([192], 0.1),
          "softmax_linear/weights": ([192, 10], 1 / 192.0), "softmax_linear/biases": ([10], 0.0)}
WEIGHT_DECAY = {"local3/weights": 0.004, "local4/weights": 0.004}


def initial_values(seed: int = 1) -> dict[str, np.ndarray]:
    """cifar10.py's initial values: truncated normals (within 2 stddev) and constants."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, scale) in SHAPES.items():
        if name.endswith("weights"):
            draw = rng.standard_normal(shape)
            while (bad := np.abs(draw) > 2).any():
                draw[bad] = rng.standard_normal(int(bad.sum()))
            out[name] = (draw * scale).astype(np.float32)
        else:
            out[name] = np.full(shape, scale, np.float32)
    return out


def make_params(dt: Any) -> dict[str, Any]:
    return {name: dt.Variable(value, name=name) for name, value in initial_values().items()}


def model_loss(dt: Any, p: dict[str, Any], images: Any, labels: Any, batch: int) -> Any:
    """cifar10.inference + cifar10.loss on ``p``'s variables (per-example mean)."""
    def conv(x: Any, layer: str) -> Any:
        y = dt.nn.conv2d(x, p[layer + "/weights"], [1, 1, 1, 1], padding="SAME")
        return dt.nn.relu(dt.nn.bias_add(y, p[layer + "/biases"]))

    def lrn(x: Any) -> Any:
        return dt.nn.lrn(x, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)

    def pool(x: Any) -> Any:
        return dt.nn.max_pool(x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")

    norm1 = lrn(pool(conv(images, "conv1")))
    pool2 = pool(lrn(conv(norm1, "conv2")))
    h = dt.reshape(pool2, [batch, -1])
    for layer in ("local3", "local4"):
        h = dt.nn.relu(dt.matmul(h, p[layer + "/weights"]) + p[layer + "/biases"])
    logits = dt.matmul(h, p["softmax_linear/weights"]) + p["softmax_linear/biases"]
    xent = dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    return dt.add_n([xent] + [dt.nn.l2_loss(p[n]) * wd for n, wd in WEIGHT_DECAY.items()])


def synthetic_batch(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + seed)
    return (rng.standard_normal((BATCH, 24, 24, 3), dtype=np.float32),
            rng.integers(0, 10, BATCH).astype(np.int64))


def placeholders(dt: Any) -> tuple[Any, Any]:
    return (dt.placeholder(dt.float32, [BATCH, 24, 24, 3], name="images"),
            dt.placeholder(dt.int64, [BATCH], name="labels"))


# -- the children: each trains and answers "go STEPS" with one JSON line ------------------

async def serve_steps(step: Any, examples_per_step: int) -> None:
    """Say ``ready MS`` (ms a step), then run ``go STEPS`` windows until ``quit``."""
    import asyncio

    async def timed(steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            await step()
        return time.perf_counter() - t0

    await timed(WARMUP_STEPS)
    print(f"ready {await timed(3) / 3 * 1e3:.3f}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        words = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not words or words[0] == "quit":
            return
        steps = int(words[1])
        await timed(WARMUP_STEPS)
        seconds = await timed(steps)
        print(json.dumps({"steps": steps, "seconds": seconds,
                          "examples": steps * examples_per_step}), flush=True)


async def child_local(towers: int) -> None:
    import distrib as dt
    x, y = placeholders(dt)
    opt = dt.train.GradientDescentOptimizer(LR)
    with dt.device("/cpu:0"):
        params = make_params(dt)
    if towers == 1:
        train = opt.minimize(model_loss(dt, params, x, y, BATCH))
        feeds = [(x, y)]
    else:
        feeds, tower_grads = [], []
        for i in range(towers):
            with dt.device(f"/cpu:{i}"), dt.name_scope(f"tower_{i}"):
                xi, yi = placeholders(dt)
                feeds.append((xi, yi))
                tower_grads.append(opt.compute_gradients(
                    model_loss(dt, params, xi, yi, BATCH), list(params.values())))
        with dt.device("/cpu:0"):
            averaged = [(dt.add_n([g[k][0] for g in tower_grads]) / float(towers), v)
                        for k, (_, v) in enumerate(tower_grads[0])]
            train = opt.apply_gradients(averaged)
    config = dt.ConfigProto(device_count={"CPU": towers}) if towers > 1 else None
    feed = {t: v for i, (xi, yi) in enumerate(feeds) for t, v in zip((xi, yi), synthetic_batch(i))}
    async with dt.Session(config=config) as sess:
        await sess.run(dt.global_variables_initializer())
        await serve_steps(lambda: sess.run(train, feed), towers * BATCH)


async def child_ps_worker(spec: dict, task: int) -> None:
    import asyncio

    import distrib as dt
    async with dt.serve(spec, job_name="worker", task_index=task) as server:
        with dt.device(dt.train.replica_device_setter(
                cluster=dt.ClusterSpec(spec), worker_device=f"/job:worker/task:{task}")):
            x, y = placeholders(dt)
            params = make_params(dt)
            train = dt.train.GradientDescentOptimizer(LR).minimize(
                model_loss(dt, params, x, y, BATCH))
        feed = dict(zip((x, y), synthetic_batch(task)))
        async with dt.Session(server.target) as sess:
            if task == 0:
                await sess.run(dt.global_variables_initializer())
            deadline = time.monotonic() + 60
            while True:   # the other worker waits for the chief's initialization
                try:
                    await sess.run(train, feed)
                    break
                except dt.errors.FailedPreconditionError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            await serve_steps(lambda: sess.run(train, feed), BATCH)


async def child_mwms(spec: dict, task: int) -> None:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "worker", "index": task}})
    import distrib as dt
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        params = make_params(dt)
        opt = dt.train.GradientDescentOptimizer(LR)
    variables = list(params.values())

    def replica_step(images: Any, labels: Any) -> Any:
        with dt.GradientTape() as tape:
            loss = model_loss(dt, params, images, labels, BATCH) / float(len(spec["worker"]))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    @dt.function
    def train_step(images: Any, labels: Any) -> Any:
        return strategy.run(replica_step, args=(images, labels))

    bx, by = synthetic_batch(task)
    await serve_steps(lambda: train_step(bx, by), BATCH)


async def child_torch() -> None:
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's spelling
    p = {n: torch.tensor(v, requires_grad=True) for n, v in initial_values().items()}
    bx, by = synthetic_batch(0)
    x = torch.tensor(bx).permute(0, 3, 1, 2).contiguous()
    y = torch.tensor(by)

    def conv(h: Any, layer: str) -> Any:
        w = p[layer + "/weights"].permute(3, 2, 0, 1)
        return F.relu(F.conv2d(h, w, p[layer + "/biases"], padding=2))

    def lrn(h: Any) -> Any:   # TF's depth_radius 4 is torch's size 9, alpha scaled by size
        return F.local_response_norm(h, 9, alpha=0.001 / 9.0 * 9, beta=0.75, k=1.0)

    def pool(h: Any) -> Any:
        return F.max_pool2d(F.pad(h, (0, 1, 0, 1), value=float("-inf")), 3, 2)

    def step() -> Any:
        h = pool(lrn(conv(lrn(pool(conv(x, "conv1"))), "conv2")))
        h = h.permute(0, 2, 3, 1).reshape(BATCH, -1)
        for layer in ("local3", "local4"):
            h = F.relu(h @ p[layer + "/weights"] + p[layer + "/biases"])
        loss = F.cross_entropy(h @ p["softmax_linear/weights"] + p["softmax_linear/biases"], y)
        loss = loss + sum(0.5 * (p[n] ** 2).sum() * wd for n, wd in WEIGHT_DECAY.items())
        grads = torch.autograd.grad(loss, list(p.values()))
        with torch.no_grad():
            for v, g in zip(p.values(), grads):
                v -= LR * g

    async def astep() -> None:
        step()

    await serve_steps(astep, BATCH)


# -- the parent ---------------------------------------------------------------------------

class Child:
    """A process answering on stdout; always stopped."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 trainer: bool = True) -> None:
        full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        full.update(env or {})
        self.proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=full, cwd=ROOT)
        self.ms_per_step = 0.0
        self.trainer = trainer   # a ps serves and says "serving"; a trainer says "ready MS"

    def readline(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise SystemExit(f"no answer from pid {self.proc.pid} within {timeout:g}s")
        return self.proc.stdout.readline()

    def expect_ready(self, timeout: float, ready: str = "ready") -> None:
        line = self.readline(timeout)
        if not line.startswith(ready):
            raise SystemExit(f"pid {self.proc.pid} did not start: {line!r}")
        if ready == "ready":
            self.ms_per_step = float(line.split()[1])

    def command(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("quit")
            except OSError:
                pass
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def start(name: str) -> list[Child]:
    """The processes of row ``name``, ready (the trainers last, a ps first)."""
    me = os.path.abspath(__file__)
    if name == "local-1thread":
        kids = [Child([me, "--child", "local", "--towers", "1"], ONE_THREAD)]
    elif name == "local-1proc":
        kids = [Child([me, "--child", "local", "--towers", "1"])]
    elif name == "towers-2cpu":
        kids = [Child([me, "--child", "local", "--towers", "2"])]
    elif name == "torch":
        kids = [Child([me, "--child", "torch"])]
    else:
        from distrib.launch import free_ports
        ports = [f"localhost:{p}" for p in free_ports(3)]
        spec = {"worker": ports[1:]} if name == "mwms-w2" else {"ps": ports[:1], "worker": ports[1:]}
        kids = []
        if name == "ps1-w2":
            kids.append(Child(["-m", "distrib.server", "--ps_hosts", ports[0], "--worker_hosts",
                               ",".join(ports[1:]), "--job_name", "ps", "--task_index", "0",
                               "--log_level", "WARNING"], ONE_THREAD, trainer=False))
            kids[0].expect_ready(60, "serving")
        kind = "mwms" if name == "mwms-w2" else "ps"
        kids += [Child([me, "--child", kind, "--task", str(t), "--spec", json.dumps(spec)],
                       ONE_THREAD) for t in (0, 1)]
    try:
        for kid in kids:
            if kid.trainer:
                kid.expect_ready(300)
    except BaseException:
        for kid in kids:
            kid.stop()
        raise
    return kids


def window(kids: list[Child], seconds: float) -> dict[str, Any]:
    trainers = [k for k in kids if k.trainer]
    steps = max(3, round(seconds * 1e3 / max(k.ms_per_step for k in trainers)))
    for k in trainers:
        k.command(f"go {steps}")
    results = [json.loads(k.readline(10 * seconds + 120)) for k in trainers]
    for k, r in zip(trainers, results):
        k.ms_per_step = r["seconds"] / r["steps"] * 1e3
    return {"examples_per_s": sum(r["examples"] / r["seconds"] for r in results),
            "ms_per_step": statistics.mean(r["seconds"] / r["steps"] for r in results) * 1e3}


def torch_importable() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def measure(names: list[str], rounds: int, seconds: float) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {n: [] for n in names}
    running = {n: start(n) for n in names}
    try:
        for _ in range(rounds):
            for name in names:
                samples[name].append(window(running[name], seconds))
    finally:
        for kids in running.values():
            for kid in kids:
                kid.stop()
    return samples


def summarize(samples: dict[str, list[dict]]) -> list[dict[str, Any]]:
    rows = []
    for name, against in ROWS:
        if name not in samples:
            continue
        row = {"name": name, "batch_per_worker": BATCH,
               "examples_per_s": statistics.median(s["examples_per_s"] for s in samples[name]),
               "ms_per_step": statistics.median(s["ms_per_step"] for s in samples[name]),
               "rounds": [round(s["examples_per_s"], 1) for s in samples[name]]}
        if against in samples:   # per round, then the median: load hits both alike
            row["versus"] = against
            row["ratio_versus"] = statistics.median(
                a["examples_per_s"] / b["examples_per_s"]
                for a, b in zip(samples[name], samples[against]))
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'config':<14} {'examples/s':>10} {'ms/step':>8}  vs row")
    for r in rows:
        vs = f"{r['ratio_versus']:.2f}x {r['versus']}" if "versus" in r else ""
        print(f"{r['name']:<14} {r['examples_per_s']:>10.0f} {r['ms_per_step']:>8.1f}  {vs}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all rows (default 3)")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per row and round")
    ap.add_argument("--only", help="comma-separated rows (default all; torch when importable)")
    ap.add_argument("--child", choices=["local", "ps", "mwms", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--towers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--task", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import asyncio
        spec = json.loads(args.spec) if args.spec else {}
        child = {"local": lambda: child_local(args.towers),
                 "ps": lambda: child_ps_worker(spec, args.task),
                 "mwms": lambda: child_mwms(spec, args.task), "torch": child_torch}[args.child]
        return asyncio.run(child())
    names = args.only.split(",") if args.only else [n for n, _ in ROWS]
    if "torch" in names and not torch_importable():
        names.remove("torch")
    unknown = set(names) - {n for n, _ in ROWS}
    if unknown:
        raise SystemExit(f"unknown rows {sorted(unknown)}; rows: {[n for n, _ in ROWS]}")
    rows = summarize(measure(names, args.rounds, args.seconds))
    print(f"cifar10.py's model, batch {BATCH} per worker (tower), SGD {LR}; fixed fed batch; "
          f"medians of {args.rounds} rounds x {args.seconds:g} s; {os.cpu_count()} cores")
    print(REFERENCE)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
