"""A real server against hostile and heavy peers (issue 21, "a hardened wire").

``python -m distrib.server`` in a child process, raw sockets from the test:
connections dropped before the handshake leave no memory behind, a lying
length prefix after a real handshake costs nothing it did not send, a half
frame is closed after ``DISTRIB_FRAME_TIMEOUT_S``, and 32 clients stepping
on one counter lose nothing while the server's memory stays flat. Memory is
the server's VmRSS from /proc. The raw peer (``ServerProc``, ``handshaken``,
``drop`` ...) is ``bench/wire.py``'s, which measures the same probes.
"""
from __future__ import annotations

import asyncio
import os
import struct
import time

import pytest

from bench.wire import ServerProc, closed_within, count_steps, drop, handshaken, settle

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")


@pytest.fixture
def start(tmp_path):
    procs = []

    def starter(**env: str) -> ServerProc:
        procs.append(ServerProc(tmp_path, **env))
        return procs[-1]
    yield starter
    for proc in procs:
        proc.stop()


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

def test_32_clients_step_on_one_counter_nothing_lost_memory_flat(start):
    server = start()
    target = f"distrib://127.0.0.1:{server.port}"
    assert asyncio.run(count_steps(target, 32, 5)) == 160          # warm-up
    settle(server)
    before = server.rss_mib
    t0 = time.monotonic()
    assert asyncio.run(count_steps(target, 32, 20)) == 640          # 32 x 20 assign_add(1)
    took = time.monotonic() - t0
    settle(server)
    assert server.rss_mib <= before * 1.10 + 5, (before, server.rss_mib, took)
