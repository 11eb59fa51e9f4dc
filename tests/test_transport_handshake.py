"""Handshake, cluster secret, connect deadline, and bad input at a live listener."""
from __future__ import annotations

import asyncio
import logging
import socket
import struct

import msgpack
import numpy as np
import pytest

from transports import (
    AuthError,
    ConnectionClosed,
    ConnectTimeout,
    FrameError,
    HandshakeError,
    MessageTooLarge,
    PeerInfo,
    TransportConfig,
    connect,
    listen,
    local_host_id,
    new_incarnation,
)
from transports.frames import MAGIC, PREAMBLE

FAST = dict(connect_timeout_s=3.0, handshake_timeout_s=1.0)


def identity(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


def echo(conn):
    conn.start(conn.send_nowait, lambda exc: None)


@pytest.fixture
async def server():
    listener = await listen("127.0.0.1", 0, echo, identity=identity("/job:ps/task:0"),
                            config=TransportConfig(token=b"", **FAST))
    yield listener
    await listener.close()


async def assert_serves(address: str, token: bytes = b"", mode: str = "auto") -> None:
    conn = await connect(address, identity=identity("client"),
                         config=TransportConfig(token=token, mode=mode, **FAST))
    try:
        await conn.send({"ping": np.arange(5)})
        reply = await asyncio.wait_for(conn.recv(), 3.0)
        assert reply["ping"].tolist() == [0, 1, 2, 3, 4]
        assert conn.peer.name.startswith("/job:")
    finally:
        await conn.close()


# ---- cluster secret ------------------------------------------------------------

@pytest.fixture
async def secured():
    listener = await listen("127.0.0.1", 0, echo, identity=identity("/job:worker/task:0"),
                            config=TransportConfig(token=b"s3cret", **FAST))
    yield listener
    await listener.close()


async def test_right_token_connects(secured):
    await assert_serves(secured.address, token=b"s3cret")


@pytest.mark.parametrize("mode", ["tcp", "shm"])
async def test_token_from_environment(secured, monkeypatch, tmp_path, mode):
    monkeypatch.setenv("DISTRIB_CLUSTER_TOKEN", "s3cret")
    conn = await connect(secured.address, identity=identity("c"), config=TransportConfig(mode=mode, **FAST))
    assert conn.kind == mode
    await conn.close()
    monkeypatch.delenv("DISTRIB_CLUSTER_TOKEN")
    (tmp_path / "token").write_bytes(b"s3cret\n")
    monkeypatch.setenv("DISTRIB_CLUSTER_TOKEN_FILE", str(tmp_path / "token"))
    conn = await connect(secured.address, identity=identity("c"), config=TransportConfig(**FAST))
    await conn.close()


async def test_wrong_token_is_refused_and_logged(secured, caplog):
    with caplog.at_level(logging.WARNING, logger="transports"):
        with pytest.raises(AuthError, match="DISTRIB_CLUSTER_TOKEN"):
            await connect(secured.address, identity=identity("intruder"),
                          config=TransportConfig(token=b"guess", **FAST))
        await asyncio.sleep(0.05)
    refusals = [r for r in caplog.records if "refused connection" in r.getMessage()]
    assert len(refusals) == 1  # AuthError came at once: no retry
    assert "does not match" in refusals[0].getMessage() and refusals[0].levelno == logging.WARNING
    await assert_serves(secured.address, token=b"s3cret")


async def test_missing_token_is_refused(secured, monkeypatch, caplog):
    monkeypatch.delenv("DISTRIB_CLUSTER_TOKEN", raising=False)
    monkeypatch.delenv("DISTRIB_CLUSTER_TOKEN_FILE", raising=False)
    with caplog.at_level(logging.WARNING, logger="transports"):
        with pytest.raises(AuthError, match="set DISTRIB_CLUSTER_TOKEN"):
            await connect(secured.address, identity=identity("c"), config=TransportConfig(**FAST))
        await asyncio.sleep(0.05)
    assert any("no cluster secret" in r.getMessage() for r in caplog.records)
    await assert_serves(secured.address, token=b"s3cret")


async def test_client_with_token_refuses_server_without(server):
    with pytest.raises(AuthError, match="cluster secret"):
        await connect(server.address, identity=identity("c"),
                      config=TransportConfig(token=b"s3cret", **FAST))
    await assert_serves(server.address)


# ---- connecting ----------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connect_to_closed_port_times_out_naming_address():
    port = free_port()
    with pytest.raises(ConnectTimeout) as info:
        await connect(f"127.0.0.1:{port}", identity=identity("c"), expected_name="/job:ps/task:3",
                      config=TransportConfig(connect_timeout_s=0.4))
    msg = str(info.value)
    assert f"127.0.0.1:{port}" in msg and "/job:ps/task:3" in msg and "after 0.4s" in msg


async def test_connect_retries_until_listener_appears():
    port = free_port()
    task = asyncio.ensure_future(connect(f"127.0.0.1:{port}", identity=identity("c"),
                                         config=TransportConfig(**FAST)))
    await asyncio.sleep(0.3)
    assert not task.done()
    listener = await listen("127.0.0.1", port, echo, identity=identity("/job:late/task:0"))
    try:
        conn = await asyncio.wait_for(task, 3.0)
        assert conn.peer.name == "/job:late/task:0"
        await conn.close()
    finally:
        await listener.close()


async def test_closed_listener_port_is_reusable_at_once(server):
    conn = await connect(server.address, identity=identity("c"), config=TransportConfig(**FAST))
    port = server.port
    await server.close()
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(conn.recv(), 3.0)
    again = await listen("127.0.0.1", port, echo, identity=identity("/job:ps/task:0"))
    try:
        await assert_serves(again.address)
    finally:
        await again.close()


async def test_tcp_mode_and_shm_mode_are_honoured(server):
    for mode in ("tcp", "shm"):
        conn = await connect(server.address, identity=identity("c"), config=TransportConfig(mode=mode, **FAST))
        assert conn.kind == mode
        await conn.close()


async def test_shm_mode_refuses_a_peer_on_another_host(server):
    other = PeerInfo("c", new_incarnation(), "another-host")
    conn = await connect(server.address, identity=other, config=TransportConfig(**FAST))
    assert conn.kind == "tcp"  # auto: different host id -> tcp
    await conn.close()
    with pytest.raises(HandshakeError, match="on this host"):
        await connect(server.address, identity=other, config=TransportConfig(mode="shm", **FAST))


# ---- bad input at a live listener ----------------------------------------------

def frame(header: bytes, buffers: list[bytes] = (), ftype: int = 0, claim: int | None = None) -> bytes:
    payload = b"".join(buffers)
    prefix = struct.pack("<IIQ", len(header), ftype << 24 | len(buffers),
                         len(payload) if claim is None else claim)
    return prefix + b"".join(struct.pack("<Q", len(b)) for b in buffers) + header + payload


HELLO = msgpack.packb({"peer": ["x", 1, "h"], "nonce": b"0" * 16})
BAD_INPUTS = {
    "garbage": (b"\x00\xff\x13garbage" * 4, "bad magic"),
    "http": (b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "bad magic"),
    "wrong_magic": (b"DISTRX" + PREAMBLE[6:] + frame(HELLO), "bad magic"),
    "wrong_version": (MAGIC + struct.pack("<H", 99) + frame(HELLO), "version 99"),
    "oversized_frame": (PREAMBLE + struct.pack("<IIQ", 10, 0, 2**40), "over the limit"),
    "not_msgpack": (PREAMBLE + frame(b"\xc1\xc1\xc1"), "undecodable"),
    "missing_buffer": (PREAMBLE + frame(msgpack.packb(msgpack.ExtType(1, msgpack.packb(["<f8", [2], 3, False])))),
                       "missing buffer"),
    "bad_dtype": (PREAMBLE + frame(msgpack.packb(msgpack.ExtType(1, msgpack.packb(["O", [1], 0, False]))),
                                   [b"12345678"]), "not allowed"),
    "lying_lengths": (PREAMBLE + frame(b"\x90", [b"abc"], claim=70) + bytes(67), "add up"),
    "vanish_mid_frame": (PREAMBLE + struct.pack("<IIQ", 5000, 0, 0) + b"\x92" * 100, "middle of a frame"),
    "silent": (b"", "no handshake within"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
async def test_bad_input_closes_only_that_connection(server, caplog, case):
    data, reason = BAD_INPUTS[case]
    bystander = await connect(server.address, identity=identity("bystander"), config=TransportConfig(**FAST))
    with caplog.at_level(logging.WARNING, logger="transports"):
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(data)
        if case == "vanish_mid_frame":
            writer.write_eof()
        try:
            await asyncio.wait_for(reader.read(), 3.0)  # server answers with EOF or a reset
        except ConnectionResetError:
            pass
        writer.close()
        await asyncio.sleep(0.05)
    assert any(reason in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    await bystander.send("still here")
    assert await asyncio.wait_for(bystander.recv(), 3.0) == "still here"
    await bystander.close()
    await assert_serves(server.address)


async def test_frame_over_configured_max_closes_connection(caplog):
    """Each side announces its max_frame_bytes in the handshake: a sender
    fails a message over the receiver's limit itself (MessageTooLarge, the
    connection stays up); a peer that sends one anyway is cut off."""
    small = TransportConfig(max_frame_bytes=1 << 20, token=b"", **FAST)
    listener = await listen("127.0.0.1", 0, echo, identity=identity("/job:small/task:0"), config=small)
    try:
        conn = await connect(listener.address, identity=identity("c"), config=TransportConfig(mode="tcp", **FAST))
        with pytest.raises(MessageTooLarge, match=r"max_frame_bytes=1048576 of the receiver /job:small"):
            await conn.send(np.zeros(2 << 20, np.uint8))
        await conn.send("still up")
        assert await asyncio.wait_for(conn.recv(), 3.0) == "still up"
        conn._wire.send_limit = 4 << 20            # a peer that ignores the announced limit
        with caplog.at_level(logging.WARNING, logger="transports"):
            await conn.send(np.zeros(2 << 20, np.uint8))
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(conn.recv(), 3.0)
        assert any("over the limit" in r.getMessage() for r in caplog.records)
        sender = await connect(listener.address, identity=identity("c"),
                               config=TransportConfig(mode="tcp", max_frame_bytes=1 << 20, **FAST))
        with pytest.raises(FrameError, match="max_frame_bytes"):  # caught before it is sent
            await sender.send(np.zeros(2 << 20))
        await sender.close()
        await assert_serves(listener.address)
    finally:
        await listener.close()
