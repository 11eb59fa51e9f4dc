"""A wide & deep model of sparse features on parameter servers (TF1's
between-graph idiom), run by the launcher:

    python -m distrib.launch --ps 2 --workers 2 -- python examples/wide_deep.py

Every task reads its cluster and role from ``TF_CONFIG``. The ps tasks serve
the tables; each worker builds the same graph with ``replica_device_setter``
and trains asynchronously under ``MonitoredTrainingSession`` (the chief,
worker 0, initializes), then measures its accuracy on held-out examples and
prints ``done global_step=<int> accuracy=<float>``.

The data is a census-like synthetic set (``make_examples``): three
categorical columns (vocabularies of 1000, 200 and 50 ids), a multi-valent
``tags`` column (0 to 3 ids of 100 per example, a ``dt.SparseTensor``) and
one numeric column; the label depends on per-id weights, the cross of the
first two columns and the number. The model is TF's canned wide & deep:

- wide: a linear model over every id and a hashed cross of the first two
  columns bucketized (``crosses`` buckets), one weight each, in a table partitioned
  over the ps tasks (``fixed_size_partitioner``), summed by
  ``dt.nn.embedding_lookup_sparse(..., combiner="sum")``;
- deep: an 8-wide embedding per column (``embedding_lookup``; the tags by
  ``safe_embedding_lookup_sparse``, mean of a row's tags, zeros for none),
  the number, two ReLU layers of 32 and 16;
- the logit their sum, sigmoid cross-entropy, ``AdagradOptimizer``: each
  step moves the rows of the ids in its batch to and from the ps tasks, and
  the sparse gradients update those rows there.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import distrib as dt  # noqa: E402
from distrib.cluster import parse_tf_config  # noqa: E402

VOCABS = (1000, 200, 50)
TAGS, MAX_TAGS, DIM = 100, 3, 8


def make_examples(n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` examples; the truth's weights come from seed 0, the draws from ``seed``."""
    truth = np.random.default_rng(0)
    weights = [truth.normal(0, 1.0, v) for v in VOCABS]
    cross = truth.normal(0, 1.0, (VOCABS[0] // 50, VOCABS[1] // 20))
    tag_w = truth.normal(0, 0.7, TAGS)
    rng = np.random.default_rng(seed)
    cats = [rng.integers(0, v, n) for v in VOCABS]
    num = rng.normal(0, 1, n).astype(np.float32)
    tag_count = rng.integers(0, MAX_TAGS + 1, n)
    tags = [rng.choice(TAGS, size=k, replace=False) for k in tag_count]
    score = sum(w[c] for w, c in zip(weights, cats)) + cross[cats[0] // 50, cats[1] // 20] \
        + np.array([tag_w[t].sum() for t in tags]) + 0.8 * num
    return {"cats": np.stack(cats, 1).astype(np.int64), "num": num[:, None],
            "tags": tags, "label": (score > 0).astype(np.float32)[:, None]}


def sparse_value(rows: list[np.ndarray], width: int) -> dt.SparseTensorValue:
    """Variable-length id lists as a SparseTensorValue (row-major, as TF's)."""
    indices = [[r, k] for r, ids in enumerate(rows) for k in range(len(ids))]
    values = [int(i) for ids in rows for i in ids]
    return dt.SparseTensorValue(np.array(indices, np.int64).reshape(-1, 2),
                                np.array(values, np.int64), np.array([len(rows), width], np.int64))


def wide_ids(cats: np.ndarray, tags: list[np.ndarray], crosses: int) -> dt.SparseTensorValue:
    """Each example's ids in the wide table: its columns, its cross, its tags."""
    offsets = np.cumsum((0,) + VOCABS)
    # the cross of the first two columns, bucketized (50 and 20 ids a bucket), hashed
    cross = ((cats[:, 0] // 50) * 1_000_003 + cats[:, 1] // 20) % crosses + offsets[-1]
    tag_base = offsets[-1] + crosses
    rows = [np.concatenate([cats[r] + offsets[:-1], [cross[r]], tags[r] + tag_base])
            for r in range(len(cats))]
    return sparse_value(rows, len(VOCABS) + 1 + MAX_TAGS)


def sparse_placeholder(name: str) -> dt.SparseTensor:
    return dt.SparseTensor(dt.placeholder(dt.int64, [None, 2], name=name + "/indices"),
                           dt.placeholder(dt.int64, [None], name=name + "/values"),
                           dt.placeholder(dt.int64, [2], name=name + "/dense_shape"))


def build(cluster: dt.ClusterSpec, task: int, crosses: int, lr: float) -> dict[str, Any]:
    shards = dt.fixed_size_partitioner(cluster.num_tasks("ps"))
    with dt.device(dt.train.replica_device_setter(cluster=cluster,
                                                  worker_device=f"/job:worker/task:{task}")):
        cats = dt.placeholder(dt.int64, [None, len(VOCABS)], name="cats")
        num = dt.placeholder(dt.float32, [None, 1], name="num")
        label = dt.placeholder(dt.float32, [None, 1], name="label")
        wide_sp, tags_sp = sparse_placeholder("wide_ids"), sparse_placeholder("tags")
        wide_table = dt.get_variable("wide/weights", [sum(VOCABS) + crosses + TAGS, 1],
                                     initializer=dt.zeros_initializer(), partitioner=shards)
        wide = dt.nn.embedding_lookup_sparse(wide_table, wide_sp, None, combiner="sum")
        columns = []
        for i, vocab in enumerate(VOCABS):
            table = dt.get_variable(f"deep/embedding_{i}", [vocab, DIM], partitioner=shards,
                                    initializer=dt.truncated_normal_initializer(0.0, 0.3))
            columns.append(dt.nn.embedding_lookup(table, cats[:, i]))
        tag_table = dt.get_variable("deep/embedding_tags", [TAGS, DIM], partitioner=shards,
                                    initializer=dt.truncated_normal_initializer(0.0, 0.3))
        columns.append(dt.nn.safe_embedding_lookup_sparse(tag_table, tags_sp))
        hidden = dt.concat(columns + [num], axis=1)
        for units in (32, 16):
            hidden = dt.layers.dense(hidden, units, activation=dt.nn.relu)
        logits = dt.layers.dense(hidden, 1) + wide
        loss = dt.reduce_mean(dt.nn.sigmoid_cross_entropy_with_logits(labels=label,
                                                                      logits=logits))
        correct = dt.equal(dt.cast(dt.greater(logits, 0.0), dt.float32), label)
        accuracy = dt.reduce_mean(dt.cast(correct, dt.float32))
        step = dt.train.get_or_create_global_step()
        train = dt.train.AdagradOptimizer(lr).minimize(loss, global_step=step)
    return {"cats": cats, "num": num, "label": label, "wide": wide_sp, "tags": tags_sp,
            "loss": loss, "accuracy": accuracy, "train": train, "step": step}


def feed(m: dict[str, Any], data: dict[str, np.ndarray], lo: int, hi: int,
         crosses: int) -> dict[Any, Any]:
    cats, tags = data["cats"][lo:hi], data["tags"][lo:hi]
    out = {m["cats"]: cats, m["num"]: data["num"][lo:hi], m["label"]: data["label"][lo:hi]}
    for sp, value in ((m["wide"], wide_ids(cats, tags, crosses)),
                      (m["tags"], sparse_value(tags, MAX_TAGS))):
        out.update(zip((sp.indices, sp.values, sp.dense_shape), value))
    return out


async def train(args: argparse.Namespace, cluster: dt.ClusterSpec, task: int) -> float:
    server = dt.Server(cluster, job_name="worker", task_index=task)
    m = build(cluster, task, args.crosses, args.learning_rate)
    data = make_examples(args.examples, seed=1 + task)
    test = make_examples(2000, seed=1000)
    hooks = [dt.train.StopAtStepHook(last_step=args.train_steps)]
    steps = 0
    async with dt.train.MonitoredTrainingSession(master=server.target, is_chief=task == 0,
                                                 hooks=hooks) as sess:
        while not sess.should_stop():
            lo = (steps * args.batch_size) % (args.examples - args.batch_size)
            await sess.run(m["train"], feed(m, data, lo, lo + args.batch_size, args.crosses))
            steps += 1
    async with dt.Session(server.target) as sess:   # the held-out examples
        accuracy, global_step = await sess.run([m["accuracy"], m["step"]],
                                               feed(m, test, 0, len(test["cats"]), args.crosses))
    print(f"worker steps={steps}", flush=True)
    print(f"done global_step={int(global_step)} accuracy={float(accuracy):.4f}", flush=True)
    server.stop()
    return float(accuracy)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train_steps", type=int, default=1200, help="global steps (all workers)")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--examples", type=int, default=20000, help="training examples per worker")
    p.add_argument("--crosses", type=int, default=2000, help="hash buckets of the cross")
    p.add_argument("--learning_rate", type=float, default=0.5)
    args = p.parse_args(argv)
    cluster, task_type, task_id, _ = parse_tf_config()
    if not cluster or task_type not in ("ps", "worker"):
        raise SystemExit("run under `python -m distrib.launch --ps N --workers M -- python "
                         "examples/wide_deep.py` (TF_CONFIG with ps and worker jobs)")
    if task_type == "ps":
        dt.Server(cluster, job_name="ps", task_index=task_id).join()
        return 0
    asyncio.run(train(args, cluster, int(task_id)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
