"""Which local address a task's server listens on.

The cluster names each task by the address its peers dial (``host:port``);
the server has to listen somewhere that address reaches. Binding that host
name itself, as distrib used to, fails in two common deployments:

- **SLURM nodes with Debian's /etc/hosts**, which maps the node's own name to
  ``127.0.1.1``: the server binds loopback and every peer on another node is
  refused, though the name resolves fine everywhere.
- **Kubernetes pods before their headless Service publishes them**: the
  pod's DNS name does not resolve yet (or not to this pod), and binding it
  fails outright.

TensorFlow's gRPC server sidesteps both by always binding ``0.0.0.0:port``.
distrib keeps the narrower bind where it is right and widens it only where the
cluster's name cannot work:

- ``DISTRIB_BIND_ADDRESS`` (or ``python -m distrib.server --bind HOST``) wins,
  for every server of the process; a failure to bind it is an error.
- A loopback literal or ``localhost`` is bound as it is (``localhost`` as
  ``127.0.0.1``): a single-host cluster never listens beyond the host. An IP
  literal is bound as it is, too.
- A name that resolves to a non-loopback address is bound by name.
- A name that resolves only to loopback addresses (the 127.0.1.1 trap), or
  does not resolve, binds the wildcard address (``0.0.0.0``; ``::`` for an
  IPv6-only name) on the same port; so does a name or literal that cannot be
  bound (``EADDRNOTAVAIL``: not an address of this host).

Either way the port and the advertised address (the cluster's, what status
shows, what peers dial) stay the cluster's, and a widened bind is logged once,
saying why. The decision is a pure function of the cluster's host, the
override and the resolution result (:func:`plan_bind`), so it is tested
without a host whose name maps to 127.0.1.1.
"""
from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from distrib.settings import BIND_ADDRESS

__all__ = ["BIND_ADDRESS_ENV", "BindPlan", "bind_error_reason", "bind_override",
           "choose_bind_host", "fallback_host", "is_loopback_host", "plan_bind"]

BIND_ADDRESS_ENV = BIND_ADDRESS.name
WILDCARD_V4, WILDCARD_V6 = "0.0.0.0", "::"
_LOCALHOST = "127.0.0.1"
# bind errors that mean "this host has no such address", which the wildcard
# mends; a port in use (EADDRINUSE) or a privileged one (EACCES) it does not
_NOT_HERE = (errno.EADDRNOTAVAIL,)


@dataclass(frozen=True)
class BindPlan:
    """Where to listen: ``host``; ``reason`` says why it is not the cluster's
    host (None when it is, or stands for it: ``localhost`` as 127.0.0.1);
    ``fallback``: whether a bind that fails with "no such address here" may
    retry on the wildcard address (not for an explicit override)."""

    host: str
    reason: str | None = None
    fallback: bool = True


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """``localhost`` (or a name under it) or a loopback literal (127.x.x.x, ::1)."""
    name = host.strip("[]").rstrip(".").lower()
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    ip = _ip(name)
    return ip is not None and ip.is_loopback


def _wildcard(host: str, resolved: Sequence[str] = ()) -> str:
    ip = _ip(host)
    if ip is not None:
        return WILDCARD_V6 if ip.version == 6 else WILDCARD_V4
    versions = {a.version for a in map(_ip, resolved) if a is not None}
    return WILDCARD_V6 if versions == {6} else WILDCARD_V4


def bind_override(flag: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The host every server of this process listens on when one is forced:
    ``flag`` (``--bind``), else ``DISTRIB_BIND_ADDRESS``; None when neither is
    set. A value with a port is a ``ValueError``: the port is the cluster's."""
    text = (flag if flag is not None else BIND_ADDRESS.get(env)).strip()
    if not text:
        return None
    source = "--bind" if flag is not None else BIND_ADDRESS_ENV
    host = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if (":" in host and _ip(host) is None) or any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"{source}={text!r} is not a host: give an address or name without "
                         "a port (e.g. 0.0.0.0, 10.1.2.3, node07); the port is the cluster's")
    return host


def plan_bind(cluster_host: str, *, override: str | None = None,
              resolved: Sequence[str] | OSError | None = None) -> BindPlan:
    """Where a server whose cluster address has host ``cluster_host`` listens.

    ``resolved``: what the name resolves to (IP address strings), or the
    ``OSError`` (``socket.gaierror``) resolving it raised; it is needed only
    for a name that is neither ``localhost`` nor an IP literal, and None
    there means "not resolved" (the name is bound as it is)."""
    host = cluster_host.strip("[]")
    if override is not None:
        return BindPlan(override, f"{BIND_ADDRESS_ENV} or --bind says {override}", fallback=False)
    if is_loopback_host(host):
        return BindPlan(_LOCALHOST if _ip(host) is None else host)
    if _ip(host) is not None or resolved is None:
        return BindPlan(host)
    if isinstance(resolved, OSError):
        why = getattr(resolved, "strerror", None) or str(resolved) or type(resolved).__name__
        return BindPlan(_wildcard(host), f"{host!r} does not resolve here ({why})")
    ips = [ip for ip in map(_ip, resolved) if ip is not None]
    if not ips:
        return BindPlan(_wildcard(host), f"{host!r} resolves to no address here")
    if all(ip.is_loopback for ip in ips):
        shown = ", ".join(sorted({str(ip) for ip in ips}))
        return BindPlan(_wildcard(host, resolved),
                        f"{host!r} resolves to loopback {shown} here (as /etc/hosts often "
                        "maps a host's own name), which peers on other hosts cannot reach")
    return BindPlan(host)


def bind_error_reason(error: OSError) -> str:
    """A short why for a failed bind: ``Cannot assign requested address``, not
    asyncio's whole "error while attempting to bind on address (...)"."""
    if isinstance(error, socket.gaierror) or not error.errno or error.errno < 0:
        return str(error.strerror or error)
    return os.strerror(error.errno)


def fallback_host(plan: BindPlan, error: OSError) -> str | None:
    """The wildcard address to retry on after binding ``plan.host`` failed with
    ``error``; None when the error stands (an override, a port in use)."""
    if not plan.fallback or plan.host in (WILDCARD_V4, WILDCARD_V6):
        return None
    if isinstance(error, socket.gaierror) or error.errno in _NOT_HERE:
        return _wildcard(plan.host)
    return None


async def _resolve(host: str) -> list[str] | OSError:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as e:
        return e
    return [str(info[4][0]) for info in infos]


async def choose_bind_host(cluster_host: str, override: str | None = None) -> BindPlan:
    """:func:`plan_bind`, resolving the name first where the plan depends on it."""
    host = cluster_host.strip("[]")
    if override is not None or is_loopback_host(host) or _ip(host) is not None:
        return plan_bind(cluster_host, override=override)
    return plan_bind(cluster_host, resolved=await _resolve(host))
