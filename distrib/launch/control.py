"""The elastic launcher's control socket: ``scale`` requests, both ends.

``python -m distrib.launch scale --logdir DIR --workers N`` (:func:`request_scale`)
connects to the unix socket ``DIR/launch.sock`` of the launcher running with
that ``--logdir``, sends one JSON line ``{"workers": N}`` and gets one back:
``{"ok": true, "message": ...}`` once the change is under way, or
``{"ok": false, "reason": ...}`` (:class:`ScaleRefusedError`). No answer
there (no socket, or nothing listening) is :class:`NoLauncherError`.

The launcher's end (:class:`ControlSocket`) is bound with mode 0600 from its
first moment (only its own user may connect; see ``_bind_private``), reads at
most ``_MAX_REQUEST`` bytes of one line within ten seconds, and hands the
count to the launcher's ``scale`` (:mod:`distrib.launch.elastic`). A name
longer than a unix socket's may be is refused when the launch starts, with
advice (:func:`control_path`).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["CONTROL_SOCKET", "ControlSocket", "ScaleError", "NoLauncherError", "ScaleRefusedError",
           "request_scale", "control_path"]

CONTROL_SOCKET = "launch.sock"
_MAX_UNIX_PATH = 107   # sun_path holds 108 bytes, the last a NUL
_MAX_REQUEST = 4096


class ScaleError(Exception):
    """A scale request that did not happen; ``exit_code`` is the CLI's."""

    exit_code = 1


class ScaleRefusedError(ScaleError, ValueError):
    """The launcher refused the change (N outside MIN..MAX, not elastic, stopping)."""

    exit_code = 1


class NoLauncherError(ScaleError, ConnectionError):
    """No launcher answers at ``--logdir``'s control socket."""

    exit_code = 3


def control_path(logdir: str) -> str:
    """The launcher's control socket under ``logdir``; ValueError when the
    path is longer than a unix socket's name may be."""
    path = os.path.join(os.path.abspath(logdir), CONTROL_SOCKET)
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        raise ValueError(f"the control socket {path!r} is longer than {_MAX_UNIX_PATH} bytes, "
                         "the most a unix socket's name holds: give a shorter --logdir")
    return path


async def request_scale(logdir: str, workers: int, timeout: float = 30.0) -> str:
    """Ask the launcher at ``logdir`` to grow or shrink to ``workers``; its
    message once the change is under way. :class:`ScaleRefusedError` when it
    refuses, :class:`NoLauncherError` when none answers there."""
    try:
        path = control_path(logdir)
    except ValueError as e:
        raise NoLauncherError(str(e)) from None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        why = "no control socket" if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}"
        raise NoLauncherError(f"no launcher runs with --logdir {logdir} ({why} at {path})") from None
    try:
        writer.write(json.dumps({"workers": int(workers)}).encode() + b"\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        raise NoLauncherError(f"the launcher at {path} did not answer ({type(e).__name__})") from None
    finally:
        writer.close()
    try:
        answer = json.loads(line)
    except ValueError:
        raise NoLauncherError(f"the launcher at {path} closed without an answer") from None
    if not answer.get("ok"):
        raise ScaleRefusedError(str(answer.get("reason")))
    return str(answer.get("message", ""))


class ControlSocket:
    """The launcher's end of its control socket: one scale request a
    connection, answered with what ``scale`` (the launcher's
    :meth:`Elastic.scale`) says or refuses."""

    def __init__(self, logdir: str, scale: Callable[[int], Awaitable[str]]) -> None:
        self.logdir = logdir
        self.path = control_path(logdir)
        self._scale = scale
        self._server: asyncio.base_events.Server | None = None

    async def open(self) -> None:
        """Listen at ``path``: OSError when another launcher answers there
        (a dead launcher's socket is removed)."""
        if os.path.exists(self.path):
            try:
                _, writer = await asyncio.open_unix_connection(self.path)
            except OSError:
                os.unlink(self.path)   # a dead launcher's
            else:
                writer.close()
                raise OSError(f"another launcher runs with --logdir {self.logdir} "
                              f"(it answers at {self.path})")
        self._server = await asyncio.start_unix_server(self._serve, sock=self._bind_private())

    def close(self) -> None:
        """Stop listening and remove the socket (no-op when not open)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def _bind_private(self) -> socket.socket:
        """The control socket, bound at ``self.path`` with mode 0600 from its
        first moment: bound in a fresh folder only we may enter (0700),
        made 0600 there, then linked into place (a chmod after binding at
        ``self.path`` would leave it open to other local users meanwhile).
        FileExistsError when something is at ``self.path`` already."""
        folder = tempfile.mkdtemp(prefix=".", dir=os.path.dirname(self.path))
        inner = os.path.join(folder, "s")   # no longer than self.path: "." + 8 + "/s"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(inner)
            os.chmod(inner, 0o600)
            os.link(inner, self.path)
        except BaseException:
            sock.close()
            raise
        finally:
            if os.path.exists(inner):
                os.unlink(inner)
            os.rmdir(folder)
        return sock

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10.0)
            if len(line) > _MAX_REQUEST:
                raise ScaleRefusedError("request too long")
            try:
                n = json.loads(line)["workers"]
                if type(n) is not int:
                    raise TypeError
            except (ValueError, KeyError, TypeError):
                raise ScaleRefusedError('a request is one JSON line {"workers": N}') from None
            answer: dict[str, Any] = {"ok": True, "message": await self._scale(n)}
        except ScaleRefusedError as e:
            answer = {"ok": False, "reason": str(e)}
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        except Exception as e:   # noqa: BLE001 - the asker gets the reason, the launch goes on
            logger.exception("scale request failed")
            answer = {"ok": False, "reason": f"{type(e).__name__}: {e}"}
        try:
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()
