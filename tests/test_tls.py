"""Mutual TLS (DISTRIB_TLS_CERT/KEY/CA): a CA and certificates are made by
bench/pki.py with the openssl command. A peer with a certificate of the
cluster's CA works and its connection's kind is "tls"; one with a
certificate of another CA, or with no TLS settings at all, is refused at once
with UnauthenticatedError (AuthError in transports) and the server keeps
serving; big messages (sent in pieces over TLS) arrive whole and in order;
co-located tasks still use shared memory; a partial set of the three
variables is a clear error."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import numpy as np
import pytest

import distrib as dt
import transports
from bench.pki import have_openssl, make_pki
from distrib.errors import UnauthenticatedError
from tests.helpers import ROOT, child_env
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

pytestmark = pytest.mark.skipif(not have_openssl(), reason="needs the openssl command")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    return make_pki(base / "cluster"), make_pki(base / "other")


def _config(env: dict[str, str], **kw) -> transports.TransportConfig:
    return transports.TransportConfig(tls_cert=env["DISTRIB_TLS_CERT"], tls_key=env["DISTRIB_TLS_KEY"],
                                      tls_ca=env["DISTRIB_TLS_CA"], connect_timeout_s=5, **kw)


def _identity(name: str) -> transports.PeerInfo:
    return transports.PeerInfo(name, transports.new_incarnation(), transports.local_host_id())


async def _echo(conn) -> None:
    conn.start(conn.send_nowait, lambda exc: None)


async def test_tls_in_process(pki, caplog):
    good, other = pki
    big = np.arange(1 << 21, dtype=np.float32)   # 8 MiB: the direct (get_buffer) receive path
    async with await transports.listen("127.0.0.1", 0, _echo, identity=_identity("server"),
                                       config=_config(good, mode="tcp")) as lst:
        conn = await transports.connect(lst.address, identity=_identity("good"), config=_config(good, mode="tcp"))
        assert conn.kind == "tls"
        await conn.send({"a": big})
        assert np.array_equal((await conn.recv())["a"], big)
        await conn.close()
        for name, env in [("other-ca", other),
                          ("other-cert", {**other, "DISTRIB_TLS_CA": good["DISTRIB_TLS_CA"]})]:
            with pytest.raises(transports.AuthError, match=r"127\.0\.0\.1.*TLS|TLS.*127\.0\.0\.1"):
                await transports.connect(lst.address, identity=_identity(name),
                                         config=_config(env, mode="tcp"))
        # the listener keeps serving
        conn = await transports.connect(lst.address, identity=_identity("good2"), config=_config(good, mode="tcp"))
        await conn.send([1, 2])
        assert await conn.recv() == [1, 2]
        await conn.close()
    assert "TLS handshake failed" in caplog.text


async def test_plain_side_against_tls_side_is_refused(pki):
    good, _ = pki
    async with await transports.listen("127.0.0.1", 0, _echo, identity=_identity("plain"),
                                       config=transports.TransportConfig(mode="tcp", tls_cert="", tls_key="",
                                                                         tls_ca="")) as lst:
        with pytest.raises(transports.AuthError, match="TLS"):
            await transports.connect(lst.address, identity=_identity("c"), config=_config(good, mode="tcp"))


async def test_client_without_tls_settings_is_told_the_server_needs_tls(pki):
    """A plain client gets UnauthenticatedError at once, not UnavailableError
    at its connect deadline (the TLS listener closes on it without a byte)."""
    good, _ = pki
    async with await transports.listen("127.0.0.1", 0, _echo, identity=_identity("server"),
                                       config=_config(good, mode="tcp")) as lst:
        plain = transports.TransportConfig(mode="tcp", tls_cert="", tls_key="", tls_ca="",
                                           connect_timeout_s=20)
        t0 = time.monotonic()
        with pytest.raises(transports.AuthError, match="requires TLS.*DISTRIB_TLS_CA"):
            await transports.connect(lst.address, identity=_identity("plain"), config=plain)
        assert time.monotonic() - t0 < 5
        conn = await transports.connect(lst.address, identity=_identity("good"), config=_config(good, mode="tcp"))
        await conn.send("still serving")
        assert await conn.recv() == "still serving"
        await conn.close()


async def test_big_messages_over_tls_arrive_whole_and_in_order(pki):
    """TLS hands payloads over in pieces as the socket drains (frames.TLS_CHUNK):
    big and small messages sent back to back keep their order, and what is
    queued when the connection closes still goes out."""
    good, _ = pki
    got: list = []
    done = asyncio.Event()

    async def sink(conn):
        def on_message(msg):
            got.append(msg)
            if msg == "end":
                done.set()
        conn.start(on_message, lambda exc: done.set())

    async with await transports.listen("127.0.0.1", 0, sink, identity=_identity("server"),
                                       config=_config(good, mode="tcp")) as lst:
        conn = await transports.connect(lst.address, identity=_identity("c"), config=_config(good, mode="tcp"))
        arrays = [np.full(3 << 18, i, dtype=np.float32) + np.arange(3 << 18, dtype=np.float32)
                  for i in range(4)]                            # 3 MiB each
        for i, arr in enumerate(arrays):
            conn.send_nowait({"i": i, "a": arr, "b": np.arange(100.0) * i})
            conn.send_nowait(i)
        conn.send_nowait("end")
        await conn.close()                                      # before the backlog drained
        await asyncio.wait_for(done.wait(), 30)
    assert got[-1] == "end" and len(got) == 9
    for i, arr in enumerate(arrays):
        assert got[2 * i]["i"] == i and got[2 * i + 1] == i
        assert np.array_equal(got[2 * i]["a"], arr)
        assert np.array_equal(got[2 * i]["b"], np.arange(100.0) * i)


async def test_colocated_peers_still_use_shared_memory(pki):
    good, _ = pki
    async with await transports.listen("127.0.0.1", 0, _echo, identity=_identity("server"),
                                       config=_config(good)) as lst:
        conn = await transports.connect(lst.address, identity=_identity("c"), config=_config(good))
        assert conn.kind == "shm"
        arr = np.ones(1 << 20)
        await conn.send({"a": arr})
        assert (await conn.recv())["a"].sum() == arr.sum()
        await conn.close()


def test_partial_tls_settings_are_a_clear_error(pki, monkeypatch):
    good, _ = pki
    monkeypatch.setenv("DISTRIB_TLS_CERT", good["DISTRIB_TLS_CERT"])
    monkeypatch.delenv("DISTRIB_TLS_KEY", raising=False)
    monkeypatch.delenv("DISTRIB_TLS_CA", raising=False)
    with pytest.raises(ValueError, match="DISTRIB_TLS_KEY, DISTRIB_TLS_CA missing"):
        transports.TransportConfig()


def graph_across_tasks():
    g = dt.Graph()
    with g.as_default():
        with dt.device("/job:worker/task:1"):
            a = dt.constant(np.arange(6.0).reshape(2, 3))
        with dt.device("/job:worker/task:0"):
            b = dt.reduce_sum(a * 2.0)
    return g, b


async def test_tls_cluster_of_processes(pki, tmp_path, monkeypatch):
    good, other = pki
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)
    g, b = graph_across_tasks()
    with cli_task(cfg, "worker", 0, **good) as w0, cli_task(cfg, "worker", 1, **good) as w1:
        for key, value in other.items():   # a certificate of another CA
            monkeypatch.setenv(key, value)
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            with pytest.raises(UnauthenticatedError, match="TLS"):
                await sess.run(b)
        for key in good:                   # no TLS settings at all
            monkeypatch.delenv(key)
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            with pytest.raises(UnauthenticatedError, match="requires TLS"):
                await asyncio.wait_for(sess.run(b), 15)
        for key, value in good.items():
            monkeypatch.setenv(key, value)
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            assert await sess.run(b) == 30.0
        assert w0.p.poll() is None and w1.p.poll() is None


def test_status_of_a_tls_cluster(pki, tmp_path):
    """python -m distrib.status with the cluster's TLS settings sees every
    task up and their connection as "tls"; without them each task is down,
    "unauthenticated" (at once, not at the deadline), and the exit code 1."""
    good, _ = pki
    spec = cluster_spec(worker=2)
    cfg = write_cluster(tmp_path, spec)

    def status(**env) -> subprocess.CompletedProcess:
        environ = child_env(DISTRIB_TRANSPORT="tcp", **{k: v for k, v in env.items() if v is not None})
        for key in [k for k, v in env.items() if v is None]:
            environ.pop(key, None)
        return subprocess.run([sys.executable, "-m", "distrib.status", "--cluster", cfg, "--json"],
                              capture_output=True, text=True, env=environ, cwd=ROOT, timeout=60)

    with cli_task(cfg, "worker", 0, DISTRIB_TRANSPORT="tcp", **good), \
            cli_task(cfg, "worker", 1, DISTRIB_TRANSPORT="tcp", **good):
        g, b = graph_across_tasks()

        async def step():
            async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
                return await sess.run(b)
        env = {**good, "DISTRIB_TRANSPORT": "tcp"}
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            assert asyncio.run(step()) == 30.0
        ok = status(**good)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        tasks = json.loads(ok.stdout)["tasks"]
        assert [t["state"] for t in tasks] == ["up", "up"]
        assert all(t["peers"] and {p["transport"] for p in t["peers"]} == {"tls"} for t in tasks), tasks
        t0 = time.monotonic()
        bad = status(**{key: None for key in good})
        assert time.monotonic() - t0 < 20
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert [(t["state"], t["reason"]) for t in json.loads(bad.stdout)["tasks"]] == \
            [("down", "unauthenticated")] * 2
