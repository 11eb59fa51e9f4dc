"""Message-level behaviour, run over both kinds of connection (tcp, shm)."""
from __future__ import annotations

import asyncio
import contextlib
import gc

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
from transports import connection as connection_module
from transports.shm import ARENA, shared_empty

KINDS = ["tcp", "shm"]
BIG = (512, 256)  # over the 64 KiB shm threshold for every dtype below


def identity(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


@contextlib.asynccontextmanager
async def connected(kind: str):
    """(client, server) connections of the given kind, closed afterwards."""
    config = TransportConfig(mode=kind, connect_timeout_s=5.0, handshake_timeout_s=2.0)
    accepted: asyncio.Queue = asyncio.Queue()
    listener = await listen("127.0.0.1", 0, accepted.put_nowait, identity=identity("server"),
                            config=config)
    client = await connect(listener.address, identity=identity("client"), config=config)
    try:
        server = await asyncio.wait_for(accepted.get(), 2.0)
        assert client.kind == server.kind == kind
        yield client, server
    finally:
        await client.close()
        await listener.close()


@pytest.fixture(params=KINDS)
async def pair(request):
    async with connected(request.param) as conns:
        yield conns


@pytest.fixture
async def shm_pair():
    async with connected("shm") as conns:
        yield conns


async def roundtrip(pair, obj):
    client, server = pair
    await client.send(obj)
    return await asyncio.wait_for(server.recv(), 10.0)


NUMERIC = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
           np.complex128, np.clongdouble]
SHAPES = [(), (0,), (3, 0), (7,), (4, 5), BIG]


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    vals = rng.integers(0, 100, size=shape) if shape else rng.integers(0, 100)
    return np.asarray(vals).astype(dtype)


def assert_same(got, want):
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
async def test_numeric_arrays_arrive_equal(pair, dtype):
    sent = [sample(dtype, s, i) for i, s in enumerate(SHAPES)]
    got = await roundtrip(pair, sent)
    for g, w in zip(got, sent):
        assert_same(g, w)


@pytest.mark.parametrize("layout", ["fortran", "strided", "transposed3d", "bigendian", "fortran_big"])
async def test_non_c_contiguous_layouts_arrive_equal(pair, layout):
    base = np.arange(6 * 70 * 300, dtype=np.float64).reshape(6, 70, 300)
    arr = {
        "fortran": np.asfortranarray(base[0]),
        "strided": base[:, ::3, 1::2],
        "transposed3d": base.transpose(2, 0, 1),
        "bigendian": base.astype(">i4"),
        "fortran_big": np.asfortranarray(base),
    }[layout]
    assert_same(await roundtrip(pair, arr), arr)


async def test_string_arrays_arrive_as_unicode_or_bytes(pair):
    uni = np.array([["héllo", "", "wörld"], ["a", "bb", "ccc"]])
    raw = np.array([b"x", b"\x00yz", b""])
    obj = np.array(["one", "two", "three"], dtype=object)
    big = np.array(["s%05d" % i for i in range(20000)])
    got = await roundtrip(pair, [uni, raw, obj, big, np.array([], dtype=object)])
    assert_same(got[0], uni)
    assert_same(got[1], raw)
    assert got[2].dtype == np.dtype("<U5") and got[2].tolist() == ["one", "two", "three"]
    assert_same(got[3], big)
    assert got[4].dtype.kind == "U" and got[4].shape == (0,)


async def test_nested_structures_and_scalars(pair):
    msg = {"none": None, "t": True, "f": False, "int": -(2**63), "u": 2**64 - 1, "x": 1.5,
           "s": "ünï", "b": b"\x00\xff", "list": [1, [2, [3, {"k": (4, 5)}]]], 7: "int key",
           "np32": np.float32(2.5), "np64": np.float64(0.25), "npint": np.int16(-3)}
    got = await roundtrip(pair, msg)
    assert got["list"] == [1, [2, [3, {"k": [4, 5]}]]]
    assert got[7] == "int key"
    for key in ("none", "t", "f", "int", "u", "x", "s", "b"):
        assert got[key] == msg[key] and type(got[key]) is type(msg[key])
    assert got["np32"].dtype == np.float32 and got["np32"].shape == () and got["np32"] == 2.5
    assert type(got["np64"]) is float and got["np64"] == 0.25
    assert got["npint"].dtype == np.int16 and got["npint"] == -3


async def test_unsendable_objects_raise_type_error(pair):
    client, _ = pair
    for bad in (object(), {1, 2}, np.array([1, "x"], dtype=object)):
        with pytest.raises(TypeError):
            await client.send(bad)
    await client.send("still works")
    assert await pair[1].recv() == "still works"


async def test_many_messages_arrive_in_order(pair):
    client, server = pair
    n = 3000
    for i in range(n):
        client.send_nowait({"i": i, "a": np.full(3 if i % 50 else 40000, i, np.int32)})
    for i in range(n):
        msg = await asyncio.wait_for(server.recv(), 10.0)
        assert msg["i"] == i and msg["a"][0] == i


async def test_concurrent_senders_keep_each_order(pair):
    client, server = pair

    async def sender(k: int):
        for i in range(150):
            await client.send([k, i, np.full(20000 if i % 10 == 0 else 4, i, np.int64)])

    await asyncio.gather(*(sender(k) for k in range(4)))
    seen = {k: [] for k in range(4)}
    for _ in range(600):
        k, i, arr = await asyncio.wait_for(server.recv(), 10.0)
        assert arr[-1] == i
        seen[k].append(i)
    assert all(seen[k] == list(range(150)) for k in range(4))


async def test_callback_delivery_in_order_and_close_reported(pair):
    client, server = pair
    events = []
    closed = asyncio.get_running_loop().create_future()
    for i in range(5):
        await client.send(i)  # some arrive before start(): they are delivered first
    await asyncio.sleep(0.05)
    server.start(events.append, lambda exc: closed.set_result(exc))
    for i in range(5, 10):
        await client.send(i)
    await client.close()
    assert await asyncio.wait_for(closed, 5.0) is None
    assert events == list(range(10))
    assert server.closed
    with pytest.raises(ConnectionClosed):
        await client.send("after close")


async def test_both_directions(pair):
    client, server = pair
    big = np.arange(300_000, dtype=np.float32)
    await server.send({"from": "server", "a": big})
    got = await asyncio.wait_for(client.recv(), 5.0)
    assert got["from"] == "server"
    assert_same(got["a"], big)


async def test_received_buffers_are_never_overwritten_while_held(pair):
    client, server = pair
    held = []
    for i in range(6):
        await client.send(np.full(BIG, i, np.float64))
        held.append(await asyncio.wait_for(server.recv(), 5.0))
    for i, arr in enumerate(held):  # later sends never reused a buffer still held
        assert (arr == i).all()
    assert held[0].flags.writeable == (client.kind == "tcp")
    view = held[0][::2]
    del held
    gc.collect()
    for _ in range(3):
        await client.send(np.full(BIG, 99, np.float64))
        await asyncio.wait_for(server.recv(), 5.0)
    assert (view == 0).all()  # a view keeps its segment (shm) or receive block (tcp)


async def pass_one(client, server, i: int) -> None:
    """Send an array through shared memory; the receiver checks it and drops it."""
    await client.send(np.full(BIG, i, np.float64))
    arr = await asyncio.wait_for(server.recv(), 5.0)
    assert arr[0, 0] == i


async def test_shm_segments_are_reused_in_steady_state(shm_pair):
    client, server = shm_pair
    for i in range(30):
        await pass_one(client, server, i)
        await asyncio.sleep(connection_module._RELEASE_DELAY_S + 0.01)  # past the notice's delay
    assert len(client._pool._lent) + sum(map(len, client._pool._free.values())) <= 3


async def test_shm_release_rides_with_the_next_message(shm_pair, monkeypatch):
    # A release notice waits for the receiver's next message instead of
    # taking a frame (a system call and a wake-up) of its own.
    monkeypatch.setattr(connection_module, "_RELEASE_DELAY_S", 30.0)
    monkeypatch.setattr(connection_module, "_RELEASE_ALONE_S", 30.0)
    client, server = shm_pair
    for i in range(5):
        await pass_one(client, server, i)
        await asyncio.sleep(0.01)
        assert len(client._pool._lent) == 1   # the notice is still held back
        await server.send({"ack": i})
        assert await asyncio.wait_for(client.recv(), 5.0) == {"ack": i}
        assert not client._pool._lent          # it came with the ack
    assert sum(map(len, client._pool._free.values())) == 1


async def _all_back(client, timeout: float = 1.0) -> None:
    """Wait until the peer has released every segment lent to it."""
    for _ in range(int(timeout / 0.005)):
        if not client._pool._lent:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"segments {sorted(client._pool._lent)} are still lent")


async def test_shm_release_of_many_bytes_goes_at_once(shm_pair, monkeypatch):
    # Past _RELEASE_NOW_BYTES the notices do not wait for a ride: a sender of
    # big arrays gets its segments back at once.
    monkeypatch.setattr(connection_module, "_RELEASE_DELAY_S", 30.0)
    monkeypatch.setattr(connection_module, "_RELEASE_ALONE_S", 30.0)
    client, server = shm_pair
    await client.send(np.full(BIG, 7, np.float64))
    small = await asyncio.wait_for(server.recv(), 5.0)
    monkeypatch.setattr(connection_module, "_RELEASE_NOW_BYTES", 2 * small.nbytes)
    await client.send(np.full(BIG, 8, np.float64))
    big = await asyncio.wait_for(server.recv(), 5.0)
    del small
    await asyncio.sleep(0.05)
    assert len(client._pool._lent) == 2   # one array's bytes: still held back
    del big
    await _all_back(client)


async def test_shm_release_waits_longer_for_a_ride_where_this_side_sends(shm_pair, monkeypatch):
    # A side that has sent nothing on the connection has nothing for a notice
    # to ride with: it goes after the short delay. Once it sends there, a
    # notice waits the long one for the next message.
    monkeypatch.setattr(connection_module, "_RELEASE_DELAY_S", 30.0)
    client, server = shm_pair
    await pass_one(client, server, 1)
    await _all_back(client)                      # alone, after _RELEASE_ALONE_S
    await server.send({"hello": 1})
    assert await asyncio.wait_for(client.recv(), 5.0) == {"hello": 1}
    await pass_one(client, server, 2)
    await asyncio.sleep(0.1)
    assert len(client._pool._lent) == 1          # waits for a ride now
    await server.send({"ack": 2})
    assert await asyncio.wait_for(client.recv(), 5.0) == {"ack": 2}
    assert not client._pool._lent


async def test_shm_release_goes_alone_after_a_delay(shm_pair):
    client, server = shm_pair
    await client.send(np.full(BIG, 7, np.float64))
    arr = await asyncio.wait_for(server.recv(), 5.0)
    del arr
    await _all_back(client)


async def test_shm_pool_bound_falls_back_to_inline(shm_pair):
    client, server = shm_pair
    client._pool._limit = 1 << 20
    held = [None] * 5
    for i in range(5):  # each needs a 1 MiB segment; only one fits the bound while held
        await client.send(np.full(1 << 17, i, np.float64))
        held[i] = await asyncio.wait_for(server.recv(), 5.0)
    assert [int(a[0]) for a in held] == list(range(5))
    assert not held[0].flags.writeable and held[1].flags.writeable  # second went inline


@pytest.mark.slow
async def test_one_gib_array(pair):
    client, server = pair
    arr = np.empty(1 << 30, np.uint8)
    arr[::4096] = np.arange(arr[::4096].size, dtype=np.uint64).astype(np.uint8)
    await client.send(arr)
    got = await asyncio.wait_for(server.recv(), 60.0)
    assert got.shape == arr.shape and got.dtype == arr.dtype
    assert np.array_equal(got[::4096], arr[::4096]) and got[-1] == arr[-1]
    del got
    gc.collect()


# -- shared arrays (transports.shm.ARENA): lent as they are, never copied --------

def shared_full(value: float, dtype=np.float64) -> np.ndarray:
    """A BIG array in this process's shared-memory arena, filled with ``value``."""
    a = shared_empty(BIG, dtype)
    a[...] = value
    return a


async def _released(client, arr, timeout: float = 2.0) -> None:
    for _ in range(int(timeout / 0.005)):
        if ARENA.holders(arr) == 0:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"still {ARENA.holders(arr)} holders of the shared array")


async def test_shared_array_is_lent_without_a_copy(shm_pair):
    client, server = shm_pair
    a = shared_full(1.0)
    assert ARENA.lookup(a) is not None and ARENA.holders(a) == 0
    await client.send({"v": a})
    got = (await asyncio.wait_for(server.recv(), 5.0))["v"]
    assert not got.flags.writeable and (got == 1.0).all()
    assert ARENA.holders(a) == 1            # the peer's loan: its owner must not write now
    a[3, 4] = 7.0                            # (done here only to show the memory is one)
    assert got[3, 4] == 7.0
    del got
    await _released(client, a)


async def test_shared_array_fd_crosses_once(shm_pair):
    client, server = shm_pair
    a = shared_full(2.0, np.float32)
    for _ in range(4):
        await client.send(a)
        got = await asyncio.wait_for(server.recv(), 5.0)
        assert (got == 2.0).all()
    assert len(server._maps._maps) == 1     # one mapping, reused by every loan
    assert client._pool._total == 0         # no segment of the pool was needed
    del got
    await _released(client, a)


async def test_shared_array_goes_inline_over_tcp():
    async with connected("tcp") as (client, server):
        a = shared_full(3.0)
        await client.send(a)
        got = await asyncio.wait_for(server.recv(), 5.0)
        assert got.flags.writeable and (got == 3.0).all()
        assert ARENA.holders(a) == 0        # a copy went: nothing is lent
        got[0, 0] = 0.0
        assert a[0, 0] == 3.0


def test_arena_reuses_free_buffers_and_keeps_small_arrays_private():
    a = shared_empty(BIG, np.float64)
    buf = ARENA.lookup(a)
    del a
    b = shared_empty(BIG, np.float64)       # nobody holds the first: it is reused
    assert ARENA.lookup(b) is buf
    c = shared_empty(BIG, np.float64)       # b holds it: a new one
    assert ARENA.lookup(c) is not buf
    assert ARENA.lookup(shared_empty((4,), np.float32)) is None   # under 64 KiB
    assert ARENA.lookup(shared_empty(BIG, object)) is None


async def test_a_closed_connection_leaves_its_loans_unwritable():
    # The peer process may still read what it was lent after the connection
    # goes: the buffer is pinned, never lent or written again.
    from distrib.runtime.state.variable_store import VariableStore
    async with connected("shm") as (client, server):
        a = shared_full(1.0)
        await client.send(a)
        got = await asyncio.wait_for(server.recv(), 5.0)
        await client.close()
        assert ARENA.holders(a) >= 1 and ARENA.lookup(a) is None
        store = VariableStore()
        store.set("v", a)
        del a
        store.writable("v")[...] = 2.0          # copy on write, not into the peer's view
        assert (got == 1.0).all() and (store.get("v") == 2.0).all()


async def test_a_message_that_fails_to_encode_lends_nothing(shm_pair):
    client, server = shm_pair
    a = shared_full(5.0)
    with pytest.raises(TypeError):
        await client.send([a, np.full(BIG, 6.0), object()])   # an arena loan, a new segment
    assert ARENA.holders(a) == 0 and not client._pool._lent
    # the peer got both fds ahead of any message; later messages still resolve them
    await client.send(np.full((1024, 256), 7.0))                # a segment made after them
    assert (await asyncio.wait_for(server.recv(), 5.0) == 7.0).all()
    await client.send([a, np.full(BIG, 8.0)])                   # the rolled-back ones
    got = await asyncio.wait_for(server.recv(), 5.0)
    assert (got[0] == 5.0).all() and (got[1] == 8.0).all()


async def test_release_notices_survive_a_failed_send(shm_pair, monkeypatch):
    monkeypatch.setattr(connection_module, "_RELEASE_DELAY_S", 30.0)
    monkeypatch.setattr(connection_module, "_RELEASE_ALONE_S", 30.0)
    client, server = shm_pair
    await pass_one(client, server, 3)
    await asyncio.sleep(0.01)
    assert len(client._pool._lent) == 1
    with pytest.raises(TypeError):
        await server.send({"bad": object()})
    await server.send({"ok": 1})
    assert await asyncio.wait_for(client.recv(), 5.0) == {"ok": 1}
    assert not client._pool._lent            # the notice went with the next message


def test_arena_unmaps_idle_buffers_past_its_idle_limit():
    from transports.shm import SharedArena
    arena = SharedArena(limit=64 << 20, max_buffers=64)
    assert arena.idle_limit == 16 << 20
    try:
        for mib in (8, 4, 2, 1):                # each dropped at once: idle buffers pile up
            arena.empty((mib << 20,), np.uint8)
        assert arena._total == 15 << 20
        arena.empty((2 << 20,), np.uint8)       # reuses the free 2 MiB one
        assert arena._total == 15 << 20
        arena.empty((16 << 20,), np.uint8)      # idle 15 MiB <= 16: kept, a new one made
        assert arena._total == 31 << 20
        arena.empty((512 << 10,), np.uint8)     # idle 31 MiB > 16: the biggest go first
        assert arena._total <= (15 << 20) + (512 << 10)
        assert len(arena.evicted) >= 1
    finally:
        arena.close()


async def test_a_prefix_claiming_a_huge_header_commits_no_memory_up_front():
    # 16 bytes claiming a 512 MiB header (up to 4 GiB passes the frame limit):
    # the receive buffer grows with the bytes that actually come, not with
    # the claim (it zero-filled the whole claim, on the event loop)
    from transports import wire as W
    w = W.Wire("test")
    w.max_frame = 1 << 32
    data = W.PREAMBLE + W.PREFIX.pack(1 << 29, W.FRAME_MSG << 24, 0) + b"x" * 16
    for _ in range(3):   # the same bytes over and over: still a small buffer
        view = w.get_buffer(-1)
        view[:len(data)] = data
        w.buffer_updated(len(data))
        data = b"y" * 1024
    assert len(w._buf) <= 4 * W._BUF_SIZE
    assert not w.closed
