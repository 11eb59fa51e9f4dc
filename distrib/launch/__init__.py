"""``python -m distrib.launch``: one process per task of a cluster on this
host, each told its place through ``TF_CONFIG``; output prefixed by task,
failed tasks restarted on a budget, workers stopped before the ps.
Re-exports only."""
from __future__ import annotations

from distrib.launch.control import NoLauncherError, ScaleError, ScaleRefusedError, request_scale
from distrib.launch.launcher import LaunchConfig, Launcher, LaunchResult, TaskProcess
from distrib.launch.tasks import TRAINING_JOBS, free_ports, loopback_cluster, select_tasks, tf_config

__all__ = ["Launcher", "LaunchConfig", "LaunchResult", "TaskProcess", "TRAINING_JOBS",
           "free_ports", "loopback_cluster", "select_tasks", "tf_config",
           "request_scale", "ScaleError", "ScaleRefusedError", "NoLauncherError"]
