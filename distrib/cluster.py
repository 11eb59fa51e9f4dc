"""Cluster descriptions: ``ClusterSpec``, ``TF_CONFIG`` and cluster resolvers.

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
from typing import Any, NamedTuple, Union

logger = logging.getLogger(__name__)

__all__ = [
    "ClusterSpec", "task_string", "parse_tf_config", "TFConfig",
    "ClusterResolver", "TFConfigClusterResolver", "SimpleClusterResolver",
]

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
            jobs = {job: dict(tasks) for job, tasks in cluster._jobs.items()}
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


# -- TF_CONFIG ---------------------------------------------------------------

class TFConfig(NamedTuple):
    """What ``TF_CONFIG`` says: the cluster, this process's task, the RPC layer."""

    cluster: ClusterSpec
    task_type: str | None
    task_id: int | None
    rpc_layer: str | None


_TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host:2222"]}, '
                      '"task": {"type": "worker", "index": 0}}')
# TF's evaluator runs beside the cluster, so it is the one task type that may
# be missing from TF_CONFIG's cluster.
_TASKS_OUTSIDE_CLUSTER = frozenset({"evaluator"})


def _load_tf_config(env: Mapping[str, str]) -> dict[str, Any]:
    text = env.get("TF_CONFIG", "")
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON ({exc}); expected e.g. {_TF_CONFIG_EXAMPLE}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"TF_CONFIG must be a JSON object, not {type(data).__name__}; expected e.g. {_TF_CONFIG_EXAMPLE}")
    return data


def _parse_task(task: object) -> tuple[str | None, int | None]:
    if not isinstance(task, dict):
        raise ValueError(f'TF_CONFIG "task" must be an object like {{"type": "worker", "index": 0}}; got {task!r}')
    task_type = task.get("type")
    if task_type is not None and not isinstance(task_type, str):
        raise ValueError(f'TF_CONFIG "task.type" must be a job name string; got {task_type!r}')
    index = task.get("index")
    if index is None:
        return task_type, None
    if isinstance(index, bool) or not (isinstance(index, int) or (isinstance(index, str) and index.isdigit())):
        raise ValueError(f'TF_CONFIG "task.index" must be an int >= 0; got {index!r}')
    if int(index) < 0:
        raise ValueError(f'TF_CONFIG "task.index" must be an int >= 0; got {index!r}')
    return task_type, int(index)


def _check_task_in_cluster(cluster: ClusterSpec, task_type: str | None, task_id: int | None) -> None:
    if not cluster or task_type is None or task_type in _TASKS_OUTSIDE_CLUSTER:
        return
    if task_type not in cluster.jobs:
        raise ValueError(
            f"TF_CONFIG task type {task_type!r} is not a job of its cluster; the jobs are {cluster.jobs}")
    if task_id is not None and task_id not in cluster.task_indices(task_type):
        raise ValueError(
            f"TF_CONFIG task index {task_id} is not a task of job {task_type!r}; "
            f"its task indices are {cluster.task_indices(task_type)}")


def parse_tf_config(env: Mapping[str, str] | None = None) -> TFConfig:
    """Parse the ``TF_CONFIG`` environment variable (of ``env``, default ``os.environ``).

    Returns ``(cluster, task_type, task_id, rpc_layer)``; an unset ``TF_CONFIG``
    gives an empty cluster and ``None``s. A malformed one raises ``ValueError``
    saying what is wrong.
    """
    data = _load_tf_config(os.environ if env is None else env)
    cluster_data = data.get("cluster", {})
    if not isinstance(cluster_data, dict):
        raise ValueError(
            f'TF_CONFIG "cluster" must be an object {{"job": ["host:port", ...]}}; got {cluster_data!r}')
    try:
        cluster = ClusterSpec(cluster_data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f'TF_CONFIG "cluster": {exc}') from None
    task_type, task_id = _parse_task(data.get("task", {}))
    _check_task_in_cluster(cluster, task_type, task_id)
    rpc_layer = data.get("rpc_layer")
    if rpc_layer is not None and not isinstance(rpc_layer, str):
        raise ValueError(f'TF_CONFIG "rpc_layer" must be a string; got {rpc_layer!r}')
    return TFConfig(cluster, task_type, task_id, rpc_layer or None)


# -- cluster resolvers ---------------------------------------------------------

def _format_master_url(address: str, rpc_layer: str | None) -> str:
    return f"{rpc_layer}://{address}" if rpc_layer else address


class ClusterResolver:
    """The interface of ``tf.distribute.cluster_resolver.ClusterResolver``.

    Subclasses give ``cluster_spec()``, ``task_type``, ``task_id`` and
    ``rpc_layer``; ``master()`` and ``num_accelerators()`` follow from them.
    """

    environment: str = ""

    def cluster_spec(self) -> ClusterSpec:
        raise NotImplementedError

    @property
    def task_type(self) -> str | None:
        raise NotImplementedError

    @property
    def task_id(self) -> int | None:
        raise NotImplementedError

    @property
    def rpc_layer(self) -> str | None:
        return None

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The address of a task (default: this one), prefixed ``rpc_layer://`` when set; '' if unknown."""
        layer = rpc_layer or self.rpc_layer
        if task_type is not None and task_id is not None:
            return _format_master_url(self.cluster_spec().task_address(task_type, task_id), layer)
        task_type, task_id = self.task_type, self.task_id
        cluster = self.cluster_spec()
        if task_type is not None and task_id is not None and task_type in cluster.jobs:
            return _format_master_url(cluster.task_address(task_type, task_id), layer)
        return ""

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: object = None) -> dict[str, int]:
        """Accelerators per type on a task. Resolvers do not probe tasks, so: ``{}``."""
        return {}


class TFConfigClusterResolver(ClusterResolver):
    """Reads the cluster and this task from ``TF_CONFIG``, like TF's resolver of that name.

    ``TF_CONFIG`` is read on every call, as in TF, so a change to the
    environment is seen. ``task_type``, ``task_id`` and ``rpc_layer`` given
    here (or assigned later) override ``TF_CONFIG``. ``env`` replaces
    ``os.environ`` (a distrib extension, for tests and launchers).
    """

    def __init__(self, task_type: str | None = None, task_id: int | None = None,
                 rpc_layer: str | None = None, environment: str | None = None,
                 *, env: Mapping[str, str] | None = None) -> None:
        self._task_type = task_type
        self._task_id = task_id
        self._rpc_layer = rpc_layer
        self._environment = environment
        self._env = env

    def _config(self) -> TFConfig:
        return parse_tf_config(self._env)

    def cluster_spec(self) -> ClusterSpec:
        return self._config().cluster

    @property
    def task_type(self) -> str | None:
        return self._task_type if self._task_type is not None else self._config().task_type

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property
    def task_id(self) -> int | None:
        return self._task_id if self._task_id is not None else self._config().task_id

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property
    def rpc_layer(self) -> str | None:
        return self._rpc_layer if self._rpc_layer is not None else self._config().rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, value: str | None) -> None:
        self._rpc_layer = value

    @property
    def environment(self) -> str:  # type: ignore[override]
        if self._environment is not None:
            return self._environment
        return str(_load_tf_config(os.environ if self._env is None else self._env).get("environment", ""))


class SimpleClusterResolver(ClusterResolver):
    """A resolver over a given cluster, like TF's ``SimpleClusterResolver``.

    The signature is TF's: ``master`` is the second positional argument, so
    pass ``task_type`` and ``task_id`` by keyword.
    """

    def __init__(self, cluster_spec: ClusterLike, master: str = "", task_type: str | None = None,
                 task_id: int | None = None, environment: str = "",
                 num_accelerators: Mapping[str, int] | None = None,
                 rpc_layer: str | None = None) -> None:
        self._cluster_spec = ClusterSpec(cluster_spec)
        self._master = master
        self._task_type = task_type
        self._task_id = task_id
        self.environment = environment
        self._num_accelerators = dict(num_accelerators or {})
        self._rpc_layer = rpc_layer

    def cluster_spec(self) -> ClusterSpec:
        return self._cluster_spec

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """TF's rule: a given task's address, else the ``master`` passed in, prefixed by ``rpc_layer``."""
        if task_type is not None and task_id is not None:
            address = self._cluster_spec.task_address(task_type, task_id)
        else:
            address = self._master
        return _format_master_url(address, rpc_layer or self._rpc_layer) if address else ""

    @property
    def task_type(self) -> str | None:
        return self._task_type

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property
    def task_id(self) -> int | None:
        return self._task_id

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property
    def rpc_layer(self) -> str | None:
        return self._rpc_layer

    @rpc_layer.setter
    def rpc_layer(self, value: str | None) -> None:
        self._rpc_layer = value

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: object = None) -> dict[str, int]:
        return dict(self._num_accelerators)
