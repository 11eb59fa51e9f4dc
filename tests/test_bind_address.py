"""Where a task's server listens (distrib/server/bind_address.py).

The decision is a pure function of the cluster's host, the override and what
the name resolved to, so the cases that need a particular host (a name that
/etc/hosts maps to 127.0.1.1, a Kubernetes name not published yet, an
address of another host) are checked by handing in the resolution result.
The real servers below bind loopback only: a cluster that names a host
which does not resolve, with ``--bind 127.0.0.1`` or
``DISTRIB_BIND_ADDRESS=127.0.0.1``, listens on 127.0.0.1 and serves a step
there, while the address it is known by stays the cluster's. The automatic
fallback to the wildcard address runs inside a network namespace the test
makes (a host of its own), where a client on another such host reaches it.
"""
from __future__ import annotations

import errno
import socket
import subprocess
import sys

import numpy as np
import pytest

import distrib as dt
from distrib.server.bind_address import (
    BindPlan,
    bind_error_reason,
    bind_override,
    fallback_host,
    is_loopback_host,
    plan_bind,
)
from tests.helpers import ROOT, Proc, child_env
from tests.netns import NetnsProc, netns  # noqa: F401  (netns: the fixture)
from tests.peers.cli_cluster import free_ports, write_cluster

# a name that resolves nowhere (RFC 2606): a cluster's name for a host that is
# not this one, or not published yet
ELSEWHERE = "distrib-bind-test.invalid"


def listening_ips(port: int, pid: int | None = None) -> set[str]:
    """The local addresses with a TCP socket listening on ``port`` (Linux), in
    this process's network namespace or in that of process ``pid``."""
    found = set()
    net = f"/proc/{pid}/net" if pid else "/proc/net"
    for table, size in ((f"{net}/tcp", 4), (f"{net}/tcp6", 16)):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            hex_ip, hex_port = local.split(":")
            if state != "0A" or int(hex_port, 16) != port:   # 0A: LISTEN
                continue
            raw = bytes.fromhex(hex_ip)
            # /proc prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            found.add(socket.inet_ntop(socket.AF_INET if size == 4 else socket.AF_INET6, raw))
    return found


# -- the decision ----------------------------------------------------------------

@pytest.mark.parametrize("host, bound", [
    ("localhost", "127.0.0.1"),
    ("LOCALHOST", "127.0.0.1"),
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.1.1", "127.0.1.1"),     # a loopback literal is meant: kept
    ("[::1]", "::1"),
    ("10.1.2.3", "10.1.2.3"),       # a literal is bound as it is (EADDRNOTAVAIL falls back)
])
def test_loopback_names_and_literals_are_bound_as_they_are(host, bound):
    assert plan_bind(host) == BindPlan(bound)
    # no resolution is asked for, and none would change it
    assert plan_bind(host, resolved=["10.9.9.9"]) == BindPlan(bound)


def test_a_name_that_resolves_to_a_reachable_address_is_bound_by_name():
    assert plan_bind("node07", resolved=["10.0.0.7"]) == BindPlan("node07")
    assert plan_bind("node07", resolved=["127.0.1.1", "10.0.0.7"]) == BindPlan("node07")
    assert plan_bind("node07") == BindPlan("node07")      # not resolved: as before


def test_the_debian_127_0_1_1_trap_binds_the_wildcard_and_says_why():
    plan = plan_bind("node07", resolved=["127.0.1.1"])
    assert plan.host == "0.0.0.0" and plan.fallback
    assert "node07" in plan.reason and "127.0.1.1" in plan.reason and "loopback" in plan.reason
    assert plan_bind("gpu3", resolved=["::1"]).host == "::"


def test_a_name_that_does_not_resolve_binds_the_wildcard():
    err = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    plan = plan_bind("trainer-ps-0.trainer.ml.svc", resolved=err)
    assert plan.host == "0.0.0.0"
    assert "does not resolve" in plan.reason and "Name or service not known" in plan.reason
    assert plan_bind("node07", resolved=[]).host == "0.0.0.0"


def test_an_override_wins_and_does_not_fall_back():
    for host in ("localhost", "node07", "10.1.2.3"):
        plan = plan_bind(host, override="127.0.0.1", resolved=["127.0.1.1"])
        assert plan.host == "127.0.0.1" and not plan.fallback and plan.reason
    plan = plan_bind("localhost", override="0.0.0.0")
    assert plan.host == "0.0.0.0"
    assert fallback_host(plan, OSError(errno.EADDRNOTAVAIL, "x")) is None


def test_only_a_missing_address_falls_back_to_the_wildcard():
    not_here = OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    assert fallback_host(BindPlan("10.1.2.3"), not_here) == "0.0.0.0"
    assert fallback_host(BindPlan("fd00::7"), not_here) == "::"
    assert fallback_host(BindPlan("node07"), socket.gaierror(-2, "Name or service not known")) \
        == "0.0.0.0"
    # a port in use or a privileged port stays an error (exit 2 from the CLI)
    assert fallback_host(BindPlan("node07"), OSError(errno.EADDRINUSE, "in use")) is None
    assert fallback_host(BindPlan("node07"), OSError(errno.EACCES, "denied")) is None
    assert fallback_host(BindPlan("0.0.0.0", "why"), not_here) is None
    assert bind_error_reason(OSError(errno.EADDRNOTAVAIL, "error while attempting to bind on "
                                     "address ('10.1.2.3', 0): cannot assign")) \
        == "Cannot assign requested address"
    assert bind_error_reason(socket.gaierror(-2, "Name or service not known")) \
        == "Name or service not known"


def test_is_loopback_host():
    assert all(map(is_loopback_host, ["localhost", "localhost.", "a.localhost", "127.0.0.1",
                                      "127.0.1.1", "::1", "[::1]", ""]))
    assert not any(map(is_loopback_host, ["node07", "10.0.0.1", "0.0.0.0", "::", "localhost1"]))


def test_bind_override_reads_the_flag_else_the_environment():
    env = {"DISTRIB_BIND_ADDRESS": " 0.0.0.0 "}
    assert bind_override(None, env) == "0.0.0.0"
    assert bind_override("127.0.0.1", env) == "127.0.0.1"    # the flag wins
    assert bind_override(None, {}) is None and bind_override(None, {"DISTRIB_BIND_ADDRESS": ""}) \
        is None
    assert bind_override("[::]", {}) == "::" and bind_override("fd00::1", {}) == "fd00::1"
    for bad in ("127.0.0.1:2222", "node07:1", "a b"):
        with pytest.raises(ValueError, match="port|host"):
            bind_override(bad, {})
    with pytest.raises(ValueError, match="DISTRIB_BIND_ADDRESS"):
        bind_override(None, {"DISTRIB_BIND_ADDRESS": "0.0.0.0:80"})


# -- real servers -----------------------------------------------------------------

def run_step(target: str, task: str) -> np.ndarray:
    g = dt.Graph()
    with g.as_default(), dt.device(task):
        out = dt.constant([1.0, 2.0]) * 3.0
    with dt.SyncSession(target, graph=g) as sess:
        return sess.run(out)


def test_bind_flag_listens_there_and_keeps_the_cluster_address(tmp_path):
    (port,) = free_ports(1)
    cfg = write_cluster(tmp_path, {"worker": [f"{ELSEWHERE}:{port}"]})
    args = ["-m", "distrib.server", "--cluster", cfg, "--bind", "127.0.0.1"]
    with Proc(args, env=child_env(), ready_prefix="serving") as server:
        assert server.line == f"serving /job:worker/task:0 at {ELSEWHERE}:{port}"
        assert listening_ips(port) == {"127.0.0.1"}
        assert np.allclose(run_step(f"distrib://127.0.0.1:{port}", "/job:worker/task:0"),
                           [3.0, 6.0])
        err = server.stop()
    assert f"listens on 127.0.0.1:{port}, not on {ELSEWHERE}" in err, err


def test_bind_address_environment_is_honoured_by_an_in_process_server(monkeypatch):
    monkeypatch.setenv("DISTRIB_BIND_ADDRESS", "127.0.0.1")
    with dt.Server({"worker": [f"{ELSEWHERE}:0"]}, job_name="worker",
                   task_index=0) as server:
        port = int(server.target.rpartition(":")[2])
        assert server.target == f"distrib://{ELSEWHERE}:{port}"
        assert server.cluster.task_address("worker", 0) == f"{ELSEWHERE}:{port}"
        assert listening_ips(port) == {"127.0.0.1"}
        assert np.allclose(run_step(f"distrib://127.0.0.1:{port}", "/job:worker/task:0"),
                           [3.0, 6.0])


def run_server(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distrib.server", *args], env=child_env(**env),
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_a_bind_override_that_cannot_be_bound_is_exit_2(tmp_path):
    (port,) = free_ports(1)
    cfg = write_cluster(tmp_path, {"worker": [f"localhost:{port}"]})
    # TEST-NET-1 (RFC 5737): no address of this host; an override never falls back
    res = run_server("--cluster", cfg, DISTRIB_BIND_ADDRESS="192.0.2.1")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: cannot listen on 192.0.2.1:{port} (cluster address "
                               f"localhost:{port}) for /job:worker/task:0: "), lines[0]
    res = run_server("--cluster", cfg, "--bind", "127.0.0.1:80")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("error: --bind='127.0.0.1:80' is not a host"), lines[0]


def test_a_name_that_does_not_resolve_falls_back_to_the_wildcard(netns, tmp_path):  # noqa: F811
    """No override: the server of a cluster naming a host that does not
    resolve listens on 0.0.0.0 (in its own namespace), says why, and a client
    on another host reaches it by that host's address."""
    net = netns(2)
    (port,) = free_ports(1)
    cfg = write_cluster(tmp_path, {"worker": [f"{ELSEWHERE}:{port}"]})
    args = ["-m", "distrib.server", "--cluster", cfg]
    with NetnsProc(net, 1, args, env=child_env(), ready_prefix="serving") as server:
        assert server.line == f"serving /job:worker/task:0 at {ELSEWHERE}:{port}"
        assert listening_ips(port, server.p.pid) == {"0.0.0.0"}
        step = ("import sys; sys.path.insert(0, '.'); from tests.test_bind_address import run_step; "
                f"print(run_step('distrib://{net.address(1)}:{port}', '/job:worker/task:0').tolist())")
        out = net.run(0, [sys.executable, "-c", step], cwd=ROOT, env=child_env(),
                      capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.strip() == "[3.0, 6.0]", out.stdout + out.stderr
        err = server.stop()
    assert f"listens on 0.0.0.0:{port}, not on {ELSEWHERE}" in err and "does not resolve" in err, err
