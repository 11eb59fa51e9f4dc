"""The cluster: which jobs and tasks exist and where (``ClusterSpec``), and
how a task learns it (``TF_CONFIG``, cluster resolvers for SLURM and
Kubernetes). Re-exports only."""
from __future__ import annotations

from distrib.cluster.cluster_spec import ClusterSpec, task_string
from distrib.cluster.resolvers import (
    ClusterResolver,
    KubernetesClusterResolver,
    SchedulerEnvironmentError,
    SimpleClusterResolver,
    SlurmClusterResolver,
    TFConfigClusterResolver,
    expand_hostlist,
    expand_tasks_per_node,
    resolver_from_environment,
)
from distrib.cluster.tf_config import TFConfig, format_tf_config, parse_tf_config

__all__ = ["ClusterSpec", "task_string", "TFConfig", "parse_tf_config", "format_tf_config",
           "ClusterResolver", "TFConfigClusterResolver", "SimpleClusterResolver",
           "SlurmClusterResolver", "KubernetesClusterResolver", "SchedulerEnvironmentError",
           "expand_hostlist", "expand_tasks_per_node", "resolver_from_environment"]
