"""``ClusterSpec``: the jobs and tasks of a cluster and their addresses.

A cluster is a set of named *jobs*, each a set of *tasks* keyed by a task
index, each task one ``host:port`` address. This module only describes a
cluster; it opens no sockets. It behaves like TensorFlow 1.x's
``tf.train.ClusterSpec`` (same constructors, accessors and ``ValueError``s),
with stricter validation up front: a cluster that would fail at server start
(an address without a port, a job name that no device string could name)
fails here instead, with a message naming the bad entry.

Two design rules:

- A ``ClusterSpec`` is a value: it is built once, validated once, never
  mutated, and compared by content.
- Every error names what is wrong and what to write instead, because these
  messages are what a user sees when a hand-written cluster file is off.
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

logger = logging.getLogger(__name__)

__all__ = ["ClusterSpec", "task_string"]

# TensorFlow's DeviceNameUtils accepts job names of this form; anything else
# could never appear in a "/job:NAME" device string.
_JOB_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# "host:port" or "[ipv6]:port"; the host part is checked separately.
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]\s/]+):(?P<port>[^:]*)$")

ClusterLike = Union["ClusterSpec", Mapping[str, Any]]


def _check_job_name(job: object) -> str:
    if not isinstance(job, str) or not _JOB_NAME.match(job):
        raise ValueError(
            f"Invalid job name {job!r}: a job name starts with a letter and holds only "
            "letters, digits and '_' (e.g. 'ps', 'worker', 'chief')")
    return job


def _check_task_index(job: str, index: object) -> int:
    # JSON object keys are strings, so a sparse job read from a file arrives as
    # {"3": "host:port"}; accept decimal strings like TensorFlow's int(i).
    if isinstance(index, bool):
        raise ValueError(f"Invalid task index {index!r} in job {job!r}: a task index is an int >= 0")
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index.strip())
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"Invalid task index {index!r} in job {job!r}: a task index is an int >= 0")
    return index


def _check_address(job: str, index: int, address: object) -> str:
    where = f"/job:{job}/task:{index}"
    if not isinstance(address, str):
        raise ValueError(f"Address of {where} is {address!r}: write the address as a 'host:port' string")
    match = _ADDRESS.match(address.strip())
    if match is None:
        if ":" not in address:
            raise ValueError(
                f"Address {address!r} of {where} has no port: write host:port "
                "(e.g. 'localhost:2222'; port 0 picks a free port)")
        raise ValueError(f"Address {address!r} of {where} is not of the form host:port (e.g. 'localhost:2222')")
    port = match.group("port")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"Address {address!r} of {where} has a bad port {port!r}: "
            "the port is an integer from 0 to 65535 (0 picks a free port)")
    return address.strip()


def _normalize_job(job: str, tasks: object) -> dict[int, str]:
    if isinstance(tasks, (list, tuple)):
        items: Iterable[tuple[object, object]] = enumerate(tasks)
    elif isinstance(tasks, Mapping):
        items = tasks.items()
    else:
        raise TypeError(
            f"The tasks for job {job!r} must be a list of 'host:port' strings or a dict "
            f"from task index to 'host:port'; got {type(tasks).__name__}")
    result: dict[int, str] = {}
    for raw_index, address in items:
        index = _check_task_index(job, raw_index)
        if index in result:
            raise ValueError(f"Task index {index} appears twice in job {job!r}")
        result[index] = _check_address(job, index, address)
    return dict(sorted(result.items()))


class ClusterSpec:
    """A cluster as a set of jobs of tasks, like ``tf.train.ClusterSpec``.

    ``cluster`` is a dict from job name to a list of addresses (task *i* is the
    *i*-th address) or to a dict from task index to address (a sparse job), or
    another ``ClusterSpec``. Addresses are ``host:port``; port 0 means "pick a
    free port when the server starts".
    """

    __slots__ = ("_jobs",)
    __hash__ = None  # type: ignore[assignment]  # equal by content, and content is a dict

    def __init__(self, cluster: ClusterLike | None = None) -> None:
        if cluster is None:
            cluster = {}
        if isinstance(cluster, ClusterSpec):
            jobs = {job: dict(tasks) for job, tasks in cluster._jobs.items()}  # noqa: SLF001 - a copy
        elif isinstance(cluster, Mapping):
            jobs = {_check_job_name(job): _normalize_job(job, tasks) for job, tasks in cluster.items()}
        else:
            raise TypeError(
                "ClusterSpec takes a dict {job: ['host:port', ...]} or another ClusterSpec; "
                f"got {type(cluster).__name__}")
        self._jobs: dict[str, dict[int, str]] = dict(sorted(jobs.items()))

    # -- constructors -------------------------------------------------------

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> ClusterSpec:
        """Read the ``{"job": ["host:port", ...]}`` cluster file at ``path``."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise ValueError(f"Cluster file {os.fspath(path)!r} does not exist") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Cluster file {os.fspath(path)!r} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"Cluster file {os.fspath(path)!r} must hold a JSON object "
                '{"job": ["host:port", ...]}; it holds a ' + type(data).__name__)
        try:
            return cls(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Cluster file {os.fspath(path)!r}: {exc}") from None

    @classmethod
    def from_flags(cls, ps_hosts: str | Iterable[str] | None = None,
                   worker_hosts: str | Iterable[str] | None = None,
                   **other_jobs: str | Iterable[str] | None) -> ClusterSpec:
        """Build a cluster from comma-separated host lists, as TF1 scripts' flags.

        ``ClusterSpec.from_flags(ps_hosts="h:1", worker_hosts="h:2,h:3",
        chief_hosts="h:4")``: a keyword's ``_hosts`` suffix is dropped to get the
        job name. An empty or ``None`` value leaves the job out.
        """
        named = {"ps": ps_hosts, "worker": worker_hosts}
        for key, value in other_jobs.items():
            named[key.removesuffix("_hosts")] = value
        jobs: dict[str, list[str]] = {}
        for job, hosts in named.items():
            addresses = _split_hosts(hosts)
            if addresses:
                jobs[job] = addresses
        return cls(jobs)

    # -- accessors ----------------------------------------------------------

    @property
    def jobs(self) -> list[str]:
        """The job names, sorted."""
        return list(self._jobs)

    def _tasks(self, job: str) -> dict[int, str]:
        try:
            return self._jobs[job]
        except (KeyError, TypeError):
            raise ValueError(f"No such job in cluster: {job!r}; the jobs are {self.jobs}") from None

    def num_tasks(self, job: str) -> int:
        """The number of tasks in ``job``."""
        return len(self._tasks(job))

    def task_indices(self, job: str) -> list[int]:
        """The task indices of ``job``, sorted."""
        return list(self._tasks(job))

    def task_address(self, job: str, task_index: int) -> str:
        """The ``host:port`` of task ``task_index`` of ``job``."""
        tasks = self._tasks(job)
        try:
            return tasks[task_index]
        except (KeyError, TypeError):
            raise ValueError(
                f"No such task index {task_index!r} in job {job!r}; "
                f"its task indices are {list(tasks)}") from None

    def job_tasks(self, job: str) -> list[str | None]:
        """The addresses of ``job`` by task index, ``None`` in the gaps of a sparse job."""
        tasks = self._tasks(job)
        if not tasks:
            return []
        result: list[str | None] = [None] * (max(tasks) + 1)
        for index, address in tasks.items():
            result[index] = address
        return result

    def as_dict(self) -> dict[str, list[str] | dict[int, str]]:
        """A dict like the constructor's input: a list for a dense job, a dict for a sparse one."""
        result: dict[str, list[str] | dict[int, str]] = {}
        for job, tasks in self._jobs.items():
            if tasks and max(tasks) + 1 == len(tasks):
                result[job] = list(tasks.values())
            else:
                result[job] = dict(tasks)
        return result

    def to_json(self) -> str:
        """The cluster as JSON that :meth:`from_json` reads back."""
        return json.dumps({job: (v if isinstance(v, list) else {str(k): a for k, a in v.items()})
                           for job, v in self.as_dict().items()}, sort_keys=True)

    # -- value semantics ----------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClusterSpec):
            return self._jobs == other._jobs
        if isinstance(other, Mapping):
            try:
                return self._jobs == ClusterSpec(other)._jobs
            except (TypeError, ValueError):
                return False
        return NotImplemented

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def __repr__(self) -> str:
        return f"ClusterSpec({self.as_dict()!r})"


def _split_hosts(hosts: str | Iterable[str] | None) -> list[str]:
    if hosts is None:
        return []
    parts = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    return [p.strip() for p in parts if p.strip()]


def task_string(job: str, index: int) -> str:
    """The device-string prefix that names a task: ``/job:J/task:T``."""
    return f"/job:{job}/task:{index}"
