"""transports: messages between processes, over TCP or shared memory.

Knows nothing of graphs or actors. A message is a msgpack header plus raw
array buffers sent out of band (:mod:`.codec`), framed on a stream
(:mod:`.frames` the bytes, :mod:`.wire` the protocol object, :mod:`.blocks`
big frames' memory), after a handshake that checks protocol, identity and the
cluster secret (:mod:`.handshake`). Peers on one host pass large arrays
through memfd shared memory (:mod:`.shm`). Entry points: :func:`listen`,
:func:`connect`.
"""
from __future__ import annotations

from .config import PeerInfo, TransportConfig, local_host_id, new_incarnation
from .connection import Connection
from .endpoint import Listener, connect, listen, parse_address
from .errors import (
    AuthError,
    ConnectionClosed,
    ConnectTimeout,
    FrameError,
    HandshakeError,
    MessageTooLarge,
    TransportError,
)

__all__ = [
    "TransportConfig", "PeerInfo", "local_host_id", "new_incarnation",
    "listen", "connect", "Listener", "Connection", "parse_address",
    "TransportError", "ConnectionClosed", "ConnectTimeout", "HandshakeError", "AuthError", "FrameError",
    "MessageTooLarge",
]
