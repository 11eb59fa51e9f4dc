"""TF's ``tf.Session()`` with no target (a DirectSession), on distrib's
runtime: the session gets a server of its own, in this process and on the
session's loop, made with the session's ``ConfigProto`` (``device_count``
gives it ``/cpu:0`` .. ``/cpu:n-1`` for in-graph towers, as TF's does), and
reached by direct calls (no socket is crossed). Closing the session stops
the server, so its variables live as long as the session, as a
DirectSession's do. The process runtime hands :func:`open_local_channel` to
the client layer.
"""
from __future__ import annotations

from distrib.client.session import ConfigProto, parse_target
from distrib.runtime.step.master_channel import ActorMasterChannel
from distrib.server.server_lib import ServerCore

__all__ = ["open_local_channel", "LOCAL_JOB"]

LOCAL_JOB = "localhost"   # TF's name for a direct session's job


class _LocalSessionChannel(ActorMasterChannel):
    """The channel of a session with no target, and the server it owns."""

    __slots__ = ("server",)

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            await self.server.stop()


async def open_local_channel(config: ConfigProto | None) -> ActorMasterChannel:
    """TF's ``tf.Session()`` with no target (a DirectSession): a server of the
    session's own on the caller's loop (job ``localhost``, as TF names a direct
    session's devices), made with the session's ``config`` (``device_count``:
    in-graph towers on ``/cpu:i``), reached by direct calls, stopped when the
    session closes (its variables live as long as the session)."""
    core = ServerCore({LOCAL_JOB: ["localhost:0"]}, LOCAL_JOB, 0, config)
    try:
        await core.start()
        channel = await _LocalSessionChannel.open(parse_target(core.target))
    except BaseException:
        await core.stop()
        raise
    channel.server = core   # type: ignore[attr-defined]
    return channel
