"""Property-based tests of the frame decoder and the handshake (issue 21).

Random, truncated and mutated frames go straight into a :class:`Wire` through
``get_buffer``/``buffer_updated`` (the asyncio buffered-protocol calls) with a
fake transport, and random hellos into both sides of the handshake. Whatever
comes, the wire either delivers messages or closes with a typed
``TransportError``: never an exception of ours (``buffer_updated`` logs those
as "error while reading"), and its buffers never hold much more than the
bytes that came. Bounded: modest ``max_examples``, a deadline per example,
the file in a few seconds.
"""
from __future__ import annotations

import asyncio
import logging
import struct

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transports import PeerInfo, TransportConfig, TransportError, local_host_id, new_incarnation
from transports import blocks as B
from transports import frames as F
from transports import wire as W
from transports.handshake import client_handshake, server_handshake

FUZZ = settings(max_examples=150, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
LIMIT = 1 << 20   # an opened wire's frame limit in these tests
SLACK = 64 << 10  # what a wire may hold beyond the bytes it got


# ---- a loop and a fake transport ---------------------------------------------------

_loop: asyncio.AbstractEventLoop | None = None


def run(coro):
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coro)


@pytest.fixture(scope="module", autouse=True)
def _close_loop():
    yield
    global _loop
    if _loop is not None:
        _loop.close()
        _loop = None


class FakeTransport(asyncio.Transport):
    """Collects writes; abort/close end the connection on the next loop turn,
    as a real transport does."""

    def __init__(self, wire: W.Wire) -> None:
        super().__init__()
        self.wire, self.out, self.closing = wire, bytearray(), False

    def get_extra_info(self, name, default=None):
        return default

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def write(self, data):
        self.out += data

    def writelines(self, pieces):
        for p in pieces:
            self.out += p

    def is_closing(self):
        return self.closing

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def abort(self):
        if not self.closing:
            self.closing = True
            asyncio.get_running_loop().call_soon(self.wire.connection_lost, None)

    close = abort


class Errors(logging.Handler):
    """Records our own bugs: buffer_updated logs them at ERROR."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


@pytest.fixture(scope="module")
def bugs():
    handler = Errors()
    logger = logging.getLogger("transports")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


async def new_wire(opened: bool, limit: int = LIMIT) -> tuple[W.Wire, FakeTransport]:
    wire = W.Wire("fuzz")
    transport = FakeTransport(wire)
    wire.connection_made(transport)
    transport.out.clear()   # our own preamble
    if opened:
        wire.open_up(limit, 0.0)
    return wire, transport


def held(wire: W.Wire) -> int:
    """Bytes of memory the wire holds for what it is receiving."""
    return len(wire._buf) + (len(wire._dmv) if wire._dmv is not None else 0)


def feed(wire: W.Wire, data: bytes, cuts: list[int]) -> None:
    """``data`` in pieces (as reads of any size would bring it), checking the
    wire's memory after each."""
    got, pos = 0, 0
    for cut in sorted(set(c % (len(data) + 1) for c in cuts)) + [len(data)]:
        while pos < cut and not wire.transport.is_closing():   # a loop stops reading then
            view = wire.get_buffer(-1)
            assert len(view) > 0
            n = min(len(view), cut - pos)
            view[:n] = data[pos:pos + n]
            del view
            wire.buffer_updated(n)
            pos += n
            got += n
            assert held(wire) <= max(2 * got, B.GROW_FROM) + W._BUF_SIZE + SLACK
            if wire.max_frame == W.HANDSHAKE_MAX_FRAME:   # a peer not yet proven
                assert held(wire) <= 2 * W.HANDSHAKE_MAX_FRAME + W._HANDSHAKE_BUF
            if wire._dmv is not None:
                assert wire._dlen <= wire.max_frame


def frame(header: bytes, buffers: list[bytes] = (), ftype: int = W.FRAME_MSG) -> bytes:
    pieces, lens, off = [], [], 0
    for b in buffers:
        pad = -off % W.ALIGN
        pieces.append(bytes(pad) + b)
        lens.append(len(b))
        off += pad + len(b)
    return (F.PREFIX.pack(len(header), ftype << 24 | len(buffers), off)
            + struct.pack(f"<{len(lens)}Q", *lens) + header + b"".join(pieces))


def outcome(wire: W.Wire) -> None:
    """A wire that closed did so with a typed error."""
    if wire._error is not None:
        assert isinstance(wire._error, TransportError), repr(wire._error)


# ---- messages: what a peer could legitimately send ----------------------------------

arrays = st.builds(
    lambda dt, shape, seed: np.random.default_rng(seed).integers(0, 255, shape).astype(dt),
    st.sampled_from(["<f4", "<f8", "<i8", "|u1", "|b1", "<c8"]),
    st.lists(st.integers(0, 40), max_size=3).map(tuple), st.integers(0, 1000))
scalars = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats(allow_nan=False) \
    | st.text(max_size=20) | st.binary(max_size=64)
messages = st.recursive(scalars | arrays, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
cuts = st.lists(st.integers(0, 1 << 20), max_size=6)


def encode(msgs: list, limit: int = LIMIT) -> bytes:
    async def go():
        wire, transport = await new_wire(opened=True, limit=limit)
        for m in msgs:
            wire.write_message(m)
        return bytes(transport.out)
    return run(go())


def same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and (a == b).all()
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


# ---- the decoder ---------------------------------------------------------------------

@FUZZ
@given(msgs=st.lists(messages, min_size=1, max_size=4), cuts=cuts)
def test_valid_frames_arrive_whole_in_any_pieces(msgs, cuts, bugs):
    data = W.PREAMBLE + encode(msgs)

    async def go():
        wire, _ = await new_wire(opened=True)
        feed(wire, data, cuts)
        return [await wire.recv() for _ in msgs], wire
    got, wire = run(go())
    assert all(map(same, msgs, got)) and not wire.closed and not bugs


@FUZZ
@given(data=st.binary(max_size=4096), opened=st.booleans(), preamble=st.booleans(), cuts=cuts)
def test_random_bytes_close_with_a_typed_error(data, opened, preamble, cuts, bugs):
    async def go():
        wire, _ = await new_wire(opened)
        feed(wire, (W.PREAMBLE if preamble else b"") + data, cuts)
        await asyncio.sleep(0)
        outcome(wire)
    run(go())
    assert not bugs


@FUZZ
@given(msgs=st.lists(messages, min_size=1, max_size=3), cuts=cuts, data=st.data())
def test_truncated_and_mutated_frames_close_with_a_typed_error(msgs, cuts, data, bugs):
    raw = bytearray(encode(msgs))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if kind == "flip" and raw:
            raw[at] ^= data.draw(st.integers(1, 255))
        elif kind == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del raw[at:at + data.draw(st.integers(1, 16))]
        else:
            del raw[at:]

    async def go():
        wire, _ = await new_wire(opened=True)
        feed(wire, W.PREAMBLE + bytes(raw), cuts)
        while wire._inbox:                 # whatever decoded is a message of ours
            await wire.recv()
        wire.eof_received()
        wire.connection_lost(None)
        outcome(wire)
        assert held(wire) == 0             # a closed wire lets go of its buffers
    run(go())
    assert not bugs


@FUZZ
@given(hlen=st.integers(0, 2**32 - 1), nbufs=st.integers(0, 3), plen=st.integers(0, 2**64 - 1),
       lens=st.lists(st.integers(0, 2**64 - 1), min_size=3, max_size=3),
       tail=st.integers(0, 3 << 20), opened=st.booleans(), cuts=cuts)
def test_a_lying_prefix_costs_only_the_bytes_that_came(hlen, nbufs, plen, lens, tail, opened, cuts, bugs):
    # a prefix (and buffer lengths) claiming anything, then `tail` bytes of
    # zeros: the wire holds about what came, never the claim (a 4 GiB limit,
    # the old default, so that claims of gigabytes pass the limit check)
    head = F.PREFIX.pack(hlen, nbufs, plen) + struct.pack(f"<{nbufs}Q", *lens[:nbufs])

    async def go():
        wire, _ = await new_wire(opened, limit=2**32)
        feed(wire, W.PREAMBLE + head + bytes(tail), cuts)
        outcome(wire)
    run(go())
    assert not bugs


def test_a_big_frame_grows_its_block_with_the_bytes_and_arrives_intact(bugs):
    # 40 MiB: the block starts at _GROW_FROM and doubles as bytes come
    payload = np.arange(5 << 20, dtype=np.int64)
    data = W.PREAMBLE + encode([{"a": payload}], limit=64 << 20)

    async def go():
        wire, _ = await new_wire(opened=False)
        wire.open_up(64 << 20, 0.0)
        sizes, pos = [], 0
        while pos < len(data):
            view = wire.get_buffer(-1)
            n = min(len(view), len(data) - pos, 1 << 20)
            view[:n] = data[pos:pos + n]
            del view
            wire.buffer_updated(n)
            pos += n
            if wire._dmv is not None:
                sizes.append(len(wire._dmv))
                assert len(wire._dmv) <= max(B.GROW_FROM, 2 * wire._doff)
        assert sorted(set(sizes)) == [B.GROW_FROM, 2 * B.GROW_FROM, payload.nbytes]
        got = await wire.recv()
        assert (got["a"] == payload).all() and got["a"].flags.writeable
    run(go())
    assert not bugs


# ---- the handshake -------------------------------------------------------------------

def me(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


junk = st.none() | st.integers() | st.text(max_size=8) | st.binary(max_size=20) | st.lists(st.integers(), max_size=3)
hellos = st.fixed_dictionaries({}, optional={
    "peer": st.sampled_from([["x", 1, "h"], ["x", "1", "h"], [1, 2], None]) | junk,
    "nonce": st.sampled_from([b"0" * 16, b"short"]) | junk,
    "mac": st.sampled_from([None, b"m" * 32]) | junk,
    "shm": st.booleans() | junk, "ok": st.booleans() | junk, "code": st.sampled_from(["auth", "shm"]) | junk,
    "reason": junk, "auth": junk, "ticket": junk,
})
handshake_input = st.lists(hellos | junk, min_size=0, max_size=3)


async def handshake(side: str, msgs: list, token: bytes, cut: int | None):
    wire, _ = await new_wire(opened=False)
    config = TransportConfig(mode="tcp", token=token)
    if side == "server":
        task = asyncio.ensure_future(server_handshake(wire, me("s"), config, token, None))
    else:
        task = asyncio.ensure_future(client_handshake(wire, me("c"), config, token, "peer"))
    data = W.PREAMBLE + b"".join(frame(msgpack.packb(m, use_bin_type=True)) for m in msgs)
    feed(wire, data[:cut] if cut is not None else data, [])
    await asyncio.sleep(0)
    wire.connection_lost(None)   # the peer is gone: every wait ends
    try:
        conn = await asyncio.wait_for(task, 2.0)
    except TransportError:
        return wire
    await conn.close()           # only a well-formed exchange gets here
    return wire


@FUZZ
@given(side=st.sampled_from(["server", "client"]), msgs=handshake_input,
       token=st.sampled_from([b"", b"tok"]), cut=st.none() | st.integers(0, 400))
def test_random_handshakes_fail_with_typed_errors(side, msgs, token, cut, bugs):
    wire = run(handshake(side, msgs, token, cut))
    assert wire.closed and held(wire) == 0
    assert not bugs


def test_a_closed_wire_holds_nothing_and_is_no_cycle():
    import gc
    import weakref

    async def go():
        wire, transport = await new_wire(opened=False)
        feed(wire, b"bad magic!", [])
        await asyncio.sleep(0)
        return weakref.ref(wire), transport
    gc.disable()
    try:
        ref, transport = run(go())
        transport.wire = None
        assert ref() is None       # freed by refcounting, no collection needed
    finally:
        gc.enable()

