"""Mutual TLS (DISTRIB_TLS_CERT/KEY/CA): a CA and certificates are made here
with the openssl command. A peer with a certificate of the cluster's CA
works and its connection's kind is "tls"; one with a certificate of another
CA is refused with UnauthenticatedError (AuthError in transports) and the
server keeps serving; co-located tasks still use shared memory; a partial
set of the three variables is a clear error."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import distrib as dt
import transports
from distrib.errors import UnauthenticatedError
from tests.peers.cli_cluster import cli_task, cluster_spec, write_cluster

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _run(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_pki(directory) -> dict[str, str]:
    """A CA and one certificate signed by it: the three DISTRIB_TLS_* values."""
    directory.mkdir()
    _run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=directory)
    _run("req", "-x509", "-new", "-key", "ca.key", "-subj", f"/CN=ca-{directory.name}", "-days", "2",
         "-out", "ca.pem", cwd=directory)
    _run("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "node.key", cwd=directory)
    _run("req", "-new", "-key", "node.key", "-subj", "/CN=node", "-out", "node.csr", cwd=directory)
    (directory / "ext.cnf").write_text("basicConstraints=CA:FALSE\n")
    _run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-extfile", "ext.cnf", "-out", "node.pem", cwd=directory)
    return {"DISTRIB_TLS_CERT": str(directory / "node.pem"), "DISTRIB_TLS_KEY": str(directory / "node.key"),
            "DISTRIB_TLS_CA": str(directory / "ca.pem")}


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
        for key, value in good.items():
            monkeypatch.setenv(key, value)
        async with dt.Session("distrib://" + spec["worker"][0], graph=g) as sess:
            assert await sess.run(b) == 30.0
        assert w0.p.poll() is None and w1.p.poll() is None
