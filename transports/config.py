"""Configuration and identities of transport endpoints.

A :class:`PeerInfo` is what each side tells the other in the handshake: the
task name, an *incarnation* that changes every time a process starts (so a
restarted peer is never mistaken for its previous life) and a *host id* that
tells whether both ends share a host, and therefore shared memory.
"""
from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

__all__ = ["TransportConfig", "PeerInfo", "local_host_id", "new_incarnation", "resolve_token"]

TOKEN_ENV = "DISTRIB_CLUSTER_TOKEN"
TOKEN_FILE_ENV = "DISTRIB_CLUSTER_TOKEN_FILE"


@dataclass(frozen=True)
class TransportConfig:
    """Knobs of one endpoint; the defaults suit a cluster on one or many hosts.

    ``mode``: "auto" (shared memory when the peer is on this host, else tcp),
    "tcp" or "shm". ``token``: the cluster secret; ``None`` reads
    ``DISTRIB_CLUSTER_TOKEN`` (or the file named by
    ``DISTRIB_CLUSTER_TOKEN_FILE``); empty means no authentication.
    ``shm_pool_bytes`` bounds the shared memory one connection's sender keeps
    pooled (a single array bigger than that still goes through, alone).
    """

    mode: str = "auto"
    max_frame_bytes: int = 2**32
    shm_threshold: int = 64 * 1024
    token: bytes | None = None
    connect_timeout_s: float = 10.0
    handshake_timeout_s: float = 5.0
    shm_pool_bytes: int = 2**31

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "tcp", "shm"):
            raise ValueError(f"TransportConfig.mode must be 'auto', 'tcp' or 'shm', not {self.mode!r}")


@dataclass(frozen=True)
class PeerInfo:
    """Who is at one end of a connection."""

    name: str
    incarnation: int
    host_id: str

    def to_wire(self) -> list:
        return [self.name, self.incarnation, self.host_id]

    @classmethod
    def from_wire(cls, data: object) -> PeerInfo:
        if (not isinstance(data, list) or len(data) != 3 or not isinstance(data[0], str)
                or not isinstance(data[1], int) or not isinstance(data[2], str)):
            raise ValueError(f"malformed peer info {data!r:.200}")
        return cls(data[0], data[1], data[2])


def local_host_id() -> str:
    """An id shared by every process of this host (boot id + hostname)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "noboot"
    return f"{boot}/{socket.gethostname()}"


def new_incarnation() -> int:
    """A random 63-bit number naming this start of a process."""
    return secrets.randbits(63)


def resolve_token(config: TransportConfig) -> bytes:
    """The cluster secret to use: the config's, else the environment's; b"" = none."""
    if config.token is not None:
        return bytes(config.token)
    value = os.environ.get(TOKEN_ENV)
    if value:
        return value.encode()
    path = os.environ.get(TOKEN_FILE_ENV)
    if path:
        with open(path, "rb") as f:
            return f.read().strip()
    return b""
