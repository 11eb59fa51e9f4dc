"""Master ``""``: TF's in-process session, here a local server made on first
use (``Server.create_local_server()``) and stopped, with the sessions opened
on it, when its owner (a Supervisor) stops."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from distrib.server.server_lib import Server
from distrib.train.checkpoints.readiness import close_quietly

logger = logging.getLogger(__name__)

__all__ = ["LocalMaster"]


class LocalMaster:
    """The in-process server of master ``""`` and the sessions opened on it."""

    def __init__(self) -> None:
        self.server: Server | None = None
        self._sessions: list[Any] = []

    async def target(self, master: str | None, config: Any = None) -> str:
        """``master``, or for ``""`` the target of the local server, started now
        if need be (on a thread: it blocks until it serves, and this loop's
        other tasks must go on meanwhile)."""
        if master:
            return master
        if self.server is None:   # made with the session's config (its device_count), as TF's
            self.server = await asyncio.to_thread(Server.create_local_server, config)
            logger.info("master '': started an in-process server at %s (stopped by "
                        "Supervisor.stop)", self.server.target)
        return self.server.target

    def track(self, sess: Any, target: str) -> None:
        """Close ``sess`` with the server if it was opened on it."""
        if self.server is not None and target == self.server.target:
            self._sessions.append(sess)

    async def stop(self) -> None:
        server, self.server = self.server, None
        sessions, self._sessions = self._sessions, []
        for sess in sessions:
            await close_quietly(sess)
        if server is not None:
            await asyncio.to_thread(server.stop)
            logger.info("stopped the in-process server of master ''")
