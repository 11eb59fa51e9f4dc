"""A transport peer in its own process, for the multi-process tests.

    python tests/transport_peer.py echo MODE
        listen on 127.0.0.1:0, print "ADDRESS host:port", echo every message back
    python tests/transport_peer.py flood MODE ADDRESS NBYTES
        connect to ADDRESS and send arrays of NBYTES bytes until killed
"""
from __future__ import annotations

import asyncio
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import uvloop  # noqa: E402

from transports import (  # noqa: E402
    ConnectionClosed,
    PeerInfo,
    TransportConfig,
    connect,
    listen,
    local_host_id,
    new_incarnation,
)


def _identity(name: str) -> PeerInfo:
    return PeerInfo(name, new_incarnation(), local_host_id())


async def echo(mode: str) -> None:
    def on_connection(conn):
        conn.start(conn.send_nowait, lambda exc: None)

    listener = await listen("127.0.0.1", 0, on_connection, identity=_identity("echo"),
                            config=TransportConfig(mode=mode))
    print("ADDRESS", listener.address, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes
    await listener.close()


async def flood(mode: str, address: str, nbytes: int) -> None:
    conn = await connect(address, identity=_identity("flood"), config=TransportConfig(mode=mode))
    arr = np.arange(nbytes, dtype=np.uint8)
    i = 0
    try:
        while True:
            arr[0] = i % 256
            await conn.send(arr)
            i += 1
    except ConnectionClosed:
        pass


if __name__ == "__main__":
    role, mode = sys.argv[1], sys.argv[2]
    if role == "echo":
        uvloop.run(echo(mode))
    else:
        uvloop.run(flood(mode, sys.argv[3], int(sys.argv[4])))
