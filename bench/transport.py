"""Transport benchmark: our TCP and shared-memory connections against their limits.

Between this process and a peer process on the same host, for 1 KiB, 1 MiB,
64 MiB and 256 MiB messages, the one-way throughput of

* ``tcp``        our Connection, mode="tcp"
* ``shm``        our Connection, mode="shm" (arrays through memfd segments)
* ``raw-socket`` a blocking socket: sendall / recv_into a preallocated buffer
* ``memcpy``     in-process ``np.copyto`` into a preallocated array (the copy limit)

and the small-message round trip of our Connection (``transport-rtt``) beside
a minimal uvloop + msgpack length-prefixed echo (``raw-echo``). Medians of
repeated runs after a warm-up. Prints a table; ``--json PATH`` writes
``{"rows": [{"transport", "size", "GBps", "us"}, ...]}``. Never asserts.

``--netns`` (root): the same between two hosts made of network namespaces on
a bridge (``bench/netns.py``): this bench runs in host 0, every peer in host
1, and the rows are ``tcp`` (our Connection; across namespaces ``auto`` picks
tcp, as it does between hosts), ``raw-socket``, ``transport-rtt``,
``actor-call`` and ``raw-echo``. Target: ``tcp >= 0.9x raw-socket``.

With mutual TLS on (``--netns`` always, ``--tls`` on loopback; a throwaway CA
made by ``bench/pki.py`` with the openssl command): ``tls`` (our Connection,
``DISTRIB_TLS_*`` set on both sides) beside ``raw-tls`` (the blocking raw
socket wrapped in ``ssl`` with the same certificates), and ``tls-rtt`` beside
``raw-tls-echo`` (the uvloop echo over TLS). Target: ``tls >= 0.5x`` of
``raw-tls``; the ratio to the plain ``raw-socket`` is printed too (the cipher
costs both TLS rows alike).

    python bench/transport.py [--quick] [--tls] [--json PATH]
    python bench/transport.py --netns [--quick] [--rounds N] [--json PATH]

``raw_echo_rtt_us`` and ``print_table`` are importable for other benches.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
from typing import Any, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import msgpack  # noqa: E402
import numpy as np  # noqa: E402
import uvloop  # noqa: E402

from transports import PeerInfo, TransportConfig, connect, listen, local_host_id, new_incarnation  # noqa: E402

SIZES = [1 << 10, 1 << 20, 64 << 20, 256 << 20]
_LEN = struct.Struct("<I")
# where peers run: a command prefix (``ip netns exec HOST``) and the address
# they listen on; --netns sets both to the second namespace
_PEER_AT: dict[str, Any] = {"prefix": [], "host": "127.0.0.1"}


def _count(size: int) -> int:
    """Messages per timed run: enough bytes to time, bounded in run time."""
    return max(1, min(2000, (128 << 20) // size))


def _identity(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


# ---- peer process ---------------------------------------------------------------

async def _peer_transport(mode: str, host: str) -> None:
    """Echo every message that is not an array; drop arrays (a sink for them)."""
    def on_connection(conn):
        def on_message(msg: Any) -> None:
            if not isinstance(msg, np.ndarray):
                conn.send_nowait(msg)
        conn.start(on_message, lambda exc: None)

    listener = await listen(host, 0, on_connection, identity=_identity("bench-peer"),
                            config=TransportConfig(mode=mode))
    print("ADDRESS", listener.address, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await listener.close()


class _EchoProtocol(asyncio.Protocol):
    """The raw-echo baseline: length-prefixed msgpack, decoded and re-encoded."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = b""

    def data_received(self, data):
        buf = self.buf + data
        while len(buf) >= 4:
            (n,) = _LEN.unpack_from(buf)
            if len(buf) < 4 + n:
                break
            body = msgpack.packb(msgpack.unpackb(buf[4:4 + n]))
            self.transport.write(_LEN.pack(len(body)) + body)
            buf = buf[4 + n:]
        self.buf = buf


def _tls_context(server: bool):
    """The ssl context of a raw TLS row, from the DISTRIB_TLS_* environment."""
    from transports.tls import client_context, server_context
    files = (os.environ["DISTRIB_TLS_CERT"], os.environ["DISTRIB_TLS_KEY"], os.environ["DISTRIB_TLS_CA"])
    return server_context(*files) if server else client_context(*files)


async def _peer_raw_echo(host: str, tls: bool = False) -> None:
    server = await asyncio.get_running_loop().create_server(
        _EchoProtocol, host, 0, ssl=_tls_context(True) if tls else None)
    print("ADDRESS", "%s:%d" % (host, server.sockets[0].getsockname()[1]), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    server.close()


def _peer_raw_socket(host: str, tls: bool = False) -> None:
    """Per round: read (size, count), receive count*size bytes into one buffer, ack."""
    lsock = socket.create_server((host, 0))
    print("ADDRESS", "%s:%d" % (host, lsock.getsockname()[1]), flush=True)
    conn, _ = lsock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        conn = _tls_context(True).wrap_socket(conn, server_side=True)
    buf = bytearray(max(SIZES))
    view = memoryview(buf)
    while True:
        head = b""
        while len(head) < 16:    # (an ssl socket takes no MSG_WAITALL)
            more = conn.recv(16 - len(head))
            if not more:
                return
            head += more
        size, count = struct.unpack("<QQ", head)
        for _ in range(count):
            got = 0
            while got < size:
                n = conn.recv_into(view[got:size])
                if not n:
                    return
                got += n
        conn.sendall(b"k")


@contextlib.contextmanager
def _peer(*args: str) -> Iterator[str]:
    proc = subprocess.Popen([*_PEER_AT["prefix"], sys.executable, os.path.abspath(__file__),
                             "--bind", _PEER_AT["host"], "--peer", *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("ADDRESS "):
            raise RuntimeError(f"bench peer did not start: {line!r}")
        yield line.split()[1]
    finally:
        proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


# ---- measurements ---------------------------------------------------------------

def _median_time(run, reps: int) -> float:
    run()  # warm-up: faults pages in, fills pools
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _row(transport: str, size: int, seconds: float, count: int) -> dict:
    return {"transport": transport, "size": size, "GBps": size * count / seconds / 1e9,
            "us": seconds / count * 1e6}


def bench_memcpy(size: int, reps: int) -> dict:
    src = np.ones(size, np.uint8)
    dst = np.empty_like(src)
    count = _count(size)

    def run():
        for _ in range(count):
            np.copyto(dst, src)
    return _row("memcpy", size, _median_time(run, reps), count)


def bench_raw_socket(sizes: list[int], reps: int, tls: bool = False) -> list[dict]:
    rows = []
    name = "raw-tls" if tls else "raw-socket"
    with _peer(name) as address:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            sock = _tls_context(False).wrap_socket(sock, server_hostname=host)
        for size in sizes:
            data = memoryview(np.ones(size, np.uint8))
            count = _count(size)

            def run():
                sock.sendall(struct.pack("<QQ", size, count))
                for _ in range(count):
                    sock.sendall(data)
                assert sock.recv(1) == b"k"
            rows.append(_row(name, size, _median_time(run, reps), count))
        sock.close()
    return rows


async def _amedian_time(run, reps: int) -> float:
    await run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def bench_transport(mode: str, sizes: list[int], reps: int) -> list[dict]:
    rows = []
    with _peer("transport", mode) as address:
        conn = await connect(address, identity=_identity("bench"), config=TransportConfig(mode=mode))
        name = "tls" if mode == "tcp" and TransportConfig().tls else mode   # DISTRIB_TLS_* set
        assert conn.kind == name, conn.kind
        for size in sizes:
            arr = np.ones(size, np.uint8)
            count = _count(size)

            async def run():
                for _ in range(count):
                    await conn.send(arr)
                await conn.send("sync")
                assert await conn.recv() == "sync"
            rows.append(_row(name, size, await _amedian_time(run, reps), count))
        await conn.close()
    return rows


_PING = {"op": "ping", "i": 1}
_KINDS: dict[str, str] = {}   # the kind of connection ``auto`` chose for the rtt rows


def _transport_rtt_run(conn, n: int):
    async def run():
        for _ in range(n):
            await conn.send(_PING)
            await conn.recv()
    return run


class _EchoClient(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.buf = b""

    def data_received(self, data):
        self.buf += data
        if len(self.buf) >= 4 and len(self.buf) >= 4 + _LEN.unpack_from(self.buf)[0]:
            n = _LEN.unpack_from(self.buf)[0]
            msg, self.buf = msgpack.unpackb(self.buf[4:4 + n]), self.buf[4 + n:]
            self.waiter.set_result(msg)


async def _raw_echo_client(address: str, n: int, tls: bool = False):
    loop = asyncio.get_running_loop()
    host, port = address.rsplit(":", 1)
    transport, proto = await loop.create_connection(
        _EchoClient, host, int(port), **({"ssl": _tls_context(False), "server_hostname": host} if tls else {}))

    async def run():
        for _ in range(n):
            proto.waiter = loop.create_future()
            body = msgpack.packb(_PING)
            transport.write(_LEN.pack(len(body)) + body)
            await proto.waiter
    return transport, run


async def _raw_echo_rtt(address: str, n: int, reps: int) -> float:
    transport, run = await _raw_echo_client(address, n)
    seconds = await _amedian_time(run, reps)
    transport.close()
    return seconds / n * 1e6


class _Pong:
    def ping(self, x):
        return x


async def _peer_actor(host: str) -> None:
    from distrib.runtime.actors.system import ActorSystem
    system = await ActorSystem("/job:pong/task:0", host=host).start()
    system.spawn("pong", _Pong(), ["ping"])
    print(f"ADDRESS {system.address}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await system.shutdown()


def _actor_call_run(ref, n: int):
    async def run():
        for _ in range(n):
            await ref.call("ping", _PING)
    return run


async def bench_rtt(n: int, reps: int) -> list[dict]:
    """transport-rtt (mode auto, as the runtime uses it), actor-call (one call of
    distrib's actor runtime on top of it) and raw-echo, runs interleaved so that
    all three see the same machine load."""
    from distrib.runtime.actors.system import ActorSystem
    with _peer("transport", "auto") as address, _peer("raw-echo") as echo_address, \
            _peer("actor") as actor_address:
        conn = await connect(address, identity=_identity("bench"))
        _KINDS["transport-rtt"] = conn.kind
        echo_transport, echo_run = await _raw_echo_client(echo_address, n)
        system = await ActorSystem("/job:bench/task:0", listen=False).start()
        ours_run = _transport_rtt_run(conn, n)
        actor_run = _actor_call_run(system.ref(actor_address, "pong"), n)
        times = await _interleaved([ours_run, actor_run, echo_run], reps)
        echo_transport.close()
        await conn.close()
        await system.shutdown()
    return _rtt_rows(("transport-rtt", "actor-call", "raw-echo"), times, n)


def _rtt_rows(names: tuple, times: list[list[float]], n: int) -> list[dict]:
    size = len(msgpack.packb(_PING))
    return [{"transport": name, "size": size, "GBps": 0.0, "us": statistics.median(ts) / n * 1e6}
            for name, ts in zip(names, times)]


async def _interleaved(runs: list, reps: int) -> list[list[float]]:
    """Each run once to warm up, then ``reps`` rounds of every run in turn
    (so all see the same machine load): the times of each."""
    for run in runs:
        await run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(reps):
        for run, ts in zip(runs, times):
            t0 = time.perf_counter()
            await run()
            ts.append(time.perf_counter() - t0)
    return times


async def bench_rtt_tls(n: int, reps: int) -> list[dict]:
    """tls-rtt (our Connection over mutual TLS) beside raw-tls-echo (the uvloop
    msgpack echo over TLS), interleaved. Needs DISTRIB_TLS_* in the environment."""
    with _peer("transport", "tcp") as address, _peer("raw-echo-tls") as echo_address:
        conn = await connect(address, identity=_identity("bench"), config=TransportConfig(mode="tcp"))
        assert conn.kind == "tls", conn.kind
        echo_transport, echo_run = await _raw_echo_client(echo_address, n, tls=True)
        times = await _interleaved([_transport_rtt_run(conn, n), echo_run], reps)
        echo_transport.close()
        await conn.close()
    return _rtt_rows(("tls-rtt", "raw-tls-echo"), times, n)


@contextlib.contextmanager
def throwaway_ca() -> Iterator[dict[str, str] | None]:
    """The DISTRIB_TLS_* values of a CA made in a temporary folder for the
    run (removed after); None (a note on stderr) without the openssl command."""
    import tempfile

    from bench.pki import have_openssl, make_pki
    if not have_openssl():
        print("tls rows skipped: the openssl command is not installed", file=sys.stderr)
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="distrib-bench-pki-") as tmp:
        yield make_pki(os.path.join(tmp, "cluster"))


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ (this process and the peers it starts), then restored."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_tls(sizes: list[int], reps: int, ca: dict[str, str] | None,
              rtt_n: int = 2000) -> list[dict]:
    """The TLS rows (tls, raw-tls, tls-rtt, raw-tls-echo) with the certificates
    of ``ca`` (:func:`throwaway_ca`); none without one."""
    if ca is None:
        return []
    with _environ(ca):
        rows = bench_raw_socket(sizes, reps, tls=True)

        async def ours() -> list[dict]:
            return await bench_transport("tcp", sizes, reps) + await bench_rtt_tls(rtt_n, reps)
        return rows + uvloop.run(ours())


def raw_echo_rtt_us(n: int = 2000, reps: int = 5) -> float:
    """Round trip (us) of a minimal uvloop + msgpack echo to a peer process."""
    with _peer("raw-echo") as address:
        return uvloop.run(_raw_echo_rtt(address, n, reps))


def print_table(rows: list[dict], file=sys.stdout) -> None:
    print(f"{'transport':<14}{'size':>12}{'GB/s':>10}{'us/msg':>12}", file=file)
    for r in rows:
        size = r["size"]
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"
        print(f"{r['transport']:<14}{label:>12}{r['GBps']:>10.2f}{r['us']:>12.1f}", file=file)


def _summary(rows: list[dict]) -> list[str]:
    get = {(r["transport"], r["size"]): r for r in rows}
    lines = []
    big = 64 << 20
    if ("shm", big) in get and ("memcpy", big) in get:
        lines.append(f"shm / memcpy at 64 MiB: {get['shm', big]['GBps'] / get['memcpy', big]['GBps']:.2f}x")
    if ("tcp", big) in get and ("raw-socket", big) in get:
        lines.append(f"tcp / raw-socket at 64 MiB: {get['tcp', big]['GBps'] / get['raw-socket', big]['GBps']:.2f}x")
    for size, label in ((1 << 20, "1 MiB"), (64 << 20, "64 MiB")):
        if ("tls", size) in get and ("raw-tls", size) in get:
            line = f"tls / raw-tls at {label}: {get['tls', size]['GBps'] / get['raw-tls', size]['GBps']:.2f}x"
            if size == big:
                line += " (target >= 0.5x)"
                if ("raw-socket", size) in get:
                    line += (f"; tls / raw-socket {get['tls', size]['GBps'] / get['raw-socket', size]['GBps']:.2f}x,"
                             f" raw-tls / raw-socket {get['raw-tls', size]['GBps'] / get['raw-socket', size]['GBps']:.2f}x")
            lines.append(line)
    tls_rtt = [r for r in rows if r["transport"] == "tls-rtt"]
    tls_echo = [r for r in rows if r["transport"] == "raw-tls-echo"]
    if tls_rtt and tls_echo:
        lines.append(f"tls-rtt / raw-tls-echo: {tls_rtt[0]['us'] / tls_echo[0]['us']:.2f}x")
    rtt = [r for r in rows if r["transport"] == "transport-rtt"]
    echo = [r for r in rows if r["transport"] == "raw-echo"]
    actor = [r for r in rows if r["transport"] == "actor-call"]
    if rtt and echo:
        lines.append(f"transport-rtt / raw-echo: {rtt[0]['us'] / echo[0]['us']:.2f}x")
    if actor and echo:
        lines.append(f"actor-call / raw-echo: {actor[0]['us'] / echo[0]['us']:.2f}x (target <= 2x)")
    return lines


def _summary_netns(rows: list[dict]) -> list[str]:
    get = {(r["transport"], r["size"]): r for r in rows}
    lines = [f"tcp / raw-socket at {label}: {get['tcp', size]['GBps'] / get['raw-socket', size]['GBps']:.2f}x"
             + (" (target >= 0.9x)" if size == 64 << 20 else "")
             for size, label in ((1 << 20, "1 MiB"), (64 << 20, "64 MiB"), (256 << 20, "256 MiB"))
             if ("tcp", size) in get and ("raw-socket", size) in get]
    lines += [line for line in _summary(rows) if not line.startswith(("tcp /", "shm /"))]
    lines.append(f"connection chosen by mode auto between the namespaces: {_KINDS.get('transport-rtt')}")
    return lines


def _median_rows(rounds: list[list[dict]]) -> list[dict]:
    """One row per (transport, size): the median figures over the rounds."""
    by: dict[tuple, list[dict]] = {}
    for rows in rounds:
        for r in rows:
            by.setdefault((r["transport"], r["size"]), []).append(r)
    return [{"transport": t, "size": size, "GBps": statistics.median(r["GBps"] for r in rs),
             "us": statistics.median(r["us"] for r in rs), "rounds": len(rs)}
            for (t, size), rs in by.items()]


def _netns_client(peer_ns: str, peer_host: str, reps: int, json_path: str | None,
                  rounds: int = 3) -> None:
    """Runs inside the first namespace; every peer runs in ``peer_ns``. Each
    round measures every row (a baseline next to what it is compared with);
    the table has the median of each row over the rounds."""
    _PEER_AT.update(prefix=["ip", "netns", "exec", peer_ns], host=peer_host)

    async def ours() -> list[dict]:
        return await bench_transport("tcp", SIZES, reps) + await bench_rtt(2000, reps)
    measured = []
    with throwaway_ca() as ca:          # one CA for every round
        for _ in range(rounds):
            measured.append(bench_raw_socket(SIZES, reps) + uvloop.run(ours())
                            + bench_tls(SIZES, reps, ca))
    rows = _median_rows(measured)
    order = ["tcp", "raw-socket", "tls", "raw-tls", "transport-rtt", "actor-call", "raw-echo",
             "tls-rtt", "raw-tls-echo"]
    rows.sort(key=lambda r: (order.index(r["transport"]), r["size"]))
    print(f"between two network namespaces (veth pairs on a bridge), median of {rounds} rounds:")
    print_table(rows)
    for line in _summary_netns(rows):
        print(line)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"rows": rows, "netns": True}, f, indent=1)


def _run_netns(args: argparse.Namespace) -> int:
    from bench.netns import NetnsUnavailable, Network
    try:
        net = Network(2)
    except NetnsUnavailable as e:
        print(f"--netns needs network namespaces (root): {e}", file=sys.stderr)
        return 2
    with net:
        argv = [sys.executable, os.path.abspath(__file__), "--netns-client", net.name(1),
                net.address(1)]
        if args.quick:
            argv.append("--quick")
        argv += ["--rounds", str(args.rounds)]
        if args.json:
            argv += ["--json", os.path.abspath(args.json)]
        return net.run(0, argv, cwd=ROOT).returncode


async def _main_async(reps: int) -> list[dict]:
    rows = []
    for mode in ("tcp", "shm"):
        rows += await bench_transport(mode, SIZES, reps)
    return rows + await bench_rtt(2000, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--netns", action="store_true",
                        help="between two network namespaces (needs root): tcp vs a raw socket")
    parser.add_argument("--tls", action="store_true",
                        help="also the TLS rows on loopback (tls, raw-tls, tls-rtt, raw-tls-echo)")
    parser.add_argument("--peer", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--bind", default="127.0.0.1", help=argparse.SUPPRESS)
    parser.add_argument("--netns-client", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3,
                        help="--netns: rounds of every row, the median shown (default 3)")
    args = parser.parse_args()
    if args.peer:
        role = args.peer[0]
        if role == "transport":
            uvloop.run(_peer_transport(args.peer[1], args.bind))
        elif role in ("raw-echo", "raw-echo-tls"):
            uvloop.run(_peer_raw_echo(args.bind, tls=role == "raw-echo-tls"))
        elif role == "actor":
            uvloop.run(_peer_actor(args.bind))
        else:
            _peer_raw_socket(args.bind, tls=role == "raw-tls")
        return
    reps = 3 if args.quick else 7
    if args.netns:
        sys.exit(_run_netns(args))
    if args.netns_client:
        _netns_client(*args.netns_client, reps, args.json, max(1, args.rounds))
        return
    rows = [bench_memcpy(size, reps) for size in SIZES]
    rows += bench_raw_socket(SIZES, reps)
    rows += uvloop.run(_main_async(reps))
    if args.tls:
        with throwaway_ca() as ca:
            rows += bench_tls(SIZES, reps, ca)
    order = ["shm", "tcp", "raw-socket", "tls", "raw-tls", "memcpy", "transport-rtt", "actor-call",
             "raw-echo", "tls-rtt", "raw-tls-echo"]
    rows.sort(key=lambda r: (order.index(r["transport"]), r["size"]))
    print_table(rows)
    for line in _summary(rows):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
