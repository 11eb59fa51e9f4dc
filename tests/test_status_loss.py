"""``python -m distrib.status`` shows the last loss the task's process logged.

A summary writer notes each scalar it writes (``distrib.server.training_stats``);
the task's status answer carries the newest loss among them (a tag "loss" or
ending in "loss": "train/loss", "epoch_loss"), and the table a LOSS column
beside STEPS/S. In-process servers: the scalars are the process's own.
"""
from __future__ import annotations

import json
import time

import pytest

import distrib as dt
from distrib.demo import free_ports
from distrib.server import training_stats
from distrib.status import StatusClient, render_table
from distrib.status.__main__ import render


@pytest.fixture
def fresh_stats():
    training_stats.clear()
    yield
    training_stats.clear()


async def test_last_loss_is_the_newest_loss_tag_and_shows_in_json_and_table(fresh_stats):
    spec = {"worker": [f"localhost:{p}" for p in free_ports(1)]}
    async with dt.serve(spec, job_name="worker", task_index=0):
        async with StatusClient(dt.ClusterSpec(spec)) as client:
            (before,) = await client.query()
            training_stats.record_scalar("accuracy", 0.9, step=3)   # not a loss
            training_stats.record_scalar("loss", 2.5, step=3)
            time.sleep(0.002)   # (wall times apart: the newest is the later one)
            training_stats.record_scalar("train/loss", 0.25, step=4)
            (after,) = await client.query()
            training_stats.record_scalar("loss", 0.125, step=5)
            (latest,) = await client.query()
    assert before.last_loss is None and "LOSS" in render_table([before])
    assert after.last_loss == 0.25 and latest.last_loss == 0.125
    assert after.membership_version is None
    task = json.loads(render([after], as_json=True))["tasks"][0]
    assert task["last_loss"] == 0.25 and task["membership_version"] is None
    header, row = render_table([after]).splitlines()[:2]
    columns = header.split()
    assert columns[columns.index("STEPS/S") + 1] == "LOSS"
    assert "0.25" in row.split()


async def test_the_loss_is_trainings_and_finite(fresh_stats, tmp_path):
    """A validation run's loss (Keras' validation/ writer: the same tag
    "epoch_loss") is not the training loss; a NaN loss is unknown (the JSON
    stays JSON)."""
    for run, value in (("train", 0.5), ("validation", 0.75)):
        writer = dt.summary.create_file_writer(str(tmp_path / run))
        writer.write(dt.summary.proto.messages().Summary(value=[
            dt.summary.proto.messages().Summary.Value(tag="epoch_loss", simple_value=value)]), 1)
        writer.close()
        time.sleep(0.002)
    training_stats.record_scalar("val_loss", 0.875, step=1)
    assert training_stats.last_scalars()["validation/epoch_loss"]["value"] == 0.75
    spec = {"worker": [f"localhost:{p}" for p in free_ports(1)]}
    async with dt.serve(spec, job_name="worker", task_index=0):
        async with StatusClient(dt.ClusterSpec(spec)) as client:
            (row,) = await client.query()
            training_stats.record_scalar("loss", float("nan"), step=2)
            (diverged,) = await client.query()
    assert row.last_loss == 0.5
    assert diverged.last_loss is None
    text = render([diverged], as_json=True)
    assert "NaN" not in text and json.loads(text)["tasks"][0]["last_loss"] is None


def test_a_malformed_answer_leaves_unknowns_not_a_crash():
    """Another version's server (or a damaged answer): fields of the wrong type
    and non-finite numbers are unknown; the table and the JSON still render."""
    from distrib.status.query import TaskStatus, fill, mark_chief
    row = TaskStatus("worker", 0, "localhost:1")
    fill(row, {"last_loss": "0.5", "steps_per_s": float("inf"), "uptime_s": float("nan"),
               "incarnation": "x", "global_step": True, "rss_bytes": [1],
               "lease": {"term": "2", "holder": ["x"]}, "peers": [["a"], "bc", ["/job:ps/task:0", "tcp"]]})
    assert row.up and (row.last_loss, row.steps_per_s, row.uptime_s) == (None, None, None)
    assert (row.incarnation, row.global_step, row.rss_bytes) == (None, None, None)
    assert row.peers == [{"task": "/job:ps/task:0", "transport": "tcp"}]
    mark_chief([row])
    assert "0.5" not in render_table([row]).splitlines()[1]
    text = render([row], as_json=True)
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["tasks"][0]["state"] == "up"
