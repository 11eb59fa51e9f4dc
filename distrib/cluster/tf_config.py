"""``TF_CONFIG``: the cluster and this process's task, as a scheduler or a
launcher hands them to each task in its environment.

The same JSON TensorFlow reads (``{"cluster": {...}, "task": {"type": J,
"index": I}, "rpc_layer": ...}``), checked as strictly as a cluster file:
a malformed one is a ``ValueError`` saying what is wrong and showing an
example, never a half-read cluster.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from distrib.cluster.cluster_spec import ClusterSpec

__all__ = ["TFConfig", "parse_tf_config", "load_tf_config", "format_tf_config", "split_command",
           "session_master"]


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


def load_tf_config(env: Mapping[str, str]) -> dict[str, Any]:
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
    data = load_tf_config(os.environ if env is None else env)
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




def session_master(env: Mapping[str, str] | None = None) -> str | None:
    """``TF_CONFIG``'s ``session_master``: the master a session connects to, when
    the config names one (TF's resolver returns it from ``master()`` as written)."""
    value = load_tf_config(os.environ if env is None else env).get("session_master")
    if value is not None and not isinstance(value, str):
        raise ValueError(f'TF_CONFIG "session_master" must be a string like '
                         f'"grpc://host:2222"; got {value!r}')
    return value


def format_tf_config(cluster: ClusterSpec, task_type: str | None, task_id: int | None,
                     rpc_layer: str | None = None) -> str:
    """The ``TF_CONFIG`` value that :func:`parse_tf_config` reads back as these."""
    data: dict[str, Any] = {"cluster": json.loads(cluster.to_json())}
    if task_type is not None:
        data["task"] = {"type": task_type, "index": task_id}
    if rpc_layer:
        data["rpc_layer"] = rpc_layer
    return json.dumps(data, sort_keys=True)


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """A command line as (its own arguments, the COMMAND [ARGS...] after the first
    ``--``): how the launcher and ``python -m distrib.cluster`` take the program
    they run with TF_CONFIG set."""
    argv = list(argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []
