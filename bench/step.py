"""Step latency and fetch throughput of distrib, beside raw baselines measured
in the same run.

Local (one server in this process, reached over loopback like any task):
- ``actor-call``: one raw actor call round trip to an actor in another process;
- ``trivial-step``: ``sess.run`` of a scalar constant (a Session on the loop of
  an in-process ``serve()``, which skips the socket hop);
- ``trivial-step-wire``: the same through a socket (``SyncSession`` to a
  ``Server`` on its own loop thread);
- ``matmul-step``: ``sess.run`` of a 1024x1024 float32 matmul, fetched (constant
  folding off: its inputs are constants);
- ``numpy-matmul``: the same matmul done directly with numpy, in a fresh
  process (see ``numpy_matmul_s``).

Remote (``--remote``, default on): task 1 is a separate server process started
through the CLI; this process hosts task 0 (the master) and the client:
- ``remote-trivial-step``: client -> master on task 0 -> op on task 1 -> back;
- ``coordinator-trivial-step``: the same trivial function through TF2's
  parameter-server API: this process is the chief of a cluster of 1 ps and 1
  worker (each a ``python -m distrib.server`` process), a
  ``ParameterServerStrategy`` (whose server the strategy starts in this
  process) and a ``ClusterCoordinator``; one ``coordinator.schedule`` of a
  ``@dt.function`` returning ``dt.constant(1.0)`` (traced under the worker's
  device, so it runs there) and ``await rv.fetch()`` of its RemoteValue;
- ``coordinator-trivial-queued``: the same function, 32 closures scheduled at
  once, then ``join``: time per closure with the default one closure per
  worker (TF's: the worker idles a round trip between two); ``-overlap``: the
  same with ``closures_per_worker=2`` (the next closure sent while one runs;
  staler gradients in training, see ``distrib/distribute/coordinator/cluster_coordinator.py``);
- ``fetch-64MiB-shm`` / ``fetch-64MiB-tcp``: a 64 MiB tensor made on task 1,
  fetched to the client, over shared memory and over forced TCP;
- ``memcpy`` and ``raw-socket``: the in-process copy and a raw blocking socket
  between two processes, the limits for the two fetches;
- ``var-sum-64MiB``: a 64 MiB variable on task 1 summed on task 0 over shared
  memory: the variable lives in task 1's shared-memory arena and task 0 reads
  it with no copy; ``var-sum-64MiB-copied`` is the same with the arena off on
  task 1 (``DISTRIB_SHM_ARENA_BYTES=0``: one copy into a segment per read);
  ``numpy-sum-64MiB`` is the sum alone, in this process.

Eager values (``bench/eager_ops.py``, in a child process): ``eager-add-4``,
``x + y`` of two small eager tensors, beside ``numpy-add-4``; ``eager-op-4``,
``dt.add`` through the builders.

Graph optimizer (``--chains``, default on; ``--chains-only``): the two
10,000-op chains of ``bench/graph_chain.py``, each pass on and off, and
build + first run in a fresh process.

Medians after warm-up; a table on stdout; ``--json PATH`` writes
``{"rows": [{"name", "us", "GBps", "baseline", "ratio", "target"}]}``.
Timings are never asserted anywhere: this only reports.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import distrib as dt  # noqa: E402
from bench.eager_ops import eager_rows  # noqa: E402
from bench.graph_chain import chain_rows, first_run_rows  # noqa: E402
from distrib.demo import free_ports  # noqa: E402
from distrib.runtime.actors.system import ActorSystem  # noqa: E402

MiB = 1 << 20


def median_time(fn, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def amedian_time(fn, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        await fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def actor_call_us(reps: int) -> float:
    """Median round trip of one actor call to an actor in another process on
    this host (the default transport between co-located tasks); the peer is
    bench/transport.py's actor peer, so both benches measure the same thing."""
    from bench.transport import _peer
    with _peer("actor") as address:
        system = await ActorSystem("/job:bench/task:0", listen=False).start()
        try:
            ref = system.ref(address, "pong")
            return await amedian_time(lambda: ref.call("ping", 1), reps, warmup=200) * 1e6
        finally:
            await system.shutdown()


async def local_rows(reps: int) -> list[dict]:
    rows = []
    call_us = await actor_call_us(reps * 20)
    rows.append({"name": "actor-call", "us": call_us})
    async with dt.serve({"local": ["localhost:0"]}) as srv:
        g = dt.Graph()
        with g.as_default():
            c = dt.constant(1.0)
            rng = np.random.default_rng(0)
            a_np = rng.standard_normal((1024, 1024)).astype(np.float32)
            b_np = rng.standard_normal((1024, 1024)).astype(np.float32)
            mm = dt.matmul(dt.constant(a_np), dt.constant(b_np))
        # the matmul's inputs are constants: the graph optimizer would fold it
        # into a constant (as TF's does), and the row would time a fetch
        no_folding = dt.ConfigProto(graph_options=dt.GraphOptions(
            rewrite_options=dt.RewriterConfig(constant_folding=dt.RewriterConfig.OFF)))
        async with dt.Session(srv.target, graph=g, config=no_folding) as sess:
            triv = await amedian_time(lambda: sess.run(c), reps * 20, warmup=50) * 1e6
            rows.append({"name": "trivial-step", "us": triv, "baseline": "actor-call",
                         "ratio": triv / call_us, "target": "<= 3.0x"})
            mm_s = await amedian_time(lambda: sess.run(mm), reps)
    # the same trivial step over the wire: a blocking Server on its own loop
    # thread and a SyncSession, so no in-process shortcut applies
    server = dt.Server.create_local_server()
    try:
        with dt.Graph().as_default():
            c2 = dt.constant(1.0)
            sync = dt.SyncSession(server.target)
            wire = median_time(lambda: sync.run(c2), reps * 20, warmup=50) * 1e6
            sync.close()
    finally:
        server.stop()
    rows.append({"name": "trivial-step-wire", "us": wire, "baseline": "actor-call",
                 "ratio": wire / call_us, "target": "<= 3.0x"})
    np_s = numpy_matmul_s(reps)
    rows.append({"name": "numpy-matmul", "us": np_s * 1e6})
    rows.append({"name": "matmul-step", "us": mm_s * 1e6, "baseline": "numpy-matmul",
                 "ratio": mm_s / np_s, "target": "<= 1.3x"})
    return rows


_NUMPY_MATMUL = r"""
import json, statistics, sys, time
import numpy as np
reps = int(sys.argv[1])
rng = np.random.default_rng(0)
a = rng.standard_normal((1024, 1024)).astype(np.float32)
b = rng.standard_normal((1024, 1024)).astype(np.float32)
for _ in range(3):
    a @ b
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    a @ b
    times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times)))
"""


def numpy_matmul_s(reps: int) -> float:
    """The numpy baseline in a fresh process, as a user's script would run it:
    in this process, with a server's big arrays alive, glibc returns and
    re-faults the 4 MiB output's pages on every call, which slows numpy down
    and would flatter the ratio."""
    out = subprocess.run([sys.executable, "-c", _NUMPY_MATMUL, str(reps)], capture_output=True,
                         text=True, timeout=300, check=True)
    return float(out.stdout.strip())


def start_task(cfg: str, index: int, env: dict, job: str = "t") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "distrib.server", "--cluster", cfg,
                          "--job_name", job, "--task_index", str(index), "--log_level", "WARNING"],
                         stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    line = p.stdout.readline()
    if not line.startswith("serving"):
        p.kill()
        p.wait(10)
        raise SystemExit(f"task /job:{job}/task:{index} did not start")
    return p


def stop_task(p: subprocess.Popen) -> None:
    """SIGTERM (the server stops cleanly and frees its shared memory), else SIGKILL."""
    if p.poll() is None:
        p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)


@contextlib.asynccontextmanager
async def two_tasks(transport: str, **child_env: str):
    """Task 1 in a child process (its environment plus ``child_env``), task 0
    served here; yields task 0's server. Everything stops on the way out."""
    env = dict(os.environ, DISTRIB_TRANSPORT=transport,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **child_env)
    os.environ["DISTRIB_TRANSPORT"] = transport
    p0, p1 = free_ports(2)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "cluster.json")
        spec = {"t": [f"localhost:{p0}", f"localhost:{p1}"]}
        with open(cfg, "w") as f:
            json.dump(spec, f)
        child = start_task(cfg, 1, env)
        try:
            async with dt.serve(spec, job_name="t", task_index=0) as srv:
                yield srv
        finally:
            stop_task(child)
            os.environ.pop("DISTRIB_TRANSPORT", None)


async def remote_rows(reps: int, transport: str, call_us: float) -> list[dict]:
    """Task 0 (master) here, task 1 in a child process."""
    rows = []
    async with two_tasks(transport) as srv:
        g = dt.Graph()
        with g.as_default():
            with dt.device("/job:t/task:1"):
                one = dt.constant(1.0)
                big = dt.constant(np.ones(64 * MiB // 4, np.float32))
        async with dt.Session(srv.target, graph=g) as sess:
            if transport == "shm":
                t = await amedian_time(lambda: sess.run(one), reps * 20, warmup=50) * 1e6
                rows.append({"name": "remote-trivial-step", "us": t,
                             "baseline": "actor-call", "ratio": t / call_us,
                             "target": "<= 4.0x"})
            s = await amedian_time(lambda: sess.run(big), reps)
            rows.append({"name": f"fetch-64MiB-{transport}", "us": s * 1e6,
                         "GBps": 64 * MiB / s / 1e9})
    return rows


QUEUED = 32   # closures scheduled at once by the coordinator-trivial-queued rows


async def coordinator_rows(reps: int, transport: str, baseline_us: float) -> list[dict]:
    """``schedule`` + ``fetch`` of a trivial ``dt.function`` through a
    ClusterCoordinator: 1 ps and 1 worker in child processes, the chief (the
    strategy's server and the coordinator) in this process; then ``QUEUED``
    closures at once, with one and with two closures per worker."""
    from distrib.distribute.functions import def_function
    from distrib.distribute.functions.local_target import set_default_target
    env = dict(os.environ, DISTRIB_TRANSPORT=transport,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    os.environ["DISTRIB_TRANSPORT"] = transport
    ports = free_ports(3)
    spec = {"chief": [f"localhost:{ports[0]}"], "ps": [f"localhost:{ports[1]}"],
            "worker": [f"localhost:{ports[2]}"]}
    children: list[subprocess.Popen] = []
    strategy = coordinator = None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = os.path.join(tmp, "cluster.json")
            with open(cfg, "w") as f:
                json.dump(spec, f)
            for job in ("ps", "worker"):
                children.append(start_task(cfg, 0, env, job))
        with dt.Graph().as_default():
            resolver = dt.distribute.cluster_resolver.SimpleClusterResolver(
                dt.ClusterSpec(spec), task_type="chief", task_id=0)
            strategy = dt.distribute.ParameterServerStrategy(resolver)
            coordinator = dt.distribute.coordinator.ClusterCoordinator(strategy)

            @dt.function
            def trivial():
                return dt.constant(1.0)

            async def once() -> None:
                await coordinator.schedule(trivial).fetch()
            t = await amedian_time(once, reps * 20, warmup=50) * 1e6
            assert float(await coordinator.schedule(trivial).fetch()) == 1.0
            queued = {}
            for closures in (1, 2):
                if closures > 1:   # a second coordinator, the first one's loops stopped
                    await coordinator.shutdown()
                    coordinator = dt.distribute.coordinator.ClusterCoordinator(
                        strategy, closures_per_worker=closures)

                async def many() -> None:
                    for _ in range(QUEUED):
                        coordinator.schedule(trivial)
                    await coordinator.join()
                queued[closures] = await amedian_time(many, reps, warmup=2) / QUEUED * 1e6
    finally:
        try:
            if coordinator is not None:
                await coordinator.shutdown()
            await def_function.close_sessions()
        finally:
            if strategy is not None:
                strategy._server.stop()
            set_default_target(None)
            for p in reversed(children):
                stop_task(p)
            os.environ.pop("DISTRIB_TRANSPORT", None)
    return [{"name": "coordinator-trivial-step", "us": t, "baseline": "remote-trivial-step",
             "ratio": t / baseline_us, "target": "<= 2.0x"},
            {"name": "coordinator-trivial-queued", "us": queued[1],
             "baseline": "coordinator-trivial-step", "ratio": queued[1] / t},
            {"name": "coordinator-trivial-queued-overlap", "us": queued[2],
             "baseline": "coordinator-trivial-step", "ratio": queued[2] / t}]


async def variable_rows(reps: int) -> list[dict]:
    """A ps-style read: a 64 MiB variable on task 1, used by an op on task 0."""
    base = np.ones(64 * MiB // 4, np.float32)
    s = median_time(lambda: base.sum(), reps)
    rows = [{"name": "numpy-sum-64MiB", "us": s * 1e6}]
    for name, child_env in (("var-sum-64MiB", {}),
                            ("var-sum-64MiB-copied", {"DISTRIB_SHM_ARENA_BYTES": "0"})):
        async with two_tasks("shm", **child_env) as srv:
            g = dt.Graph()
            with g.as_default():
                with dt.device("/job:t/task:1"):
                    v = dt.Variable(base, name="big")
                with dt.device("/job:t/task:0"):
                    total = dt.reduce_sum(v)
                init = dt.global_variables_initializer()
            async with dt.Session(srv.target, graph=g) as sess:
                await sess.run(init)
                t = await amedian_time(lambda: sess.run(total), reps)
                rows.append({"name": name, "us": t * 1e6, "GBps": 64 * MiB / t / 1e9,
                             "baseline": "numpy-sum-64MiB", "ratio": t / s})
    return rows


def memcpy_gbps(reps: int) -> float:
    src = np.ones(64 * MiB, np.uint8)
    dst = np.empty_like(src)
    s = median_time(lambda: np.copyto(dst, src), reps)
    return 64 * MiB / s / 1e9


_RAW_SINK = r"""
import socket, struct
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
buf = bytearray(64 << 20); view = memoryview(buf)
while True:
    head = c.recv(8, socket.MSG_WAITALL)
    if len(head) < 8: break
    left = struct.unpack("<Q", head)[0]
    while left:
        n = c.recv_into(view[:min(left, len(view))])
        if not n: raise SystemExit
        left -= n
    c.sendall(b"k")
"""


def raw_socket_gbps(reps: int) -> float:
    """One-way throughput of a raw blocking socket between two processes: a
    length prefix, the payload received straight into a preallocated buffer,
    and a one-byte acknowledgement so the sender times whole transfers."""
    import socket
    import struct
    p = subprocess.Popen([sys.executable, "-c", _RAW_SINK], stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = memoryview(np.ones(64 * MiB, np.uint8))

        def once() -> None:
            s.sendall(struct.pack("<Q", len(payload)))
            s.sendall(payload)
            s.recv(1)
        t = median_time(once, reps, warmup=2)
        s.close()
        return 64 * MiB / t / 1e9
    finally:
        p.kill()
        p.wait(10)


def print_table(rows: list[dict]) -> None:
    print(f"{'measure':<24} {'time':>12} {'GB/s':>8}   {'vs baseline':<32} target")
    for r in rows:
        t = f"{r['us']:.1f} us" if "us" in r else ""
        gb = f"{r['GBps']:.2f}" if "GBps" in r else ""
        vs = f"{r['ratio']:.2f}x {r['baseline']}" if "ratio" in r else ""
        print(f"{r['name']:<24} {t:>12} {gb:>8}   {vs:<32} {r.get('target', '')}")


async def amain(args: argparse.Namespace) -> list[dict]:
    reps = 5 if args.quick else 15
    if args.chains_only:
        return await chain_rows(reps, args.chain_ops) + first_run_rows(args.chain_ops)
    rows = await local_rows(reps)
    rows += eager_rows(reps)   # x + y of eager tensors, in a child process (issue 39)
    if args.chains:
        rows += await chain_rows(reps, args.chain_ops) + first_run_rows(args.chain_ops)
    if args.remote:
        call_us = rows[0]["us"]
        rows += await remote_rows(reps, "shm", call_us)
        remote_us = rows[-2]["us"]   # remote-trivial-step, measured just before
        assert rows[-2]["name"] == "remote-trivial-step"
        rows += await coordinator_rows(reps, "shm", remote_us)
        rows += await remote_rows(reps, "tcp", call_us)
        rows += await variable_rows(reps)
        mem = memcpy_gbps(reps)
        raw = raw_socket_gbps(reps)
        rows.append({"name": "memcpy", "GBps": mem})
        rows.append({"name": "raw-socket", "GBps": raw})
        for r in rows:
            if r["name"] == "fetch-64MiB-shm":
                r.update(baseline="memcpy", ratio=r["GBps"] / mem, target=">= 0.4x")
            elif r["name"] == "fetch-64MiB-tcp":
                r.update(baseline="raw-socket", ratio=r["GBps"] / raw, target=">= 0.6x")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--no-remote", dest="remote", action="store_false",
                    help="skip the two-process measurements")
    ap.add_argument("--no-chains", dest="chains", action="store_false",
                    help="skip the graph optimizer's chains (bench/graph_chain.py)")
    ap.add_argument("--chains-only", action="store_true",
                    help="only the graph optimizer's chains")
    ap.add_argument("--chain-ops", type=int, default=10000, help="ops in each chain")
    args = ap.parse_args()
    import uvloop
    rows = uvloop.run(amain(args))
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
