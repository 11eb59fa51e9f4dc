"""The seeds' CIFAR-10 programs as written (issue 38, item 6): examples/cifar10/.

Each test runs a script as a user would (its own process, a few steps, a
small batch, the small generated data set of CIFAR's binary format) and
reads back what it left: its output lines, its checkpoint (the global step,
the moving averages beside the variables, TF1's names). Nothing here races
a clock: every assertion is on state a finished process left behind.

Slow: each trainer first fills its tower's shuffle queue with the tutorial's
``min_queue_examples`` (20000 images, cifar10_input.py) through TF1's queue
runners, about 20 s a tower on the 2-core VM; the model's steps are the
small part.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from tests.helpers import ROOT, child_env

pytestmark = [pytest.mark.timeout(600)]

EXAMPLE = os.path.join(ROOT, "examples", "cifar10")
BOUND_S = 240
STEP_LINE = re.compile(r"step (\d+), loss = ([-\d.naif]+) \(")


def run_script(script: str, *args: str, launch: tuple[str, ...] = ()) -> str:
    """``python examples/cifar10/<script> args`` (under ``python -m distrib.launch
    launch --`` when given); its output, once it exited 0."""
    cmd = [sys.executable, os.path.join(EXAMPLE, script), *args]
    if launch:
        cmd = [sys.executable, "-m", "distrib.launch", *launch, "--", *cmd]
    # the generated set's sizes: its shuffle queue is filled to 40% of 500, not of 50000
    env = child_env(CIFAR10_TRAIN_EXAMPLES="500", CIFAR10_EVAL_EXAMPLES="100")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=BOUND_S)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    return text


def read_checkpoint(train_dir: str) -> dict[str, np.ndarray]:
    reader = dt.train.load_checkpoint(dt.train.latest_checkpoint(train_dir))
    return {name: reader.get_tensor(name) for name, _ in dt.train.list_variables(train_dir)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """The multi-tower trainer's run: 2 towers on /cpu:0 and /cpu:1, 4 steps of 8 images."""
    root = tmp_path_factory.mktemp("cifar10")
    data_dir, train_dir = str(root / "data"), str(root / "train")
    out = run_script("cifar10_multi_gpu_train.py", "--num_gpus=2", "--cpu_towers",
                     "--max_steps=4", "--batch_size=8", f"--data_dir={data_dir}",
                     f"--train_dir={train_dir}", "--log_device_placement")
    return {"root": root, "data_dir": data_dir, "train_dir": train_dir, "out": out}


def test_the_multi_tower_trainer_steps_on_two_cpu_devices(trained):
    out, ckpt = trained["out"], read_checkpoint(trained["train_dir"])
    losses = [float(m.group(2)) for m in STEP_LINE.finditer(out)]
    assert losses and all(np.isfinite(losses)), out[-3000:]
    # one apply of the averaged gradients a step, whatever the number of towers
    assert int(ckpt["global_step"]) == 4
    # each tower's convolution ran on its own CPU device (log_device_placement, TF's line)
    for i in (0, 1):
        assert f"tower_{i}/conv1/Conv2D: (Conv2D): /job:localhost/replica:0/task:0/device:CPU:{i}" \
            in out, out[-3000:]
    assert {"checkpoint", "model.ckpt-0", "model.ckpt-3"} <= set(os.listdir(trained["train_dir"]))
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(trained["train_dir"]))


def test_the_checkpoint_holds_tf1s_names_and_the_variables_moving_averages(trained):
    ckpt = read_checkpoint(trained["train_dir"])
    names = {"conv1", "conv2", "local3", "local4", "softmax_linear"}
    want = {f"{layer}/{part}" for layer in names for part in ("weights", "biases")}
    assert want | {"global_step"} | {f"{n}/ExponentialMovingAverage" for n in want} == set(ckpt)
    assert ckpt["local3/weights"].shape == (6 * 6 * 64, 384)   # reshape's get_shape()[1].value
    # with num_updates=global_step the decay is min(0.9999, (1+n)/(10+n)): the averages trail
    # the trained weights, closely (they started at the same initial values)
    avg, w = ckpt["conv1/weights/ExponentialMovingAverage"], ckpt["conv1/weights"]
    assert not np.array_equal(avg, w) and np.abs(avg - w).max() < 0.1


def test_the_eval_restores_the_averages_and_reports_precision(trained):
    eval_dir = str(trained["root"] / "eval")
    out = run_script("cifar10_eval.py", "--run_once", "--num_examples=16", "--batch_size=8",
                     f"--data_dir={trained['data_dir']}", f"--checkpoint_dir={trained['train_dir']}",
                     f"--eval_dir={eval_dir}")
    found = re.search(r"precision @ 1 = ([\d.]+)", out)
    assert found, out[-3000:]
    assert 0.0 <= float(found.group(1)) <= 1.0
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(eval_dir))


def test_the_single_tower_trainer_runs_under_a_monitored_session(trained):
    train_dir = str(trained["root"] / "train1")
    out = run_script("cifar10_train.py", "--max_steps=3", "--log_frequency=1", "--batch_size=8",
                     f"--data_dir={trained['data_dir']}", f"--train_dir={train_dir}")
    losses = [float(m.group(2)) for m in STEP_LINE.finditer(out)]
    assert len(losses) == 3 and all(np.isfinite(losses)), out[-3000:]
    ckpt = read_checkpoint(train_dir)
    assert int(ckpt["global_step"]) == 3
    # the loss averages of cifar10.train (ExponentialMovingAverage(0.9, name='avg'))
    assert {"cross_entropy/avg", "total_loss/avg", "conv1/weights/ExponentialMovingAverage"} <= set(ckpt)


def test_the_between_graph_form_trains_synchronously_through_the_launcher(trained):
    train_dir = str(trained["root"] / "sync")
    out = run_script("cifar10_sync_replicas.py", "--max_steps=3", "--log_frequency=1",
                     "--batch_size=8", f"--data_dir={trained['data_dir']}",
                     f"--train_dir={train_dir}", launch=("--ps", "1", "--workers", "2"))
    done = re.findall(r"\[worker:(\d)\] done global_step=(\d+) steps=(\d+) loss=(\S+)", out)
    assert sorted(d[0] for d in done) == ["0", "1"], out[-3000:]
    assert all(int(gs) == 3 and np.isfinite(float(loss)) for _, gs, _, loss in done)
    assert "[launch] ps:0 stopped (exit code 0)" in out
    ckpt = read_checkpoint(train_dir)
    assert int(ckpt["global_step"]) == 3
    assert "conv1/weights/ExponentialMovingAverage" in ckpt   # the chief's averages, on the ps
