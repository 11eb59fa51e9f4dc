"""Cluster resolvers: where a task learns its cluster and its own place in it.

This module is ``dt.distribute.cluster_resolver``: TensorFlow's interface
(``ClusterResolver``) and one resolver per source. ``TFConfigClusterResolver``
reads ``TF_CONFIG`` (here), ``SimpleClusterResolver`` takes a spec as it is,
``SlurmClusterResolver`` reads what ``srun`` sets (``slurm.py``), and
``KubernetesClusterResolver`` reads a StatefulSet pod's name
(``kubernetes.py``).

``resolver_from_environment`` picks the one the environment calls for, so
that ``python -m distrib.server`` and ``python -m distrib.cluster`` need no
flags under a scheduler. It reads the sources in a fixed order, the most
explicit first: ``TF_CONFIG``, then SLURM (``SLURM_PROCID``), then Kubernetes
(``KUBERNETES_SERVICE_HOST``), and takes what a scheduler cannot say (the jobs,
the ports) from arguments or ``DISTRIB_SLURM_*`` / ``DISTRIB_K8S_*``
variables:

    DISTRIB_SLURM_JOBS           ps:1,worker:3 (default: every task a worker)
    DISTRIB_SLURM_PORT_BASE      the first port on each node (default 8888)
    DISTRIB_SLURM_GPUS_PER_TASK  GPUs given to each task via CUDA_VISIBLE_DEVICES
    DISTRIB_K8S_JOBS             ps:1,worker:2 (required: the sets' replicas)
    DISTRIB_K8S_PORT             every task's port (default 2222)
    DISTRIB_K8S_SERVICE          one headless Service for all sets (default: one per set)
    DISTRIB_K8S_STATEFULSETS     ps:NAME,worker:NAME (default: the job names)
    DISTRIB_K8S_CLUSTER_DOMAIN   e.g. cluster.local, for fully qualified names
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from distrib.cluster.cluster_resolver import ClusterResolver, SchedulerEnvironmentError, SimpleClusterResolver
from distrib.cluster.cluster_spec import ClusterSpec
from distrib.cluster.kubernetes import KubernetesClusterResolver
from distrib.cluster.slurm import SlurmClusterResolver, expand_hostlist, expand_tasks_per_node
from distrib.cluster.tf_config import TFConfig, load_tf_config, parse_tf_config, session_master
from distrib.settings import (
    K8S_CLUSTER_DOMAIN,
    K8S_JOBS,
    K8S_PORT,
    K8S_SERVICE,
    K8S_STATEFULSETS,
    SLURM_GPUS_PER_TASK,
    SLURM_JOBS,
    SLURM_PORT_BASE,
    Setting,
    SettingError,
)

__all__ = ["ClusterResolver", "TFConfigClusterResolver", "SimpleClusterResolver",
           "SlurmClusterResolver", "KubernetesClusterResolver", "SchedulerEnvironmentError",
           "expand_hostlist", "expand_tasks_per_node", "resolver_from_environment",
           "detect_scheduler", "no_cluster", "RESOLVER_KINDS"]

RESOLVER_KINDS = ("tf_config", "slurm", "kubernetes")
_FROM_SCHEDULERS = ("set TF_CONFIG, or run under SLURM (srun sets SLURM_PROCID), or in a "
                    "Kubernetes pod with DISTRIB_K8S_JOBS set")


def no_cluster(flags: str | None = None) -> str:
    """What to do when neither ``flags`` (a CLI's own ways, e.g. ``--cluster
    FILE``) nor the environment give a cluster: one message for every CLI."""
    if flags:
        return f"no cluster given: pass {flags}, or {_FROM_SCHEDULERS}"
    return f"no cluster in the environment: {_FROM_SCHEDULERS}"


class TFConfigClusterResolver(ClusterResolver):
    """Reads the cluster and this task from ``TF_CONFIG``, like TF's resolver of that name.

    ``TF_CONFIG`` is read on every call, as in TF, so a change to the
    environment is seen. ``task_type``, ``task_id`` and ``rpc_layer`` given
    here (or assigned later) override ``TF_CONFIG``; its ``session_master``,
    when set, is what ``master()`` returns, as in TF. ``env`` replaces
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

    def _found_task(self) -> tuple[str | None, int | None]:
        config = self._config()
        return config.task_type, config.task_id

    def _found_rpc_layer(self) -> str | None:
        return self._config().rpc_layer




    def master(self, task_type: str | None = None, task_id: int | None = None,
               rpc_layer: str | None = None) -> str:
        """TF's rule: ``TF_CONFIG``'s ``session_master`` when set (as written), else
        the task's address (default: this one) prefixed ``rpc_layer://``."""
        named = session_master(self._env)
        if named is not None:
            return named
        return super().master(task_type, task_id, rpc_layer)

    @property
    def environment(self) -> str:  # type: ignore[override]
        if self._environment is not None:
            return self._environment
        return str(load_tf_config(os.environ if self._env is None else self._env).get("environment", ""))


def detect_scheduler(env: Mapping[str, str] | None = None) -> str | None:
    """Which source the environment gives: ``tf_config``, ``slurm``, ``kubernetes``, or None."""
    env = os.environ if env is None else env
    if env.get("TF_CONFIG", "").strip():
        return "tf_config"
    if env.get("SLURM_PROCID", "").strip():
        return "slurm"
    if env.get("KUBERNETES_SERVICE_HOST", "").strip():
        return "kubernetes"
    return None


def _setting(setting: Setting, env: Mapping[str, str], value: object = None) -> Any:
    """``value`` (an argument) when given, else ``setting`` as ``env`` holds it;
    a bad value is a ``SchedulerEnvironmentError``, as every resolver error is."""
    if value is not None:
        return value
    try:
        return setting.get(env)
    except SettingError as e:
        raise SchedulerEnvironmentError(str(e)) from None


def _named_sets(env: Mapping[str, str]) -> dict[str, str] | None:
    text = _setting(K8S_STATEFULSETS, env)
    if not text:
        return None
    sets: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        job, sep, name = part.partition(":")
        if not sep or not job.strip() or not name.strip():
            raise SchedulerEnvironmentError(
                f"{K8S_STATEFULSETS.name}={text!r}: {part!r} is not job:name "
                "(e.g. ps:mnist-ps,worker:mnist-worker)")
        sets[job.strip()] = name.strip()
    return sets


def resolver_from_environment(env: Mapping[str, str] | None = None, *, kind: str | None = None,
                              jobs: Mapping[str, int] | str | None = None,
                              port: int | None = None,
                              gpus_per_task: int | None = None) -> ClusterResolver:
    """The resolver for the scheduler this process runs under (a distrib extension).

    ``kind`` (``"tf_config"``, ``"slurm"``, ``"kubernetes"``) skips the
    detection. ``jobs``, ``port`` (SLURM: the port base) and ``gpus_per_task``
    win over their ``DISTRIB_SLURM_*`` / ``DISTRIB_K8S_*`` twins. Nothing
    found is a ``SchedulerEnvironmentError`` that lists what would do.
    """
    environ = os.environ if env is None else env
    kind = kind or detect_scheduler(environ)
    if kind == "tf_config":
        if not environ.get("TF_CONFIG", "").strip():
            raise SchedulerEnvironmentError("TF_CONFIG is not set")
        return TFConfigClusterResolver(env=env)
    if kind == "slurm":
        return SlurmClusterResolver(
            jobs=jobs or _setting(SLURM_JOBS, environ) or None,
            port_base=_setting(SLURM_PORT_BASE, environ, port),
            gpus_per_task=_setting(SLURM_GPUS_PER_TASK, environ, gpus_per_task),
            env=env)
    if kind == "kubernetes":
        k8s_jobs = jobs or _setting(K8S_JOBS, environ)
        if not k8s_jobs:
            raise SchedulerEnvironmentError(
                "in Kubernetes, DISTRIB_K8S_JOBS (or --jobs) must give each StatefulSet's job and "
                "replicas, e.g. ps:1,worker:2")
        return KubernetesClusterResolver(
            jobs=k8s_jobs, port=_setting(K8S_PORT, environ, port),
            service=_setting(K8S_SERVICE, environ) or None,
            statefulsets=_named_sets(environ),
            cluster_domain=_setting(K8S_CLUSTER_DOMAIN, environ) or None,
            env=env)
    if kind is None:
        raise SchedulerEnvironmentError(no_cluster())
    raise SchedulerEnvironmentError(f"unknown resolver {kind!r}: choose one of {RESOLVER_KINDS}")


def add_resolver_flags(parser: Any, what: str = "the source") -> None:
    """The scheduler flags of the CLIs that resolve a cluster (``python -m
    distrib.server``, ``python -m distrib.cluster``): ``--resolver``, ``--jobs``,
    ``--port``, ``--gpus_per_task``; :func:`resolver_from_flags` reads them."""
    parser.add_argument("--resolver", choices=RESOLVER_KINDS,
                        help=f"{what}: default the first of TF_CONFIG, SLURM (SLURM_PROCID), "
                             "Kubernetes (KUBERNETES_SERVICE_HOST)")
    parser.add_argument("--jobs", help="SLURM/Kubernetes: each job and its tasks in order, "
                                       "e.g. ps:1,worker:3 (env DISTRIB_SLURM_JOBS / "
                                       "DISTRIB_K8S_JOBS)")
    parser.add_argument("--port", type=int, help="SLURM: the first port on each node, the task "
                                                 "with local index L on PORT+L (default 8888); "
                                                 "Kubernetes: every task's port (default 2222)")
    parser.add_argument("--gpus_per_task", type=int,
                        help="SLURM: GPUs given to each task in CUDA_VISIBLE_DEVICES (env "
                             "DISTRIB_SLURM_GPUS_PER_TASK; default: leave GPUs as they are)")


def resolver_from_flags(args: Any, env: Mapping[str, str] | None = None) -> ClusterResolver:
    """:func:`resolver_from_environment` with the flags of :func:`add_resolver_flags`."""
    return resolver_from_environment(env, kind=args.resolver, jobs=args.jobs, port=args.port,
                                     gpus_per_task=args.gpus_per_task)

