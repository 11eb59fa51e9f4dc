"""``dt.distribute.experimental.partitioners``: how ParameterServerStrategy
shards a large variable (TF's names)."""
from __future__ import annotations

from distrib.distribute.strategies.parameter_server import (
    FixedShardsPartitioner,
    MaxSizePartitioner,
    MinSizePartitioner,
)

__all__ = ["FixedShardsPartitioner", "MinSizePartitioner", "MaxSizePartitioner"]
