"""The in-process server that TF2-style code runs on when nothing else is named.

TF2 runs eagerly in the process; here every step runs on a server. A
``dt.function`` outside any strategy, and a ``MirroredStrategy`` (one
process, its replicas on the process's logical CPUs or GPUs), run on one
local server per process, made on first use (``Server.create_local_server``:
a free loopback port, its own loop thread) and stopped when the process
exits, or by ``shutdown()``.

A multi-worker strategy's server becomes the default target while it runs
(``set_default_target``: TF's sets up the eager context so). A
ParameterServerStrategy's does not: code outside it runs as if it had never
been made, on the local server, except a function whose step reads or updates
its variables (through any input, made in the trace or before it), which
runs on its server (``home_of``, which starts no server to decide); so a
later function never depends on a cluster that went away.

The sessions of this process reach that server, and a strategy's own
server, by direct calls on the server's loop: no socket, no encoding, no
copy of feeds into shared memory (``Server.accept_direct_calls``). The server keeps its own loop thread, so
that its variables outlive the caller's ``asyncio.run``.
"""
from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

from distrib.distribute.core.distribute_lib import variable_owner
from distrib.errors import OpError
from distrib.framework.graph import GraphKeys
from distrib.server.server_lib import Server

logger = logging.getLogger(__name__)

__all__ = ["local_server", "shutdown", "default_target", "set_default_target", "home_of",
           "variables_read"]

_lock = threading.Lock()
_server: Server | None = None
_default: Server | None = None   # a multi-worker strategy's own server, once made


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


def home_of(graph: Any, roots: list[Any]) -> Any:
    """The first strategy, of those whose variables a step of ``roots`` (its
    fetches and side-effect ops) reads or updates, that runs on its own server
    rather than the default target (the chief's of a ParameterServerStrategy);
    None when there is none. The whole input closure counts: a tensor built
    from a variable before the trace (``y = v * 2`` at top level) reads it as
    much as a read made in the trace does. Code that touches no strategy's
    variables runs as if no strategy had been made. Nothing is started here: a
    strategy's target is compared with the servers this module runs."""
    touched = variables_read(roots)
    if not touched:
        return None
    checked: set[int] = set()
    for v in graph.get_collection(GraphKeys.GLOBAL_VARIABLES):
        owner = variable_owner(v)
        if owner is None or id(owner) in checked or \
                getattr(v, "shared_name", None) not in touched:
            continue
        checked.add(id(owner))
        try:
            target = getattr(owner, "target", "")
        except (ValueError, OpError):   # runs no server (any more): not where to run
            continue
        if target and not _is_default(target):
            return owner
    return None


def variables_read(roots: list[Any]) -> set[str]:
    """The variables (their ``var`` attr) that running ``roots`` (tensors or
    ops) reaches through data and control inputs."""
    stack = [getattr(r, "op", r) for r in roots]
    seen: set[int] = set()
    found: set[str] = set()
    while stack:
        op = stack.pop()
        if id(op) in seen or not hasattr(op, "inputs"):
            continue
        seen.add(id(op))
        var = op.attrs.get("var")
        if var:
            found.add(var)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


def _is_default(target: str) -> bool:
    """Whether ``target`` is :func:`default_target`'s, without starting the local
    server (a target that no running server of this module has is not)."""
    server = _default
    if server is None or server.is_stopped:
        server = _server
    return server is not None and server.target == target
