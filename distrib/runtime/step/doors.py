"""The doors of a task's ``worker`` and ``master`` actors
(:class:`~.worker.WorkerService`, :class:`~.master.MasterService`), see
:mod:`distrib.runtime.actors.door`.

Who calls them: a master calls the workers of a step's tasks (register,
run, abort a partition; their status), a worker the other workers (the
tensors a step sends, ``recv_tensor(s)``), and a session its master through
``distrib.client.channel.MasterChannel``, which :class:`MasterDoor`
implements (``runtime/step/master_channel.py``). The chief wing's ``fence``
is declared with its own doors (``runtime/chief/doors.py``) and inherited.

Two messages are on the path of every step and keep to one plain call in
front of the actor system: ``run_partition``, sent with ``ActorRef.request``
(a future, no task per call: the master starts every partition at once),
and the ``recv_tensors`` tell. Both keep flat parameters (a request
dataclass would cost more than the rest of the door; see ``door.py``).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from distrib.runtime.actors.door import Door, request_args
from distrib.runtime.actors.system import DEFAULT_TIMEOUT_S
from distrib.runtime.chief.doors import FenceDoor

__all__ = ["MasterDoor", "RegisterPartition", "WorkerDoor"]


@dataclass(frozen=True, slots=True)
class RegisterPartition:
    """A master's request to compile and keep one partition of a step's plan."""

    key: str                      # "<session handle>/<plan id>"
    nodes: list                   # the partition's GraphDef nodes
    fetches: list                 # the tensor names the partition returns
    soft_placement: bool = False  # a missing device falls back to one there is
    feeds: list | None = None     # the fed tensors it reads ("op:k"), producer present or not
    log_placement: bool = False   # log each node's device (ConfigProto.log_device_placement)


class WorkerDoor(FenceDoor):
    """Actor ``worker``; called by masters (partitions, status), by the other
    workers (a step's tensors), by a Supervisor and the coordinator (status)."""

    __slots__ = ()
    actor = "worker"

    async def get_status(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The task's name, incarnation, devices, address and newest chief term."""
        return await self.ref.call("get_status", timeout=timeout)

    async def register_partition(self, req: RegisterPartition, *,
                                 timeout: float | None = DEFAULT_TIMEOUT_S) -> bool:
        """Compile and keep a partition under ``req.key`` (once per key)."""
        return await self.ref.call("register_partition", *request_args(req, RegisterPartition),
                                   timeout=timeout)

    async def deregister_partitions(self, prefix: str, *,
                                    timeout: float | None = DEFAULT_TIMEOUT_S) -> int:
        """Drop the partitions whose key starts with ``prefix``: how many."""
        return await self.ref.call("deregister_partitions", prefix, timeout=timeout)

    def run_partition(self, key: str, step: int, feeds: dict[str, Any],
                      incarnations: dict[str, int], peers: dict[str, str],
                      op_timeout: float | None = None, term: int | None = None,
                      trace: bool = False, *,
                      timeout: float | None = DEFAULT_TIMEOUT_S) -> asyncio.Future:
        """Start one step of a registered partition now: the future of its fetches."""
        # trace: the step is recorded, its record one more value after the fetches
        traced = (True,) if trace else ()   # (an untraced step's message stays as it was)
        return self.ref.request("run_partition", key, step, feeds, incarnations, peers,
                                op_timeout, term, *traced, timeout=timeout)

    async def recv_tensor(self, step: int, key: str, value: Any, src_task: str,
                          incarnation: int) -> None:
        """(Tell) one tensor of ``step`` from ``src_task``."""
        return await self.ref.tell("recv_tensor", step, key, value, src_task, incarnation)

    async def recv_tensors(self, step: int, items: list, src_task: str,
                           incarnation: int) -> None:
        """(Tell) several tensors of ``step`` from ``src_task``: ``[[key, value], ...]``."""
        return await self.ref.tell("recv_tensors", step, items, src_task, incarnation)

    async def abort_step(self, step: int, error: dict[str, Any]) -> None:
        """(Tell) another task failed ``step``: its pending receives fail here."""
        return await self.ref.tell("abort_step", step, error)

    async def stats(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The worker's counters since the last ``reset_stats``."""
        return await self.ref.call("stats", timeout=timeout)

    async def reset_stats(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Zero the worker's counters."""
        return await self.ref.call("reset_stats", timeout=timeout)

    async def list_variables(self, *,
                             timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, list]:
        """The task's variables: name -> [dtype, shape]."""
        return await self.ref.call("list_variables", timeout=timeout)

    async def read_variables(self, names: list[str], *,
                             timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Copies of the named variables' values."""
        return await self.ref.call("read_variables", names, timeout=timeout)

    async def write_variables(self, values: dict[str, Any], *,
                              timeout: float | None = DEFAULT_TIMEOUT_S) -> int:
        """Set variables by name: how many."""
        return await self.ref.call("write_variables", values, timeout=timeout)

    async def ping(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """The task's name (a liveness probe)."""
        return await self.ref.call("ping", timeout=timeout)


class MasterDoor(Door):
    """Actor ``master``; called by sessions (through ``MasterChannel``) and
    by a Supervisor's chief role (``cluster_info``)."""

    __slots__ = ()
    actor = "master"

    async def create_session(self, graph_def: dict[str, Any],
                             config: dict[str, Any] | None = None, *,
                             timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        """Open a session on ``graph_def``: its handle."""
        return await self.ref.call("create_session", graph_def, config, timeout=timeout)

    async def extend_session(self, handle: str, graph_def: dict[str, Any], *,
                             timeout: float | None = DEFAULT_TIMEOUT_S) -> int:
        """Replace the session's graph with a newer version: the version."""
        return await self.ref.call("extend_session", handle, graph_def, timeout=timeout)

    async def run(self, handle: str, fetches: list[str], targets: list[str],
                  feeds: dict[str, Any], options: dict[str, Any] | None = None, *,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> list[Any]:
        """Run one step of the session: the fetched values, in order."""
        return await self.ref.call("run", handle, fetches, targets, feeds, options,
                                   timeout=timeout)

    async def list_devices(self, *,
                           timeout: float | None = DEFAULT_TIMEOUT_S) -> list[dict[str, Any]]:
        """Every reachable device of the cluster (TF's device attributes)."""
        return await self.ref.call("list_devices", timeout=timeout)

    async def close_session(self, handle: str, *,
                            timeout: float | None = DEFAULT_TIMEOUT_S) -> bool:
        """Close the session, ending its steps: False if it was not open."""
        return await self.ref.call("close_session", handle, timeout=timeout)

    async def cluster_info(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """This task's name and its cluster ({job: {index: address}})."""
        return await self.ref.call("cluster_info", timeout=timeout)

    async def stats(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, int]:
        """The master's counters since the last ``reset_stats``."""
        return await self.ref.call("stats", timeout=timeout)

    async def reset_stats(self, *, timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        """Zero the master's counters."""
        return await self.ref.call("reset_stats", timeout=timeout)
