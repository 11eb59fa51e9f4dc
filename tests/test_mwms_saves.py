"""Saves under MultiWorkerMirroredStrategy as TF's tutorials make them, with two
real worker processes (tests/peers/mwms_saves.py, TF_CONFIG, free loopback ports).

"Multi-worker training with Keras" saves with ``model.save(write_filepath(...))``:
every worker writes, a non-chief into a temporary ``workertemp_<id>`` folder
that it deletes with ``dt.io.gfile.rmtree``, and every worker then loads the
chief's model; the custom-loop tutorial does the same with a
``CheckpointManager`` and ``restore(latest_checkpoint(chief_dir))``. The chief
sleeps before each save, so a worker whose ``save`` returned before the
chief's copy was whole would look for it too early (``NotFoundError``, or no
latest checkpoint): ``save`` must wait for it on every worker (issue 36).
Every process is stopped by its pid.
"""
from __future__ import annotations

import pytest

from tests.helpers import run_workers

pytestmark = pytest.mark.slow
BOUND_S = 90


def run_two_workers(*args: str) -> list[dict[str, str]]:
    """Both workers' ``KEY VALUE`` lines, once both exited 0."""
    lines = []
    for out in run_workers(["tests/peers/mwms_saves.py", *args], 2, BOUND_S):
        lines.append(dict(line.split(" ", 1) for line in out.splitlines() if " " in line))
    return lines


def test_keras_tutorial_saves_on_every_worker_and_loads_the_chiefs_model(tmp_path) -> None:
    chief, other = run_two_workers("--mode", "keras", "--root", str(tmp_path),
                                   "--chief-delay", "0.5")
    assert chief["saved"] == str(tmp_path / "keras-model")
    assert other["saved"] == str(tmp_path / "workertemp_1" / "keras-model")
    for worker in (chief, other):
        # its own copy, whole (the non-chief's then deleted by the tutorial's rmtree)
        assert worker["own_copy"] == "['config.json', 'metadata.json', 'variables']"
        assert worker["own_weights"] == "True"
        assert worker["loaded"] == worker["weights_loaded"] == worker["trained"]
    assert chief["trained"] == other["trained"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keras-model", "weights"]


def test_custom_loop_tutorial_checkpoints_on_every_worker_and_restores_the_chiefs(
        tmp_path) -> None:
    chief, other = run_two_workers("--mode", "custom", "--root", str(tmp_path),
                                   "--chief-delay", "0.5")
    assert chief["saved"] == str(tmp_path / "ckpt" / "ckpt-1")
    assert other["saved"] == str(tmp_path / "workertemp_1" / "ckpt" / "ckpt-1")
    for worker in (chief, other):
        assert worker["own_copy"] == "['checkpoint', 'ckpt-1']"
        assert worker["latest"] == str(tmp_path / "ckpt" / "ckpt-1")
        assert worker["own_write"] == "True" and worker["read"] == "ok"
    # one folder for every worker: the chief writes and deletes, both keep its list
    assert chief["shared"] == other["shared"]
    assert chief["shared"].startswith("['checkpoint', 'ckpt-3']")
    assert not (tmp_path / "workertemp_1" / "ckpt").exists()   # the tutorial's rmtree
    # the chief's write failed: its error there, AbortedError naming it on the other
    assert chief["failed_write"] not in ("none", "AbortedError", "UnavailableError")
    assert other["failed_write"] == "AbortedError"
