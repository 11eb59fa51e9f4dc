"""Cluster resolvers: where a task learns its cluster and its own place in it.

``ClusterResolver`` is TensorFlow's interface (``cluster_spec()``,
``task_type``, ``task_id``, ``master()``, ``num_accelerators()``); each
resolver reads one source: ``TF_CONFIG``, or a spec handed over as it is.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from distrib.cluster.cluster_spec import ClusterLike, ClusterSpec
from distrib.cluster.tf_config import TFConfig, load_tf_config, parse_tf_config

__all__ = ["ClusterResolver", "TFConfigClusterResolver", "SimpleClusterResolver"]


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
        return str(load_tf_config(os.environ if self._env is None else self._env).get("environment", ""))


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
