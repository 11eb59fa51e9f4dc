"""One server per task: ``Server`` (TF's blocking ``tf.train.Server``),
``serve`` (the same on the caller's event loop), ``request_stop``, and the
``python -m distrib.server`` CLI (``__main__``). Re-exports only."""
from __future__ import annotations

from distrib.server.server_lib import Server, ServerCore, request_stop, resolve_task, serve, task_devices

__all__ = ["Server", "ServerCore", "serve", "request_stop", "resolve_task", "task_devices"]
