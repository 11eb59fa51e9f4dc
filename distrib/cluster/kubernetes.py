"""``KubernetesClusterResolver``: the cluster of StatefulSets behind headless
Services, from the pod's own name; no Kubernetes API client, no API access.

Each job is a StatefulSet with as many replicas as the job has tasks.
Kubernetes names its pods ``<set>-0``, ``<set>-1``, ... (the *ordinal*), and
a headless Service (``clusterIP: None``) named in the set's ``serviceName``
gives each pod the DNS name ``<set>-<i>.<service>``. So a pod learns all it
needs from what it already has:

- its task: its hostname (``HOSTNAME``, which Kubernetes sets to the pod
  name) is ``<set>-<ordinal>``: the job is the set's, the index the ordinal;
- its peers: task i of a job is ``<set>-<i>.<service>:<port>``, with
  ``.<namespace>.svc`` added when the namespace is known (``namespace=``,
  the downward API's ``POD_NAMESPACE``, or the service account's namespace
  file) so the names resolve from any namespace, and ``.<cluster_domain>``
  after that when one is given.

What a pod cannot learn without the API is the shape of the cluster, so
``jobs`` (``{"ps": 1, "worker": 2}``) is always given, and must match the
sets' ``replicas``. A pod whose name is not ``<set>-<ordinal>`` of one of the
sets can still read the cluster (a client, a coordinator); asking it for its
task is then a ``SchedulerEnvironmentError`` that says why.
"""
from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping

from distrib.cluster.cluster_resolver import ClusterResolver, SchedulerEnvironmentError, parse_job_counts
from distrib.cluster.cluster_spec import ClusterSpec

__all__ = ["KubernetesClusterResolver", "NAMESPACE_FILE"]

NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# a DNS-1123 label: what a StatefulSet's pods and a Service may be called
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_POD = re.compile(r"^(?P<set>.+)-(?P<ordinal>0|[1-9][0-9]*)$")
_EXAMPLE_JOBS = 'jobs={"ps": 1, "worker": 2}'


def _label(value: object, what: str) -> str:
    if not isinstance(value, str) or not _LABEL.match(value) or len(value) > 63:
        raise SchedulerEnvironmentError(
            f"{what} {value!r} is not a DNS label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)")
    return value


def _domain(value: str, what: str) -> str:
    for part in value.split("."):
        _label(part, f"{what} part")
    return value


def _read_namespace(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


class KubernetesClusterResolver(ClusterResolver):
    """The cluster of a StatefulSet per job, each behind a headless Service.

    ``jobs``: ``{job: replicas}`` (a mapping, a JSON object string or
    ``"ps:1,worker:2"``); required. ``port``: the port every task's server
    listens on (the containers' port; default 2222). ``statefulsets``:
    ``{job: StatefulSet name}``, default each job's own name. ``service``: the
    headless Service all sets share (their ``serviceName``); ``None``: each
    set has its own Service of the set's name. ``namespace``: default
    ``POD_NAMESPACE``, else the service account's namespace file, else none
    (short names, resolved in the pod's own namespace). ``cluster_domain``:
    e.g. ``cluster.local`` for fully qualified names. ``task_type`` and
    ``task_id`` override what the pod's name says; ``hostname`` replaces
    ``HOSTNAME`` (tests, or a pod whose hostname was set by hand). ``env``
    replaces ``os.environ``.
    """

    def __init__(self, jobs: Mapping[str, int] | str | None = None, port: int = 2222,
                 service: str | None = None, namespace: str | None = None,
                 statefulsets: Mapping[str, str] | None = None,
                 cluster_domain: str | None = None, task_type: str | None = None,
                 task_id: int | None = None, rpc_layer: str | None = None, *,
                 hostname: str | None = None, env: Mapping[str, str] | None = None,
                 namespace_file: str = NAMESPACE_FILE) -> None:
        environ = os.environ if env is None else env
        if jobs is None:
            raise SchedulerEnvironmentError(
                "KubernetesClusterResolver needs the jobs and their replicas, e.g. "
                f"{_EXAMPLE_JOBS} (python -m distrib.server reads DISTRIB_K8S_JOBS)")
        self._jobs = parse_job_counts(jobs, "jobs")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= 65535:
            raise SchedulerEnvironmentError(f"port must be a port from 1 to 65535; got {port!r}")
        self.port = port
        self.statefulsets = self._read_sets(statefulsets)
        self.service = None if service is None else _label(service, "service")
        self.namespace = namespace or environ.get("POD_NAMESPACE", "").strip() \
            or _read_namespace(namespace_file)
        if self.namespace:
            _label(self.namespace, "namespace")
        self.cluster_domain = None if not cluster_domain else _domain(cluster_domain, "cluster_domain")
        self._cluster = ClusterSpec({job: [self.task_address(job, i) for i in range(n)]
                                     for job, n in self._jobs.items()})
        self.hostname = hostname or environ.get("HOSTNAME", "").strip() or socket.gethostname()
        self._rpc_layer = rpc_layer
        self._pod_task, self._pod_error = self._parse_pod_name(self.hostname)
        self._task_type = task_type
        self._task_id = task_id

    def _read_sets(self, statefulsets: Mapping[str, str] | None) -> dict[str, str]:
        given = dict(statefulsets or {})
        unknown = set(given) - set(self._jobs)
        if unknown:
            raise SchedulerEnvironmentError(
                f"statefulsets names jobs {sorted(unknown)} that jobs {self._jobs} does not have")
        sets = {job: given.get(job, job) for job in self._jobs}
        for job, name in sets.items():
            hint = "" if job in given else " (the default: the job's name; pass statefulsets=)"
            _label(name, f"StatefulSet name of job {job!r}{hint}")
        if len(set(sets.values())) != len(sets):
            raise SchedulerEnvironmentError(f"two jobs share a StatefulSet: {sets}")
        return sets

    def task_address(self, job: str, index: int) -> str:
        """``<set>-<index>.<service>[.<namespace>.svc[.<cluster_domain>]]:<port>``."""
        name = self.statefulsets[job]
        host = f"{name}-{index}.{self.service or name}"
        if self.namespace:
            host += f".{self.namespace}.svc"
            if self.cluster_domain:
                host += f".{self.cluster_domain}"
        return f"{host}:{self.port}"

    def _parse_pod_name(self, hostname: str) -> tuple[tuple[str, int] | None, str]:
        pod = hostname.split(".", 1)[0]
        match = _POD.match(pod)
        by_set = {name: job for job, name in self.statefulsets.items()}
        if match is None or match.group("set") not in by_set:
            return None, (f"pod name {pod!r} (HOSTNAME) is not <statefulset>-<ordinal> of the "
                          f"StatefulSets {self.statefulsets}: run in a pod of one of them, "
                          "or give task_type and task_id")
        job, ordinal = by_set[match.group("set")], int(match.group("ordinal"))
        if ordinal >= self._jobs[job]:
            return None, (f"pod {pod!r} has ordinal {ordinal} but jobs gives job {job!r} "
                          f"{self._jobs[job]} replicas: keep jobs in step with the "
                          "StatefulSet's replicas")
        return (job, ordinal), ""

    # -- the ClusterResolver interface ---------------------------------------

    def cluster_spec(self) -> ClusterSpec:
        return self._cluster

    @property
    def jobs(self) -> dict[str, int]:
        return dict(self._jobs)

    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """A task's address (default: this pod's); '' outside the StatefulSets."""
        if (task_type is None or task_id is None) and self._pod_task is None \
                and (self._task_type is None or self._task_id is None):
            return ""
        return super().master(task_type, task_id, rpc_layer)

    def _pod(self) -> tuple[str, int]:
        if self._pod_task is None:
            raise SchedulerEnvironmentError(self._pod_error)
        return self._pod_task

    def _found_task(self) -> tuple[str | None, int | None]:
        return self._pod()



