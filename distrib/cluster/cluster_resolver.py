"""The cluster-resolver interface, and the resolver over a given cluster.

``ClusterResolver`` is TensorFlow's interface (``cluster_spec()``,
``task_type``, ``task_id``, ``master()``, ``num_accelerators()``): a
strategy or a server asks it where the cluster is and which task this process
is, and never cares where the answer came from (``TF_CONFIG``, SLURM's
environment, a Kubernetes pod's name). ``SimpleClusterResolver`` hands over a
spec as it is.

The scheduler-reading resolvers (``slurm.py``, ``kubernetes.py``) share two
rules kept here: a scheduler's environment that does not describe a cluster is
a ``SchedulerEnvironmentError`` (a ``ValueError``) naming the variable and what
it should hold, and a ``jobs`` table is written the same way everywhere
(``{"ps": 1, "worker": 3}``, or ``ps:1,worker:3`` in a flag or variable).
"""
from __future__ import annotations

import json
from collections.abc import Mapping

from distrib.cluster.cluster_spec import ClusterLike, ClusterSpec

__all__ = ["ClusterResolver", "SimpleClusterResolver", "SchedulerEnvironmentError",
           "format_master_url", "parse_job_counts"]


class SchedulerEnvironmentError(ValueError):
    """A scheduler's environment (or a resolver's arguments) does not describe a
    cluster: the message names the variable or argument and what it should hold."""


_JOBS_EXAMPLE = '{"ps": 1, "worker": 3} (or ps:1,worker:3)'


def parse_job_counts(value: object, source: str = "jobs") -> dict[str, int]:
    """A ``{job: number of tasks}`` table, in the order written.

    ``value`` is a mapping, a JSON object string, or ``"ps:1,worker:3"``;
    ``source`` names where it came from (an argument or a variable) in errors.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SchedulerEnvironmentError(
                    f"{source} is not valid JSON ({exc}); expected e.g. {_JOBS_EXAMPLE}") from None
        else:
            value = _split_pairs(text, source)
    if not isinstance(value, Mapping) or not value:
        raise SchedulerEnvironmentError(
            f"{source} must name each job and its number of tasks, e.g. {_JOBS_EXAMPLE}; "
            f"got {value!r}")
    jobs: dict[str, int] = {}
    for job, count in value.items():
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        if not isinstance(job, str) or not job or isinstance(count, bool) \
                or not isinstance(count, int) or count < 1:
            raise SchedulerEnvironmentError(
                f"{source}: job {job!r} has {count!r} tasks; each job needs a name and a "
                f"whole number of tasks >= 1, e.g. {_JOBS_EXAMPLE}")
        jobs[job] = count
    try:
        ClusterSpec({job: [] for job in jobs})   # the job names, checked as a cluster's
    except ValueError as exc:
        raise SchedulerEnvironmentError(f"{source}: {exc}") from None
    return jobs


def _split_pairs(text: str, source: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        job, sep, count = part.partition(":")
        if not sep or job.strip() in pairs:
            raise SchedulerEnvironmentError(
                f"{source}: {part!r} is not a new job:count pair; expected e.g. {_JOBS_EXAMPLE}")
        pairs[job.strip()] = count.strip()
    return pairs


def format_master_url(address: str, rpc_layer: str | None) -> str:
    """``rpc_layer://address``, or the address alone without an RPC layer."""
    return f"{rpc_layer}://{address}" if rpc_layer else address


class ClusterResolver:
    """The interface of ``tf.distribute.cluster_resolver.ClusterResolver``.

    Subclasses give ``cluster_spec()``; ``task_type``, ``task_id`` and
    ``rpc_layer`` are TF's settable properties: the value set (or given to the
    constructor), else what the subclass finds in its scheduler's environment
    (``_found_task``, ``_found_rpc_layer``), else None. ``master()`` and
    ``num_accelerators()`` follow from them.
    """

    environment: str = ""
    _task_type: str | None = None
    _task_id: int | None = None
    _rpc_layer: str | None = None

    def cluster_spec(self) -> ClusterSpec:
        raise NotImplementedError

    def _found_task(self) -> tuple[str | None, int | None]:
        """This task's (type, id) from the environment, where none was set."""
        return None, None

    def _found_rpc_layer(self) -> str | None:
        """The RPC layer from the environment, where none was set."""
        return None

    @property
    def task_type(self) -> str | None:
        return self._task_type if self._task_type is not None else self._found_task()[0]

    @task_type.setter
    def task_type(self, value: str | None) -> None:
        self._task_type = value

    @property
    def task_id(self) -> int | None:
        return self._task_id if self._task_id is not None else self._found_task()[1]

    @task_id.setter
    def task_id(self, value: int | None) -> None:
        self._task_id = value

    @property
    def rpc_layer(self) -> str | None:
        return self._rpc_layer if self._rpc_layer is not None else self._found_rpc_layer()

    @rpc_layer.setter
    def rpc_layer(self, value: str | None) -> None:
        self._rpc_layer = value

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """The address of a task (default: this one), prefixed ``rpc_layer://`` when set; '' if unknown."""
        layer = rpc_layer or self.rpc_layer
        if task_type is not None and task_id is not None:
            return format_master_url(self.cluster_spec().task_address(task_type, task_id), layer)
        task_type, task_id = self.task_type, self.task_id
        cluster = self.cluster_spec()
        if task_type is not None and task_id is not None and task_type in cluster.jobs:
            return format_master_url(cluster.task_address(task_type, task_id), layer)
        return ""

    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: object = None) -> dict[str, int]:
        """Accelerators per type on a task. Resolvers do not probe tasks, so: ``{}``."""
        return {}


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
        return format_master_url(address, rpc_layer or self._rpc_layer) if address else ""




    def num_accelerators(self, task_type: str | None = None, task_id: int | None = None,
                         config_proto: object = None) -> dict[str, int]:
        return dict(self._num_accelerators)
