"""Hosts in network namespaces for tests: the ``netns`` fixture and process helpers.

The namespaces themselves are made by ``bench/netns.py`` (shared with
``bench/transport.py --netns``; see its doc for the layout and the cleanup).
Here: the pytest fixture, which skips (with the reason) only where
``ip netns add`` is refused, and removes everything it made after the test,
failed or not; and :class:`NetnsProc`, ``tests.helpers.Proc`` run inside a
host.

    def test_x(netns):
        net = netns(3)                      # three hosts, 10.200.X.1-3
        with netns_task(net, 1, cfg, "worker", 0): ...
"""
from __future__ import annotations

import subprocess
import sys
from typing import Callable, Sequence

import pytest

from bench.netns import NetnsUnavailable, Network
from tests.helpers import ROOT, Proc, child_env

__all__ = ["Network", "NetnsProc", "netns", "netns_task"]


@pytest.fixture
def netns() -> Callable[[int], Network]:
    """A factory: ``netns(hosts)`` makes a Network of that many hosts (2 to 4
    in these tests); every Network made is closed after the test."""
    made: list[Network] = []

    def make(hosts: int = 3) -> Network:
        try:
            net = Network(hosts)
        except NetnsUnavailable as e:
            pytest.skip(f"no network namespaces here: {e}")
        made.append(net)
        return net

    try:
        yield make
    finally:
        for net in made:
            net.close()


class NetnsProc(Proc):
    """A ``tests.helpers.Proc`` inside one host of ``net``: waits for its
    ready line, stopped (by pid) on exit, and killed by ``net.close()``."""

    def __init__(self, net: Network, host: int, args: Sequence[str], *,
                 env: dict[str, str] | None = None, ready_prefix: str = "",
                 timeout: float = 30.0) -> None:
        self.p = net.popen(host, [sys.executable, *args], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env or child_env(), cwd=ROOT)
        self.line = self._wait_line(ready_prefix, timeout)


def netns_task(net: Network, host: int, cfg: str, job: str, index: int, **env: str) -> NetnsProc:
    """``python -m distrib.server --cluster cfg`` for one task, inside ``host``."""
    return NetnsProc(net, host, ["-m", "distrib.server", "--cluster", cfg, "--job_name", job,
                                 "--task_index", str(index), "--log_level", "WARNING"],
                     env=child_env(**env), ready_prefix="serving")
