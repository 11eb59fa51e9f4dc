"""The client's side of a step: ``Session`` (async), ``SyncSession`` (its
blocking twin), ``ConfigProto``, ``RunOptions``/``RunMetadata`` and
``timeline`` (a traced step as a Chrome trace). Re-exports only."""
from __future__ import annotations

from distrib.client import timeline
from distrib.client.run_metadata import RunMetadata, RunOptions
from distrib.client.session import ConfigProto, Session, SyncSession

__all__ = ["ConfigProto", "Session", "SyncSession", "RunOptions", "RunMetadata", "timeline"]
