"""``dt.data.experimental``: the names TF keeps under ``tf.data.experimental``.

Re-exports only: ``AutoShardPolicy`` and ``DistributeOptions`` (options.py),
``AUTOTUNE`` and the cardinality constants, ``cardinality(ds)``, and
``prefetch_to_device`` / ``copy_to_device`` (iterators.DevicePrefetch),
``ignore_errors()``.
"""
from __future__ import annotations

from typing import Any

from distrib.data.dataset_ops import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Cardinality, Dataset
from distrib.data.iterators import AUTOTUNE, DevicePrefetch
from distrib.data.options import AutoShardPolicy, DistributeOptions, ThreadingOptions
from distrib.framework.device import DeviceSpec

__all__ = ["AutoShardPolicy", "DistributeOptions", "ThreadingOptions", "AUTOTUNE",
           "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "cardinality", "prefetch_to_device",
           "copy_to_device", "ignore_errors"]


def ignore_errors(log_warning: bool = False) -> Any:
    """``ds.apply(ignore_errors())``: ``ds.ignore_errors(log_warning)`` (TF 1's spelling)."""
    return lambda dataset: dataset.ignore_errors(log_warning)


def cardinality(dataset: Dataset) -> Cardinality:
    """``tf.data.experimental.cardinality(ds)``: the same as ``ds.cardinality()``."""
    return dataset.cardinality()


def prefetch_to_device(device: str, buffer_size: int | None = None) -> Any:
    """``ds.apply(prefetch_to_device("/gpu:0"))``: prefetch whose thread copies the
    elements' arrays to that GPU (TF's); a CPU device is a plain prefetch."""
    spec = DeviceSpec.from_string(device)
    size = 1 if buffer_size is None else int(buffer_size)

    def apply(dataset: Dataset) -> Dataset:
        if (spec.device_type or "CPU").upper() != "GPU":
            return dataset.prefetch(size)
        node = DevicePrefetch(dataset.node, int(spec.device_index or 0), size)
        return Dataset(node, dataset.options())
    return apply


def copy_to_device(target_device: str, source_device: str = "/cpu:0") -> Any:
    """TF's ``copy_to_device``: here ``prefetch_to_device(target_device, 1)``."""
    return prefetch_to_device(target_device, 1)
