"""The cluster secret (DISTRIB_CLUSTER_TOKEN): a client without it or with a
wrong one gets UnauthenticatedError from Session.run, the server logs the
refusal and keeps serving; a client with it works, and so do tasks talking
to each other."""
from __future__ import annotations

import numpy as np
import pytest

import distrib as dt
from distrib.errors import UnauthenticatedError
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

SECRET = "s3cret-for-tests"


@pytest.fixture
def secured_cluster(tmp_path):
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    with cli_task(cfg, "worker", 0, DISTRIB_CLUSTER_TOKEN=SECRET) as w0, \
            cli_task(cfg, "worker", 1, DISTRIB_CLUSTER_TOKEN=SECRET) as w1:
        yield spec, (w0, w1)


def graph_across_tasks():
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:1"):
            a = dt.constant(np.arange(6.0).reshape(2, 3))
        with dt.device("/job:worker/task:0"):
            b = dt.reduce_sum(a * 2.0)
    return g, b


@pytest.mark.parametrize("token", [None, "wrong-secret"])
async def test_missing_or_wrong_secret_is_unauthenticated(secured_cluster, monkeypatch, token):
    spec, procs = secured_cluster
    if token is None:
        monkeypatch.delenv("DISTRIB_CLUSTER_TOKEN", raising=False)
    else:
        monkeypatch.setenv("DISTRIB_CLUSTER_TOKEN", token)
    monkeypatch.delenv("DISTRIB_CLUSTER_TOKEN_FILE", raising=False)
    g, b = graph_across_tasks()
    async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
        with pytest.raises(UnauthenticatedError, match="DISTRIB_CLUSTER_TOKEN"):
            await sess.run(b)
    # the server refused us, and keeps serving those who know the secret
    monkeypatch.setenv("DISTRIB_CLUSTER_TOKEN", SECRET)
    async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
        assert await sess.run(b) == 30.0
    assert all(p.p.poll() is None for p in procs)


async def test_right_secret_runs_across_tasks(secured_cluster, monkeypatch):
    spec, _ = secured_cluster
    monkeypatch.setenv("DISTRIB_CLUSTER_TOKEN", SECRET)
    g, b = graph_across_tasks()
    async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
        assert await sess.run(b) == 30.0
