"""Embeddings on parameter servers (issue 41): examples/s and bytes on the
wire per step of the issue's model, at several table sizes.

The model (TF1's spelling, as the issue's anchor): a ``rows x 64`` float32
table made by ``get_variable(..., partitioner=fixed_size_partitioner(2))``
over 2 ps tasks (``replica_device_setter``), bags of 8 ids per example drawn
from a Zipf(1.2) law (folded into the table), ``dt.nn.embedding_lookup``
then the mean over the bag, a 64 -> 1 logistic layer,
``AdagradOptimizer(0.1)``, batch 512 per worker. Rows:

- ``ps2-w1``: 2 ps processes (``python -m distrib.server``) and one worker
  process, between-graph, asynchronous;
- ``ps2-w2``: the same with two worker processes (examples/s summed);
- ``psstrategy``: ``ParameterServerStrategy`` (the table a ``ShardedVariable``
  of 2 shards, ``FixedShardsPartitioner(2)``) with a ``ClusterCoordinator``
  in the bench process scheduling ``dt.function`` steps on one worker.

Columns: ``examples/s`` over ``--seconds`` after warm-up; ``init s`` the
variables' initializer (the table made on its ps: the one cost that grows
with the table); ``first step s`` the first training step after it (graph
registration on every task); ``wire B/step`` the bytes every task sent in
one traced step (``RunOptions(FULL_TRACE)``: the sends' ``output_bytes``);
``x touched`` that over the bytes of the rows the step touched (an id's
row and its int64 id, forward and backward). The processes run with the
default heartbeats: a ps copies a 10^7-row shard's initial value into its
arena (seconds) on its kernel pool, its event loop answering meanwhile
(tests/test_big_assign.py). The machine is shared and
loaded: figures are indicative. TF 2.21 on the issue's machine: 74,500
examples/s (ps2-w1, 1e6 rows). Never asserts; ``--json PATH`` writes the rows.

    python bench/embedding.py [--sizes 1e5,1e6,1e7] [--only ps2-w1] [--seconds 5] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import subprocess
import sys
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BATCH, BAG, DIM, LR = 512, 8, 64, 0.1
ROWS = ("ps2-w1", "ps2-w2", "psstrategy")
REFERENCE = "TF 2.21 (issue 41, its machine): 74,500 examples/s, 1 worker, 2 ps, 1e6 rows"


def batches(rows: int, seed: int, n: int = 16) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` batches of Zipf(1.2) bags and labels (a bag is positive when most of its
    ids are even: learnable from the embeddings)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = (rng.zipf(1.2, (BATCH, BAG)) - 1) % rows
        labels = ((ids % 2 == 0).sum(1, keepdims=True) > BAG // 2).astype(np.float32)
        out.append((ids.astype(np.int64), labels))
    return out


def tf1_model(dt: Any, cluster: Any, task: int, rows: int) -> dict[str, Any]:
    with dt.device(dt.train.replica_device_setter(cluster=cluster,
                                                  worker_device=f"/job:worker/task:{task}")):
        emb = dt.get_variable("emb", [rows, DIM],
                              initializer=dt.random_uniform_initializer(-0.05, 0.05),
                              partitioner=dt.fixed_size_partitioner(2))
        w = dt.get_variable("w", [DIM, 1])
        b = dt.get_variable("b", [1], initializer=dt.zeros_initializer())
        step = dt.train.get_or_create_global_step()
        ids = dt.placeholder(dt.int64, [BATCH, BAG], name="ids")
        labels = dt.placeholder(dt.float32, [BATCH, 1], name="labels")
        pooled = dt.reduce_mean(dt.nn.embedding_lookup(emb, ids), axis=1)
        logits = dt.matmul(pooled, w) + b
        loss = dt.reduce_mean(dt.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                      logits=logits))
        train = dt.train.AdagradOptimizer(LR).minimize(loss, global_step=step)
    return {"ids": ids, "labels": labels, "loss": loss, "train": train,
            "init": dt.global_variables_initializer(),
            "ready": [dt.is_variable_initialized(v) for v in dt.global_variables()]}


async def child_tf1(spec: dict, task: int, rows: int, seconds: float) -> dict[str, Any]:
    import distrib as dt
    m = tf1_model(dt, dt.ClusterSpec(spec), task, rows)
    data = batches(rows, seed=task)
    feeds = [{m["ids"]: i, m["labels"]: y} for i, y in data]
    async with dt.serve(spec, job_name="worker", task_index=task) as server:
        async with dt.Session(server.target) as sess:
            t0 = time.perf_counter()
            if task == 0:
                await sess.run(m["init"])
            else:
                while not all(bool(r) for r in await sess.run(m["ready"])):
                    await asyncio.sleep(0.1)
            init_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            await sess.run(m["train"], feeds[0])
            first_s = time.perf_counter() - t0
            for k in range(3):
                await sess.run(m["train"], feeds[k % len(feeds)])
            md = dt.RunMetadata()
            await sess.run([m["loss"], m["train"]], feeds[1],
                           options=dt.RunOptions(trace_level=dt.RunOptions.FULL_TRACE),
                           run_metadata=md)
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                await sess.run(m["train"], feeds[steps % len(feeds)])
                steps += 1
            elapsed = time.perf_counter() - t0
            loss = float(await sess.run(m["loss"], feeds[0]))
    sent = sum(n.output_bytes for d in md.step_stats.dev_stats for n in d.node_stats
               if n.kind == "send")
    return {"examples_per_s": steps * BATCH / elapsed, "init_s": init_s, "first_step_s": first_s,
            "wire_bytes": sent, "loss": loss,
            "unique_ids": int(np.mean([len(np.unique(i)) for i, _ in data]))}


async def child_strategy(spec: dict, rows: int, seconds: float) -> dict[str, Any]:
    import distrib as dt
    resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
        dt.ClusterSpec(spec), task_type="chief", task_id=0)
    strategy = dt.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=dt.distribute.experimental.partitioners
        .FixedShardsPartitioner(2))
    coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)
    t0 = time.perf_counter()
    with strategy.scope():
        emb = dt.Variable(dt.random_uniform([rows, DIM], -0.05, 0.05), name="emb")
        w = dt.Variable(np.zeros((DIM, 1), np.float32), name="w")
        b = dt.Variable(np.zeros(1, np.float32), name="b")
        opt = dt.train.AdagradOptimizer(LR)
    params = [emb, w, b]
    data = batches(rows, seed=0)

    def dataset_fn(ctx: Any) -> Any:
        ids = np.concatenate([i for i, _ in data])
        ys = np.concatenate([y for _, y in data])
        return dt.data.Dataset.from_tensor_slices((ids, ys)).batch(BATCH).repeat()

    @dt.function
    def worker_fn(iterator: Any) -> Any:
        def replica_fn(inputs: Any) -> Any:
            ids, labels = inputs
            with dt.GradientTape() as tape:
                pooled = dt.reduce_mean(dt.nn.embedding_lookup(emb, ids), axis=1)
                loss = dt.reduce_mean(dt.nn.sigmoid_cross_entropy_with_logits(
                    labels=labels, logits=dt.matmul(pooled, w) + b))
            grads = tape.gradient(loss, params)
            opt.apply_gradients(zip(grads, params))
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    coordinator.schedule(worker_fn, args=(iterator,))
    await coordinator.join()
    init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    coordinator.schedule(worker_fn, args=(iterator,))
    await coordinator.join()
    first_s = time.perf_counter() - t0
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        results = [coordinator.schedule(worker_fn, args=(iterator,)) for _ in range(8)]
        await coordinator.join()
        steps += len(results)
    elapsed = time.perf_counter() - t0
    loss = float(await results[-1].fetch())
    await coordinator.shutdown()
    return {"examples_per_s": steps * BATCH / elapsed, "init_s": init_s, "first_step_s": first_s,
            "wire_bytes": None, "loss": loss,
            "unique_ids": int(np.mean([len(np.unique(i)) for i, _ in data]))}


# -- the parent ----------------------------------------------------------------------------

def _spawn(args: list[str]) -> subprocess.Popen:
    # (the default heartbeats: a ps copies a big Assign's value off its event loop)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)


def _result(proc: subprocess.Popen, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise SystemExit(f"no result from pid {proc.pid} within {timeout:g}s (exit {proc.poll()})")


def measure(row: str, rows: int, seconds: float) -> dict[str, Any]:
    from distrib.launch import free_ports
    workers = 2 if row == "ps2-w2" else 1
    chief = row == "psstrategy"
    ports = [f"localhost:{p}" for p in free_ports(2 + workers + chief)]
    spec = {"ps": ports[:2], "worker": ports[2:2 + workers]}
    if chief:
        spec["chief"] = ports[-1:]
    flags = ["--cluster_json", json.dumps(spec)]
    servers = [_spawn(["-m", "distrib.server", "--ps_hosts", ",".join(spec["ps"]),
                       "--worker_hosts", ",".join(spec["worker"]), "--job_name", "ps",
                       "--task_index", str(i)]) for i in range(2)]
    me = os.path.abspath(__file__)
    kids: list[subprocess.Popen] = []
    try:
        if chief:
            servers.append(_spawn(["-c", _SERVE_WORKER, json.dumps(spec)]))
            kids.append(_spawn([me, "--child", "strategy", "--rows", str(rows), "--seconds",
                                str(seconds), *flags]))
        else:
            kids = [_spawn([me, "--child", "tf1", "--task", str(t), "--rows", str(rows),
                            "--seconds", str(seconds), *flags]) for t in range(workers)]
        results = [_result(k, 600 + seconds) for k in kids]
    finally:
        for p in kids + servers:
            if p.poll() is None:
                p.terminate()
        for p in kids + servers:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
    out = {"row": row, "rows": rows, "examples_per_s": sum(r["examples_per_s"] for r in results),
           "init_s": max(r["init_s"] for r in results),
           "first_step_s": max(r["first_step_s"] for r in results),
           "wire_bytes_per_step": results[0]["wire_bytes"], "loss": results[0]["loss"],
           "unique_ids_per_step": results[0]["unique_ids"]}
    touched = 2 * BATCH * BAG * (DIM * 4 + 8)
    out["touched_bytes_per_step"] = touched
    out["wire_over_touched"] = None if out["wire_bytes_per_step"] is None else \
        out["wire_bytes_per_step"] / touched
    return out


# a worker task of the strategy's cluster: a bare server with the chief in its spec
_SERVE_WORKER = ("import json, sys; import distrib as dt; "
                 "s = dt.Server(json.loads(sys.argv[1]), job_name='worker', task_index=0); "
                 "s.join()")


def print_table(out: list[dict[str, Any]]) -> None:
    print(f"{'row':<11} {'rows':>9} {'examples/s':>10} {'init s':>7} {'first step s':>12} "
          f"{'wire B/step':>11} {'x touched':>9} {'uniq ids':>8} {'loss':>6}")
    for r in out:
        wire = "-" if r["wire_bytes_per_step"] is None else f"{r['wire_bytes_per_step']:.0f}"
        ratio = "-" if r["wire_over_touched"] is None else f"{r['wire_over_touched']:.2f}"
        print(f"{r['row']:<11} {r['rows']:>9.0e} {r['examples_per_s']:>10.0f} "
              f"{r['init_s']:>7.2f} {r['first_step_s']:>12.3f} {wire:>11} {ratio:>9} "
              f"{r['unique_ids_per_step']:>8} {r['loss']:>6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6,1e7", help="table rows (default 1e5,1e6,1e7)")
    ap.add_argument("--only", help=f"comma-separated rows of {ROWS} (default all)")
    ap.add_argument("--seconds", type=float, default=5.0, help="timed seconds per run")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--child", choices=["tf1", "strategy"], help=argparse.SUPPRESS)
    ap.add_argument("--task", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--cluster_json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.cluster_json)
        run = child_tf1(spec, args.task, args.rows, args.seconds) if args.child == "tf1" \
            else child_strategy(spec, args.rows, args.seconds)
        print("RESULT " + json.dumps(asyncio.run(run)), flush=True)
        return
    names = args.only.split(",") if args.only else list(ROWS)
    unknown = set(names) - set(ROWS)
    if unknown:
        raise SystemExit(f"unknown rows {sorted(unknown)}; rows: {list(ROWS)}")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    out = [measure(row, rows, args.seconds) for rows in sizes for row in names]
    print(f"the issue's model: {DIM}-wide table in 2 shards on 2 ps, bags of {BAG} Zipf(1.2) "
          f"ids, batch {BATCH} per worker, Adagrad {LR}; {args.seconds:g} s timed; "
          f"{os.cpu_count()} cores, shared")
    print(REFERENCE)
    print_table(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
