"""``dt.data.experimental``: the names TF keeps under ``tf.data.experimental``.

Re-exports only: ``AutoShardPolicy`` and ``DistributeOptions`` (options.py),
``AUTOTUNE`` and the cardinality constants, and ``cardinality(ds)``.
"""
from __future__ import annotations

from distrib.data.dataset_ops import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Cardinality, Dataset
from distrib.data.iterators import AUTOTUNE
from distrib.data.options import AutoShardPolicy, DistributeOptions, ThreadingOptions

__all__ = ["AutoShardPolicy", "DistributeOptions", "ThreadingOptions", "AUTOTUNE",
           "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "cardinality"]


def cardinality(dataset: Dataset) -> Cardinality:
    """``tf.data.experimental.cardinality(ds)``: the same as ``ds.cardinality()``."""
    return dataset.cardinality()
