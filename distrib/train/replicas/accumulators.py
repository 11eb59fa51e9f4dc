"""The graph side of the sync replicas' accumulators, one per trainable
variable, colocated with it (the ps) and shared by name (``<var>/grad_accum``):
:class:`Accumulator` (TF1's ``ConditionalAccumulator``: a dense gradient) and
:class:`SparseAccumulator` (TF1's ``SparseConditionalAccumulator``: an
``IndexedSlices``, whose rows alone cross the wire and are kept, so an
embedding's aggregation costs the rows the replicas touched, never the
table). The ops run on the ps (``distrib.runtime.state.resources`` and
``sparse_accumulator``; docs/ops.md, "Synchronous training resources")."""
from __future__ import annotations

from typing import Any

from distrib.framework import dtypes
from distrib.framework.graph import Operation, Tensor
from distrib.ops import math_ops as ops
from distrib.ops.indexed_slices import IndexedSlices
from distrib.ops.variables import Variable

__all__ = ["Accumulator", "SparseAccumulator"]


class Accumulator:
    """Graph side of one ``ConditionalAccumulator`` (ops colocated with its variable)."""

    def __init__(self, var: Variable, dtype: Any, shape: list | None) -> None:
        self.var = var
        self.name = var.op.name + "/grad_accum"
        self._attrs = {"acc": self.name, "dtype": dtypes.as_dtype(dtype).name, "shape": shape}

    def _op(self, op_type: str, inputs: list, name: str, outputs: list | None = None,
            **extra: Any) -> Operation:
        graph = self.var.graph
        with graph.as_default(), graph.colocate_with(self.var.op):
            return graph.create_op(op_type, inputs, {**self._attrs, **extra}, name,
                                   output_specs=outputs or [])

    def _num_required(self, num_required: int) -> Tensor:
        with self.var.graph.as_default(), self.var.graph.colocate_with(self.var.op):
            return ops.constant(num_required, dtype=dtypes.int32, name="num_required")

    def apply_grad(self, grad: Tensor, local_step: Tensor, replica: str = "") -> Operation:
        """``replica`` names the sender, so a stalled take can say who is missing."""
        return self._op("AccumulatorApplyGradient", [local_step, grad],
                        "AccumulatorApplyGradient", replica=replica)

    def take_grad(self, num_required: int, num_replicas: int = 0) -> Any:
        """``num_replicas`` (total_num_replicas; 0: unknown) lets a stalled take
        count the replicas it has never heard from."""
        n = self._num_required(num_required)
        shape = self._attrs["shape"]
        op = self._op("AccumulatorTakeGradient", [n], "AccumulatorTakeGradient",
                      [(self._attrs["dtype"], shape)], num_replicas=num_replicas)
        return op.outputs[0]

    def set_global_step(self, step: Tensor, name: str = "SetGlobalStep") -> Operation:
        return self._op("AccumulatorSetGlobalStep", [step], name)

    def num_accumulated(self) -> Tensor:
        return self._op("AccumulatorNumAccumulated", [], "AccumulatorNumAccumulated",
                        [(dtypes.int32, [])]).outputs[0]


class SparseAccumulator(Accumulator):
    """Graph side of one ``SparseConditionalAccumulator``: applies and takes
    ``IndexedSlices`` (the take's indices sorted, one row per index)."""

    def apply_grad(self, grad: Any, local_step: Tensor, replica: str = "") -> Operation:
        return self._op("SparseAccumulatorApplyGradient", [local_step, grad.indices, grad.values],
                        "SparseAccumulatorApplyGradient", replica=replica)

    def take_grad(self, num_required: int, num_replicas: int = 0) -> Any:
        n = self._num_required(num_required)
        shape = self._attrs["shape"]
        rows = None if shape is None else [None] + list(shape[1:])
        op = self._op("SparseAccumulatorTakeGradient", [n], "SparseAccumulatorTakeGradient",
                      [(dtypes.int64, [None]), (self._attrs["dtype"], rows),
                       (dtypes.int64, [None if shape is None else len(shape)])],
                      num_replicas=num_replicas)
        indices, values, dense_shape = op.outputs
        return IndexedSlices(values, indices, dense_shape)
