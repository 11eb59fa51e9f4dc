"""An elastic MultiWorkerMirroredStrategy custom loop (tests/test_elastic_mwms.py):
run by ``python -m distrib.launch --workers MIN:MAX --logdir DIR -- python
tests/peers/elastic_mwms.py --steps N``.

A two-layer classifier of the 8x8 digits; the loop is bounded by a mirrored
global step (``while step < N: step = await train(next(it))``). Each step
prints ``step G batch K t=T`` (the global step after it, the global batch it
trained on, the wall time); the end prints ``done step=G accuracy=A
weights=H`` (H: a hash of the final weights). A worker told to leave exits
0 from its step call (the strategy logs "left the cluster at step N").
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import distrib as dt  # noqa: E402
from examples.datasets import load_digits  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout,
                        format="%(name)s: %(message)s")
    logging.getLogger("distrib.distribute.elastic.controller").setLevel(logging.INFO)
    strategy = dt.distribute.MultiWorkerMirroredStrategy()
    print(f"strategy ready: worker {strategy.worker_index} of {strategy.num_workers} "
          f"t={time.time():.3f}", flush=True)
    x_train, y_train = load_digits("train")
    x_test, y_test = load_digits("test")
    with strategy.scope():
        rng = np.random.default_rng(args.seed)
        w1 = dt.Variable(rng.normal(0, 0.1, (64, args.hidden)).astype(np.float32), name="w1")
        b1 = dt.Variable(np.zeros(args.hidden, np.float32), name="b1")
        w2 = dt.Variable(rng.normal(0, 0.1, (args.hidden, 10)).astype(np.float32), name="w2")
        b2 = dt.Variable(np.zeros(10, np.float32), name="b2")
        global_step = dt.Variable(np.int64(0), name="global_step", trainable=False)
        optimizer = dt.train.GradientDescentOptimizer(args.learning_rate)
    params = [w1, b1, w2, b2]

    def model(x: dt.Tensor) -> dt.Tensor:
        return dt.matmul(dt.nn.relu(dt.matmul(x, w1) + b1), w2) + b2

    def replica_step(inputs: tuple) -> dt.Tensor:
        features, labels = inputs
        with dt.GradientTape() as tape:
            per_example = dt.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=model(features))
            loss = dt.nn.compute_average_loss(per_example, global_batch_size=args.batch)
        grads = tape.gradient(loss, params)
        optimizer.apply_gradients(zip(grads, params), global_step=global_step)
        return loss

    @dt.function
    def train(dist_inputs: tuple) -> dt.Tensor:
        strategy.run(replica_step, args=(dist_inputs,))
        return global_step.read_value()

    @dt.function
    def predict(x: np.ndarray) -> dt.Tensor:
        return dt.argmax(model(x), axis=1)

    @dt.function
    def weights() -> list:
        return [p.read_value() for p in params]

    dataset = dt.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(
        len(x_train), seed=args.seed).repeat().batch(args.batch, drop_remainder=True)
    it = iter(strategy.experimental_distribute_dataset(dataset))
    step = 0
    try:
        while step < args.steps:
            batch = next(it)
            step = int(await train(batch))
            index = getattr(it, "global_index", -1)
            print(f"step {step} batch {index} t={time.time():.3f}", flush=True)
            await asyncio.sleep(pace(args))
    finally:
        print(f"loop ended at step {step}", flush=True)
    with strategy.scope():
        predicted = await predict(x_test)
        final = await weights()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in final))
    print(f"done step={step} accuracy={float(np.mean(predicted == y_test)):.4f} "
          f"weights={digest.hexdigest()[:16]}", flush=True)


def pace(args: argparse.Namespace) -> float:
    """Seconds to wait after a step: ``--pace_file``'s number while it exists
    (a test slows the loop down while a worker joins), else ``--step_sleep``."""
    if args.pace_file:
        try:
            with open(args.pace_file) as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError):
            pass
    return args.step_sleep


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=60, help="the global batch")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--step_sleep", type=float, default=0.0, help="seconds between steps")
    p.add_argument("--pace_file", default=None,
                   help="while this file exists, the seconds between steps it holds")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
