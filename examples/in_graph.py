"""In-graph replication: one client builds one graph with a tower per worker.

Each worker task computes the loss and gradients of its own slice of the
batch; the gradients are averaged and applied once to the variables on the
ps (synchronous data parallelism driven by a single client, TF1's "in-graph
replication"). With no cluster flags it starts its own cluster of 1 ps and 2
workers in this process (each a real server on a loopback port).

    python examples/in_graph.py                       # local cluster
    python examples/in_graph.py --ps_hosts=h:2222 --worker_hosts=h:2223,h:2224
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402


def tower_loss(x: dt.Tensor, y: dt.Tensor, params: list) -> dt.Tensor:
    w1, b1, w2, b2 = params
    h = dt.nn.relu(dt.matmul(x, w1) + b1)
    logits = dt.matmul(h, w2) + b2
    return dt.reduce_mean(dt.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def build(num_workers: int, hidden: int, lr: float) -> dict:
    with dt.device("/job:ps/task:0"):
        params = [dt.Variable(dt.random_normal([64, hidden], stddev=0.1, seed=1), name="w1"),
                  dt.Variable(dt.zeros([hidden]), name="b1"),
                  dt.Variable(dt.random_normal([hidden, 10], stddev=0.1, seed=2), name="w2"),
                  dt.Variable(dt.zeros([10]), name="b2")]
        global_step = dt.train.get_or_create_global_step()
    opt = dt.train.GradientDescentOptimizer(lr)
    xs, ys, losses, tower_grads = [], [], [], []
    for i in range(num_workers):
        with dt.device(f"/job:worker/task:{i}"), dt.name_scope(f"tower_{i}"):
            x = dt.placeholder(dt.float32, shape=[None, 64], name="x")
            y = dt.placeholder(dt.int64, shape=[None], name="y")
            loss = tower_loss(x, y, params)
            tower_grads.append(opt.compute_gradients(loss, var_list=params))
            xs.append(x)
            ys.append(y)
            losses.append(loss)
    with dt.device("/job:ps/task:0"):
        averaged = [(dt.add_n([g[k][0] for g in tower_grads]) / float(num_workers),
                     tower_grads[0][k][1]) for k in range(len(params))]
        train_op = opt.apply_gradients(averaged, global_step=global_step)
        mean_loss = dt.add_n(losses) / float(num_workers)
    with dt.device("/job:worker/task:0"):
        logits = dt.matmul(dt.nn.relu(dt.matmul(xs[0], params[0]) + params[1]),
                           params[2]) + params[3]
    return {"xs": xs, "ys": ys, "train_op": train_op, "loss": mean_loss,
            "logits": logits, "global_step": global_step,
            "init": dt.global_variables_initializer()}


async def train(target: str, num_workers: int, steps: int, batch: int) -> float:
    X, y = load_digits("train")
    Xt, yt = load_digits("test")
    m = build(num_workers, hidden=128, lr=0.3)
    rng = np.random.default_rng(0)
    async with dt.Session(target) as sess:
        await sess.run(m["init"])
        t0 = time.perf_counter()
        for step in range(1, steps + 1):
            feed = {}
            for x, yy in zip(m["xs"], m["ys"]):
                idx = rng.integers(0, len(X), batch)
                feed[x], feed[yy] = X[idx], y[idx]
            _, loss = await sess.run([m["train_op"], m["loss"]], feed)
            if step % 100 == 0 or step == steps:
                rate = step * batch * num_workers / (time.perf_counter() - t0)
                print(f"step {step}: loss {loss:.4f}, {rate:.0f} examples/s", flush=True)
        logits = await sess.run(m["logits"], {m["xs"][0]: Xt})
    accuracy = float(np.mean(np.argmax(logits, axis=1) == yt))
    print(f"done global_step={steps} accuracy={accuracy:.4f}", flush=True)
    return accuracy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ps_hosts")
    p.add_argument("--worker_hosts")
    p.add_argument("--train_steps", type=int, default=500)
    p.add_argument("--batch_size", type=int, default=32, help="per worker")
    args = p.parse_args(argv)
    if bool(args.ps_hosts) != bool(args.worker_hosts):
        p.error("give both --ps_hosts and --worker_hosts (a running cluster), or neither "
                "(a local one in this process)")
    servers = []
    if args.ps_hosts and args.worker_hosts:
        cluster = dt.ClusterSpec.from_flags(ps_hosts=args.ps_hosts, worker_hosts=args.worker_hosts)
        target = "distrib://" + cluster.task_address("worker", 0)
    else:
        from distrib.demo import free_ports
        ps, w0, w1 = free_ports(3)
        cluster = dt.ClusterSpec({"ps": [f"localhost:{ps}"],
                                  "worker": [f"localhost:{w0}", f"localhost:{w1}"]})
        servers = [dt.Server(cluster, job_name=j, task_index=i)
                   for j, i in (("ps", 0), ("worker", 0), ("worker", 1))]
        target = servers[1].target
    try:
        asyncio.run(train(target, cluster.num_tasks("worker"), args.train_steps,
                          args.batch_size))
    finally:
        for s in servers:
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
