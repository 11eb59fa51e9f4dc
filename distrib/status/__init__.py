"""``python -m distrib.status``: every task of a cluster, one row each
(docs/CONTRACT.md, "Command lines"). Re-exports only; the CLI is ``__main__``."""
from __future__ import annotations

from distrib.status.query import DEFAULT_TIMEOUT_S, StatusClient, TaskStatus, query_cluster
from distrib.status.table import human_bytes, human_seconds, render_table

__all__ = ["DEFAULT_TIMEOUT_S", "StatusClient", "TaskStatus", "query_cluster", "render_table",
           "human_bytes", "human_seconds"]
