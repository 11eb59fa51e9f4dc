"""The actor runtime: calls, tells, typed remote errors, timeouts, shutdown,
peers that die; remote tests run over both transports against a real peer
process."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from distrib.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)
from distrib.runtime.actors.system import ActorSystem
from tests.helpers import Proc
from transports import TransportConfig

MODES = ["tcp", "shm"]


class Counter:
    def __init__(self):
        self.n = 0
        self.seen = []

    def incr(self, k=1):
        self.n += k
        return self.n

    def note(self, x):
        self.seen.append(x)

    async def slow(self, seconds):
        await asyncio.sleep(seconds)
        return "late"

    def fail(self):
        raise InvalidArgumentError("bad input here")

    def helper(self):   # public, not a message: out of the wire's reach
        return "reached"


COUNTER = ["incr", "note", "slow", "fail"]


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def peer(mode):
    with Proc(["tests/peers/actor_peer.py", mode]) as p:
        yield p


async def client(mode: str, listen: bool = False) -> ActorSystem:
    return await ActorSystem("/job:client/task:0", listen=listen,
                             config=TransportConfig(mode=mode)).start()


async def test_local_call_and_tell_skip_the_wire():
    sys_ = await ActorSystem("/job:a/task:0").start()
    try:
        c = Counter()
        ref = sys_.spawn("counter", c, COUNTER)
        assert await ref.call("incr", 2) == 2
        await ref.tell("note", "x")
        assert c.seen == ["x"]
        with pytest.raises(InvalidArgumentError, match="bad input"):
            await ref.call("fail")
        with pytest.raises(DeadlineExceededError, match="slow"):
            await ref.call("slow", 5, timeout=0.05)
        with pytest.raises(UnimplementedError, match="'nope' is not one of them"):
            await ref.call("nope")
        with pytest.raises(UnimplementedError, match="'helper' is not one of them"):
            await ref.call("helper")   # a public method its door does not declare
        with pytest.raises(ValueError, match=r"no public method for the messages \['echo'\]"):
            sys_.spawn("other", Counter(), ["incr", "echo"])
    finally:
        await sys_.shutdown()


async def test_remote_call_returns_values_and_arrays(peer, mode):
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        assert await ref.call("echo", {"a": [1, "two", None]}) == {"a": [1, "two", None]}
        big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
        out = await ref.call("add", big, np.float32(1))
        assert out.dtype == np.float32 and np.array_equal(out, big + 1)
        results = await asyncio.gather(*(ref.call("echo", i) for i in range(200)))
        assert results == list(range(200))
    finally:
        await sys_.shutdown()


async def test_remote_errors_are_typed_and_name_the_task(peer, mode):
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        with pytest.raises(InvalidArgumentError, match="bad: x") as ei:
            await ref.call("fail", "x")
        assert ei.value.task == "/job:peer/task:0"
        with pytest.raises(UnknownError, match="ZeroDivisionError: boom"):
            await ref.call("crash")
        with pytest.raises(NotFoundError, match="no actor named 'ghost'"):
            await sys_.ref(peer.line, "ghost").call("echo", 1)
        with pytest.raises(UnimplementedError, match="'_private' is not one of them"):
            await ref.call("_private")
        # the connection survives every error above
        assert await ref.call("echo", 7) == 7
    finally:
        await sys_.shutdown()


async def test_call_timeout_is_deadline_exceeded_and_connection_survives(peer, mode):
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        with pytest.raises(DeadlineExceededError, match="within 0.1s"):
            await ref.call("slow", 5, timeout=0.1)
        assert await ref.call("echo", "still here") == "still here"
    finally:
        await sys_.shutdown()


async def test_peer_calls_back_into_a_listening_client(peer, mode):
    sys_ = await client(mode, listen=True)
    try:
        sys_.spawn("echo", Counter(), COUNTER)  # no 'echo' message: a typed error crosses twice
        ref = sys_.ref(peer.line, "echo")
        with pytest.raises(UnimplementedError, match=r"door \[fail, incr, note, slow\]; "
                                                     r"'echo' is not one of them"):
            await ref.call("call_back", sys_.address, 1)
    finally:
        await sys_.shutdown()


class Echo:
    def echo(self, x):
        return x


ECHO = ["echo"]

async def test_connections_lists_the_open_ones_each_way(peer, mode):
    sys_ = await client(mode, listen=True)
    try:
        sys_.spawn("echo", Echo(), ECHO)
        assert sys_.connections() == []
        ref = sys_.ref(peer.line, "echo")
        assert await ref.call("echo", 1) == 1
        (out,) = sys_.connections()
        assert (out.peer.name, out.kind) == ("/job:peer/task:0", mode)
        # the peer calls back over a connection it opens: accepted here, listed too
        assert await ref.call("call_back", sys_.address, 2) == 2
        conns = sys_.connections()
        assert len(conns) == 2 and {c.peer.name for c in conns} == {"/job:peer/task:0"}
        await out.close()
        assert sys_.connections() == [c for c in conns if c is not out]   # closed: left out
    finally:
        await sys_.shutdown()
    assert sys_.connections() == []


async def _told_back(peer, mode: str):
    """A listening client with a Counter actor, and a handle on the peer's echo."""
    sys_ = await client(mode, listen=True)
    c = Counter()
    sys_.spawn("counter", c, COUNTER)
    return sys_, c, sys_.ref(peer.line, "echo")


async def _noted(counter: Counter, n: int) -> None:
    for _ in range(200):
        if len(counter.seen) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {counter.seen} arrived")


async def test_a_tell_to_a_system_that_called_us_goes_over_its_connection(peer, mode):
    # The peer answers over the connection this system opened to it (as a ps
    # sends a worker its variables over the connection the step came by):
    # no second connection, and both ways share it.
    sys_, c, ref = await _told_back(peer, mode)
    try:
        conns = await ref.call("tell_back", sys_.address, sys_.name, sys_.incarnation,
                               np.arange(5.0))
        assert conns == {"outbound": [], "inbound": 1}
        await _noted(c, 1)
        np.testing.assert_array_equal(c.seen[0], np.arange(5.0))
        assert sys_._inbound == set()   # nothing connected to us either
        # an incarnation other than ours: not provably us, so the peer connects
        conns = await ref.call("tell_back", sys_.address, sys_.name, sys_.incarnation + 1, 2)
        assert conns == {"outbound": [sys_.address], "inbound": 1}
        await _noted(c, 2)
        assert c.seen[1] == 2 and len(sys_._inbound) == 1
    finally:
        await sys_.shutdown()


async def test_a_tell_back_reconnects_once_the_callers_connection_is_gone(peer, mode):
    sys_, c, ref = await _told_back(peer, mode)
    try:
        await ref.call("tell_back", sys_.address, sys_.name, sys_.incarnation, 1)
        await sys_._out[peer.line].conn.close()
        await asyncio.sleep(0.05)
        # the call reconnects; the tell cannot use a connection that is gone...
        conns = await ref.call("tell_back", sys_.address, sys_.name, sys_.incarnation, 2)
        # ...so it takes the new one this call came by
        assert conns == {"outbound": [], "inbound": 1}
        await _noted(c, 2)
        assert c.seen == [1, 2]
    finally:
        await sys_.shutdown()


async def test_killed_peer_fails_pending_call_not_hangs(peer, mode):
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        assert await ref.call("echo", 1) == 1
        pending = asyncio.ensure_future(ref.call("slow", 30, timeout=20))
        await asyncio.sleep(0.2)
        peer.kill()
        with pytest.raises(UnavailableError, match="peer:0|/job:peer/task:0"):
            await asyncio.wait_for(pending, 10)
    finally:
        await sys_.shutdown()


async def test_shutdown_fails_pending_calls(peer, mode):
    sys_ = await client(mode)
    ref = sys_.ref(peer.line, "echo")
    pending = asyncio.ensure_future(ref.call("slow", 30, timeout=20))
    await asyncio.sleep(0.2)
    await sys_.shutdown()
    with pytest.raises(UnavailableError, match="shut down"):
        await asyncio.wait_for(pending, 5)


async def test_unreachable_address_is_unavailable_naming_it():
    sys_ = await ActorSystem("/job:c/task:0", listen=False,
                             config=TransportConfig(connect_timeout_s=0.5)).start()
    try:
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
            await sys_.ref(f"127.0.0.1:{port}", "echo").call("echo", 1)
    finally:
        await sys_.shutdown()


async def test_call_to_another_system_of_this_process_skips_the_wire():
    server = await ActorSystem("/job:a/task:0").start()
    client_ = await ActorSystem("/job:b/task:0", listen=False).start()
    try:
        c = Counter()
        server.spawn("counter", c, COUNTER)
        ref = client_.ref(server.address.replace("127.0.0.1", "localhost"), "counter")
        assert await ref.call("incr", 3) == 3
        await ref.tell("note", "y")
        assert c.seen == ["y"]
        with pytest.raises(InvalidArgumentError, match="bad input"):
            await ref.call("fail")
        with pytest.raises(DeadlineExceededError):
            await ref.call("slow", 5, timeout=0.05)
        assert not client_._out, "no connection should have been opened"
    finally:
        await client_.shutdown()
        await server.shutdown()


async def test_concurrent_first_calls_share_one_pooled_connection(peer, mode):
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        # 50 calls start before any connection exists: they must not race to open 50
        assert await asyncio.gather(*(ref.call("echo", i) for i in range(50))) == list(range(50))
        assert await ref.call("inbound_connections") == 1
        assert len(sys_._out) == 1
    finally:
        await sys_.shutdown()


@pytest.mark.parametrize("mode", ["tcp"])
async def test_a_message_over_the_frame_limit_is_a_typed_error_and_the_link_survives(peer, mode):
    sys_ = await ActorSystem("/job:client/task:0", listen=False,
                             config=TransportConfig(mode=mode, max_frame_bytes=1 << 20)).start()
    try:
        ref = sys_.ref(peer.line, "echo")
        assert await ref.call("echo", 1) == 1
        with pytest.raises(InvalidArgumentError, match="over max_frame_bytes"):
            await ref.call("echo", np.zeros(1 << 19))   # 4 MiB
        with pytest.raises(InvalidArgumentError, match="over max_frame_bytes"):
            await ref.tell("echo", np.zeros(1 << 19))
        assert await ref.call("echo", 2) == 2
    finally:
        await sys_.shutdown()


async def test_a_connection_lost_just_before_a_send_is_unavailable_not_a_transport_error(
        peer, mode, monkeypatch):
    # the connection closes between the lookup of the pooled connection and
    # the write: the caller gets the typed error (a transport error leaked before)
    import transports
    from distrib.errors import UnavailableError
    sys_ = await client(mode)
    try:
        ref = sys_.ref(peer.line, "echo")
        assert await ref.call("echo", 1) == 1
        conn = sys_._out[peer.line].conn       # white-box: the pooled connection

        async def closed_send(obj):
            raise transports.ConnectionClosed(f"connection {conn!r} is closed")
        monkeypatch.setattr(conn, "send", closed_send)
        with pytest.raises(UnavailableError, match="not sent"):
            await ref.call("echo", 2)
        with pytest.raises(UnavailableError, match="not sent"):
            await ref.tell("echo", 3)
    finally:
        await sys_.shutdown()
