"""A real server against hostile and heavy peers (issue 21, "a hardened wire").

``python -m distrib.server`` in a child process, raw sockets from the test:
connections dropped before the handshake leave no memory behind, a lying
length prefix after a real handshake costs nothing it did not send, a half
frame is closed after ``DISTRIB_FRAME_TIMEOUT_S``, and 32 clients stepping
on one counter lose nothing while the server's memory stays flat. Memory is
the server's VmRSS from /proc.
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
import time

import msgpack
import pytest

from tests.helpers import ROOT, child_env
from transports.wire import PREAMBLE

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class ServerProc:
    """One ps task; stderr goes to a file (a pipe nobody reads could block it)."""

    def __init__(self, tmp_path, **env: str) -> None:
        self.port = free_port()
        self.log = open(tmp_path / "server.log", "w+")
        environ = child_env(**env)
        for name in ("DISTRIB_CLUSTER_TOKEN", "DISTRIB_CLUSTER_TOKEN_FILE"):
            environ.pop(name, None)
        self.p = subprocess.Popen(
            [sys.executable, "-m", "distrib.server", "--ps_hosts", f"127.0.0.1:{self.port}",
             "--job_name", "ps", "--task_index", "0", "--log_level", "WARNING"],
            cwd=ROOT, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.p.poll() is None, self.stderr()
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not listen: {self.stderr()}")

    @property
    def rss_mib(self) -> float:
        return status_kib(self.p.pid, "VmRSS") / 1024

    @property
    def vm_mib(self) -> float:
        return status_kib(self.p.pid, "VmSize") / 1024

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.log.close()


@pytest.fixture
def start(tmp_path):
    procs = []

    def starter(**env: str) -> ServerProc:
        procs.append(ServerProc(tmp_path, **env))
        return procs[-1]
    yield starter
    for proc in procs:
        proc.stop()


def frame(obj) -> bytes:
    header = msgpack.packb(obj, use_bin_type=True)
    return struct.pack("<IIQ", len(header), 0, 0) + header


def read_frame(sock: socket.socket, buf: bytearray):
    while True:
        if len(buf) >= 16:
            hlen, tn, plen = struct.unpack_from("<IIQ", buf)
            total = 16 + 8 * (tn & 0xFFFFFF) + hlen + plen
            if len(buf) >= total:
                obj = msgpack.unpackb(bytes(buf[16 + 8 * (tn & 0xFFFFFF):16 + 8 * (tn & 0xFFFFFF) + hlen]))
                del buf[:total]
                return obj
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        buf += data


def handshaken(port: int) -> socket.socket:
    """A raw socket that passed the handshake as a tcp peer on another host."""
    sock = socket.create_connection(("127.0.0.1", port), 5)
    sock.settimeout(5)
    sock.sendall(PREAMBLE + frame({"peer": ["raw-test", 1, "another-host"], "nonce": b"n" * 16}))
    buf = bytearray()
    while len(buf) < len(PREAMBLE):
        buf += sock.recv(65536)
    assert bytes(buf[:len(PREAMBLE)]) == PREAMBLE
    del buf[:len(PREAMBLE)]
    read_frame(sock, buf)                      # the server's hello
    sock.sendall(frame({"mac": None, "shm": False}))
    assert read_frame(sock, buf)["ok"] is True
    return sock


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` (None: still open)."""
    t0 = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - t0 < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def drop(port: int, n: int) -> None:
    # paced: past the listen backlog the kernel drops SYNs and each client
    # waits a second to retry
    for i in range(n):
        socket.create_connection(("127.0.0.1", port), 5).close()
        if i % 50 == 49:
            time.sleep(0.01)


def settle(server: ServerProc, seconds: float = 0.3) -> None:
    time.sleep(seconds)
    assert server.p.poll() is None, server.stderr()


# ---- the probes --------------------------------------------------------------

def test_connections_dropped_before_the_handshake_leave_no_memory(start):
    server = start()
    drop(server.port, 200)                   # warm-up: the first accepts allocate for good
    settle(server)
    before = server.rss_mib
    drop(server.port, 2000)
    settle(server, 0.5)
    after = server.rss_mib
    # it was +49 MB after 2,000 (and 330-430 MB after 2,400 in the issue)
    assert after <= before * 1.10 + 3, (before, after)


@pytest.mark.slow
def test_ten_thousand_dropped_connections(start):
    server = start()
    drop(server.port, 200)
    settle(server)
    before = server.rss_mib
    drop(server.port, 10_000)
    settle(server, 0.5)
    assert server.rss_mib <= before * 1.10, (before, server.rss_mib)   # the target


def test_a_4_gib_prefix_after_the_handshake_is_refused_and_costs_nothing(start):
    server = start()
    sock = handshaken(server.port)
    before_rss, before_vm = server.rss_mib, server.vm_mib
    claim = 2**32 - 4096                     # over the 2 GiB default limit
    sock.sendall(struct.pack("<IIQ", 16, 1, claim) + struct.pack("<Q", claim) + b"\x90" * 16)
    assert closed_within(sock, 5) is not None
    sock.close()
    settle(server)
    assert server.rss_mib < before_rss + 8 and server.vm_mib < before_vm + 64
    assert "over the limit" in server.stderr()


def test_a_lying_prefix_under_the_limit_costs_only_what_came(start):
    server = start(DISTRIB_FRAME_TIMEOUT_S="1", DISTRIB_HEARTBEAT_S="0")
    sock = handshaken(server.port)
    settle(server)
    before_rss, before_vm = server.rss_mib, server.vm_mib
    claim = 2**31 - 4096                     # passes the limit: a frame of 2 GiB is announced
    sock.sendall(struct.pack("<IIQ", 16, 1, claim) + struct.pack("<Q", claim) + b"\x90" * 16)
    sent = 24 << 20
    sock.sendall(bytes(sent))                # ... and 24 MiB of it come, then nothing
    settle(server, 0.3)
    grew_rss, grew_vm = server.rss_mib - before_rss, server.vm_mib - before_vm
    assert grew_rss < 24 + 8, grew_rss       # memory for the bytes that came
    assert grew_vm < 2 * 24 + 16, grew_vm    # and address space: not the 2 GiB claimed
    gone = closed_within(sock, 5)            # the half frame times out
    assert gone is not None and gone < 3, gone
    sock.close()
    settle(server)
    assert "no byte of a frame in progress" in server.stderr()
    assert server.rss_mib < before_rss + 8   # its block went with it


def test_a_half_frame_is_closed_after_the_frame_timeout_and_the_server_serves_on(start):
    server = start(DISTRIB_FRAME_TIMEOUT_S="0.5", DISTRIB_HEARTBEAT_S="0")   # no failure detector
    sock = handshaken(server.port)
    sock.sendall(struct.pack("<IIQ", 5000, 0, 0) + b"\x92" * 100)
    gone = closed_within(sock, 5)
    assert gone is not None and 0.4 < gone < 2.5, gone
    sock.close()
    other = handshaken(server.port)          # everyone else is still served
    other.close()
    assert "no byte of a frame in progress for 0.5s" in server.stderr()


# ---- load: 32 clients, one counter -------------------------------------------------------

async def _steps(target: str, clients: int, steps: int) -> float:
    import distrib as dt
    graph = dt.Graph()
    with graph.as_default():
        counter = dt.Variable(0.0, name="wire_load_counter")
        inc = counter.assign_add(1.0)
        read = counter.read_value()

    async def client() -> None:
        async with dt.Session(target, graph=graph) as sess:
            for _ in range(steps):
                await sess.run(inc.op)

    async with dt.Session(target, graph=graph) as sess:
        await sess.run(counter.initializer)
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(clients))), 60)
        return float(await sess.run(read))


def test_32_clients_step_on_one_counter_nothing_lost_memory_flat(start):
    server = start()
    target = f"distrib://127.0.0.1:{server.port}"
    assert asyncio.run(_steps(target, 32, 5)) == 160          # warm-up
    settle(server)
    before = server.rss_mib
    t0 = time.monotonic()
    assert asyncio.run(_steps(target, 32, 20)) == 640          # 32 x 20 assign_add(1)
    took = time.monotonic() - t0
    settle(server)
    assert server.rss_mib <= before * 1.10 + 5, (before, server.rss_mib, took)
