"""Failure detection: heartbeats on every connection, and a deadline for silence.

Every actor system sends each of its connections (to other tasks and to
clients, both ways) a heartbeat every ``DISTRIB_HEARTBEAT_S`` seconds
(default 1). A peer from which nothing has arrived for three of them (no
message, no heartbeat, not one byte of a frame still in flight) is declared
dead: its connection is dropped with a reason that names it, so every call
pending on it fails with ``UnavailableError`` whose ``peer`` is that task
(set by the actor system's close of the connection), and with it every step that
needs the peer, with or without ``operation_timeout_s``. A killed process
closes its sockets at once; this finds the stopped or hung one (SIGSTOP, a
frozen VM, a partition) within 3 to 3.25 heartbeats (docs/CONTRACT.md,
"Fault tolerance").

Two rules keep it from blaming the innocent:
- Liveness is bytes received, not messages: a 1 GiB tensor that takes longer
  than three heartbeats to arrive is progress all along.
- A system whose own loop did not run for a while (itself paused, swapped
  out) heard nothing in that time, and the peers' messages are still in its
  sockets: it restarts every peer's clock instead of declaring them dead.
Heartbeats are sent and read on the event loop, which a long kernel never
holds (see kernel_pool), so a busy task still answers.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import transports
from distrib.settings import HEARTBEAT_S

logger = logging.getLogger(__name__)

__all__ = ["MISSED_HEARTBEATS", "heartbeat_s", "FailureDetector", "Heartbeat"]

# heartbeats missed before a peer is declared dead (the contract's three)
MISSED_HEARTBEATS = 3


def heartbeat_s() -> float:
    """``DISTRIB_HEARTBEAT_S``: seconds between heartbeats on every connection
    (default 1; 0 turns failure detection off, for benchmarks). Read on
    each call; a bad value is a ``SettingError`` (a ``ValueError``)."""
    return HEARTBEAT_S.get()


class Heartbeat:
    """The heartbeat message of one actor system, ``[kind]``, or ``[kind,
    version]`` once the system holds a cluster membership (version > 0,
    ``distrib.runtime.chief.membership``): every heartbeat carries it, so a
    peer holding an older one learns within a heartbeat that it should
    fetch the new list. ``heard`` reads a heartbeat that arrived: a newer
    version than this system's goes to ``on_version``; anything else in it
    is ignored (an older peer sends none)."""

    def __init__(self, kind: int) -> None:
        self.kind = kind
        self.version = 0
        self.on_version: Callable[[int], None] | None = None

    def message(self) -> list:
        return [self.kind, self.version] if self.version else [self.kind]

    def heard(self, msg: list) -> None:
        if len(msg) > 1 and self.on_version is not None and type(msg[1]) is int \
                and msg[1] > self.version:
            self.on_version(msg[1])


class FailureDetector:
    """Heartbeats for the connections ``connections()`` lists, and the
    deadline for their silence. ``heartbeat`` is the message sent (a
    :class:`Heartbeat`: its current message)."""

    def __init__(self, name: str, connections: Callable[[], list[transports.Connection]],
                 heartbeat: Any, every: float) -> None:
        self.name = name
        self.connections = connections
        self.heartbeat = heartbeat
        self.every = every
        # per connection: bytes received when last seen growing, and when (loop time)
        self._heard: dict[transports.Connection, tuple[int, float]] = {}

    async def run(self) -> None:
        """Look four times per heartbeat (a death is named within 3.25
        heartbeats); send the heartbeats once per heartbeat."""
        loop = asyncio.get_running_loop()
        last = next_beat = loop.time()
        while True:
            await asyncio.sleep(self.every / 4)
            now = loop.time()
            deaf = now - last > 2 * self.every
            last = now
            beat = now >= next_beat
            if beat:
                next_beat = now + self.every
            live = [c for c in self.connections() if not c.closed]
            msg = self.heartbeat.message() if isinstance(self.heartbeat, Heartbeat) else self.heartbeat
            for conn in live:
                self.check(conn, now, beat, deaf, msg)
            if len(self._heard) > len(live):
                keep = set(live)
                self._heard = {c: h for c, h in self._heard.items() if c in keep}

    def check(self, conn: transports.Connection, now: float, beat: bool, deaf: bool,
              msg: Any = None) -> None:
        got = conn.bytes_received
        heard = self._heard.get(conn)
        if heard is None or got != heard[0] or deaf:
            self._heard[conn] = (got, now)
        elif now - heard[1] >= MISSED_HEARTBEATS * self.every:
            reason = transports.ConnectionClosed(
                f"nothing from {conn.peer.name} for {now - heard[1]:.1f}s, "
                f"{MISSED_HEARTBEATS} heartbeats (DISTRIB_HEARTBEAT_S={self.every:g}): "
                "declared dead")
            self._heard.pop(conn, None)
            conn.fail(reason)
            return
        if beat:
            try:
                conn.send_nowait(self.heartbeat if msg is None else msg)
            except Exception as e:   # the connection's close callback reports why
                logger.debug("heartbeat to %s not sent: %s", conn.peer.name, e)
