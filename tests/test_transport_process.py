"""Transports between real processes: an echo peer, and peers killed mid-transfer.

The crash tests pin the shared-memory promise: SIGKILL of either side leaves
nothing in /dev/shm, no memfd open or mapped in the survivor beyond those of
its live connections (each mapping holds one descriptor: Python's mmap keeps a
dup), and the survivor keeps serving.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from transports import (
    ConnectionClosed,
    PeerInfo,
    TransportConfig,
    connect,
    listen,
    local_host_id,
    new_incarnation,
)
from transports.shm import ARENA

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transport_peer.py")
FAST = dict(connect_timeout_s=5.0, handshake_timeout_s=2.0)


def identity(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


@contextlib.contextmanager
def peer_process(*args: str):
    proc = subprocess.Popen([sys.executable, PEER, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for f in (proc.stdin, proc.stdout):
            f.close()


async def read_address(proc: subprocess.Popen) -> str:
    line = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline), 10)
    assert line.startswith("ADDRESS "), line
    return line.split()[1]


@pytest.fixture(autouse=True)
def no_idle_arena_buffers():
    # Earlier tests of this process may have left shared-memory arena buffers
    # that nobody holds (the arena keeps them for reuse until a server stops):
    # unmap them so that the counts below are this test's alone.
    gc.collect()
    ARENA.trim()


def our_memfds() -> tuple[int, set[str]]:
    """(open memfd descriptors, inodes of mapped memfd segments) of this process."""
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds += "memfd:distrib-shm" in os.readlink(f"/proc/self/fd/{fd}")
    with open("/proc/self/maps") as f:
        inodes = {line.split()[4] for line in f if "memfd:distrib-shm" in line}
    return fds, inodes


@pytest.mark.parametrize("mode", ["tcp", "shm"])
async def test_echo_peer_process(mode):
    with peer_process("echo", mode) as proc:
        conn = await connect(await read_address(proc), identity=identity("client"),
                             config=TransportConfig(mode=mode, **FAST))
        assert conn.kind == mode and conn.peer.name == "echo"
        msgs = [{"i": i, "a": np.arange(i * 10000, dtype=np.float32).reshape(-1, 100 if i else 1)}
                for i in range(20)]
        for m in msgs:
            conn.send_nowait(m)
        for m in msgs:
            got = await asyncio.wait_for(conn.recv(), 10)
            assert got["i"] == m["i"] and np.array_equal(got["a"], m["a"]) and got["a"].dtype == np.float32
        await conn.close()
        proc.stdin.close()
        assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 10) == 0


@contextlib.asynccontextmanager
async def live_shm_pair():
    """An in-process shm connection with one segment pooled on it (it must survive)."""
    accepted: asyncio.Queue = asyncio.Queue()
    listener = await listen("127.0.0.1", 0, accepted.put_nowait, identity=identity("live"),
                            config=TransportConfig(mode="shm", **FAST))
    client = await connect(listener.address, identity=identity("c"), config=TransportConfig(mode="shm", **FAST))
    server = await accepted.get()
    await client.send(np.ones(1 << 20))
    held = await server.recv()
    try:
        yield held
    finally:
        await client.close()
        await listener.close()


async def test_sigkill_of_sending_peer_mid_shm_transfer_leaks_nothing(shm_snapshot):
    accepted: asyncio.Queue = asyncio.Queue()
    listener = await listen("127.0.0.1", 0, accepted.put_nowait, identity=identity("survivor"),
                            config=TransportConfig(mode="shm", **FAST))
    try:
        async with live_shm_pair() as live_held:
            baseline = our_memfds()
            assert len(baseline[1]) == 1  # the live pair's one segment
            with peer_process("flood", "shm", listener.address, str(32 << 20)) as proc:
                conn = await asyncio.wait_for(accepted.get(), 10)
                assert conn.kind == "shm"
                for _ in range(5):
                    held = await asyncio.wait_for(conn.recv(), 10)
                os.kill(proc.pid, signal.SIGKILL)
                with pytest.raises(ConnectionClosed):
                    while True:
                        await asyncio.wait_for(conn.recv(), 10)
            assert held.shape == (32 << 20,) and held[1] == 1  # still readable after the crash
            del held
            gc.collect()
            assert our_memfds() == baseline
            assert live_held.sum() == 1 << 20
            # the survivor keeps serving
            client = await connect(listener.address, identity=identity("after"), config=TransportConfig(mode="shm", **FAST))
            other = await asyncio.wait_for(accepted.get(), 5)
            await client.send(np.arange(1 << 18))
            assert (await asyncio.wait_for(other.recv(), 5))[-1] == (1 << 18) - 1
            await client.close()
        del live_held
    finally:
        await listener.close()
    gc.collect()
    assert our_memfds() == (0, set())
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


async def test_sigkill_of_receiving_peer_mid_shm_transfer_leaks_nothing(shm_snapshot):
    async with live_shm_pair():
        gc.collect()
        baseline = our_memfds()
        with peer_process("echo", "shm") as proc:
            conn = await connect(await read_address(proc), identity=identity("survivor"),
                                 config=TransportConfig(mode="shm", **FAST))
            arr = np.ones(32 << 20, np.uint8)
            sent = 0

            async def pump():
                nonlocal sent
                while True:
                    await conn.send(arr)
                    sent += 1

            async def drop_echoes():
                while True:
                    await conn.recv()

            tasks = [asyncio.ensure_future(pump()), asyncio.ensure_future(drop_echoes())]
            while sent < 5:
                await asyncio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            done, _ = await asyncio.wait(tasks, timeout=10, return_when=asyncio.ALL_COMPLETED)
            assert len(done) == 2 and all(isinstance(t.exception(), ConnectionClosed) for t in done)
            assert conn.closed
            gc.collect()
            assert our_memfds() == baseline
        # the survivor still talks to a new peer
        with peer_process("echo", "shm") as proc:
            conn = await connect(await read_address(proc), identity=identity("survivor"),
                                 config=TransportConfig(mode="shm", **FAST))
            await conn.send(arr)
            assert (await asyncio.wait_for(conn.recv(), 10)).sum() == arr.size
            await conn.close()
    gc.collect()
    assert our_memfds() == (0, set())
    assert set(os.listdir("/dev/shm")) <= shm_snapshot


async def test_a_stopped_server_returns_its_shared_memory():
    # a ps keeps big variables in its shared-memory arena; they go with it
    import distrib as dt
    from distrib.demo import free_ports
    gc.collect()
    before = our_memfds()
    spec = {"ps": [f"localhost:{free_ports(1)[0]}"]}
    async with dt.serve(spec, job_name="ps", task_index=0) as server:
        g = dt.Graph()
        with g.as_default():
            v = dt.Variable(np.ones((512, 512), np.float32), name="big")
            bump = v.assign_add(np.ones((512, 512), np.float32))
            init = dt.global_variables_initializer()
        async with dt.Session(server.target, graph=g) as sess:
            await sess.run(init)
            await sess.run(bump)
            assert (await sess.run(v) == 2).all()
            assert our_memfds()[0] > before[0]
    gc.collect()
    assert our_memfds() == before
