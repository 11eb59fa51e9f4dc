"""Configuration and identities of transport endpoints.

A :class:`PeerInfo` is what each side tells the other in the handshake: the
task name, an *incarnation* that changes every time a process starts (so a
restarted peer is never mistaken for its previous life) and a *host id* that
tells whether both ends share a host, and therefore shared memory.

Two limits bound what a peer can make a receiver hold (issue 21):
``max_frame_bytes`` (``DISTRIB_MAX_FRAME_BYTES``, default 2 GiB: gRPC's and
protobuf's own ceiling, so one step of a TF1 program fits in one message) and
``frame_timeout_s`` (``DISTRIB_FRAME_TIMEOUT_S``, default three heartbeats,
at least 10 s): how long a frame in progress may go without a byte.
"""
from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

from .settings import (
    CLUSTER_TOKEN,
    CLUSTER_TOKEN_FILE,
    FRAME_TIMEOUT_S,
    HEARTBEAT_S,
    MAX_FRAME_BYTES,
    TLS_CA,
    TLS_CERT,
    TLS_KEY,
    SettingError,
)

__all__ = ["TransportConfig", "PeerInfo", "local_host_id", "new_incarnation", "resolve_token",
           "DEFAULT_MAX_FRAME_BYTES", "MIN_FRAME_BYTES"]

TLS_SETTINGS = (TLS_CERT, TLS_KEY, TLS_CA)
# One message (a step's request, its fetches, a tensor sent between tasks)
# may be this big. It was 4 GiB: a 16-byte prefix could make a server accept
# bytes until the sender stopped. 2 GiB is the int32 limit of TF's gRPC
# channels and of protobuf, so nothing TF could send in one RPC is refused.
DEFAULT_MAX_FRAME_BYTES: int = MAX_FRAME_BYTES.default
MIN_FRAME_BYTES = int(MAX_FRAME_BYTES.minimum or 0)   # the handshake's own frames must fit
_MIN_FRAME_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TransportConfig:
    """Knobs of one endpoint; the defaults suit a cluster on one or many hosts.

    ``mode``: "auto" (shared memory when the peer is on this host, else tcp),
    "tcp" or "shm". ``token``: the cluster secret; ``None`` reads
    ``DISTRIB_CLUSTER_TOKEN`` (or the file named by
    ``DISTRIB_CLUSTER_TOKEN_FILE``); empty means no authentication.
    ``shm_pool_bytes`` bounds the shared memory one connection's sender keeps
    pooled (a single array bigger than that still goes through, alone).
    ``max_frame_bytes``: the biggest message this side accepts; ``None``
    reads ``DISTRIB_MAX_FRAME_BYTES`` (bytes, or with a K/M/G suffix; default
    2 GiB). Both sides announce theirs in the handshake and a sender refuses
    a message over the peer's with :class:`~transports.errors.MessageTooLarge`
    (the connection stays up). ``frame_timeout_s``: a frame in progress that
    gets no byte for this long closes the connection; ``None`` reads
    ``DISTRIB_FRAME_TIMEOUT_S`` (default 3 x ``DISTRIB_HEARTBEAT_S``, at least
    10 s; 0 turns it off). ``handshake_timeout_s`` bounds a connection that
    has not proven itself. ``tls_cert``, ``tls_key``, ``tls_ca``: paths
    that turn on mutual TLS for TCP (:mod:`transports.tls`); ``None`` reads
    ``DISTRIB_TLS_CERT``, ``DISTRIB_TLS_KEY``, ``DISTRIB_TLS_CA``; all three
    or none (a partial set is a ValueError naming what is missing); "" = off.
    """

    mode: str = "auto"
    max_frame_bytes: int | None = None
    shm_threshold: int = 64 * 1024
    token: bytes | None = None
    connect_timeout_s: float = 10.0
    handshake_timeout_s: float = 5.0
    shm_pool_bytes: int = 2**31
    frame_timeout_s: float | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None

    def __post_init__(self) -> None:
        self._resolve_tls()
        if self.mode not in ("auto", "tcp", "shm"):
            raise ValueError(f"TransportConfig.mode must be 'auto', 'tcp' or 'shm', not {self.mode!r}")
        if self.max_frame_bytes is None:
            object.__setattr__(self, "max_frame_bytes", MAX_FRAME_BYTES.get())
        if not MIN_FRAME_BYTES <= self.max_frame_bytes < 2**63:  # type: ignore[operator]
            raise ValueError(f"max_frame_bytes must be at least {MIN_FRAME_BYTES}, "
                             f"not {self.max_frame_bytes!r}")
        if self.frame_timeout_s is None:
            object.__setattr__(self, "frame_timeout_s", _default_frame_timeout())
        if not 0 <= self.frame_timeout_s < float("inf"):  # type: ignore[operator]
            raise ValueError(f"frame_timeout_s must be a number of seconds >= 0, not {self.frame_timeout_s!r}")

    def _resolve_tls(self) -> None:
        fields = ("tls_cert", "tls_key", "tls_ca")
        for field, setting in zip(fields, TLS_SETTINGS):
            if getattr(self, field) is None:
                object.__setattr__(self, field, setting.get())
        missing = [s.name for field, s in zip(fields, TLS_SETTINGS) if not getattr(self, field)]
        if missing and len(missing) < 3:
            have = [s.name for s in TLS_SETTINGS if s.name not in missing]
            raise ValueError(f"mutual TLS needs DISTRIB_TLS_CERT, DISTRIB_TLS_KEY and DISTRIB_TLS_CA "
                             f"together: {', '.join(have)} set but {', '.join(missing)} missing")

    @property
    def tls(self) -> bool:
        """Whether TCP connections use mutual TLS."""
        return bool(self.tls_cert)


def _default_frame_timeout() -> float:
    """``DISTRIB_FRAME_TIMEOUT_S``, else three heartbeats and at least 10 s.

    The runtime's failure detector already drops a connection silent for
    three heartbeats (a byte of a frame in flight counts as life); this is
    the transport's own bound, for connections with heartbeats off and for
    users of the transport alone. A peer that trickles bytes stays within
    ``max_frame_bytes``."""
    value = FRAME_TIMEOUT_S.get()
    if value is not None:
        return value
    try:
        beat = HEARTBEAT_S.get()
    except SettingError:
        beat = 0.0   # the runtime reports a bad heartbeat itself
    return max(_MIN_FRAME_TIMEOUT_S, 3 * beat)


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
    """An id shared by every process of this host (boot id + hostname +
    network namespace).

    The network namespace is part of it because shared memory needs the
    peer's abstract Unix socket (its fd side channel), and those exist per
    network namespace: processes in two namespaces of one kernel (containers,
    ``ip netns``) are two hosts to us, and talk TCP.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "noboot"
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        netns = 0
    return f"{boot}/{socket.gethostname()}/{netns}"


def new_incarnation() -> int:
    """A random 63-bit number naming this start of a process."""
    return secrets.randbits(63)


def resolve_token(config: TransportConfig) -> bytes:
    """The cluster secret to use: the config's, else the environment's; b"" = none."""
    if config.token is not None:
        return bytes(config.token)
    value = CLUSTER_TOKEN.get()
    if value:
        return value.encode()
    path = CLUSTER_TOKEN_FILE.get()
    if path:
        with open(path, "rb") as f:
            return f.read().strip()
    return b""
