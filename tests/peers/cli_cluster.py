"""Helpers for tests that run a cluster of CLI-started tasks.

Each task is ``python -m distrib.server ...`` in its own process, started
through ``tests.helpers.Proc`` (which waits for the ready line and always stops
it). Cluster files name free ports picked up front by binding port 0.
"""
from __future__ import annotations

import json
import os
from typing import Any

from distrib.demo import free_ports  # noqa: F401  (re-exported for the tests)
from tests.helpers import Proc, child_env


def cluster_spec(**jobs: int) -> dict[str, list[str]]:
    """{"worker": 2, "ps": 1} -> a cluster dict on free localhost ports."""
    ports = iter(free_ports(sum(jobs.values())))
    return {job: [f"localhost:{next(ports)}" for _ in range(n)] for job, n in jobs.items()}


def write_cluster(directory: Any, spec: dict[str, Any], name: str = "config.json") -> str:
    path = os.path.join(str(directory), name)
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def cli_task(cfg: str, job: str, index: int, **env: str) -> Proc:
    """Start one task via ``--cluster FILE``; returns once it printed its ready line."""
    return Proc(["-m", "distrib.server", "--cluster", cfg, "--job_name", job,
                 "--task_index", str(index), "--log_level", "WARNING"],
                env=child_env(**env), ready_prefix="serving")


def cli_flags_task(spec: dict[str, list[str]], job: str, index: int, **env: str) -> Proc:
    """Start one task via ``--ps_hosts/--worker_hosts``."""
    return Proc(["-m", "distrib.server", "--ps_hosts", ",".join(spec["ps"]),
                 "--worker_hosts", ",".join(spec["worker"]), "--job_name", job,
                 "--task_index", str(index), "--log_level", "WARNING"],
                env=child_env(**env), ready_prefix="serving")
