"""The graph's data model: ``Graph``, ``Operation``, ``Tensor``, GraphDef,
dtypes, shapes, device specs and shape inference. It imports nothing of
distrib above it (errors only). Re-exports only."""
from __future__ import annotations

from distrib.framework.device import DeviceSpec
from distrib.framework.dtypes import DType, as_dtype
from distrib.framework.graph import (
    Graph,
    GraphKeys,
    Operation,
    Tensor,
    get_default_graph,
    reset_default_graph,
)
from distrib.framework.graph_def import graph_from_def, import_graph_def
from distrib.framework.tensor_shape import TensorShape

__all__ = ["DeviceSpec", "DType", "as_dtype", "Graph", "GraphKeys", "Operation", "Tensor",
           "get_default_graph", "reset_default_graph", "graph_from_def", "import_graph_def",
           "TensorShape"]
