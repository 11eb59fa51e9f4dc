"""Asking every task of a cluster how it is: one row per task.

Each server's "server" actor answers ``status()`` from its own view
(``distrib.server.server_lib``); :class:`StatusClient` asks every task at
once and combines the answers into :class:`TaskStatus` rows, the shape of
``python -m distrib.status --json`` (its keys: docs/CONTRACT.md).

Two rules keep a status fast whatever state the cluster is in:
- Every task is asked concurrently, each under its own deadline (2 s by
  default): a down or hung task costs that deadline once, not once per task,
  and never delays another's row. A 16-task cluster on loopback answers in
  a few tens of milliseconds.
- A task that has not answered within 0.2 s is probed with a plain TCP
  connect. The transport retries a refused connect until its deadline
  (right for a task that is starting, wrong for a status that should say
  "refused" at once); the probe tells refused from timed out in one round
  trip. It is not the first thing done, because a listening server logs a
  warning for every connection that leaves before its handshake: a status
  every second would fill its log.

The client is an ordinary one (``listen=False``, a ``client:`` name, so no
task counts it among its peers) and takes the process's transport settings:
``DISTRIB_CLUSTER_TOKEN`` as every client does, and TLS from the same
settings once the transport has it. It speaks tcp itself, whatever
``DISTRIB_TRANSPORT`` says: a status has no arrays to pass through shared
memory.

What no server can know is filled in here: the chief (the task that the
arbiter's lease names; see ``distrib.runtime.chief.lease``), and the last
checkpoint, read from a checkpoint folder when one is given (servers never
see checkpoint files: the chief's client process writes them).
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

from distrib.cluster import ClusterSpec
from distrib.errors import DeadlineExceededError, NotFoundError, UnauthenticatedError, UnavailableError
from distrib.runtime.actors.clients import client_systems
from distrib.runtime.actors.system import ActorSystem, default_transport_config
from distrib.server.doors import ServerDoor

__all__ = ["TaskStatus", "StatusClient", "query_cluster", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 2.0
# a task that has not answered by then is probed: is anything listening?
_PROBE_AFTER_S = 0.2
# the jobs whose tasks may be chief, as in distrib.train.chief.role
_WORKER_JOBS = ("chief", "worker")


@dataclass
class TaskStatus:
    """One task's row. ``None`` is unknown (a down task knows only its name)."""

    job: str
    task: int
    address: str
    state: str = "down"
    reason: str | None = None
    incarnation: int | None = None
    uptime_s: float | None = None
    role: str | None = None
    term: int | None = None
    global_step: int | None = None
    steps_per_s: float | None = None
    last_loss: float | None = None
    last_checkpoint: str | None = None
    checkpoint_age_s: float | None = None
    sessions: int | None = None
    rss_bytes: int | None = None
    membership_version: int | None = None
    peers: list[dict[str, str]] = field(default_factory=list)
    lease: dict[str, Any] | None = field(default=None, repr=False)  # not in the JSON

    @property
    def name(self) -> str:
        return f"/job:{self.job}/task:{self.task}"

    @property
    def up(self) -> bool:
        return self.state == "up"

    def to_json(self) -> dict[str, Any]:
        """The contract's object: exactly its keys, in its order."""
        d = dataclasses.asdict(self)
        d.pop("lease")
        return d


class StatusClient:
    """A client that asks a cluster's tasks for their status; reusable
    across refreshes (``--watch`` keeps its connections open)."""

    def __init__(self, cluster: ClusterSpec, timeout: float = DEFAULT_TIMEOUT_S,
                 checkpoint_dir: str | None = None) -> None:
        self.cluster = cluster
        self.timeout = float(timeout)
        self.checkpoint_dir = checkpoint_dir
        self._system: ActorSystem | None = None   # a lease, from the first query to close
        self._calls: set[asyncio.Future] = set()

    async def __aenter__(self) -> StatusClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        system, self._system = self._system, None
        if system is not None:
            await client_systems().release(system)

    async def query(self) -> list[TaskStatus]:
        """Every task's row, in the cluster's order (job, then index)."""
        if self._system is None:
            # tcp whatever DISTRIB_TRANSPORT says, and the query's deadline to connect
            self._system = await client_systems().acquire(dataclasses.replace(
                default_transport_config(), mode="tcp", connect_timeout_s=self.timeout))
        rows = [TaskStatus(job, i, self.cluster.task_address(job, i))
                for job in self.cluster.jobs for i in self.cluster.task_indices(job)]
        await asyncio.gather(*(self._ask(row) for row in rows))
        mark_chief(rows)
        if self.checkpoint_dir:
            add_checkpoint(rows, self.checkpoint_dir)
        return rows

    async def _ask(self, row: TaskStatus) -> None:
        deadline = time.monotonic() + self.timeout
        call = asyncio.ensure_future(self._call(row.address, self.timeout))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        done, _ = await asyncio.wait({call}, timeout=min(_PROBE_AFTER_S, self.timeout))
        if not done:
            # slow to answer: is anything listening at all? (the call, left
            # to run out its own deadline, is harmless)
            reason = await _probe(row.address, max(deadline - time.monotonic(), 0.05))
            if reason is not None:
                row.reason = reason
                return
            done, _ = await asyncio.wait({call}, timeout=max(deadline - time.monotonic(), 0))
        if not done:
            row.reason = "timed out"
            return
        answer, row.reason = call.result()
        if answer is not None:
            fill(row, answer)

    async def _call(self, address: str, timeout: float) -> tuple[dict | None, str | None]:
        """The task's ``status()`` answer, or why there is none; never raises."""
        try:
            answer = await asyncio.wait_for(
                ServerDoor.at(self._system, address).status(timeout=timeout), timeout)
        except asyncio.TimeoutError:
            return None, "timed out"
        except UnauthenticatedError:
            return None, "unauthenticated"
        except DeadlineExceededError:
            return None, "timed out"
        except NotFoundError:
            return None, "no status"       # a server of an older distrib
        except UnavailableError:
            return None, "unavailable"
        except asyncio.CancelledError:
            raise
        except Exception as e:   # noqa: BLE001  (a status row, not a crash)
            return None, f"error: {e}"[:200]
        return answer, None


async def _probe(address: str, timeout: float) -> str | None:
    """Why nothing listens at ``address`` ("refused", "timed out",
    "unreachable"), or None when something does."""
    host, _, port = address.rpartition(":")
    host = "127.0.0.1" if host in ("", "localhost") else host.strip("[]")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    except ConnectionRefusedError:
        return "refused"
    except asyncio.TimeoutError:
        return "timed out"
    except (OSError, ValueError):
        return "unreachable"
    writer.transport.abort()
    return None


def fill(row: TaskStatus, answer: dict[str, Any]) -> None:
    """Copy a server's ``status()`` answer into its row. A field of the wrong
    type (another version's server, a damaged answer) is unknown (None), as is
    a NaN or infinite number: the table formats them, and --json stays JSON."""
    row.state, row.reason = "up", None
    if not isinstance(answer, dict):
        answer = {}
    row.incarnation = _number(answer.get("incarnation"), int)
    row.uptime_s = _number(answer.get("uptime_s"), float)
    row.term = _number(answer.get("term"), int) or None
    row.global_step = _number(answer.get("global_step"), int)
    row.steps_per_s = _number(answer.get("steps_per_s"), float)
    row.last_loss = _number(answer.get("last_loss"), float)
    row.membership_version = _number(answer.get("membership_version"), int)
    row.sessions = _number(answer.get("sessions"), int)
    row.rss_bytes = _number(answer.get("rss_bytes"), int)
    lease = answer.get("lease")
    row.lease = {"term": _number(lease.get("term"), int),
                 "holder": lease.get("holder") if isinstance(lease.get("holder"), str) else None} \
        if isinstance(lease, dict) else None
    peers = answer.get("peers")
    row.peers = [{"task": str(p[0]), "transport": str(p[1])}
                 for p in (peers if isinstance(peers, (list, tuple)) else [])
                 if isinstance(p, (list, tuple)) and len(p) == 2]


def _number(value: Any, kind: type) -> Any:
    """``value`` as an ``int`` (kind int: an int only) or a finite ``float``; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    return float(value) if math.isfinite(value) else None


def mark_chief(rows: list[TaskStatus]) -> None:
    """Role "chief" on the task that the newest live lease names, with the
    lease's term. Where nothing can be elected (no ps job, or fewer than two
    chief/worker tasks: ``distrib.train.chief.role``) the role is TF's fixed
    one: task 0 of the "chief" job, else of "worker" (its term is null)."""
    leases = [r.lease for r in rows if r.up and r.lease and r.lease.get("term")]
    by_name = {r.name: r for r in rows}
    if leases:
        newest = max(leases, key=lambda lease: lease["term"])
        chief = by_name.get(newest.get("holder") or "")
        if chief is not None:
            chief.role, chief.term = "chief", newest["term"]
        return
    jobs = {r.job for r in rows}
    workers = [r for r in rows if r.job in _WORKER_JOBS]
    if "ps" in jobs and len(workers) >= 2:
        return   # an election's cluster with no election running: no chief to show
    fixed = by_name.get("/job:chief/task:0") or by_name.get("/job:worker/task:0")
    if fixed is not None and fixed.up:
        fixed.role = "chief"


def add_checkpoint(rows: list[TaskStatus], checkpoint_dir: str) -> None:
    """The newest good checkpoint of ``checkpoint_dir`` and its age, on the
    chief's row (the chief writes them), else on the first chief/worker row."""
    from distrib.train.checkpoints.state_file import latest_checkpoint
    path = latest_checkpoint(checkpoint_dir)
    if path is None:
        return
    try:
        age = max(time.time() - os.path.getmtime(path), 0.0)
    except OSError:
        age = None
    target = next((r for r in rows if r.role == "chief"), None) \
        or next((r for r in rows if r.job in _WORKER_JOBS), None)
    if target is not None:
        target.last_checkpoint, target.checkpoint_age_s = path, age


async def query_cluster(cluster: ClusterSpec | dict, timeout: float = DEFAULT_TIMEOUT_S,
                        checkpoint_dir: str | None = None) -> list[TaskStatus]:
    """Every task's status, once: ``await dt_status.query_cluster(cluster)``."""
    spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster)
    async with StatusClient(spec, timeout, checkpoint_dir) as client:
        return await client.query()
