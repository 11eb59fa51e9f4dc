"""The cluster: which jobs and tasks exist and where (``ClusterSpec``), and
how a task learns it (``TF_CONFIG``, cluster resolvers). Re-exports only."""
from __future__ import annotations

from distrib.cluster.cluster_spec import ClusterSpec, task_string
from distrib.cluster.resolvers import (ClusterResolver, SimpleClusterResolver,
                                       TFConfigClusterResolver)
from distrib.cluster.tf_config import TFConfig, parse_tf_config

__all__ = ["ClusterSpec", "task_string", "TFConfig", "parse_tf_config", "ClusterResolver",
           "TFConfigClusterResolver", "SimpleClusterResolver"]
