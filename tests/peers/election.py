"""Shared by the election tests (Supervisor and MonitoredTrainingSession): a
cluster of one ps and two workers served in this process with a 0.3 s
heartbeat (a lease lasts 0.9 s), and a bounded wait for a condition."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterator

import distrib as dt
from distrib.launch.tasks import free_ports

GUARD_S = 30


def ps_and_two_workers(monkeypatch: Any) -> Iterator[tuple[dt.ClusterSpec, dict]]:
    """Body of a fixture: the spec and the servers by (job, index), stopped after."""
    monkeypatch.setenv("DISTRIB_HEARTBEAT_S", "0.3")   # read when each server starts
    p, w0, w1 = free_ports(3)
    spec = dt.ClusterSpec({"ps": [f"localhost:{p}"],
                           "worker": [f"localhost:{w0}", f"localhost:{w1}"]})
    servers: dict = {}
    try:
        for job, n in (("ps", 1), ("worker", 2)):
            for i in range(n):
                servers[(job, i)] = dt.Server(spec, job_name=job, task_index=i)
        yield spec, servers
    finally:
        for s in servers.values():
            s.stop()


async def until(cond: Callable[[], bool], what: str) -> None:
    """Wait (at most GUARD_S, a hang guard) until ``cond()``."""
    for _ in range(int(GUARD_S / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")
