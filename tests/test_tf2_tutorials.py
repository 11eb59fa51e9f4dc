"""TF's three tf.distribute tutorials, ported with README.md's mechanical edits
(``examples/tf2/``), run as a user runs them: through the launcher, real
processes on free loopback ports.

What could fail, per tutorial: a line of the program that distrib does not
take as TF does (the run ends non-zero and the output shows where); the
replicas diverging (MultiWorkerMirroredStrategy's workers print the same
losses and accuracies, the all-reduce keeping them equal); the model not
learning (each program's accuracy lands in the band its tutorial reaches
on MNIST: the digits stand in, shaped as MNIST by ``examples/tf2/mnist_data``);
the saves every worker takes part in (the chief's copy must be whole, the
others' temporary ones gone).
"""
from __future__ import annotations

import os
import re
import sys

import pytest

from tests.helpers import ROOT, child_env
from tests.test_launch import assert_all_gone, launches  # noqa: F401  (fixture)

TF2 = os.path.join(ROOT, "examples", "tf2")
FIT = re.compile(r"^(fit [a-z0-9 ]+): loss ([0-9.]+) accuracy ([0-9.]+)$")


def _env(tmp_path) -> dict[str, str]:
    return child_env(OPENBLAS_NUM_THREADS="1", TUTORIAL_DIR=str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_multi_worker_with_keras_as_written(launches, tmp_path, shm_snapshot):  # noqa: F811
    launch = launches("--workers", "2", "--", sys.executable,
                      os.path.join(TF2, "multi_worker_with_keras.py"), env=_env(tmp_path))
    assert launch.finish(280) == 0, launch.output[-4000:]
    fits = {}
    for worker in ("worker:0", "worker:1"):
        lines = launch.task_lines(worker)
        fits[worker] = {m.group(1): (float(m.group(2)), float(m.group(3)))
                        for m in map(FIT.match, lines) if m}
        assert list(fits[worker]) == ["fit main", "fit loaded", "fit restored",
                                      "fit backup epoch", "fit backup 30"], launch.output[-4000:]
        assert "done workers=2" in lines
    # MWMS fits agree on both workers (the reload's fit is each worker's own, unsynchronized)
    for name in ("fit main", "fit restored", "fit backup epoch", "fit backup 30"):
        assert fits["worker:0"][name] == fits["worker:1"][name], name
    loss, accuracy = fits["worker:0"]["fit main"]
    assert loss < 2.2 and accuracy >= 0.45, fits   # SGD(0.001), 3 x 70 steps: still climbing
    # the restored model goes on from the trained one, not from scratch
    assert fits["worker:0"]["fit restored"][1] >= accuracy - 0.1, fits
    # the chief's saves are whole; the other worker's temporary copies are gone
    assert os.path.isfile(tmp_path / "keras-model" / "config.json")
    assert os.path.isfile(tmp_path / "ckpt" / "checkpoint")
    assert not os.path.exists(tmp_path / "workertemp_1" / "keras-model")
    assert not os.path.exists(tmp_path / "workertemp_1" / "ckpt")
    assert not os.path.exists(tmp_path / "backup") or not os.listdir(tmp_path / "backup")
    assert_all_gone(launch)
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


CTL_EPOCH = re.compile(r"^Epoch: (\d), accuracy: ([0-9.]+), train_loss: ([0-9.]+)\.$")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_multi_worker_with_ctl_as_written(launches, tmp_path, shm_snapshot):  # noqa: F811
    launch = launches("--workers", "2", "--", sys.executable,
                      os.path.join(TF2, "multi_worker_with_ctl.py"), env=_env(tmp_path))
    assert launch.finish(280) == 0, launch.output[-4000:]
    epochs = {}
    for worker in ("worker:0", "worker:1"):
        epochs[worker] = [m.groups() for m in map(CTL_EPOCH.match, launch.task_lines(worker))
                          if m]
        assert [e[0] for e in epochs[worker]] == ["0", "1", "2"], launch.output[-4000:]
    assert epochs["worker:0"] == epochs["worker:1"]   # the all-reduce kept the replicas equal
    accuracy = [float(e[1]) for e in epochs["worker:0"]]
    loss = [float(e[2]) for e in epochs["worker:0"]]
    # RMSprop(0.001), 3 x 70 steps: the tutorial's MNIST run ends above 0.9
    assert loss[0] > loss[1] > loss[2] and accuracy[2] >= 0.9, epochs
    assert_all_gone(launch)
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


PS_EPOCH = re.compile(r"^Finished epoch (\d), accuracy is ([0-9.]+)\.$")


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_parameter_server_training_as_written(launches, tmp_path, shm_snapshot):  # noqa: F811
    launch = launches("--ps", "2", "--workers", "3", "--chief", "--max_restarts", "0", "--",
                      sys.executable, os.path.join(TF2, "parameter_server_training.py"),
                      env=_env(tmp_path))
    assert launch.finish(180) == 0, launch.output[-4000:]
    chief = launch.task_lines("chief:0")
    # Model.fit: the mse on uniform data falls epoch by epoch (SGD 0.01, 5 x 20 steps)
    fit = [line for line in chief if line.startswith("fit losses ")]
    assert len(fit) == 1, launch.output[-4000:]
    losses = [float(v) for v in fit[0].split()[2:]]
    assert len(losses) == 5 and losses[0] > losses[-1], losses
    # the sharded embedding: two shards, one on each ps task
    assert sorted(line for line in chief if line.startswith("/job:ps")) == \
        ["/job:ps/task:0", "/job:ps/task:1"], chief
    # the custom loop learns "avenger in features" (the tutorial ends at accuracy 1.0)
    epochs = [m.groups() for m in map(PS_EPOCH.match, chief) if m]
    assert [e[0] for e in epochs] == ["0", "1", "2", "3"], launch.output[-4000:]
    assert float(epochs[-1][1]) >= 0.8, epochs
    final = [line for line in chief if line.startswith("Final loss is ")]
    assert len(final) == 1 and float(final[0].split()[-1]) < 0.6, chief
    inline = [line for line in chief if line.startswith("Evaluation accuracy: ")]
    spread = [line for line in chief if line.startswith("Distributed evaluation accuracy: ")]
    assert len(inline) == 1 and float(inline[0].split()[-1]) >= 0.75, chief
    assert len(spread) == 1 and float(spread[0].split()[-1]) >= 0.75, chief
    # the fit's callbacks wrote where they were told; BackupAndRestore cleaned up after it
    assert os.path.isdir(tmp_path / "my_working_dir" / "log")
    assert os.path.exists(tmp_path / "my_working_dir" / "ckpt")
    assert_all_gone(launch)
    assert set(os.listdir("/dev/shm")) <= shm_snapshot
