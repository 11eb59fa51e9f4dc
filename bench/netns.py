"""Several "hosts" on this machine, each a Linux network namespace of its own.

Used by ``tests/netns.py`` (the pytest fixture) and ``bench/transport.py
--netns``; stdlib only, no pytest. Needs root (``ip netns add``)::

    with Network(hosts=3) as net:
        net.address(0)                          # '10.200.X.1' (host 0's address)
        p = net.popen(1, [sys.executable, ...])  # a process inside host 1
        net.link_down(2); net.link_up(2)        # pull host 2's cable, plug it back
        net.lose_host(2)                        # host 2 gone: cut off, its processes killed

Layout: a "switch" namespace holds a bridge ``br0``; each host namespace has
``lo`` up and ``eth0``, one end of a veth pair whose other end (``h<i>``) is a
port of the bridge. The veth pairs are made inside the switch namespace and
their host ends go straight into the host's, so nothing is ever made in the
root namespace: the machine's own network is untouched and interface names
(15 characters at most) cannot collide with its interfaces. Namespaces are
named ``distrib-<creator pid>-<6 hex>-sw`` and ``...-h<i>``.

Addresses: host ``i`` is ``10.200.X.(i+1)/24`` on a random ``X`` that no
interface of the root namespace uses (the namespaces have routing tables of
their own, so this is for whoever reads ``ip addr``, not for correctness).

:meth:`Network.close` (also on leaving the ``with``) SIGKILLs, by pid, every
process still running in one of its namespaces (those started with
:meth:`popen` and any they started: ``ip netns pids``), then deletes every
namespace, which deletes the links in them. A new Network also removes the
namespaces of an earlier one whose creator process is gone (a test run that
was killed before it could clean up).
"""
from __future__ import annotations

import os
import random
import re
import secrets
import signal
import subprocess
import time
from typing import Any, Sequence

__all__ = ["Network", "NetnsUnavailable", "PREFIX"]

PREFIX = "distrib-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]{{6}}-(sw|h\d+)$")


class NetnsUnavailable(RuntimeError):
    """``ip netns add`` was refused (not root, no kernel support) or ``ip`` is missing."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _netns_pids(ns: str) -> list[int]:
    res = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _kill_inside(ns: str) -> None:
    """SIGKILL every process in namespace ``ns`` (by pid), wait until none is left."""
    deadline = time.monotonic() + 10
    while (pids := _netns_pids(ns)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale() -> None:
    """Delete the namespaces of Networks whose creator process has died."""
    res = _ip("netns", "list", check=False)
    for line in res.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and not _alive(int(m.group(1))):
            _kill_inside(name)
            _ip("netns", "delete", name, check=False)


def _used_subnets() -> set[int]:
    res = _ip("-o", "-4", "addr", "show", check=False)
    return {int(m.group(1)) for m in re.finditer(r"inet 10\.200\.(\d+)\.", res.stdout)}


class Network:
    """``hosts`` network namespaces joined by a bridge; see the module's doc."""

    def __init__(self, hosts: int = 2) -> None:
        if not 1 <= hosts <= 250:
            raise ValueError(f"hosts must be 1 to 250, not {hosts}")
        base = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.switch = base + "-sw"
        self.names = [f"{base}-h{i}" for i in range(hosts)]
        used = _used_subnets()
        self.subnet = random.choice([x for x in range(1, 255) if x not in used])
        self._made: list[str] = []       # namespaces that exist, in creation order
        self._procs: dict[str, list[subprocess.Popen]] = {n: [] for n in self.names}
        self._lost: set[str] = set()
        try:
            _remove_stale()
            self._add_netns(self.switch)
        except FileNotFoundError as e:
            raise NetnsUnavailable(f"network namespaces need iproute2's `ip`: {e}") from None
        except subprocess.CalledProcessError as e:
            raise NetnsUnavailable(f"`ip netns add` refused: {e.stderr.strip() or e}") from None
        try:
            sw = ("-n", self.switch)
            _ip(*sw, "link", "set", "lo", "up")
            _ip(*sw, "link", "add", "br0", "type", "bridge")
            _ip(*sw, "link", "set", "br0", "up")
            for i, ns in enumerate(self.names):
                self._add_netns(ns)
                port = f"h{i}"
                _ip(*sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip(*sw, "link", "set", port, "master", "br0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise

    def _add_netns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)

    # ---- naming ----------------------------------------------------------

    def __len__(self) -> int:
        return len(self.names)

    def _index(self, host: int | str) -> int:
        return self.names.index(host) if isinstance(host, str) else int(host)

    def name(self, host: int | str) -> str:
        """The namespace of ``host`` (its index or its name)."""
        return self.names[self._index(host)]

    def address(self, host: int | str) -> str:
        """Host ``host``'s IPv4 address on the bridge."""
        return f"10.200.{self.subnet}.{self._index(host) + 1}"

    # ---- processes -------------------------------------------------------

    def command(self, host: int | str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host`` (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name(host), *argv]

    def popen(self, host: int | str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``host``; killed by :meth:`close` if still running."""
        proc = subprocess.Popen(self.command(host, argv), **kwargs)
        self._procs[self.name(host)].append(proc)
        return proc

    def run(self, host: int | str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """``subprocess.run`` inside ``host``."""
        return subprocess.run(self.command(host, argv), **kwargs)

    # ---- faults ----------------------------------------------------------

    def link_down(self, host: int | str) -> None:
        """Take ``host``'s switch port down: its packets are dropped, both ways,
        silently (a pulled cable; the host keeps its address and sockets)."""
        _ip("-n", self.switch, "link", "set", f"h{self._index(host)}", "down")

    def link_up(self, host: int | str) -> None:
        _ip("-n", self.switch, "link", "set", f"h{self._index(host)}", "up")

    def lose_host(self, host: int | str) -> None:
        """``host`` is gone, as a machine that loses power: its link is cut
        first (no FIN or RST reaches anyone), then every process in it is
        SIGKILLed and its namespace deleted."""
        ns = self.name(host)
        _ip("-n", self.switch, "link", "del", f"h{self._index(host)}", check=False)
        self._reap(ns)
        _ip("netns", "delete", ns, check=False)
        self._lost.add(ns)

    def _reap(self, ns: str) -> None:
        for proc in self._procs.get(ns, []):
            if proc.poll() is None:
                proc.kill()
        _kill_inside(ns)
        for proc in self._procs.get(ns, []):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass

    # ---- cleanup ---------------------------------------------------------

    def close(self) -> None:
        """Kill every process in our namespaces, then delete the namespaces.
        Safe to call twice; never raises for what is already gone."""
        for ns in reversed(self._made):
            if ns not in self._lost:
                self._reap(ns)
        for ns in reversed(self._made):
            _ip("netns", "delete", ns, check=False)
        self._made.clear()

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
