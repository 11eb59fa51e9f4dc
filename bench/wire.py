"""A real server against hostile and heavy peers: what it costs in memory.

``python -m distrib.server`` (one ps task) in a child process, raw sockets
from here, the server's VmRSS / VmSize from /proc (issue 21, "a hardened
wire"):

* ``dropped-10000``: 10,000 connections that connect and close before the
  handshake (after 200 to warm up). Target: RSS within 10% of the start.
* ``lying-4GiB``: after a real handshake, a frame whose prefix claims just
  under 4 GiB (over the 2 GiB default limit): refused, nothing reserved.
* ``lying-2GiB+24MiB``: a prefix claiming 2 GiB (under the limit) and 24 MiB
  of it sent: memory for what came only, and the half frame times out.
* ``clients-32x20``: 32 sessions x 20 ``assign_add`` steps on one counter
  (after a warm-up of 32 x 5): the counter adds up, memory flat.

Prints a table; ``--json PATH`` writes the rows. Never asserts. The helpers
(``ServerProc``, ``handshaken``, ``drop`` ...) are the raw peer that
``tests/test_wire_limits.py`` uses too.

    python bench/wire.py [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import msgpack  # noqa: E402

from transports.wire import PREAMBLE  # noqa: E402

__all__ = ["ServerProc", "closed_within", "count_steps", "drop", "frame", "free_port", "handshaken",
           "read_frame", "settle", "status_kib"]


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

    def __init__(self, log_dir: str | os.PathLike, **env: str) -> None:
        self.port = free_port()
        self.log = open(os.path.join(log_dir, f"server-{self.port}.log"), "w+")
        environ = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        environ.update(env)
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
    if server.p.poll() is not None:
        raise RuntimeError(f"the server exited: {server.stderr()}")


# ---- the measurements ------------------------------------------------------------

def _row(name: str, before: float, after: float, vm_grew: float, note: str) -> dict:
    return {"name": name, "rss_before_mib": before, "rss_after_mib": after,
            "ratio": after / before if before else 0.0, "vm_grew_mib": vm_grew, "note": note}


def dropped(log_dir: str, n: int = 10_000) -> dict:
    server = ServerProc(log_dir)
    try:
        drop(server.port, 200)
        settle(server)
        before, vm = server.rss_mib, server.vm_mib
        t0 = time.monotonic()
        drop(server.port, n)
        took = time.monotonic() - t0
        settle(server, 0.5)
        return _row(f"dropped-{n}", before, server.rss_mib, server.vm_mib - vm,
                    f"{n / took:.0f} connections/s; target <= 1.10x")
    finally:
        server.stop()


def lying(log_dir: str, claim: int, sent: int, name: str) -> dict:
    server = ServerProc(log_dir, DISTRIB_FRAME_TIMEOUT_S="1", DISTRIB_HEARTBEAT_S="0")
    try:
        sock = handshaken(server.port)
        settle(server)
        before, vm = server.rss_mib, server.vm_mib
        sock.sendall(struct.pack("<IIQ", 16, 1, claim) + struct.pack("<Q", claim) + b"\x90" * 16)
        if sent:
            try:
                sock.sendall(bytes(sent))
            except OSError:
                pass                          # refused at the prefix: nothing more goes
        settle(server, 0.3)
        after, vm_grew = server.rss_mib, server.vm_mib - vm
        gone = closed_within(sock, 5)
        sock.close()
        return _row(name, before, after, vm_grew,
                    f"closed after {gone:.1f} s" if gone is not None else "still open after 5 s")
    finally:
        server.stop()


async def count_steps(target: str, clients: int, steps: int) -> float:
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


def clients(log_dir: str, n: int = 32, steps: int = 20) -> dict:
    server = ServerProc(log_dir)
    try:
        target = f"distrib://127.0.0.1:{server.port}"
        asyncio.run(count_steps(target, n, 5))
        settle(server)
        before, vm = server.rss_mib, server.vm_mib
        t0 = time.monotonic()
        total = asyncio.run(count_steps(target, n, steps))
        took = time.monotonic() - t0
        settle(server)
        return _row(f"clients-{n}x{steps}", before, server.rss_mib, server.vm_mib - vm,
                    f"counter {total:g} of {n * steps}; {n * steps / took:.0f} steps/s")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="distrib-bench-wire-") as log_dir:
        rows = [dropped(log_dir),
                lying(log_dir, 2**32 - 4096, 0, "lying-4GiB"),
                lying(log_dir, 2**31 - 4096, 24 << 20, "lying-2GiB+24MiB"),
                clients(log_dir)]
    print(f"{'probe':<20}{'RSS before':>12}{'RSS after':>11}{'ratio':>8}{'VM grew':>10}  note")
    for r in rows:
        print(f"{r['name']:<20}{r['rss_before_mib']:>9.1f} MiB{r['rss_after_mib']:>7.1f} MiB"
              f"{r['ratio']:>7.2f}x{r['vm_grew_mib']:>6.0f} MiB  {r['note']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
