"""All-reduce benchmark: dt.collective.all_reduce between server processes of this host.

For 2 and 4 participants (each a ``python -m distrib.server`` process), over
shared memory (``DISTRIB_TRANSPORT=auto``) and forced TCP, for 1 KiB to
256 MiB float32 tensors, the time of one all-reduce and, as nccl-tests
reports them,

* ``algbw`` = size / time
* ``busbw`` = algbw x 2(n-1)/n (the bytes each participant must move in a
  ring: figures compare across n, and with a link's bandwidth)

beside ``memcpy`` (np.copyto in this process), a raw blocking TCP socket
between two processes, and one actor call round trip (bench/transport.py's
measurements, taken in the same run), and ``raw-exchange``: two processes
moving exactly the traffic of a 2-participant ring all-reduce over raw
blocking TCP sockets (each sends and receives size/2 at once, twice) and
nothing else, the bound for the TCP rows: on a 2-core VM loopback TCP in
both directions at once runs at about a third of the one-way raw socket.

``--rounds R`` repeats the whole run R times, interleaving shm and tcp (and
the baselines), and reports each row's median over the rounds: on a noisy
VM, numbers taken minutes apart are not comparable.

Each participant runs its own graph (between-graph, as
MultiWorkerMirroredStrategy does): a variable of the size (so nothing is fed
or fetched but a NoOp) through a chain of K all-reduces per step, K large
for small tensors so that the step's own overhead is amortized; the time is
the median step's wall time over K. Never asserts.

    python bench/allreduce.py [--quick] [--sizes 1K,1M,64M] [--rounds 3] [--json PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from typing import Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
for p in (ROOT, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import transport as transport_bench  # noqa: E402  (bench/transport.py)
import uvloop  # noqa: E402

import distrib as dt  # noqa: E402
from distrib.demo import free_ports  # noqa: E402
from tests.helpers import Proc, child_env  # noqa: E402

SIZES = [1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20]
QUICK_SIZES = [1 << 10, 1 << 20, 16 << 20, 64 << 20]


def _label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB" \
        if size >= 1 << 10 else f"{size} B"


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * mult


def _chain(size: int) -> int:
    """All-reduces per step: amortize the step overhead, bound the run time."""
    return 50 if size <= 64 << 10 else 10 if size <= 4 << 20 else 2


@contextlib.contextmanager
def _servers(n: int, transport: str) -> Iterator[list[str]]:
    spec = {"worker": [f"localhost:{p}" for p in free_ports(n)]}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "cluster.json")
        with open(cfg, "w") as f:
            json.dump(spec, f)
        env = child_env(DISTRIB_TRANSPORT=transport)
        procs: list[Proc] = []
        try:
            for t in range(n):
                procs.append(Proc(["-m", "distrib.server", "--cluster", cfg, "--job_name",
                                   "worker", "--task_index", str(t), "--log_level", "WARNING"],
                                  env=env, ready_prefix="serving"))
            yield [f"distrib://{a}" for a in spec["worker"]]
        finally:
            for p in procs:
                p.stop()


async def _bench_group(targets: list[str], sizes: list[int], reps: int,
                       first_instance: int) -> list[tuple[int, float]]:
    n = len(targets)
    out = []
    for k, size in enumerate(sizes):
        chain = _chain(size)
        sessions, fetches = [], []
        for t, target in enumerate(targets):
            g = dt.Graph()
            with g.as_default(), dt.device(f"/job:worker/task:{t}"):
                v = dt.Variable(dt.ones([size // 4]), name=f"v{size}")
                y = v.value() if hasattr(v, "value") else v
                for c in range(chain):
                    y = dt.collective.all_reduce(y, n, 1, first_instance + 1000 * k + c)
                fetch = dt.group(y)
                init = dt.global_variables_initializer()
            sess = dt.Session(target, graph=g)
            await sess.run(init)
            sessions.append(sess)
            fetches.append(fetch)

        async def step() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(s.run(f) for s, f in zip(sessions, fetches)))
            return time.perf_counter() - t0
        await step()   # warm-up: connections, segments, pages
        times = [await step() for _ in range(reps)]
        for s in sessions:
            await s.close()
        out.append((size, statistics.median(times) / chain))
    return out


def bench_raw_exchange(size: int, reps: int) -> dict:
    """Two processes (this one and a fork) over raw blocking TCP, moving a
    2-participant ring all-reduce's traffic of ``size`` bytes: each sends
    size/2 while it receives size/2, twice. No framing, no reduction."""
    half = size // 2
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)

    def exchange(sock: socket.socket, out: np.ndarray, into: memoryview) -> None:
        for _ in range(2):
            sender = threading.Thread(target=sock.sendall, args=(out,))
            sender.start()
            got = 0
            while got < half:
                got += sock.recv_into(into[got:], half - got)
            sender.join()

    out = np.ones(half, np.uint8)
    into = memoryview(np.zeros(half, np.uint8))
    pid = os.fork()
    if pid == 0:   # the peer: as many exchanges as the parent times, then exit
        code = 1
        try:
            sock = socket.create_connection(lst.getsockname())
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(reps + 1):
                exchange(sock, out, into)
            code = 0
        finally:
            os._exit(code)
    try:
        sock, _ = lst.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            exchange(sock, out, into)
            times.append(time.perf_counter() - t0)
        sock.close()
    finally:
        lst.close()
        os.waitpid(pid, 0)
    sec = statistics.median(times[1:])
    return {"transport": "raw-exchange", "size": size, "GBps": size / sec / 1e9,
            "us": sec * 1e6}


def _median_rows(rounds: list[list[dict]], value: str) -> list[dict]:
    """Each row (by transport, n, size) with the median of ``value`` over the rounds."""
    out = []
    for i, row in enumerate(rounds[0]):
        vals = [r[i][value] for r in rounds]
        med = statistics.median(vals)
        out.append({**row, value: med, "rounds": vals})
    return out


def _rows(transport: str, n: int, timings: list[tuple[int, float]]) -> list[dict]:
    return [{"transport": transport, "n": n, "size": size, "us": sec * 1e6,
             "algbw_GBps": size / sec / 1e9, "busbw_GBps": size / sec / 1e9 * 2 * (n - 1) / n}
            for size, sec in timings]


def print_table(rows: list[dict], baselines: list[dict], file=sys.stdout) -> None:
    print(f"{'transport':<10}{'n':>3}{'size':>10}{'time us':>12}{'algbw GB/s':>12}"
          f"{'busbw GB/s':>12}", file=file)
    for r in rows:
        print(f"{r['transport']:<10}{r['n']:>3}{_label(r['size']):>10}{r['us']:>12.1f}"
              f"{r['algbw_GBps']:>12.3f}{r['busbw_GBps']:>12.3f}", file=file)
    print(file=file)
    transport_bench.print_table(baselines, file=file)


def summary(rows: list[dict], baselines: list[dict]) -> list[str]:
    get = {(r["transport"], r["n"], r["size"]): r for r in rows}
    base = {(b["transport"], b["size"]): b for b in baselines}
    lines = []
    big = 64 << 20
    if ("shm", 2, big) in get and ("memcpy", big) in base:
        lines.append(f"64 MiB, 2 participants, shm: algbw / memcpy = "
                     f"{get['shm', 2, big]['algbw_GBps'] / base['memcpy', big]['GBps']:.2f}x "
                     "(target >= 0.6x)")
    if ("tcp", 2, big) in get and ("raw-socket", big) in base:
        lines.append(f"64 MiB, 2 participants, tcp: algbw / raw socket = "
                     f"{get['tcp', 2, big]['algbw_GBps'] / base['raw-socket', big]['GBps']:.2f}x")
    if ("tcp", 2, big) in get and ("raw-exchange", big) in base:
        lines.append(f"64 MiB, 2 participants, tcp: algbw / raw exchange (the same traffic "
                     f"over raw sockets) = {get['tcp', 2, big]['algbw_GBps'] / base['raw-exchange', big]['GBps']:.2f}x "
                     "(target >= 0.95x)")
    actor = [b for b in baselines if b["transport"] == "actor-call"]
    for tr in ("shm", "tcp"):
        small = get.get((tr, 2, 1 << 10))
        if small and actor:
            lines.append(f"1 KiB, 2 participants, {tr}: {small['us']:.0f} us = "
                         f"{small['us'] / actor[0]['us']:.2f}x one actor call round trip "
                         f"({actor[0]['us']:.0f} us; target <= 1.5x)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--sizes", help="comma-separated sizes, e.g. 1K,1M,64M")
    parser.add_argument("--participants", default="2,4", help="group sizes, e.g. 2,4")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat everything this many times, interleaved; report medians")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args()
    sizes = [_parse_size(s) for s in args.sizes.split(",")] if args.sizes else \
        QUICK_SIZES if args.quick else SIZES
    reps = 3 if args.quick else 5
    big = sorted({s for s in sizes if s >= 1 << 20})
    row_rounds: list[list[dict]] = []
    base_rounds: list[list[dict]] = []
    for _ in range(args.rounds):
        rows: list[dict] = []
        for transport, mode in (("shm", "auto"), ("tcp", "tcp")):
            for n in (int(x) for x in args.participants.split(",")):
                with _servers(n, mode) as targets:
                    timings = uvloop.run(_bench_group(targets, sizes, reps, 1))
                rows += _rows(transport, n, timings)
        baselines = [transport_bench.bench_memcpy(s, reps) for s in big]
        baselines += transport_bench.bench_raw_socket([s for s in big if s <= max(
            transport_bench.SIZES)], reps)
        baselines += [bench_raw_exchange(s, reps) for s in big if s <= 256 << 20]
        baselines += [b for b in uvloop.run(transport_bench.bench_rtt(2000, reps))
                      if b["transport"] == "actor-call"]
        row_rounds.append(rows)
        base_rounds.append(baselines)
    rows = _median_rows(row_rounds, "us")
    for r in rows:   # bandwidths of the median time
        r["algbw_GBps"] = r["size"] / (r["us"] / 1e6) / 1e9
        r["busbw_GBps"] = r["algbw_GBps"] * 2 * (r["n"] - 1) / r["n"]
    baselines = _median_rows(base_rounds, "us")
    for b in baselines:   # bandwidth of the median time per message
        b["GBps"] = b["size"] / b["us"] / 1e3
    print_table(rows, baselines)
    for line in summary(rows, baselines):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "baselines": baselines,
                       "summary": summary(rows, baselines)}, f, indent=1)


if __name__ == "__main__":
    main()
