"""The client's side of a step: ``Session`` (async), ``SyncSession`` (its
blocking twin), ``ConfigProto``, and the fetch/feed plans. Re-exports only."""
from __future__ import annotations

from distrib.client.session import ConfigProto, Session, SyncSession

__all__ = ["ConfigProto", "Session", "SyncSession"]
