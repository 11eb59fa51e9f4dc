"""The in-process server that TF2-style code runs on when nothing else is named.

TF2 runs eagerly in the process; here every step runs on a server. A
``dt.function`` outside any strategy, and a ``MirroredStrategy`` (one
process, its replicas on the process's logical CPUs or GPUs), run on one
local server per process, made on first use (``Server.create_local_server``:
a free loopback port, its own loop thread) and stopped when the process
exits, or by ``shutdown()``.

The sessions of this process reach that server, and a multi-worker or ps
strategy's own server (``set_default_target``), by direct calls on the
server's loop: no socket, no encoding, no copy of feeds into shared memory
(``Server.accept_direct_calls``). The server keeps its own loop thread, so
that its variables outlive the caller's ``asyncio.run``.
"""
from __future__ import annotations

import atexit
import logging
import threading

from distrib.server.server_lib import Server

logger = logging.getLogger(__name__)

__all__ = ["local_server", "shutdown", "default_target", "set_default_target"]

_lock = threading.Lock()
_server: Server | None = None
_default: Server | None = None   # a multi-worker or ps strategy's own server, once made


def set_default_target(server: Server | None) -> None:
    """Where TF2-style code runs from now on in this process: a multi-worker
    strategy sets its task's server, as TF's sets up the eager context's."""
    global _default
    if server is not None:
        server.accept_direct_calls()
    _default = server


def default_target() -> str:
    """The target a ``dt.function`` runs on outside every strategy's scope: the
    server a strategy set while it runs, else this process's local server."""
    server = _default
    if server is not None and not server.is_stopped:
        return server.target
    return local_server().target


def local_server() -> Server:
    """This process's local server (started on first use)."""
    global _server
    with _lock:
        if _server is None:
            _server = Server.create_local_server()
            _server.accept_direct_calls()
            logger.info("started this process's local server at %s", _server.target)
            atexit.register(shutdown)
        return _server


def shutdown() -> None:
    """Stop the local server (a later use starts a new one)."""
    global _server
    with _lock:
        server, _server = _server, None
    if server is not None:
        server.stop()
